// Which CPUs this process may run on, and pinning it to some of them (the
// CLI's --cpus and --bind, and the per-rank placement of TP launches).
#pragma once

#include <vector>

namespace octet {

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> AllowedCpus();

// Pins this process (all its threads, including ones made later) to the CPUs
// at `indices` of AllowedCpus(). False, changing nothing, when `indices` is
// empty, names a position past the allowed CPUs, or the kernel refuses.
bool PinToCpuIndices(const std::vector<int>& indices);

}  // namespace octet
