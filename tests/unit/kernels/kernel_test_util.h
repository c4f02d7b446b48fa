// What the kernel tests share: random inputs and every backend this machine
// can run (each is then checked against the scalar reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

namespace octet::kernels::testing {

// n values from N(0, scale²).
inline std::vector<float> RandomFloats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Every backend ProbeBackends() reports available here, with `threads` threads.
inline std::vector<std::unique_ptr<KernelBackend>> AllBackends(int threads) {
  std::vector<std::unique_ptr<KernelBackend>> out;
  for (const auto& info : ProbeBackends()) {
    if (!info.available) continue;
    auto b = CreateBackend(info.name, BackendOptions{threads});
    if (b.ok()) out.push_back(std::move(*b));
  }
  return out;
}

// How far decode from NVFP4 tiles may move row r of x . W (backend.h,
// UsesNvfp4Tiles): each 16-value block of x is rounded to integers after a
// power-of-two scaling that puts its largest magnitude in [2^14, 2^15) or
// finer, so a value moves by at most 2^(e - 15), e the exponent of the
// block's largest magnitude (below 2^e), and the output by that step times
// the block's |weights|, summed over the blocks. A kernel that multiplied the
// wrong values would be off by the products themselves, far beyond this.
inline double Nvfp4TileRoundingBound(const WeightMatrix& w, int64_t r, const float* x) {
  double bound = 0;
  for (int64_t b = 0; b + kNvfp4BlockSize <= w.cols; b += kNvfp4BlockSize) {
    float amax = 0.0f;
    for (int64_t c = b; c < b + kNvfp4BlockSize; ++c) amax = std::max(amax, std::fabs(x[c]));
    if (amax == 0.0f) continue;
    int e = 0;
    std::frexp(amax, &e);
    double wsum = 0;
    for (int64_t c = b; c < b + kNvfp4BlockSize; ++c) wsum += std::fabs(double(WeightAt(w, r, c)));
    bound += std::ldexp(1.0, e - 15) * wsum;
  }
  return bound;
}

}  // namespace octet::kernels::testing
