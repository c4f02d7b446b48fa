// XorShiftRng: a tiny deterministic generator for reproducible synthetic data
// (random-weight checkpoints, benchmark prompts). Not for anything that needs
// statistical quality or secrecy. The same seed gives the same sequence on
// every platform, so random checkpoints written by tests and benchmarks are
// byte-identical wherever they are made.
#pragma once

#include <cstdint>

namespace octet {

class XorShiftRng {
 public:
  explicit XorShiftRng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}

  // Uniform in [-1, 1), in steps of 2^-23.
  float Next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return static_cast<float>(static_cast<int64_t>(s_ >> 40) - (1 << 23)) / float(1 << 23);
  }

 private:
  uint64_t s_;
};

}  // namespace octet
