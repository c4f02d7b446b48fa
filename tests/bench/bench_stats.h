// Small statistics shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <vector>

namespace octet::bench {

// The median of `v` (the upper one of an even count: one of the samples, as
// a round the table reports); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace octet::bench
