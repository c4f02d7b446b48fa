// Wall-clock time as the wire and the stores record it.
#pragma once

#include <cstdint>

namespace octet {

// Milliseconds since the Unix epoch (system clock: comparable across nodes
// with synchronized clocks, not monotonic; use Deadline for timeouts).
int64_t UnixMs();

}  // namespace octet
