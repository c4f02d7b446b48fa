// The reduce loops and the bf16/f16 conversions they use, against independent
// references: the compiler's own _Float16 conversions (hardware or libgcc),
// IEEE bit patterns worked out by hand, and sums formed in double precision.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reduce.h"

using namespace octet::collectives;

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 rounding worked out with double arithmetic: round the value to 8
// significant bits, nearest even (independent of the bit trick under test).
uint16_t ReferenceBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  if (std::isinf(f)) return f > 0 ? 0x7f80 : 0xff80;
  if (f == 0) return std::signbit(f) ? 0x8000 : 0;
  int e;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, 0.5 <= |m| < 1
  double scaled = std::ldexp(m, 8);                          // 8 significant bits
  if (e - 1 < -126) scaled = std::ldexp(static_cast<double>(f), 133);  // subnormal: fixed step 2^-133
  const double r = std::nearbyint(scaled);                   // ties to even (default mode)
  const double back = e - 1 < -126 ? std::ldexp(r, -133) : std::ldexp(r, e - 8);
  const float rf = static_cast<float>(back);                 // exact: fits in 8 bits
  return static_cast<uint16_t>(Bits(rf) >> 16);
}

}  // namespace

class TestReduce : public QObject {
  Q_OBJECT
 private slots:
  void bf16KnownValues() {
    QCOMPARE(F32ToBf16(1.0f), uint16_t{0x3f80});
    QCOMPARE(F32ToBf16(-2.0f), uint16_t{0xc000});
    QCOMPARE(F32ToBf16(0.0f), uint16_t{0x0000});
    QCOMPARE(F32ToBf16(-0.0f), uint16_t{0x8000});
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0).
    QCOMPARE(F32ToBf16(1.0f + 0x1p-8f), uint16_t{0x3f80});
    // 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up.
    QCOMPARE(F32ToBf16(1.0f + 3 * 0x1p-8f), uint16_t{0x3f82});
    QCOMPARE(F32ToBf16(std::numeric_limits<float>::infinity()), uint16_t{0x7f80});
    QVERIFY(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
    // A signalling-NaN pattern whose payload would truncate to infinity stays NaN.
    QVERIFY(std::isnan(Bf16ToF32(F32ToBf16(FromBits(0x7f800001)))));
    // The largest float rounds up to infinity in bf16.
    QCOMPARE(F32ToBf16(std::numeric_limits<float>::max()), uint16_t{0x7f80});
    QCOMPARE(Bf16ToF32(0x4049), 3.140625f);
  }

  void bf16MatchesReferenceRounding() {
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> any;
    for (int i = 0; i < 200000; ++i) {
      const float f = FromBits(any(rng));
      if (std::isnan(f)) continue;
      QCOMPARE(F32ToBf16(f), ReferenceBf16(f));
    }
  }

  void f16RoundTripsEveryValue() {
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float f = F16ToF32(static_cast<uint16_t>(h));
      if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
        QVERIFY(std::isnan(f));
        continue;
      }
      QCOMPARE(F32ToF16(f), static_cast<uint16_t>(h));
    }
  }

  void f16MatchesCompilerConversions() {
#if defined(__FLT16_MAX__) || defined(__aarch64__)
#if defined(__aarch64__) && !defined(__clang__) && __GNUC__ < 13
    // GCC 12's C++ has no _Float16 on aarch64; its __fp16 is the same IEEE
    // binary16 (the default format), with the same conversions.
    using _Float16 = __fp16;
#endif
    for (uint32_t h = 0; h < 0x10000; ++h) {
      _Float16 x;
      const uint16_t hb = static_cast<uint16_t>(h);
      std::memcpy(&x, &hb, 2);
      const float want = static_cast<float>(x);
      const float got = F16ToF32(hb);
      if (std::isnan(want)) {
        QVERIFY(std::isnan(got));
      } else {
        QCOMPARE(Bits(got), Bits(want));
      }
    }
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> any;
    std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
    for (int i = 0; i < 300000; ++i) {
      const float f = i % 2 ? FromBits(any(rng)) : near(rng) * (i % 3 ? 1.0f : 1e-6f);
      if (std::isnan(f)) continue;
      const _Float16 ref = static_cast<_Float16>(f);
      uint16_t want;
      std::memcpy(&want, &ref, 2);
      QCOMPARE(F32ToF16(f), want);
    }
#else
    QSKIP("this compiler has no _Float16 to compare against");
#endif
  }

  void f16KnownValues() {
    QCOMPARE(F32ToF16(1.0f), uint16_t{0x3c00});
    QCOMPARE(F32ToF16(65504.0f), uint16_t{0x7bff});
    QCOMPARE(F32ToF16(65520.0f), uint16_t{0x7c00});  // rounds to infinity
    QCOMPARE(F32ToF16(0x1p-24f), uint16_t{0x0001});  // smallest subnormal
    QCOMPARE(F32ToF16(0x1p-25f), uint16_t{0x0000});  // tie with 0: even
    QCOMPARE(F16ToF32(0x3555), 0.333251953125f);
  }

  void f32SumIsInSourceOrder() {
    // (1e8 + 1) - 1e8 loses the 1 in f32; the order of sources is the order
    // of additions, so a different order gives a different (defined) result.
    const float a[1] = {1e8f}, b[1] = {1.0f}, c[1] = {-1e8f};
    float out[1];
    const void* abc[3] = {a, b, c};
    ReduceSum(DType::kF32, out, abc, 3, 1);
    QCOMPARE(out[0], (1e8f + 1.0f) + -1e8f);
    const void* acb[3] = {a, c, b};
    ReduceSum(DType::kF32, out, acb, 3, 1);
    QCOMPARE(out[0], 1.0f);
  }

  void sumsMatchDoubleReference_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("count");
    for (int d = 0; d < 3; ++d) {
      for (int n : {1, 2, 3, 8}) {
        for (int count : {1, 7, 1023, 1024, 1025, 5000}) {
          QTest::addRow("%s n=%d count=%d", DTypeName(static_cast<DType>(d)).data(), n, count)
              << d << n << count;
        }
      }
    }
  }
  void sumsMatchDoubleReference() {
    QFETCH(int, dtype);
    QFETCH(int, n);
    QFETCH(int, count);
    const DType dt = static_cast<DType>(dtype);
    const size_t es = DTypeSize(dt);
    std::mt19937 rng(n * 1000 + count);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::vector<std::vector<uint8_t>> src(n, std::vector<uint8_t>(count * es));
    std::vector<std::vector<double>> val(n, std::vector<double>(count));
    for (int k = 0; k < n; ++k) {
      for (int i = 0; i < count; ++i) {
        const float f = u(rng);
        if (dt == DType::kF32) {
          std::memcpy(&src[k][i * es], &f, 4);
          val[k][i] = f;
        } else {
          const uint16_t h = dt == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
          std::memcpy(&src[k][i * es], &h, 2);
          val[k][i] = dt == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
        }
      }
    }
    std::vector<const void*> ptrs;
    for (auto& s : src) ptrs.push_back(s.data());
    std::vector<uint8_t> out(count * es);
    ReduceSum(dt, out.data(), ptrs.data(), n, count);
    // f32 accumulation error plus one final rounding to the storage type.
    const double store_eps = dt == DType::kF32 ? 0x1p-23 : dt == DType::kBF16 ? 0x1p-8 : 0x1p-11;
    for (int i = 0; i < count; ++i) {
      double want = 0, mag = 0;
      for (int k = 0; k < n; ++k) {
        want += val[k][i];
        mag += std::fabs(val[k][i]);
      }
      double got;
      if (dt == DType::kF32) {
        float g;
        std::memcpy(&g, &out[i * es], 4);
        got = g;
      } else {
        uint16_t h;
        std::memcpy(&h, &out[i * es], 2);
        got = dt == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
      }
      const double tol = mag * n * 0x1p-23 + std::fabs(want) * store_eps + 1e-30;
      if (std::fabs(got - want) > tol) {
        QFAIL(qPrintable(QString("element %1: got %2, want %3").arg(i).arg(got).arg(want)));
      }
    }
  }

  void destinationMayAliasASource() {
    std::vector<float> a(3000), b(3000), expected(3000);
    for (int i = 0; i < 3000; ++i) {
      a[i] = static_cast<float>(i);
      b[i] = static_cast<float>(2 * i + 1);
      expected[i] = a[i] + b[i];
    }
    std::vector<float> b_copy = b;
    ReduceSum2(DType::kF32, b.data(), a.data(), b.data(), 3000);  // dst == second source
    QVERIFY(b == expected);
    ReduceSum2(DType::kF32, a.data(), a.data(), b_copy.data(), 3000);  // dst == first source
    QVERIFY(a == expected);
  }
};

QTEST_APPLESS_MAIN(TestReduce)
#include "test_reduce.moc"
