// The vector exp behind the AVX2 / AVX-512 softmax and SiLU (cpu::ExpAvx2), and
// on aarch64 the NEON one (cpu::ExpNeon), against std::exp in double precision,
// over float bit patterns spread across the whole range (subnormal results,
// the overflow edge, +-inf, NaN) and every float in the windows where its range
// reduction and scaling change regime. The stated bound for both: less than 1
// ulp from the exact value (for ExpAvx2 an exhaustive run over all 2^32 floats
// measured 0.94 at worst, too slow for a unit test; ExpNeon measures 0.86 on
// this test's 18.5 million inputs under qemu).
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "octet/kernels/backend.h"

namespace {

float FromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t ToBits(float f) { return std::bit_cast<uint32_t>(f); }

// |got - exp(x)| in units of the last place of the float nearest exp(x)
// (subnormal spacing 2^-149 below FLT_MIN); overflow must give +inf.
double UlpError(float x, float got) {
  const double want = std::exp(static_cast<double>(x));
  const float rounded = static_cast<float>(want);
  if (std::isinf(rounded)) return std::isinf(got) && got > 0 ? 0.0 : 1e30;
  if (!std::isfinite(got)) return 1e30;
  int e = 0;
  std::frexp(rounded == 0.0f ? std::numeric_limits<float>::min() : rounded, &e);
  const double ulp = std::ldexp(1.0, (e - 24 < -149) ? -149 : e - 24);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

}  // namespace

class TestKernelVectorExp : public QObject {
  Q_OBJECT
 private:
  bool Supported() {
#if defined(__x86_64__)
    // The avx2 backend's own probe (AVX2, FMA, F16C; clang before 15 has no
    // "f16c" for __builtin_cpu_supports).
    for (const auto& b : octet::kernels::ProbeBackends())
      if (b.name == "avx2") return b.available;
    return false;
#elif defined(__aarch64__)
    return true;  // NEON is baseline
#else
    return false;
#endif
  }
#if defined(__x86_64__)
  static constexpr double kBoundUlp = 1.0;
  void Exp(const float* x, int64_t n, float* out) { octet::kernels::cpu::ExpAvx2(x, n, out); }
#elif defined(__aarch64__)
  static constexpr double kBoundUlp = 1.0;
  void Exp(const float* x, int64_t n, float* out) { octet::kernels::cpu::ExpNeon(x, n, out); }
#endif

  // Checks exp over xs; reports the worst input.
  void CheckAll(const std::vector<float>& xs) {
#if defined(__x86_64__) || defined(__aarch64__)
    std::vector<float> got(xs.size());
    Exp(xs.data(), static_cast<int64_t>(xs.size()), got.data());
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float x = xs[i];
      if (std::isnan(x)) {
        QVERIFY2(std::isnan(got[i]), "exp(NaN) must be NaN");
        continue;
      }
      const double err = UlpError(x, got[i]);
      if (err > worst) worst = err, worst_x = x;
    }
    const std::string why = "worst " + std::to_string(worst) +
                            " ulp at x = " + std::to_string(worst_x) + " (bits " +
                            std::to_string(ToBits(worst_x)) + ")";
    qInfo("%zu inputs: %s", xs.size(), why.c_str());
    QVERIFY2(worst < kBoundUlp, why.c_str());
#else
    (void)xs;
#endif
  }

 private slots:
  void bitPatternsAcrossTheWholeRange() {
    if (!Supported()) QSKIP("needs AVX2, FMA and F16C (x86-64) or aarch64");
    std::vector<float> xs;
    xs.reserve((uint64_t{1} << 32) / 251 + 1);
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 251) xs.push_back(FromBits(uint32_t(b)));
    CheckAll(xs);
  }

  // Every float where the result changes regime: around 0 (n = 0), the
  // overflow edge (ln FLT_MAX = 88.7228), the normal/subnormal edge
  // (-87.34) and the underflow-to-zero edge (-103.97).
  void everyFloatNearTheEdges() {
    if (!Supported()) QSKIP("needs AVX2, FMA and F16C (x86-64) or aarch64");
    std::vector<float> xs;
    for (float c : {0.0f, -0.0f, 0.3465736f, -0.3465736f, 88.7228f, -87.3365f, -103.972f}) {
      const uint32_t b = ToBits(c);
      for (int d = -100000; d <= 100000; ++d) xs.push_back(FromBits(b + d));
    }
    CheckAll(xs);
  }

  void specialValues() {
    if (!Supported()) QSKIP("needs AVX2, FMA and F16C (x86-64) or aarch64");
#if defined(__x86_64__) || defined(__aarch64__)
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> xs = {0.0f,   -0.0f, inf,     -inf,      nan,       -nan, 1000.0f,
                                   -1e30f, 89.0f, -104.0f, 88.72283f, 88.72284f, 1.0f};
    std::vector<float> got(xs.size());
    Exp(xs.data(), static_cast<int64_t>(xs.size()), got.data());
    QCOMPARE(got[0], 1.0f);
    QCOMPARE(got[1], 1.0f);
    QVERIFY(std::isinf(got[2]) && got[2] > 0);
    QCOMPARE(ToBits(got[3]), 0u);  // +0
    QVERIFY(std::isnan(got[4]));
    QVERIFY(std::isnan(got[5]));
    QVERIFY(std::isinf(got[6]) && got[6] > 0);
    QCOMPARE(ToBits(got[7]), 0u);
    QVERIFY(std::isinf(got[8]));
    QCOMPARE(ToBits(got[9]), 0u);
    QVERIFY(std::isfinite(got[10]));  // exp(88.72283) = 3.4028e38 < FLT_MAX
    QVERIFY(std::isinf(got[11]));
    QVERIFY(std::fabs(got[12] - 2.7182817f) <= 2.4e-7f);
#endif
  }

  // Any length: the tail goes through the same vector code, so an element's
  // result does not depend on where it sits in the row.
  void tailsMatchFullVectors() {
    if (!Supported()) QSKIP("needs AVX2, FMA and F16C (x86-64) or aarch64");
#if defined(__x86_64__) || defined(__aarch64__)
    std::vector<float> xs(17);
    for (int i = 0; i < 17; ++i) xs[i] = -20.0f + 2.7f * static_cast<float>(i);
    std::vector<float> whole(17);
    Exp(xs.data(), 17, whole.data());
    for (int n = 1; n <= 17; ++n) {
      std::vector<float> part(n);
      Exp(xs.data(), n, part.data());
      for (int i = 0; i < n; ++i) QCOMPARE(ToBits(part[i]), ToBits(whole[i]));
    }
#endif
  }
};

QTEST_APPLESS_MAIN(TestKernelVectorExp)
#include "test_kernel_vector_exp.moc"
