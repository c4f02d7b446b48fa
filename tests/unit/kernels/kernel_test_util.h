// What the kernel tests share: random inputs and every backend this machine
// can run (each is then checked against the scalar reference).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "octet/kernels/backend.h"

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

}  // namespace octet::kernels::testing
