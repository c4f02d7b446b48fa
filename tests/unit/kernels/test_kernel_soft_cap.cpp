// The logit soft-cap (KernelBackend::SoftCap, x = cap * tanh(x / cap)) on
// every CPU backend this machine runs. With cap = 1 it is tanh itself: checked
// against std::tanh in double precision over float bit patterns spread across
// the whole range and every float near the places where the vector tanh
// changes method (|x| = 0.5) or saturates (|x| = 10), against the bound the
// vector backends state (kVectorTanhMaxAbsError, kernels/src/cpu/isa.h; the
// scalar backend's std::tanh keeps it too). Then logit-sized rows at caps in
// use against the scalar backend, the special values, and results that do
// not depend on a row's length or on the thread split.
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "kernel_test_util.h"
#include "octet/kernels/backend.h"

using namespace octet::kernels;
using namespace octet::kernels::testing;

namespace {

float FromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t ToBits(float f) { return std::bit_cast<uint32_t>(f); }

constexpr double kBound = cpu::kVectorTanhMaxAbsError;

// Below |x| = 0.5 the vector tanh uses a series that keeps relative
// precision (isa.h): small logits are not rounded to a multiple of 1e-7.
constexpr double kSmallRelativeBound = 2.0 * 0x1p-24;

// The worst errors of one backend's tanh over some inputs (NaN inputs must
// give NaN and are not counted).
struct Errors {
  double abs = 0, rel_small = 0;
  float abs_x = 0, rel_x = 0;
  bool nan_ok = true;
};

Errors TanhErrors(KernelBackend& be, const std::vector<float>& xs) {
  std::vector<float> y = xs;
  be.SoftCap(y.data(), static_cast<int64_t>(y.size()), 1.0f);
  Errors e;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    if (std::isnan(x)) {
      e.nan_ok &= std::isnan(y[i]);
      continue;
    }
    const double want = std::tanh(static_cast<double>(x));
    const double err = std::fabs(static_cast<double>(y[i]) - want);
    if (!(err <= e.abs)) e.abs = err, e.abs_x = x;
    if (std::fabs(x) < 0.5f && want != 0.0) {
      const double rel = err / std::fabs(want);
      if (!(rel <= e.rel_small)) e.rel_small = rel, e.rel_x = x;
    }
  }
  return e;
}

void CheckTanh(const std::vector<float>& xs) {
  for (auto& be : AllBackends(2)) {
    const Errors e = TanhErrors(*be, xs);
    char buf[200];
    std::snprintf(buf, sizeof(buf), "worst %.3g at x = %.9g, relative below 0.5: %.2f ulp at %.9g",
                  e.abs, e.abs_x, e.rel_small / 0x1p-24, e.rel_x);
    const std::string why = std::string(be->name()) + ": " + buf;
    qInfo("%zu inputs, %s", xs.size(), why.c_str());
    QVERIFY2(e.nan_ok, (std::string(be->name()) + ": tanh(NaN) must be NaN").c_str());
    // The scalar backend is libm's tanhf, the reference of the other
    // backends (glibc's is within 3 ulp; measured 2.8 here): reported only.
    if (be->name() == "scalar") continue;
    QVERIFY2(e.abs <= kBound, why.c_str());
    QVERIFY2(e.rel_small <= kSmallRelativeBound, why.c_str());
  }
}

}  // namespace

class TestKernelSoftCap : public QObject {
  Q_OBJECT
 private slots:
  void tanhWithinBoundAcrossTheWholeRange() {
    std::vector<float> xs;
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 1021) xs.push_back(FromBits(uint32_t(b)));
    CheckTanh(xs);
  }

  // Every float near 0.5 (series / exp formula), 10 (the clamp), 9.011 (where
  // tanh reaches 1 in float) and the small values where the series' terms
  // vanish, both signs.
  void tanhWithinBoundNearItsEdges() {
    std::vector<float> xs;
    for (float c : {0.5f, -0.5f, 10.0f, -10.0f, 9.0109f, -9.0109f, 1e-4f, 0.25f, 2.0f}) {
      const uint32_t b = ToBits(c);
      for (int d = -60000; d <= 60000; ++d) xs.push_back(FromBits(b + d));
    }
    CheckTanh(xs);
  }

  void specialValues() {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float denorm = std::numeric_limits<float>::denorm_min();
    for (auto& be : AllBackends(1)) {
      std::vector<float> y = {0.0f, -0.0f, inf, -inf, nan, 1e30f, -1e30f, 9.5f, denorm, -denorm};
      be->SoftCap(y.data(), static_cast<int64_t>(y.size()), 1.0f);
      const char* n = be->name().data();
      QVERIFY2(ToBits(y[0]) == 0u, n);           // +0
      QVERIFY2(ToBits(y[1]) == 0x80000000u, n);  // -0
      QVERIFY2(y[2] == 1.0f && y[3] == -1.0f, n);
      QVERIFY2(std::isnan(y[4]), n);
      QVERIFY2(y[5] == 1.0f && y[6] == -1.0f && y[7] == 1.0f, n);
      QVERIFY2(y[8] == denorm && y[9] == -denorm, n);
      // At a cap: a huge logit lands on the cap itself.
      std::vector<float> z = {1e9f, -1e9f, inf};
      be->SoftCap(z.data(), 3, 15.0f);
      QVERIFY2(z[0] == 15.0f && z[1] == -15.0f && z[2] == 15.0f, n);
    }
  }

  // tanh is odd, bit for bit.
  void oddSymmetry() {
    std::mt19937 rng(5);
    std::vector<float> x = RandomFloats(4099, rng, 3.0f);
    std::vector<float> neg(x.size());
    for (size_t i = 0; i < x.size(); ++i) neg[i] = -x[i];
    for (auto& be : AllBackends(1)) {
      std::vector<float> a = x, b = neg;
      be->SoftCap(a.data(), static_cast<int64_t>(a.size()), 1.0f);
      be->SoftCap(b.data(), static_cast<int64_t>(b.size()), 1.0f);
      for (size_t i = 0; i < x.size(); ++i) QCOMPARE(ToBits(b[i]), ToBits(-a[i]));
    }
  }

  // Logit rows as the engine caps them (lengths around the vector widths and
  // a vocabulary row plus a tail; nanochat's cap 15, Gemma's 30): within
  // cap * bound of the exact value and of the scalar backend.
  void logitRowsMatchTheScalarBackend() {
    std::mt19937 rng(7);
    std::unique_ptr<KernelBackend> scalar = std::move(*CreateBackend("scalar", {1}));
    for (float cap : {15.0f, 30.0f}) {
      for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 4096 + 5}) {
        const std::vector<float> x = RandomFloats(n, rng, 10.0f);
        std::vector<float> want = x;
        scalar->SoftCap(want.data(), n, cap);
        for (auto& be : AllBackends(2)) {
          std::vector<float> got = x;
          be->SoftCap(got.data(), n, cap);
          for (int64_t i = 0; i < n; ++i) {
            const double exact = cap * std::tanh(static_cast<double>(x[i]) / cap);
            // tanh's bound scaled by the cap, plus the roundings of x / cap
            // and of the product (half an ulp each of values below the cap).
            const double tol = cap * (kBound + 0x1p-23);
            const std::string why = std::string(be->name()) + " n=" + std::to_string(n) +
                                    " i=" + std::to_string(i) + ": " + std::to_string(got[i]) +
                                    " vs " + std::to_string(exact);
            QVERIFY2(std::fabs(got[i] - exact) <= tol, why.c_str());
            QVERIFY2(std::fabs(got[i] - want[i]) <= 2 * tol, why.c_str());
          }
        }
      }
    }
  }

  // An element's result depends on its value alone: not on the row's length
  // (vector tails) nor on the split into thread tasks of a prefill-sized call.
  void resultsIndependentOfLengthAndSplit() {
    std::mt19937 rng(9);
    const int64_t big = 3 * (int64_t{1} << 16) + 1234;
    const std::vector<float> x = RandomFloats(big, rng, 20.0f);
    for (auto& be : AllBackends(2)) {
      std::vector<float> whole = x;
      be->SoftCap(whole.data(), big, 15.0f);
      for (int64_t n = 1; n <= 40; ++n) {
        std::vector<float> part(x.begin(), x.begin() + n);
        be->SoftCap(part.data(), n, 15.0f);
        for (int64_t i = 0; i < n; ++i) QCOMPARE(ToBits(part[i]), ToBits(whole[i]));
      }
      for (int64_t i = 0; i < big; i += 997) {
        float one = x[i];
        be->SoftCap(&one, 1, 15.0f);
        QCOMPARE(ToBits(one), ToBits(whole[i]));
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestKernelSoftCap)
#include "test_kernel_soft_cap.moc"
