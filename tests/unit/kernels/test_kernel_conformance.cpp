// Every kernel op on every CPU backend this machine runs, against a plain
// double-precision reference written here (for matmul/GEMM) and against the
// scalar backend (for the rest), on random shapes including odd sizes.
// Also the number-format conversions against hand-checked values.
#include <QtTest>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernel_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/thread_pool.h"
#include "octet/kernels/weight.h"

using namespace octet::kernels;
using namespace octet::kernels::testing;

namespace {

// A weight matrix with its own storage.
struct OwnedWeight {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  WeightMatrix view;
};

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

// |got - want| <= atol + rtol * scale, elementwise; reports the first failure.
bool Close(const std::vector<float>& got, const std::vector<double>& want,
           const std::vector<double>& scale, double rtol, std::string* why) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-6 + rtol * scale[i];
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      *why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
             std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

// y, m rows of stride ldy filled with 7 before `Matmul(x, m, ldx, w, y, ldy,
// acc)`, against the product in double precision (7 added when `acc`), with
// 1e-5 of the sum of |terms| as tolerance; the padding between y's rows must
// still be 7. False with `why` naming the first mismatch.
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
            std::string* why) {
  if (got.size() != want.size()) {
    *why = "size differs";
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      *why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
             std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

class TestKernelConformance : public QObject {
  Q_OBJECT
 private slots:
  void conversions() {
    QCOMPARE(Bf16ToF32(0x3f80), 1.0f);
    QCOMPARE(F32ToBf16(1.0f), uint16_t(0x3f80));
    QCOMPARE(F32ToBf16(1.00390625f), uint16_t(0x3f80));  // tie -> even
    QCOMPARE(F32ToBf16(1.01171875f), uint16_t(0x3f82));  // tie -> even (up)
    QCOMPARE(F16ToF32(0x3c00), 1.0f);
    QCOMPARE(F16ToF32(0x0001), std::ldexp(1.0f, -24));
    QCOMPARE(F16ToF32(0xc000), -2.0f);
    QCOMPARE(F32ToF16(65504.0f), uint16_t(0x7bff));
    QCOMPARE(F32ToF16(1e6f), uint16_t(0x7c00));
    QCOMPARE(F32ToF16(std::ldexp(1.0f, -24)), uint16_t(0x0001));
    for (int h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
      QCOMPARE(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), uint16_t(h));
    }
    // e4m3fn: max 448, min subnormal 2^-9, NaN codes, and every code round-trips.
    QCOMPARE(E4m3ToF32(0x7e), 448.0f);
    QCOMPARE(E4m3ToF32(0x01), std::ldexp(1.0f, -9));
    QCOMPARE(E4m3ToF32(0x08), std::ldexp(1.0f, -6));
    QCOMPARE(E4m3ToF32(0x38), 1.0f);
    QVERIFY(std::isnan(E4m3ToF32(0x7f)));
    QVERIFY(std::isnan(E4m3ToF32(0xff)));
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7f) == 0x7f) continue;
      QCOMPARE(int(F32ToE4m3(E4m3ToF32(static_cast<uint8_t>(c)))), c);
      QCOMPARE(E4m3Table()[c], E4m3ToF32(static_cast<uint8_t>(c)));
    }
    QCOMPARE(int(F32ToE4m3(1000.0f)), 0x7e);                // saturates
    QCOMPARE(int(F32ToE4m3(1.0625f)), 0x38);                // tie between 1 and 1.125 -> even
    QCOMPARE(int(F32ToE4m3(1.1875f)), 0x3a);                // tie 1.125/1.25 -> 1.25 (even)
    QCOMPARE(int(F32ToE4m3(std::ldexp(1.5f, -10))), 0x01);  // 1.5 * 2^-10 -> 2^-9
    // E2M1 ties to even code (README: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
    const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, -0.3f, -6.0f};
    const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.5f, -6.0f};
    for (int i = 0; i < 10; ++i) QCOMPARE(kE2m1Values[F32ToE2m1(in[i])], out[i]);
  }

  void threadPoolRunsEveryTaskOnce() {
    ThreadPool pool(3);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t t, int thread) {
        QVERIFY(thread >= 0 && thread < 3);
        hits[t].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) QCOMPARE(hits[i].load(), 1);
    }
  }

  // Back-to-back jobs of changing size, as one decode step issues them: a
  // worker still looking at the finished job must never run a task of the next
  // one (that ran tasks twice and could leave the caller waiting forever).
  void threadPoolBackToBackJobsRunEachTaskOnce() {
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      const int64_t sizes[] = {2, 37, 3, 64, 5, 2, 128};
      std::vector<std::atomic<int>> hits(128);
      for (int round = 0; round < 20000; ++round) {
        const int64_t n = sizes[round % 7];
        for (int64_t i = 0; i < n; ++i) hits[i].store(0, std::memory_order_relaxed);
        pool.ParallelFor(n, [&](int64_t t, int) { hits[t].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i) {
          if (hits[i].load() != 1) {
            QFAIL(qPrintable(QStringLiteral("%1 threads, round %2 (%3 tasks): task %4 ran %5 times")
                                 .arg(threads)
                                 .arg(round)
                                 .arg(n)
                                 .arg(i)
                                 .arg(hits[i].load())));
          }
        }
      }
    }
  }

  // Each thread starts on a range of its own; when one is held up (here a
  // worker keeps its first task until every other task has run), the others
  // must take the rest of its range, or the job never finishes.
  void threadPoolTakesOverAStalledThreadsRange() {
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      for (int round = 0; round < 50; ++round) {
        const int64_t n = 64;
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int64_t> finished{0};
        std::atomic<bool> held{false}, timed_out{false};
        pool.ParallelFor(n, [&](int64_t t, int thread) {
          if (thread != 0 && !held.exchange(true)) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (finished.load() < n - 1) {
              if (std::chrono::steady_clock::now() > deadline) {
                timed_out.store(true);
                break;
              }
              std::this_thread::yield();
            }
          }
          hits[t].fetch_add(1);
          finished.fetch_add(1);
        });
        QVERIFY2(!timed_out.load(), "the other threads left the held thread's range undone");
        for (int64_t i = 0; i < n; ++i) QCOMPARE(hits[i].load(), 1);
      }
    }
  }

  void matmulEveryFormatAndShape() {
    std::mt19937 rng(1);
    const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                    WeightFormat::kNvfp4};
    struct Shape {
      int64_t n, k;
    };
    // n = 301: several 4-row groups per decode task (the prefetching path) and a tail.
    // k = 1043 and 2099 (dense): batched decode's 1024-column blocks, with a ragged last one.
    // k = 16400: longer than the 16384 columns AVX-512 NVFP4 decode interleaves at once.
    const Shape shapes[] = {{1, 16},   {7, 48},    {33, 272}, {50, 528},
                            {5, 1040}, {9, 2096}, {301, 96}, {6, 16400}};
    for (auto& backend : AllBackends(2)) {
      for (WeightFormat f : formats) {
        for (const Shape& s : shapes) {
          for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 130}) {  // every decode batch kernel
            const int64_t k = (f == WeightFormat::kNvfp4) ? s.k : s.k + 3;  // odd k for dense
            OwnedWeight w = RandomWeight(f, s.n, k, rng);
            const int64_t ldx = k + 5, ldy = s.n + 2;
            std::vector<float> x = RandomFloats(m * ldx, rng);
            std::vector<float> y(m * ldy, 7.0f);
            for (bool acc : {false, true}) {
              std::fill(y.begin(), y.end(), 7.0f);
              backend->Matmul(x.data(), m, ldx, w.view, y.data(), ldy, acc);
              std::vector<float> got;
              std::vector<double> want, scale;
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t r = 0; r < s.n; ++r) {
                  double d = 0, a = 0;
                  for (int64_t c = 0; c < k; ++c) {
                    const double p = double(WeightAt(w.view, r, c)) * x[i * ldx + c];
                    d += p;
                    a += std::fabs(p);
                  }
                  got.push_back(y[i * ldy + r]);
                  want.push_back(acc ? d + 7.0 : d);
                  scale.push_back(a + 7.0);
                }
              }
              std::string why;
              QVERIFY2(Close(got, want, scale, 1e-5, &why),
                       (std::string(backend->name()) + " " + std::string(WeightFormatName(f)) +
                        " m=" + std::to_string(m) + " n=" + std::to_string(s.n) +
                        " k=" + std::to_string(k) + ": " + why)
                           .c_str());
            }
          }
        }
      }
    }
  }

  // Batched decode of BF16 weights on every backend (AMX tiles on
  // "avx512-amx": 32- and 16-row passes, then fewer than 16 rows in FMAs;
  // whole 32-column blocks, then the ragged columns), through a column slice
  // (rows further apart than their width) as the tensor-parallel shards are.
  void batchedBf16DecodeTilesAndTails() {
    std::mt19937 rng(11);
    struct Shape {
      int64_t n, k;
    };
    // n = 200 on one thread: tasks of 48 rows, one 32-row pass and one 16-row
    // pass; n = 300 on two: tasks of 36, a 32-row pass and 4 rows of FMAs.
    // k: ragged blocks (+19 = one 16-vector and 3 columns), one block + 8,
    // no whole block (31), and exactly whole blocks (64).
    const Shape shapes[] = {{200, 1043}, {300, 1043}, {300, 40}, {48, 31}, {64, 64}};
    for (int threads : {1, 2}) {
      for (auto& backend : AllBackends(threads)) {
        for (const Shape& s : shapes) {
          OwnedWeight full = RandomWeight(WeightFormat::kBF16, s.n, s.k + 7, rng);
          const WeightMatrix w = full.view.ColSlice(5, s.k);
          for (int64_t m = 3; m <= 8; ++m) {
            const int64_t ldx = s.k + 1, ldy = s.n + 3;
            std::vector<float> x = RandomFloats(m * ldx, rng);
            for (bool acc : {false, true}) {
              std::vector<float> y(m * ldy, 7.0f);
              backend->Matmul(x.data(), m, ldx, w, y.data(), ldy, acc);
              std::string why;
              QVERIFY2(MatchesDoubleProduct(w, x, m, ldx, y, ldy, acc, &why),
                       (std::string(backend->name()) + " threads=" + std::to_string(threads) +
                        " m=" + std::to_string(m) + " n=" + std::to_string(s.n) +
                        " k=" + std::to_string(s.k) + (acc ? " acc" : "") + ": " + why)
                           .c_str());
            }
          }
        }
      }
    }
  }

  // Prefill-sized batches (more than 8 rows: the GEMM paths, AVX-512's packed
  // panels of 32 weight rows gathered 16 at a time and AMX's tiles) of BF16
  // and NVFP4 weights: row counts that leave part-filled 16- and 32-row
  // panels, tasks of several panels (one thread, n = 200), odd and even k,
  // column slices that start mid-row (rows further apart than their width),
  // activation tiles of 12 with a ragged last one.
  void prefillGemmPanelsAndSlices() {
    std::mt19937 rng(13);
    struct Shape {
      int64_t n, k, col0;
    };
    const Shape shapes[] = {{7, 33, 0},   {17, 64, 5},  {33, 129, 0},
                            {50, 96, 16}, {200, 67, 3}, {97, 304, 32}};
    for (int threads : {1, 2}) {
      for (auto& backend : AllBackends(threads)) {
        for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
          for (const Shape& s : shapes) {
            // NVFP4 column slices start and end on 16-column blocks.
            const int64_t k = f == WeightFormat::kNvfp4 ? (s.k + 15) / 16 * 16 : s.k;
            const int64_t col0 = f == WeightFormat::kNvfp4 ? s.col0 / 16 * 16 : s.col0;
            OwnedWeight full = RandomWeight(f, s.n, col0 + k + 16, rng);
            QVERIFY(full.view.CanSliceCols(col0, k));
            const WeightMatrix w = full.view.ColSlice(col0, k);
            for (int64_t m : {9, 13, 25, 40}) {
              const int64_t ldx = k + 3, ldy = s.n + 2;
              std::vector<float> x = RandomFloats(m * ldx, rng);
              for (bool acc : {false, true}) {
                std::vector<float> y(m * ldy, 7.0f);
                backend->Matmul(x.data(), m, ldx, w, y.data(), ldy, acc);
                std::string why;
                QVERIFY2(MatchesDoubleProduct(w, x, m, ldx, y, ldy, acc, &why),
                         (std::string(backend->name()) + " " + std::string(WeightFormatName(f)) +
                          " threads=" + std::to_string(threads) + " m=" + std::to_string(m) +
                          " n=" + std::to_string(s.n) + " k=" + std::to_string(k) +
                          " col0=" + std::to_string(col0) + (acc ? " acc" : "") + ": " + why)
                             .c_str());
              }
            }
          }
        }
      }
    }
  }

  // Each activation keeps all 24 bits of its significand in a batched BF16
  // product: with one power-of-two weight per row (zeros elsewhere) every
  // output is one exact product, so it must equal w * x bit for bit.
  void batchedBf16DecodeKeepsFloatActivations() {
    std::mt19937 rng(12);
    const uint16_t kPow2[4] = {0x3f80, 0xc000, 0x3f00, 0xbe80};  // 1, -2, 0.5, -0.25
    std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
    // n = 200 (one thread: 32- and 16-row passes) and 300 (32-row passes and
    // FMA rows on one and on two threads).
    for (int64_t n : {200, 300}) {
      const int64_t k = 96;
      std::vector<uint16_t> data(n * k, 0);
      for (int64_t r = 0; r < n; ++r) data[r * k + (r * 7) % k] = kPow2[r % 4];
      const WeightMatrix w = WeightMatrix::Dense(WeightFormat::kBF16, data.data(), n, k);
      for (int threads : {1, 2}) {
        for (auto& backend : AllBackends(threads)) {
          for (int64_t m : {3, 5, 8}) {
            std::vector<float> x(m * k);
            for (auto& v : x) v = ud(rng);
            std::vector<float> y(m * n);
            backend->Matmul(x.data(), m, k, w, y.data(), n, false);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t r = 0; r < n; ++r) {
                const float want = Bf16ToF32(kPow2[r % 4]) * x[i * k + (r * 7) % k];
                QVERIFY2(y[i * n + r] == want,
                         (std::string(backend->name()) + " threads=" + std::to_string(threads) +
                          " m=" + std::to_string(m) + " n=" + std::to_string(n) + " row " +
                          std::to_string(r) + ": got " + std::to_string(y[i * n + r]) + " want " +
                          std::to_string(want))
                             .c_str());
              }
            }
          }
        }
      }
    }
  }

  void matmulOnSlicesEqualsSliceOfMatmul() {
    std::mt19937 rng(2);
    for (auto& backend : AllBackends(2)) {
      for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
        OwnedWeight w = RandomWeight(f, 40, 96, rng);
        std::vector<float> x = RandomFloats(3 * 96, rng);
        // Row slice: the rows of the full product.
        std::vector<float> full(3 * 40), part(3 * 10);
        backend->Matmul(x.data(), 3, 96, w.view, full.data(), 40, false);
        backend->Matmul(x.data(), 3, 96, w.view.RowSlice(12, 10), part.data(), 10, false);
        for (int i = 0; i < 3; ++i) {
          for (int r = 0; r < 10; ++r) QCOMPARE(part[i * 10 + r], full[i * 40 + 12 + r]);
        }
        // Column slices: the two halves' products add up to the full product.
        QVERIFY(w.view.CanSliceCols(32, 64));
        QVERIFY(!w.view.CanSliceCols(8, 64) || f != WeightFormat::kNvfp4);
        std::vector<float> sum(3 * 40);
        backend->Matmul(x.data(), 3, 96, w.view.ColSlice(0, 32), sum.data(), 40, false);
        backend->Matmul(x.data() + 32, 3, 96, w.view.ColSlice(32, 64), sum.data(), 40, true);
        std::string why;
        QVERIFY2(CloseF(sum, full, 1e-4, 1e-4, &why), why.c_str());
      }
    }
  }

  // An inf or NaN in the activations reaches every decode output as it does in
  // the scalar reference (a kernel that rescales or quantizes activations must
  // not turn them into finite numbers).
  void matmulNvfp4NonFiniteActivations() {
    std::mt19937 rng(21);
    auto scalar = Scalar();
    OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 21, 160, rng);
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> x = RandomFloats(160, rng);
      x[77] = bad;
      std::vector<float> want(21);
      scalar->Matmul(x.data(), 1, 160, w.view, want.data(), 21, false);
      for (auto& backend : AllBackends(2)) {
        std::vector<float> y(21, 7.0f);
        backend->Matmul(x.data(), 1, 160, w.view, y.data(), 21, false);
        for (int r = 0; r < 21; ++r) {
          QVERIFY2(std::isnan(y[r]) == std::isnan(want[r]) &&
                       (std::isnan(want[r]) || y[r] == want[r]),
                   (std::string(backend->name()) + " row " + std::to_string(r) + ": got " +
                    std::to_string(y[r]) + " want " + std::to_string(want[r]))
                       .c_str());
        }
      }
    }
  }

  // NVFP4 single-row decode from the tile copy (weight.h, TileNvfp4), which
  // the AVX2 and AVX-512 backends read (PMADDUBSW; VPDPBUSD on CPUs with
  // AVX512-VNNI), NEON with the dot product instructions too, and the others
  // ignore:
  // whole matrices and slices that keep their tiles, against the f64
  // reference, with zero-scale blocks and blocks of very different magnitude.
  void nvfp4TilesDecode() {
    std::mt19937 rng(31);
    struct Shape {
      int64_t n, k;
    };
    const Shape shapes[] = {{16, 64}, {48, 128}, {80, 1024}, {32, 3072}, {144, 192}};
    for (const Shape& s : shapes) {
      OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, s.n, s.k, rng);
      for (size_t i = 3; i < w.scales.size(); i += 7) w.scales[i] = 0;
      QVERIFY(CanTileNvfp4(w.view));
      std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
      QCOMPARE(static_cast<int64_t>(tiles.size()), w.view.BytesRead());  // the same bytes
      const WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
      QVERIFY(tiled.tiles == tiles.data());
      {  // the same bytes written by a pool's threads
        ThreadPool pool(3);
        std::vector<uint8_t> pooled(tiles.size(), 0xaa);
        TileNvfp4(w.view, pooled.data(), &pool);
        QVERIFY(pooled == tiles);
      }
      std::vector<WeightMatrix> views = {tiled};
      if (s.n > 16) views.push_back(tiled.RowSlice(16, s.n - 16));
      if (s.k > 64) views.push_back(tiled.ColSlice(64, s.k - 64));
      if (s.n > 32 && s.k > 128) views.push_back(tiled.RowSlice(16, 16).ColSlice(64, 64));
      // A slice tiled on its own (the engine tiles each rank's shard).
      std::vector<uint8_t> slice_tiles;
      if (s.n > 16 && s.k > 64) {
        const WeightMatrix slice = w.view.RowSlice(16, s.n - 16).ColSlice(64, s.k - 64);
        slice_tiles.resize(Nvfp4TilesBytes(slice));
        views.push_back(TileNvfp4(slice, slice_tiles.data()));
      }
      for (const WeightMatrix& v : views) QVERIFY(v.tiles != nullptr);
      QVERIFY(tiled.RowSlice(8, 8).tiles == nullptr);    // not whole groups
      QVERIFY(tiled.ColSlice(16, 48).tiles == nullptr);  // not whole chunks
      for (const WeightMatrix& v : views) {
        std::vector<float> x = RandomFloats(v.cols, rng);
        for (int64_t c = 0; c < 16; ++c) x[c] *= 1e6f;  // block 0 large
        if (v.cols > 32) {
          for (int64_t c = 16; c < 32; ++c) x[c] *= 1e-6f;  // block 1 small
        }
        std::vector<double> want(v.rows), scale(v.rows);
        for (int64_t r = 0; r < v.rows; ++r) {
          double d = 0, a = 0;
          for (int64_t c = 0; c < v.cols; ++c) {
            const double p = double(WeightAt(v, r, c)) * x[c];
            d += p;
            a += std::fabs(p);
          }
          want[r] = d;
          scale[r] = a;
        }
        for (auto& backend : AllBackends(2)) {
          for (bool acc : {false, true}) {
            std::vector<float> y(v.rows, 7.0f);
            backend->Matmul(x.data(), 1, v.cols, v, y.data(), v.rows, acc);
            std::vector<double> w2 = want, s2 = scale;
            if (acc) {
              for (auto& d : w2) d += 7.0;
              for (auto& d : s2) d += 7.0;
            }
            std::string why;
            QVERIFY2(Close(y, w2, s2, 1e-5, &why),
                     (std::string(backend->name()) + " n=" + std::to_string(v.rows) +
                      " k=" + std::to_string(v.cols) + ": " + why)
                         .c_str());
          }
        }
      }
    }
  }

  // The AVX2 tile kernel (PMADDUBSW) and the AVX512-VNNI one (VPDPBUSD)
  // pack the activation alike and sum the same integers in the same order:
  // their outputs are the same floats, bit for bit, for 1 to 8 rows.
  void nvfp4TilesAvx2MatchesVnniBitForBit() {
    auto avx2 = CreateBackend("avx2", {2});
    auto avx512 = CreateBackend("avx512", {2});
    if (!avx2.ok() || !avx512.ok() || !(*avx2)->UsesNvfp4Tiles() ||
        !(*avx512)->UsesNvfp4Tiles()) {
      QSKIP("needs the AVX2 and the AVX512-VNNI tile kernels (an x86 CPU with AVX512-VNNI)");
    }
    std::mt19937 rng(33);
    OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 208, 1024, rng);  // 3 passes of 64 + 16
    std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
    const WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
    for (int64_t m = 1; m <= 8; ++m) {
      std::vector<float> x = RandomFloats(m * 1024, rng);
      for (int64_t c = 0; c < 16; ++c) x[c] *= 1e5f;  // a large block and a small one
      for (int64_t c = 16; c < 32; ++c) x[c] *= 1e-5f;
      for (bool acc : {false, true}) {
        std::vector<float> a(m * 208, 3.0f), b(m * 208, 3.0f);
        (*avx2)->Matmul(x.data(), m, 1024, tiled, a.data(), 208, acc);
        (*avx512)->Matmul(x.data(), m, 1024, tiled, b.data(), 208, acc);
        QVERIFY2(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                 ("m=" + std::to_string(m) + (acc ? " accumulate" : "")).c_str());
      }
    }
  }

  // The tiles are what a tile-reading backend decodes: with the row-major
  // codes cleared after tiling it still gives the tiled weights' product
  // (the other backends give the cleared matrix's, zero), for one row and for
  // the small batches of batched decode (rows ldx apart, outputs ldy apart,
  // written or added to).
  void nvfp4TilesAreRead() {
    std::mt19937 rng(32);
    OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 112, 256, rng);  // 64 + 32 + 16 rows
    std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
    WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
    constexpr int64_t ldx = 260, ldy = 115;
    const std::vector<float> x = RandomFloats(8 * ldx, rng);
    std::vector<std::vector<float>> want(9);
    for (int64_t m = 1; m <= 8; ++m) {
      want[m].assign(m * ldy, 7.0f);
      Scalar()->Matmul(x.data(), m, ldx, w.view, want[m].data(), ldy, false);
    }
    std::fill(w.data.begin(), w.data.end(), 0);
    int readers = 0;
    for (auto& backend : AllBackends(2)) {
      readers += backend->UsesNvfp4Tiles();
      for (int64_t m = 1; m <= 8; ++m) {
        for (bool acc : {false, true}) {
          std::vector<float> y(m * ldy, 7.0f);
          backend->Matmul(x.data(), m, ldx, tiled, y.data(), ldy, acc);
          std::vector<float> expect = want[m];
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = 0; r < 112; ++r) {
              float& e = expect[i * ldy + r];
              e = backend->UsesNvfp4Tiles() ? e + (acc ? 7.0f : 0.0f) : (acc ? 7.0f : 0.0f);
            }
          }
          std::string why;
          QVERIFY2(CloseF(y, expect, 1e-4, 1e-5, &why),
                   (std::string(backend->name()) + " m=" + std::to_string(m) +
                    (acc ? " accumulate: " : ": ") + why)
                       .c_str());
        }
      }
    }
    qInfo("%d backend(s) here read NVFP4 tiles", readers);
  }

  // Matrices the tile layout does not cover keep no tiles (and every kernel
  // the row-major bytes); activations it cannot hold exactly enough (non-finite,
  // or a block far below 2^-94) take the row-major kernels, with the same
  // result as the reference.
  void nvfp4TilesLimits() {
    std::mt19937 rng(33);
    for (auto [n, k] : {std::pair<int64_t, int64_t>{24, 64}, {16, 80}, {15, 128}}) {
      OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, n, k, rng);
      QVERIFY(!CanTileNvfp4(w.view));
      QVERIFY(TileNvfp4(w.view, nullptr).tiles == nullptr);
    }
    for (uint8_t bad : {uint8_t{0x88}, uint8_t{0x7f}, uint8_t{0xff}}) {  // negative, NaN, NaN
      OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 16, 64, rng);
      w.scales[5] = bad;
      QVERIFY(!CanTileNvfp4(w.view));
    }
    OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 32, 128, rng);
    std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
    const WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
    auto scalar = Scalar();
    for (float odd : {INFINITY, NAN, 1e-30f}) {
      std::vector<float> x = RandomFloats(128, rng);
      if (odd == 1e-30f) {
        for (int c = 32; c < 48; ++c) x[c] *= odd;  // one block below 2^-94
      } else {
        x[70] = odd;
      }
      // As the only row, and as the third of four (the others ordinary).
      std::vector<float> x4 = RandomFloats(4 * 128, rng);
      std::copy(x.begin(), x.end(), x4.begin() + 2 * 128);
      std::vector<float> want4(4 * 32);
      scalar->Matmul(x4.data(), 4, 128, w.view, want4.data(), 32, false);
      for (auto& backend : AllBackends(2)) {
        std::vector<float> y4(4 * 32, 7.0f);
        backend->Matmul(x4.data(), 4, 128, tiled, y4.data(), 32, false);
        for (int r = 0; r < 4 * 32; ++r) {
          const bool ok = std::isnan(want4[r]) ? std::isnan(y4[r])
                          : std::isinf(want4[r])
                              ? y4[r] == want4[r]
                              : std::fabs(y4[r] - want4[r]) <= 1e-4 + 1e-5 * std::fabs(want4[r]);
          QVERIFY2(ok, (std::string(backend->name()) + " of 4 rows, [" + std::to_string(r) +
                        "]: got " + std::to_string(y4[r]) + " want " + std::to_string(want4[r]))
                           .c_str());
        }
      }
      std::vector<float> want(32);
      scalar->Matmul(x.data(), 1, 128, w.view, want.data(), 32, false);
      for (auto& backend : AllBackends(2)) {
        std::vector<float> y(32, 7.0f);
        backend->Matmul(x.data(), 1, 128, tiled, y.data(), 32, false);
        for (int r = 0; r < 32; ++r) {
          const bool ok = std::isnan(want[r]) ? std::isnan(y[r])
                          : std::isinf(want[r])
                              ? y[r] == want[r]
                              : std::fabs(y[r] - want[r]) <= 1e-4 + 1e-5 * std::fabs(want[r]);
          QVERIFY2(ok, (std::string(backend->name()) + " row " + std::to_string(r) + ": got " +
                        std::to_string(y[r]) + " want " + std::to_string(want[r]))
                           .c_str());
        }
      }
    }
  }

  // MatmulMulti packs the rows once for all tiled outputs of one width and
  // leaves the others to their kernels.
  void nvfp4TilesInMatmulMulti() {
    std::mt19937 rng(34);
    OwnedWeight a = RandomWeight(WeightFormat::kNvfp4, 48, 128, rng);
    OwnedWeight b = RandomWeight(WeightFormat::kNvfp4, 32, 128, rng);
    OwnedWeight c = RandomWeight(WeightFormat::kNvfp4, 21, 128, rng);  // no tiles: 21 rows
    OwnedWeight d = RandomWeight(WeightFormat::kBF16, 9, 128, rng);
    std::vector<uint8_t> ta(Nvfp4TilesBytes(a.view)), tb(Nvfp4TilesBytes(b.view));
    const WeightMatrix va = TileNvfp4(a.view, ta.data()), vb = TileNvfp4(b.view, tb.data());
    for (int64_t m : {1, 3, 8}) {
      const std::vector<float> x = RandomFloats(m * 128, rng);
      for (auto& backend : AllBackends(2)) {
        std::vector<float> ya(m * 48), yb(m * 32), yc(m * 21), yd(m * 9);
        const KernelBackend::MatmulOutput outs[4] = {{&va, ya.data(), 48},
                                                     {&vb, yb.data(), 32},
                                                     {&c.view, yc.data(), 21},
                                                     {&d.view, yd.data(), 9}};
        backend->MatmulMulti(x.data(), m, 128, outs, 4);
        for (auto [w, y, n] :
             {std::tuple{&va, &ya, 48}, {&vb, &yb, 32}, {&c.view, &yc, 21}, {&d.view, &yd, 9}}) {
          std::vector<float> want(m * n);
          backend->Matmul(x.data(), m, 128, *w, want.data(), n, false);
          QCOMPARE(*y, want);
        }
      }
    }
  }

  void matmulMultiEqualsSeparateCalls() {
    std::mt19937 rng(9);
    for (auto& backend : AllBackends(2)) {
      OwnedWeight a = RandomWeight(WeightFormat::kNvfp4, 37, 64, rng);
      OwnedWeight b = RandomWeight(WeightFormat::kBF16, 5, 64, rng);
      OwnedWeight c = RandomWeight(WeightFormat::kF32, 70, 64, rng);
      for (int64_t m : {1, 2, 3, 5, 8}) {
        std::vector<float> x = RandomFloats(m * 64, rng);
        std::vector<float> ya(m * 37), yb(m * 5), yc(m * 70);
        const KernelBackend::MatmulOutput outs[3] = {
            {&a.view, ya.data(), 37}, {&b.view, yb.data(), 5}, {&c.view, yc.data(), 70}};
        backend->MatmulMulti(x.data(), m, 64, outs, 3);
        for (auto [w, y, n] :
             {std::tuple{&a.view, &ya, 37}, {&b.view, &yb, 5}, {&c.view, &yc, 70}}) {
          std::vector<float> want(m * n);
          backend->Matmul(x.data(), m, 64, *w, want.data(), n, false);
          QCOMPARE(*y, want);
        }
      }
    }
  }

  void gemmAllTransposes() {
    std::mt19937 rng(3);
    for (auto& backend : AllBackends(2)) {
      for (int ta = 0; ta < 2; ++ta) {
        for (int tb = 0; tb < 2; ++tb) {
          for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                                 {5, 7, 3},
                                 {17, 50, 33},
                                 {130, 9, 260}}) {
            for (auto [alpha, beta] :
                 {std::pair<float, float>{1, 0}, {0.5f, 0}, {1, 1}, {-2, 0.25f}}) {
              const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
              std::vector<float> A = RandomFloats((ta ? K : M) * lda, rng);
              std::vector<float> B = RandomFloats((tb ? N : K) * ldb, rng);
              std::vector<float> C = RandomFloats(M * ldc, rng);
              if (beta == 0) std::fill(C.begin(), C.end(), NAN);  // must be ignored
              std::vector<float> C0 = C;
              backend->Gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(),
                            ldc);
              std::vector<float> got;
              std::vector<double> want, scale;
              for (int64_t i = 0; i < M; ++i) {
                for (int64_t j = 0; j < N; ++j) {
                  double d = 0, a = 0;
                  for (int64_t kk = 0; kk < K; ++kk) {
                    const double av = ta ? A[kk * lda + i] : A[i * lda + kk];
                    const double bv = tb ? B[j * ldb + kk] : B[kk * ldb + j];
                    d += av * bv;
                    a += std::fabs(av * bv);
                  }
                  const double c0 = beta == 0 ? 0.0 : double(C0[i * ldc + j]);
                  got.push_back(C[i * ldc + j]);
                  want.push_back(alpha * d + beta * c0);
                  scale.push_back(std::fabs(alpha) * a + std::fabs(beta * c0));
                }
              }
              std::string why;
              QVERIFY2(Close(got, want, scale, 1e-5, &why),
                       (std::string(backend->name()) + " ta=" + std::to_string(ta) +
                        " tb=" + std::to_string(tb) + " M=" + std::to_string(M) + ": " + why)
                           .c_str());
            }
          }
        }
      }
    }
  }

  void elementwiseOpsMatchScalar() {
    std::mt19937 rng(4);
    auto ref = Scalar();
    for (auto& backend : AllBackends(2)) {
      for (int64_t dim : {1, 7, 64, 131}) {
        const int64_t rows = 5, stride = dim + 3;
        std::vector<float> x = RandomFloats(rows * stride, rng, 3.0f);
        std::vector<float> w = RandomFloats(dim, rng);
        std::string why;
        for (const float* wp : {static_cast<const float*>(w.data()), (const float*)nullptr}) {
          std::vector<float> a(rows * stride, 0.0f), b(rows * stride, 0.0f);
          ref->RmsNorm(x.data(), wp, 1e-6f, rows, dim, stride, a.data());
          backend->RmsNorm(x.data(), wp, 1e-6f, rows, dim, stride, b.data());
          QVERIFY2(CloseF(b, a, 1e-6, 1e-5, &why), why.c_str());
        }
        // rmsnorm against the formula itself
        {
          std::vector<float> b(rows * stride, 0.0f);
          backend->RmsNorm(x.data(), w.data(), 1e-5f, rows, dim, stride, b.data());
          for (int64_t r = 0; r < rows; ++r) {
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += double(x[r * stride + i]) * x[r * stride + i];
            const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
            for (int64_t i = 0; i < dim; ++i) {
              const double want = w[i] * x[r * stride + i] * inv;
              QVERIFY(std::fabs(b[r * stride + i] - want) <= 1e-5 * (1 + std::fabs(want)));
            }
          }
        }
        std::vector<float> g = RandomFloats(rows * stride, rng, 4.0f);
        std::vector<float> u = RandomFloats(rows * stride, rng);
        std::vector<float> a(rows * stride, 0.0f), b(rows * stride, 0.0f);
        ref->SiluMul(g.data(), u.data(), rows, dim, stride, a.data());
        backend->SiluMul(g.data(), u.data(), rows, dim, stride, b.data());
        QVERIFY2(CloseF(b, a, 1e-6, 1e-5, &why), why.c_str());
        std::vector<float> s1 = x, s2 = x;
        ref->Softmax(s1.data(), rows, stride);
        backend->Softmax(s2.data(), rows, stride);
        QVERIFY2(CloseF(s2, s1, 1e-7, 1e-5, &why), why.c_str());
        std::vector<float> sum1(x.size()), sum2(x.size());
        ref->Add(x.data(), g.data(), x.size(), sum1.data());
        backend->Add(x.data(), g.data(), x.size(), sum2.data());
        QVERIFY2(CloseF(sum2, sum1, 0, 0, &why), why.c_str());
      }
    }
  }

  void ropeMatchesFormula() {
    std::mt19937 rng(5);
    for (auto& backend : AllBackends(2)) {
      const int64_t rows = 6, heads = 3, hd = 16, stride = heads * hd + 4;
      std::vector<float> x = RandomFloats(rows * stride, rng);
      std::vector<int32_t> pos = {0, 1, 5, 17, 100, 1000};
      std::vector<float> inv(hd / 2);
      for (int64_t i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, 2.0f * i / hd);
      std::vector<float> y = x;
      backend->Rope(y.data(), rows, stride, heads, hd, pos.data(), inv.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < hd / 2; ++i) {
            const double ang = double(float(pos[r]) * inv[i]);
            const double a = x[r * stride + h * hd + i], b = x[r * stride + h * hd + i + hd / 2];
            QVERIFY(std::fabs(y[r * stride + h * hd + i] -
                              (a * std::cos(ang) - b * std::sin(ang))) < 1e-5);
            QVERIFY(std::fabs(y[r * stride + h * hd + i + hd / 2] -
                              (b * std::cos(ang) + a * std::sin(ang))) < 1e-5);
          }
        }
      }
    }
  }

  void attentionMatchesNaive() {
    std::mt19937 rng(6);
    struct Shape {
      int64_t heads, kv, hd, cap;
      int32_t decode_pos;
    };
    // Odd sizes, a 128 + 8-column head (the AVX2 64-column value blocks and
    // their tail) and a Qwen3 head of 128 (the AVX-512 path), over a
    // 100-position cache.
    const Shape shapes[] = {{6, 2, 20, 40, 12}, {4, 2, 136, 120, 100}, {4, 2, 128, 120, 100}};
    // Each cache as float and as IEEE half (an F16 KV cache: the reference
    // reads the half values widened, which is exact), position-major and
    // head-major (the engine's layout: explicit strides).
    for (bool head_major : {false, true})
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16})
    for (const Shape& sh : shapes)
      for (auto& backend : AllBackends(2)) {
        const int64_t heads = sh.heads, kv = sh.kv, hd = sh.hd, cap = sh.cap;
        // Two sequences: one prefilling 5 tokens at positions 3..7, one decoding.
        std::vector<float> k1 = RandomFloats(cap * kv * hd, rng),
                           v1 = RandomFloats(cap * kv * hd, rng);
        std::vector<float> k2 = RandomFloats(cap * kv * hd, rng),
                           v2 = RandomFloats(cap * kv * hd, rng);
        std::vector<uint16_t> k1h, v1h, k2h, v2h;
        if (dtype == KvDtype::kF16) {
          for (auto [f, h] : {std::pair{&k1, &k1h}, {&v1, &v1h}, {&k2, &k2h}, {&v2, &v2h}}) {
            for (float& x : *f) {
              h->push_back(F32ToF16(x));
              x = F16ToF32(h->back());
            }
          }
        }
        // [cap, kv, hd] -> [kv, cap, hd] when head-major.
        auto arrange = [&](auto v) {
          if (!head_major || v.empty()) return v;
          auto out = v;
          for (int64_t p = 0; p < cap; ++p)
            for (int64_t g = 0; g < kv; ++g)
              for (int64_t i = 0; i < hd; ++i) out[(g * cap + p) * hd + i] = v[(p * kv + g) * hd + i];
          return out;
        };
        const std::vector<float> k1a = arrange(k1), v1a = arrange(v1), k2a = arrange(k2),
                                 v2a = arrange(v2);
        const std::vector<uint16_t> k1ha = arrange(k1h), v1ha = arrange(v1h), k2ha = arrange(k2h),
                                    v2ha = arrange(v2h);
        auto cache = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) {
          return dtype == KvDtype::kF16 ? static_cast<const void*>(h.data())
                                        : static_cast<const void*>(f.data());
        };
        const int64_t pos_stride = head_major ? hd : 0, head_stride = head_major ? cap * hd : 0;
        std::vector<int32_t> p1 = {3, 4, 5, 6, 7}, p2 = {sh.decode_pos};
        const int64_t tokens = 6, qs = heads * hd + 3, os = heads * hd + 1;
        std::vector<float> q = RandomFloats(tokens * qs, rng);
        std::vector<float> out(tokens * os, 0.0f);
        AttentionSequence seqs[2] = {{0, 5, cache(k1a, k1ha), cache(v1a, v1ha), p1.data(), dtype,
                                      pos_stride, head_stride},
                                     {5, 1, cache(k2a, k2ha), cache(v2a, v2ha), p2.data(), dtype,
                                      pos_stride, head_stride}};
        AttentionArgs a;
        a.q = q.data();
        a.q_row_stride = qs;
        a.out = out.data();
        a.out_row_stride = os;
        a.n_heads = heads;
        a.n_kv_heads = kv;
        a.head_dim = hd;
        a.scale = 1.0f / std::sqrt(float(hd));
        a.sequences = seqs;
        a.n_sequences = 2;
        backend->Attention(a);
        for (int64_t t = 0; t < tokens; ++t) {
          const bool first = t < 5;
          const float* kc = first ? k1.data() : k2.data();
          const float* vc = first ? v1.data() : v2.data();
          const int32_t p = first ? p1[t] : p2[0];
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t g = h / (heads / kv);
            std::vector<double> s(p + 1);
            double mx = -1e300;
            for (int32_t j = 0; j <= p; ++j) {
              double d = 0;
              for (int64_t i = 0; i < hd; ++i)
                d += double(q[t * qs + h * hd + i]) * kc[(j * kv + g) * hd + i];
              s[j] = d * a.scale;
              mx = std::max(mx, s[j]);
            }
            double z = 0;
            for (auto& e : s) z += (e = std::exp(e - mx));
            for (int64_t i = 0; i < hd; ++i) {
              double o = 0;
              for (int32_t j = 0; j <= p; ++j) o += s[j] / z * vc[(j * kv + g) * hd + i];
              QVERIFY2(std::fabs(out[t * os + h * hd + i] - o) < 1e-5,
                       (std::string(backend->name()) + " " + std::string(KvDtypeName(dtype)) +
                        (head_major ? " head-major" : " position-major"))
                           .c_str());
            }
          }
        }
      }
  }

  void embeddingArgmaxTopK() {
    std::mt19937 rng(7);
    for (auto& backend : AllBackends(2)) {
      for (WeightFormat f :
           {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kNvfp4}) {
        OwnedWeight t = RandomWeight(f, 11, 48, rng);
        std::vector<int32_t> ids = {0, 10, 3, 3};
        std::vector<float> out(4 * 48);
        backend->Embedding(t.view, ids.data(), 4, out.data());
        for (int i = 0; i < 4; ++i) {
          for (int c = 0; c < 48; ++c) QCOMPARE(out[i * 48 + c], WeightAt(t.view, ids[i], c));
        }
      }
      std::vector<float> v = {1.0f, 5.0f, NAN, 5.0f, -2.0f, 4.0f};
      QCOMPARE(backend->Argmax(v.data(), 6), int64_t(1));
      int32_t idx[3];
      float val[3];
      backend->TopK(v.data(), 6, 3, idx, val);
      QCOMPARE(idx[0], 1);
      QCOMPARE(idx[1], 3);
      QCOMPARE(idx[2], 5);
      QCOMPARE(val[2], 4.0f);
    }
  }

  // The memory interface: zeroed, aligned buffers of the backend's kind, and
  // copies in and out (plain copies on the CPU backends, which compute in host
  // memory).
  void buffersAndCopies() {
    for (auto& backend : AllBackends(2)) {
      QCOMPARE(backend->memory_kind(), MemoryKind::kHost);
      for (int64_t bytes : {int64_t{1}, int64_t{4096}, int64_t{3} << 20}) {
        auto b = backend->Allocate(bytes);
        QVERIFY(b.ok());
        QCOMPARE(b->bytes(), bytes);
        QCOMPARE(reinterpret_cast<uintptr_t>(b->data()) % 64, uintptr_t{0});
        const auto* p = b->as<const uint8_t>();
        QVERIFY(std::all_of(p, p + bytes, [](uint8_t c) { return c == 0; }));
        std::vector<uint8_t> in(bytes), out(bytes);
        for (int64_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
        backend->CopyToDevice(b->data(), in.data(), bytes);
        backend->CopyToHost(out.data(), b->data(), bytes);
        QVERIFY(in == out);
      }
      QVERIFY(backend->Synchronize().ok());
      // A host backend reads weights in place.
      std::mt19937 rng(3);
      OwnedWeight w = RandomWeight(WeightFormat::kBF16, 16, 32, rng);
      std::vector<Buffer> storage;
      auto placed = backend->PrepareWeight(w.view, &storage);
      QVERIFY(placed.ok());
      QCOMPARE(placed->data, w.view.data);
      QVERIFY(storage.empty());
      for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
        QVERIFY2(backend->supports(static_cast<Op>(op)),
                 std::string(OpName(static_cast<Op>(op))).c_str());
      }
    }
  }

  // The forward pass's small ops, against references written here.
  void forwardPassSmallOps() {
    std::mt19937 rng(11);
    for (auto& backend : AllBackends(2)) {
      // KvStore: [n, heads, hd] rows into the head-major cache, f32 exactly,
      // f16 rounded to nearest and saturated.
      const int64_t n = 3, heads = 2, hd = 8, cap = 7, first = 2, ld = heads * hd + 5;
      std::vector<float> k = RandomFloats(n * ld, rng, 3.0f), v = RandomFloats(n * ld, rng, 3.0f);
      k[0] = 1e6f;   // saturates in f16
      v[1] = -7e4f;  // too
      for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16}) {
        const int64_t es = KvDtypeBytes(dt);
        std::vector<uint8_t> kc(heads * cap * hd * es, 0xab), vc(heads * cap * hd * es, 0xab);
        KvStoreArgs a;
        a.k = k.data();
        a.v = v.data();
        a.row_stride = ld;
        a.n = n;
        a.n_kv_heads = heads;
        a.head_dim = hd;
        a.k_cache = kc.data();
        a.v_cache = vc.data();
        a.dtype = dt;
        a.position_stride = hd;
        a.head_stride = cap * hd;
        a.first_pos = first;
        backend->KvStore(a);
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t p = 0; p < cap; ++p) {
            for (int64_t c = 0; c < hd; ++c) {
              const int64_t e = (h * cap + p) * hd + c;
              const bool stored = p >= first && p < first + n;
              for (int which = 0; which < 2; ++which) {
                const auto& cache = which ? vc : kc;
                const auto& src = which ? v : k;
                if (!stored) {  // untouched
                  QCOMPARE(cache[e * es], uint8_t{0xab});
                  continue;
                }
                const float want = src[(p - first) * ld + h * hd + c];
                float got;
                if (dt == KvDtype::kF32) {
                  std::memcpy(&got, cache.data() + e * 4, 4);
                  QCOMPARE(got, want);
                } else {
                  uint16_t hbits;
                  std::memcpy(&hbits, cache.data() + e * 2, 2);
                  got = F16ToF32(hbits);
                  const float clamped = std::clamp(want, -65504.0f, 65504.0f);
                  QVERIFY2(std::fabs(got - clamped) <= std::fabs(clamped) * 0x1p-11f,
                           (std::to_string(got) + " vs " + std::to_string(clamped)).c_str());
                }
              }
            }
          }
        }
      }
      // AddRowVector over a strided matrix leaves the gaps alone.
      const int64_t rows = 5, cols = 13, stride = 17;
      std::vector<float> x = RandomFloats(rows * stride, rng), bias = RandomFloats(cols, rng);
      std::vector<float> want = x;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) want[r * stride + c] += bias[c];
      backend->AddRowVector(x.data(), rows, cols, stride, bias.data());
      QCOMPARE(x, want);
      // Relu2, SoftCap, Fill.
      std::vector<float> y = RandomFloats(37, rng, 4.0f), y2 = y, y3 = y;
      backend->Relu2(y.data(), 37);
      backend->SoftCap(y2.data(), 37, 15.0f);
      for (int i = 0; i < 37; ++i) {
        QCOMPARE(y[i], y3[i] > 0 ? y3[i] * y3[i] : 0.0f);
        QVERIFY(std::fabs(y2[i] - 15.0 * std::tanh(double(y3[i]) / 15.0)) < 1e-5);
      }
      backend->Fill(y.data(), 37, -2.5f);
      QVERIFY(std::all_of(y.begin(), y.end(), [](float f) { return f == -2.5f; }));
      // GatherRows, repeats and out of order.
      const std::vector<int64_t> pick = {4, 0, 4, 2};
      std::vector<float> g(pick.size() * cols);
      backend->GatherRows(x.data(), stride, pick.data(), 4, cols, g.data());
      for (size_t r = 0; r < pick.size(); ++r)
        for (int64_t c = 0; c < cols; ++c) QCOMPARE(g[r * cols + c], x[pick[r] * stride + c]);
      // ScatterAddRows: weighted, a row hit twice gets both additions in
      // order, rows not named are left alone; null weights mean 1. The
      // weights are powers of two, so every product is exact and the
      // comparison is bit-exact whether or not the compiler fuses the
      // multiply-add (GCC does at -O2 on aarch64, not at -O1).
      {
        const std::vector<int64_t> to = {2, 0, 2};
        const std::vector<float> w = {0.5f, -2.0f, 4.0f};
        const int64_t ldo = cols + 3;
        std::vector<float> out = RandomFloats(4 * ldo, rng), expect = out;
        for (size_t r = 0; r < to.size(); ++r)
          for (int64_t c = 0; c < cols; ++c) expect[to[r] * ldo + c] += w[r] * g[r * cols + c];
        backend->ScatterAddRows(g.data(), cols, to.data(), w.data(), 3, cols, out.data(), ldo);
        QCOMPARE(out, expect);
        std::vector<float> out1(4 * ldo, 1.0f), expect1 = out1;
        for (size_t r = 0; r < to.size(); ++r)
          for (int64_t c = 0; c < cols; ++c) expect1[to[r] * ldo + c] += g[r * cols + c];
        backend->ScatterAddRows(g.data(), cols, to.data(), nullptr, 3, cols, out1.data(), ldo);
        QCOMPARE(out1, expect1);
        std::vector<float> sc = RandomFloats(29, rng), sc_want = sc;
        for (float& f : sc_want) f *= 1.25f;
        backend->Scale(sc.data(), 29, 1.25f);
        QCOMPARE(sc, sc_want);
      }
      // EmbeddingShard: rows of this shard's ids, zeros for the others.
      for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
        OwnedWeight t = RandomWeight(f, 6, 32, rng);
        const std::vector<int32_t> ids = {9, 3, 14, 10};  // shard holds ids 9..14
        std::vector<float> out(ids.size() * 32, 123.0f);
        backend->EmbeddingShard(t.view, 9, ids.data(), 4, out.data());
        for (size_t i = 0; i < ids.size(); ++i) {
          const int64_t local = ids[i] - 9;
          for (int c = 0; c < 32; ++c) {
            const float expect = local >= 0 && local < 6 ? WeightAt(t.view, local, c) : 0.0f;
            QCOMPARE(out[i * 32 + c], expect);
          }
        }
      }
    }
  }

  // Greedy decoding's pick over a whole vocabulary: the first index of the
  // largest value that is not NaN (0 when every value is NaN), whatever the
  // length, wherever the ties, NaNs and infinities lie.
  void argmaxIsTheFirstLargestOnLongRows() {
    auto reference = [](const std::vector<float>& v) {
      int64_t best = -1;
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
        if (std::isnan(v[i])) continue;
        if (best < 0 || v[i] > v[best]) best = i;
      }
      return best < 0 ? int64_t{0} : best;
    };
    std::mt19937 rng(11);
    std::vector<std::vector<float>> rows;
    for (int64_t n : {1, 15, 16, 17, 255, 256, 257, 1000, 151936}) {
      std::uniform_real_distribution<float> u(-3.0f, 3.0f);
      std::vector<float> v(n);
      for (float& x : v) x = u(rng);
      rows.push_back(v);
      // Ties in different lanes and blocks, the later one first in no order.
      std::vector<float> tie = v;
      tie[n - 1] = 10.0f;
      tie[n / 2] = 10.0f;
      tie[n / 3] = 10.0f;
      rows.push_back(tie);
      // NaNs everywhere else, the maximum at the very end.
      std::vector<float> nan(n, NAN);
      nan[n - 1] = -1.0f;
      rows.push_back(nan);
      rows.push_back(std::vector<float>(n, NAN));
      rows.push_back(std::vector<float>(n, -INFINITY));
      std::vector<float> inf = v;
      inf[n / 2] = INFINITY;
      inf[0] = NAN;
      rows.push_back(inf);
    }
    for (auto& backend : AllBackends(2)) {
      for (const auto& v : rows) {
        const int64_t n = static_cast<int64_t>(v.size());
        if (backend->Argmax(v.data(), n) != reference(v)) {
          QFAIL(qPrintable(QStringLiteral("%1, %2 values: got %3, want %4")
                               .arg(QString::fromUtf8(backend->name().data(),
                                                      static_cast<int>(backend->name().size())))
                               .arg(n)
                               .arg(backend->Argmax(v.data(), n))
                               .arg(reference(v))));
        }
      }
    }
  }

  void unknownBackendIsAnError() {
    auto b = CreateBackend("tpu");
    QVERIFY(!b.ok());
    QVERIFY(b.status().message().find("tpu") != std::string::npos);
    auto a = CreateBackend("auto");
    QVERIFY(a.ok());
  }
};

QTEST_APPLESS_MAIN(TestKernelConformance)
#include "test_kernel_conformance.moc"
