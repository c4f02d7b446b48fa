#include "octet/base/cpu_affinity.h"

#include <sched.h>

namespace octet {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

bool PinToCpuIndices(const std::vector<int>& indices) {
  const std::vector<int> cpus = AllowedCpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i : indices) {
    if (i < 0 || i >= static_cast<int>(cpus.size())) return false;
    CPU_SET(cpus[i], &set);
  }
  return !indices.empty() && ::sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace octet
