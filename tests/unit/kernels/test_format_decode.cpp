// format_decode.h (the decoders the CUDA kernels use) against the reference
// conversions in weight.h, for every code of every format: all 65536 BF16 and
// IEEE half bit patterns, all 256 E4M3 codes, all 16 E2M1 codes. Values must
// match bit for bit (so -0 is not +0); a NaN must decode to a NaN.
#include <QtTest>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "octet/kernels/format_decode.h"
#include "octet/kernels/weight.h"

using namespace octet::kernels;

namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Empty when `got` is `want` (both NaN counts as equal), else what differs.
std::string Mismatch(const char* format, uint32_t code, float got, float want) {
  if (std::isnan(want) && std::isnan(got)) return {};
  if (Bits(got) == Bits(want)) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s code 0x%x: got %a (0x%08x), want %a (0x%08x)", format, code,
                got, Bits(got), want, Bits(want));
  return buf;
}

}  // namespace

class TestFormatDecode : public QObject {
  Q_OBJECT
 private slots:
  void bf16EveryCode() {
    int nans = 0;
    for (uint32_t c = 0; c <= 0xffff; ++c) {
      const float want = Bf16ToF32(static_cast<uint16_t>(c));
      const std::string m = Mismatch("bf16", c, DecodeBf16(static_cast<uint16_t>(c)), want);
      QVERIFY2(m.empty(), m.c_str());
      nans += std::isnan(want);
    }
    QCOMPARE(nans, 2 * 127);  // exponent all ones, mantissa non-zero, both signs
  }

  void f16EveryCode() {
    int nans = 0;
    for (uint32_t c = 0; c <= 0xffff; ++c) {
      const float want = F16ToF32(static_cast<uint16_t>(c));
      const std::string m = Mismatch("f16", c, DecodeF16(static_cast<uint16_t>(c)), want);
      QVERIFY2(m.empty(), m.c_str());
      nans += std::isnan(want);
    }
    QCOMPARE(nans, 2 * 1023);
    // Spot values, so a shared mistake in both implementations cannot hide.
    QCOMPARE(DecodeF16(0x3c00), 1.0f);
    QCOMPARE(DecodeF16(0x0001), std::ldexp(1.0f, -24));
    QCOMPARE(DecodeF16(0x7bff), 65504.0f);
    QCOMPARE(DecodeF16(0xfc00), -INFINITY);
    QCOMPARE(Bits(DecodeF16(0x8000)), 0x80000000u);
  }

  void e4m3EveryCode() {
    int nans = 0;
    for (uint32_t c = 0; c <= 0xff; ++c) {
      const float want = E4m3ToF32(static_cast<uint8_t>(c));
      const std::string m = Mismatch("e4m3", c, DecodeE4m3(static_cast<uint8_t>(c)), want);
      QVERIFY2(m.empty(), m.c_str());
      nans += std::isnan(DecodeE4m3(static_cast<uint8_t>(c)));
    }
    QCOMPARE(nans, 2);  // 0x7f and 0xff only
    QCOMPARE(DecodeE4m3(0x7e), 448.0f);
    QCOMPARE(DecodeE4m3(0x01), std::ldexp(1.0f, -9));
    QCOMPARE(DecodeE4m3(0x08), std::ldexp(1.0f, -6));
    QCOMPARE(DecodeE4m3(0xb8), -1.0f);
  }

  void e2m1EveryCode() {
    for (uint32_t c = 0; c < 16; ++c) {
      const std::string m = Mismatch("e2m1", c, DecodeE2m1(c), kE2m1Values[c]);
      QVERIFY2(m.empty(), m.c_str());
      // Bits above the nibble are ignored.
      QCOMPARE(Bits(DecodeE2m1(c | 0xf0u)), Bits(kE2m1Values[c]));
    }
  }

  void nvfp4CodeOrder() {
    // Low nibble = even column.
    const uint8_t row[2] = {0x21, 0xf3};
    QCOMPARE(Nvfp4Code(row, 0), 0x1u);
    QCOMPARE(Nvfp4Code(row, 1), 0x2u);
    QCOMPARE(Nvfp4Code(row, 2), 0x3u);
    QCOMPARE(Nvfp4Code(row, 3), 0xfu);
  }
};

QTEST_APPLESS_MAIN(TestFormatDecode)
#include "test_format_decode.moc"
