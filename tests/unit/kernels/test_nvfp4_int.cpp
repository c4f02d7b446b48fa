// nvfp4_int.h, the arithmetic of the CUDA integer NVFP4 decode matmul, on
// the host (the two device instructions through their host forms):
//   - every combination of four E2M1 codes to signed bytes, against
//     weight.h's kE2m1Values;
//   - activation blocks to integer parts: the parts rebuild an integer q
//     with |q| <= 2^22 whose q x scale is within 2^-22 of the block's
//     largest magnitude of every value, over magnitudes from subnormal to
//     2^127; zero, NaN and infinite blocks keep float's semantics;
//   - the int32 block sums at their extreme (every code +-12, every q +-2^22)
//     equal the exact sums;
//   - whole matrices computed chunk by chunk the way the kernel walks them
//     (DecodeNvfp4IntChunk, Nvfp4IntChunkFma) against the scalar CPU
//     backend's Matmul, within the GPU test's matmul tolerance.
// The device kernel itself is checked against the scalar backend by
// tests/gpu/test_cuda_kernels.
#include <QtTest>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/kernels/nvfp4_int.h"
#include "octet/kernels/weight.h"

using namespace octet;
using namespace octet::kernels;

namespace {

uint32_t Word(const int8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// The integer the three parts of column c stand for.
int64_t Rebuild(const int8_t* parts, int c) {
  return parts[c] + 256 * int64_t{parts[16 + c]} + 65536 * int64_t{parts[32 + c]};
}

// x[m, k] · W[n, k]ᵀ the way gemv_int.cu computes it, on the host.
std::vector<float> IntMatmul(const std::vector<float>& x, int64_t m,
                             const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales,
                             float global, int64_t n, int64_t k) {
  const int64_t blocks = k / 16;
  std::vector<int8_t> parts(m * blocks * kNvfp4IntBlockBytes);
  std::vector<float> ascales(m * blocks);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      ascales[i * blocks + b] =
          PackNvfp4IntBlock(&x[i * k + b * 16], &parts[(i * blocks + b) * kNvfp4IntBlockBytes]);
    }
  }
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < k / 32; ++c) {
        uint32_t words[4];
        std::memcpy(words, &codes[r * k / 2 + c * 16], 16);
        Nvfp4IntChunk chunk;
        DecodeNvfp4IntChunk(words, DecodeE4m3(scales[r * blocks + 2 * c]),
                            DecodeE4m3(scales[r * blocks + 2 * c + 1]), &chunk);
        uint32_t p[2][3][4];
        for (int b = 0; b < 2; ++b) {
          const int8_t* blk = &parts[(i * blocks + 2 * c + b) * kNvfp4IntBlockBytes];
          for (int pp = 0; pp < 3; ++pp) {
            for (int t = 0; t < 4; ++t) p[b][pp][t] = Word(blk + 16 * pp + 4 * t);
          }
        }
        const float as[2] = {ascales[i * blocks + 2 * c], ascales[i * blocks + 2 * c + 1]};
        // The kernel's choice: the float path for a chunk with an infinity.
        acc = std::isinf(as[0]) || std::isinf(as[1]) ? Nvfp4IntChunkFmaAny(chunk, p, as, acc)
                                                     : Nvfp4IntChunkFma(chunk, p, as, acc);
      }
      y[i * n + r] = acc * (global * 0.5f);
    }
  }
  return y;
}

}  // namespace

class TestNvfp4Int : public QObject {
  Q_OBJECT
 private slots:
  void everyFourCodes() {
    for (uint32_t codes = 0; codes <= 0xffff; ++codes) {
      const uint32_t got = E2m1x4ToInt8(codes | 0xabcd0000u);  // high half ignored
      for (int n = 0; n < 4; ++n) {
        const int want = static_cast<int>(2.0f * kE2m1Values[(codes >> (4 * n)) & 0xf]);
        const int byte = static_cast<int8_t>(got >> (8 * n));
        if (byte != want) {
          QFAIL(qPrintable(QString("codes 0x%1, column %2: got %3, want %4")
                               .arg(codes, 4, 16, QChar('0'))
                               .arg(n)
                               .arg(byte)
                               .arg(want)));
        }
      }
    }
  }

  void packedBlocksRebuildTheValues() {
    std::mt19937 rng(20261204);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exp(-149, 127);
    for (int trial = 0; trial < 20000; ++trial) {
      float v[16];
      // A block's magnitude from subnormal to near float's top, some values
      // far below the largest (they round to few bits or to zero).
      const int e = exp(rng);
      for (int c = 0; c < 16; ++c) {
        v[c] = std::ldexp(unit(rng), c % 5 == 0 ? e - 30 : e);
        if (trial % 7 == 0 && c % 3 == 0) v[c] = 0.0f;
      }
      float amax = 0.0f;
      for (float f : v) amax = std::max(amax, std::fabs(f));
      int8_t parts[kNvfp4IntBlockBytes];
      const float scale = PackNvfp4IntBlock(v, parts);
      QVERIFY(std::isfinite(scale));
      for (int c = 0; c < 16; ++c) {
        QVERIFY2(parts[32 + c] >= -64 && parts[32 + c] <= 64, "part 2 out of -64..64");
        const int64_t q = Rebuild(parts, c);
        QVERIFY(q >= -(int64_t{1} << 22) && q <= (int64_t{1} << 22));
        if (amax == 0.0f) {
          QCOMPARE(q, int64_t{0});
          continue;
        }
        // q x 2^(e-22) is within half a step, 2^(e-23) <= 2^-22 amax. The
        // scale is exact down to 2^-149 and zero below (blocks under 2^-127,
        // whose values then come back as zero).
        const double back = static_cast<double>(q) * scale;
        const double err = std::fabs(back - v[c]);
        const double bound =
            scale == 0.0f ? static_cast<double>(amax) : std::ldexp(static_cast<double>(amax), -22);
        if (err > bound) {
          QFAIL(qPrintable(QString("trial %1 column %2: %3 came back as %4 (scale %5)")
                               .arg(trial)
                               .arg(c)
                               .arg(v[c], 0, 'g', 9)
                               .arg(back, 0, 'g', 9)
                               .arg(scale, 0, 'g', 9)));
        }
      }
    }
  }

  void nonFiniteAndZeroBlocks() {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    int8_t parts[kNvfp4IntBlockBytes];
    float v[16] = {};
    QCOMPARE(PackNvfp4IntBlock(v, parts), 0.0f);
    for (int c = 0; c < 16; ++c) QCOMPARE(Rebuild(parts, c), int64_t{0});

    for (int c = 0; c < 16; ++c) v[c] = 1.0f + c;
    v[3] = inf;
    v[9] = -inf;
    QCOMPARE(PackNvfp4IntBlock(v, parts), inf);
    for (int c = 0; c < 16; ++c) {
      QCOMPARE(Rebuild(parts, c), int64_t{c == 3 ? 1 : c == 9 ? -1 : 0});
    }
    v[5] = nan;
    QVERIFY(std::isnan(PackNvfp4IntBlock(v, parts)));
  }

  // Infinities and NaN in the activations, whole rows the kernel's way,
  // give what the scalar backend's float sums give: the same infinities, NaN
  // where it has NaN (an infinity times a zero weight, opposite infinities).
  void nonFiniteRowsAgainstTheScalarBackend() {
    auto backend = CreateBackend("scalar", BackendOptions{0});
    QVERIFY2(backend.ok(), backend.status().ToString().c_str());
    const int n = 256, k = 64, m = 5;
    std::mt19937 rng(11);
    std::vector<uint8_t> codes(n * k / 2), scales(n * k / 16);
    // Every code, so that many rows have zero weights where the infinities are.
    for (auto& b : codes) b = static_cast<uint8_t>(rng());
    for (auto& sc : scales) sc = static_cast<uint8_t>(1 + rng() % 0x60);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(m * k);
    for (auto& f : x) f = normal(rng);
    const float inf = std::numeric_limits<float>::infinity();
    x[0 * k + 5] = inf;  // one infinity
    x[1 * k + 3] = std::nanf("");
    x[2 * k + 7] = inf;  // opposite infinities in one block
    x[2 * k + 9] = -inf;
    x[3 * k + 40] = -inf;  // two of one sign in the second chunk
    x[3 * k + 41] = -inf;
    x[4 * k + 2] = inf;  // infinities in both blocks of a chunk
    x[4 * k + 20] = inf;
    const WeightMatrix w = WeightMatrix::Nvfp4(codes.data(), scales.data(), 0.5f, n, k);
    std::vector<float> want(m * n);
    (*backend)->Matmul(x.data(), m, k, w, want.data(), n, false);
    const std::vector<float> got = IntMatmul(x, m, codes, scales, 0.5f, n, k);
    int nans = 0;
    for (int j = 0; j < m * n; ++j) {
      QVERIFY2(!std::isfinite(want[j]), "every output meets a non-finite activation");
      const bool same = std::isnan(want[j]) ? std::isnan(got[j]) : got[j] == want[j];
      nans += std::isnan(want[j]);
      QVERIFY2(same, qPrintable(QString("row %1 output %2: got %3 want %4")
                                    .arg(j / n)
                                    .arg(j % n)
                                    .arg(got[j])
                                    .arg(want[j])));
    }
    QVERIFY2(nans > n && nans < m * n, "both NaN and infinite outputs are covered");
  }

  // Every code +-12 against every q +-2^22 (and the mixed extremes): the
  // int32 sum is the exact sum.
  void blockSumsAtTheirExtremes() {
    for (int pattern = 0; pattern < 4; ++pattern) {
      float v[16];
      for (int c = 0; c < 16; ++c) {
        // 2^22 - 1/2 rounds to 2^22: the largest q the packing makes.
        const float mag = 0x1p22f - 0.5f;
        v[c] = (pattern & 1) && c % 2 ? -mag : mag;
      }
      int8_t parts[kNvfp4IntBlockBytes];
      const float scale = PackNvfp4IntBlock(v, parts);
      QCOMPARE(scale, 1.0f);  // amax < 2^22: q = v rounded
      uint32_t part[3][4];
      for (int p = 0; p < 3; ++p) {
        for (int t = 0; t < 4; ++t) part[p][t] = Word(parts + 16 * p + 4 * t);
      }
      // Code 7 is +6 (byte 12), code 15 is -6 (byte -12).
      const uint32_t codes = pattern & 2 ? 0x7f7f7f7fu : 0x77777777u;
      uint32_t w[4];
      for (int t = 0; t < 4; ++t) w[t] = E2m1x4ToInt8(codes >> (16 * (t % 2)));
      int64_t want = 0;
      for (int c = 0; c < 16; ++c) {
        const int64_t wc = static_cast<int8_t>(w[c / 4] >> (8 * (c % 4)));
        want += wc * Rebuild(parts, c);
      }
      QVERIFY(std::llabs(want) <= 16 * 12 * (int64_t{1} << 22));
      QCOMPARE(int64_t{Nvfp4IntBlockDot(w, part)}, want);
    }
  }

  // Whole matrices, chunk by chunk as the kernel walks them, against the
  // scalar backend: |got - want| <= 3e-5 * Σ |x||w| (test_cuda_kernels').
  void matricesAgainstTheScalarBackend() {
    auto backend = CreateBackend("scalar", BackendOptions{0});
    QVERIFY2(backend.ok(), backend.status().ToString().c_str());
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> code(0, 255), scale_code(1, 0x60);
    for (const auto& [n, k, m] : {std::tuple{5, 32, 1}, std::tuple{37, 256, 3},
                                  std::tuple{64, 1024, 8}, std::tuple{9, 4096, 2}}) {
      std::vector<uint8_t> codes(n * k / 2), scales(n * k / 16);
      for (auto& b : codes) b = static_cast<uint8_t>(code(rng));
      for (auto& s : scales) s = static_cast<uint8_t>(scale_code(rng));
      const float global = 0.0173f;
      std::vector<float> x(m * k);
      for (int64_t j = 0; j < m * k; ++j) {
        // Rows of different magnitudes, one block far smaller than the rest.
        x[j] = normal(rng) * (j / k == 1 ? 1e-3f : 1.0f) * (j % k < 16 ? 1e-6f : 1.0f);
      }
      const WeightMatrix w = WeightMatrix::Nvfp4(codes.data(), scales.data(), global, n, k);
      std::vector<float> want(m * n), mag(m * n);
      (*backend)->Matmul(x.data(), m, k, w, want.data(), n, false);
      // Σ |x||w|: |w| decoded by the backend itself (an embedding of every row).
      std::vector<int32_t> ids(n);
      for (int r = 0; r < n; ++r) ids[r] = r;
      std::vector<float> wf(n * k), xa(x);
      (*backend)->Embedding(w, ids.data(), n, wf.data());
      for (auto& f : wf) f = std::fabs(f);
      for (auto& f : xa) f = std::fabs(f);
      (*backend)->Matmul(xa.data(), m, k, WeightMatrix::Dense(WeightFormat::kF32, wf.data(), n, k),
                         mag.data(), n, false);
      const std::vector<float> got = IntMatmul(x, m, codes, scales, global, n, k);
      for (int64_t j = 0; j < m * n; ++j) {
        const float tol = 3e-5f * mag[j] + 1e-30f;
        if (!(std::fabs(got[j] - want[j]) <= tol)) {
          QFAIL(qPrintable(QString("n %1 k %2 m %3, output %4: got %5, want %6 (tolerance %7)")
                               .arg(n)
                               .arg(k)
                               .arg(m)
                               .arg(j)
                               .arg(got[j], 0, 'g', 9)
                               .arg(want[j], 0, 'g', 9)
                               .arg(tol)));
        }
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestNvfp4Int)
#include "test_nvfp4_int.moc"
