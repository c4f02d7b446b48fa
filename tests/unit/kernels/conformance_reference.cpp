// The kernel conformance test's references (conformance_reference.h).
#include "conformance_reference.h"

#include <cmath>
#include <cstring>

namespace octet::kernels::testing {

OwnedWeight RandomWeight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
  OwnedWeight o;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (f == WeightFormat::kNvfp4) {
    o.data.resize(rows * cols / 2);
    o.scales.resize(rows * cols / 16);
    for (auto& b : o.data) b = static_cast<uint8_t>(rng() & 0xff);
    // Scale codes across the range, subnormals included, never NaN.
    for (auto& s : o.scales) s = static_cast<uint8_t>(1 + rng() % 0x60);
    o.view = WeightMatrix::Nvfp4(o.data.data(), o.scales.data(), 0.0173f, rows, cols);
    return o;
  }
  const int64_t es = f == WeightFormat::kF32 ? 4 : 2;
  o.data.resize(rows * cols * es);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = nd(rng);
    if (f == WeightFormat::kF32) {
      std::memcpy(o.data.data() + i * 4, &v, 4);
    } else {
      const uint16_t h = f == WeightFormat::kBF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(o.data.data() + i * 2, &h, 2);
    }
  }
  o.view = WeightMatrix::Dense(f, o.data.data(), rows, cols);
  return o;
}

std::unique_ptr<KernelBackend> Scalar() { return std::move(*CreateBackend("scalar", {1})); }

void AddTiles(OwnedWeight* w) {
  if (w->view.format != WeightFormat::kNvfp4 || !CanTileNvfp4(w->view)) return;
  w->tiles.resize(Nvfp4TilesBytes(w->view));
  w->view = TileNvfp4(w->view, w->tiles.data());
}

bool Close(const std::vector<float>& got, const std::vector<double>& want,
           const std::vector<double>& scale, double rtol, std::string* why,
           const std::vector<double>& allowance, double atol) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * scale[i] + (allowance.empty() ? 0.0 : allowance[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      *why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
             std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

bool MatchesDoubleProduct(const WeightMatrix& w, const std::vector<float>& x, int64_t m,
                          int64_t ldx, const std::vector<float>& y, int64_t ldy, bool acc,
                          std::string* why) {
  std::vector<float> got;
  std::vector<double> want, scale;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double d = 0, a = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double p = double(WeightAt(w, r, c)) * x[i * ldx + c];
        d += p;
        a += std::fabs(p);
      }
      got.push_back(y[i * ldy + r]);
      want.push_back(acc ? d + 7.0 : d);
      scale.push_back(a + 7.0);
    }
    for (int64_t r = w.rows; r < ldy && i + 1 < m; ++r) {
      if (y[i * ldy + r] != 7.0f) {
        *why = "row " + std::to_string(i) + " wrote its padding at column " + std::to_string(r);
        return false;
      }
    }
  }
  return Close(got, want, scale, 1e-5, why);
}

bool CloseF(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
            std::string* why, const std::vector<double>& allowance) {
  if (got.size() != want.size()) {
    *why = "size differs";
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::fabs(want[i]) + (allowance.empty() ? 0.0 : allowance[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      *why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
             std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

}  // namespace octet::kernels::testing
