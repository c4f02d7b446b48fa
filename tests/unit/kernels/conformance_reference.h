// The kernel conformance test's references: weight matrices with their own
// storage, filled at random in every format, the scalar backend, and the
// tolerant comparisons against double-precision results.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

namespace octet::kernels::testing {

// A weight matrix with its own storage (moved, never copied: view points
// into the vectors).
struct OwnedWeight {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  std::vector<uint8_t> tiles;  // the NVFP4 tile copy, after AddTiles
  WeightMatrix view;
};

OwnedWeight RandomWeight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng);

// Gives an NVFP4 w its tile copy (weight.h, TileNvfp4) when its shape allows.
void AddTiles(OwnedWeight* w);

std::unique_ptr<KernelBackend> Scalar();

// |got - want| <= atol + rtol * scale (+ allowance, when given), elementwise;
// reports the first failure.
bool Close(const std::vector<float>& got, const std::vector<double>& want,
           const std::vector<double>& scale, double rtol, std::string* why,
           const std::vector<double>& allowance = {}, double atol = 1e-6);

// y, m rows of stride ldy filled with 7 before `Matmul(x, m, ldx, w, y, ldy,
// acc)`, against the product in double precision (7 added when `acc`), with
// 1e-5 of the sum of |terms| as tolerance; the padding between y's rows must
// still be 7. False with `why` naming the first mismatch.
bool MatchesDoubleProduct(const WeightMatrix& w, const std::vector<float>& x, int64_t m,
                          int64_t ldx, const std::vector<float>& y, int64_t ldy, bool acc,
                          std::string* why);

// |got - want| <= atol + rtol * |want| (+ allowance, when given), elementwise.
bool CloseF(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
            std::string* why, const std::vector<double>& allowance = {});

}  // namespace octet::kernels::testing
