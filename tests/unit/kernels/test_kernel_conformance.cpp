// Every kernel op on every CPU backend this machine runs, against a plain
// double-precision reference written here (for matmul/GEMM) and against the
// scalar backend (for the rest), on random shapes including odd sizes.
// Also the number-format conversions against hand-checked values.
// The test functions of the other ops are in test_kernel_conformance_ops.cpp.
#include "test_kernel_conformance.h"

#include <QtTest>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "conformance_reference.h"
#include "kernel_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/thread_pool.h"
#include "octet/kernels/weight.h"

using namespace octet::kernels;
using namespace octet::kernels::testing;

namespace {

// A product of m rows of x (k floats apart) into y (outputs n floats apart).
using RunRows = std::function<void(const float* x, int64_t m, float* y)>;

// Rows of x (k floats apart) through `run` one at a time, then in batches of
// each of `sizes` rows, outputs n floats apart and written over 3.0 (so that
// an accumulating product shows): empty when every batch gives each row the
// bits it gets alone, else the first batch size that does not.
std::string BatchThatDiffersFromAlone(const RunRows& run, const float* x, int64_t k, int64_t n,
                                      const std::vector<int64_t>& sizes) {
  const int64_t rows = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> alone(rows * n, 3.0f);
  for (int64_t i = 0; i < rows; ++i) run(x + i * k, 1, alone.data() + i * n);
  for (int64_t m : sizes) {
    std::vector<float> y(m * n, 3.0f);
    run(x, m, y.data());
    if (std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) != 0) {
      return "m=" + std::to_string(m);
    }
  }
  return "";
}

// The same for `backend.Matmul`, batches of 2 to 8 rows (decode).
std::string DecodeBatchThatDiffersFromAlone(KernelBackend& backend, const float* x, int64_t k,
                                            const WeightMatrix& w, bool accumulate) {
  const RunRows run = [&](const float* xr, int64_t m, float* y) {
    backend.Matmul(xr, m, k, w, y, w.rows, accumulate);
  };
  const std::string differs = BatchThatDiffersFromAlone(run, x, k, w.rows, {2, 3, 4, 5, 6, 7, 8});
  return differs.empty() ? "" : differs + (accumulate ? " accumulate" : "");
}

}  // namespace

void TestKernelConformance::conversions() {
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

void TestKernelConformance::threadPoolRunsEveryTaskOnce() {
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
void TestKernelConformance::threadPoolBackToBackJobsRunEachTaskOnce() {
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
void TestKernelConformance::threadPoolTakesOverAStalledThreadsRange() {
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

void TestKernelConformance::matmulEveryFormatAndShape() {
  std::mt19937 rng(1);
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                  WeightFormat::kNvfp4};
  struct Shape {
    int64_t n, k;
  };
  // n = 301: several 4-row groups per decode task (the prefetching path) and a tail.
  // k = 1043 and 2099 (dense): batched decode's 1024-column blocks, with a ragged last one.
  // k = 16400: longer than the 16384 columns AVX-512 NVFP4 decode interleaves at once.
  const Shape shapes[] = {{1, 16},   {7, 48},   {33, 272}, {50, 528},
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
void TestKernelConformance::batchedBf16DecodeTilesAndTails() {
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
void TestKernelConformance::prefillGemmPanelsAndSlices() {
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

// OCTET_CPU_MATMUL=bf16 (CreateBackend). On avx512 and avx512-rows, where
// the CPU has AVX512-BF16, a prefill GEMM (9 rows and more) of BF16 or NVFP4
// weights rounds its activations to BF16: each output must then be the sum of
// w * bf16(x) as closely as the exact GEMM gives w * x, and differ from the
// exact result. Decode batches (up to 8 rows) and batch-invariant backends
// keep f32 activations: their bits equal those without the variable. So does
// every backend the mode is not for (scalar, avx2, the AMX table; a CPU
// without AVX512-BF16).
void TestKernelConformance::bf16MatmulModeRoundsOnlyPrefillActivations() {
  std::mt19937 rng(41);
  bool cpu_has_bf16 = false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  cpu_has_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  struct Case {
    WeightFormat format;
    int64_t n, k, col0;
  };
  // k = 4100: two depth blocks; k = 67: an odd column paired with a zero.
  const Case cases[] = {{WeightFormat::kBF16, 33, 130, 0},
                        {WeightFormat::kBF16, 70, 4100, 0},
                        {WeightFormat::kBF16, 200, 67, 3},
                        {WeightFormat::kNvfp4, 45, 256, 16}};
  int rounded = 0;
  for (const auto& info : ProbeBackends()) {
    if (!info.available) continue;
    ::setenv("OCTET_CPU_MATMUL", "bf16", 1);
    auto mode = CreateBackend(info.name, {.threads = 2});
    auto mode_inv = CreateBackend(info.name, {.threads = 2});
    ::unsetenv("OCTET_CPU_MATMUL");
    auto exact = CreateBackend(info.name, {.threads = 2});
    auto exact_inv = CreateBackend(info.name, {.threads = 2});
    QVERIFY2(mode.ok() && mode_inv.ok() && exact.ok() && exact_inv.ok(), info.name.c_str());
    QVERIFY((*mode_inv)->set_batch_invariant(true) && (*exact_inv)->set_batch_invariant(true));
    const bool applies = cpu_has_bf16 && (info.name == "avx512" || info.name == "avx512-rows");
    rounded += applies;
    for (const Case& c : cases) {
      OwnedWeight full = RandomWeight(c.format, c.n, c.col0 + c.k + 16, rng);
      const WeightMatrix w = full.view.ColSlice(c.col0, c.k);
      for (int64_t m : {1, 4, 8, 9, 13, 40}) {
        const int64_t ldx = c.k + 3, ldy = c.n + 2;
        std::vector<float> x = RandomFloats(m * ldx, rng);
        const std::string what = info.name + " " + std::string(WeightFormatName(c.format)) +
                                 " m=" + std::to_string(m) + " n=" + std::to_string(c.n) +
                                 " k=" + std::to_string(c.k);
        for (bool acc : {false, true}) {
          std::vector<float> got(m * ldy, 7.0f), want(m * ldy, 7.0f);
          (*mode)->Matmul(x.data(), m, ldx, w, got.data(), ldy, acc);
          (*exact)->Matmul(x.data(), m, ldx, w, want.data(), ldy, acc);
          const bool same = std::memcmp(got.data(), want.data(), got.size() * 4) == 0;
          if (!applies || m <= 8) {
            QVERIFY2(same, (what + ": differs from f32 activations' result").c_str());
          } else {
            QVERIFY2(!same, (what + ": activations were not rounded").c_str());
            std::vector<float> xr(x);
            for (float& v : xr) v = Bf16ToF32(F32ToBf16(v));
            std::string why;
            QVERIFY2(MatchesDoubleProduct(w, xr, m, ldx, got, ldy, acc, &why),
                     (what + (acc ? " acc" : "") + ": " + why).c_str());
          }
          std::fill(got.begin(), got.end(), 7.0f);
          std::fill(want.begin(), want.end(), 7.0f);
          (*mode_inv)->Matmul(x.data(), m, ldx, w, got.data(), ldy, acc);
          (*exact_inv)->Matmul(x.data(), m, ldx, w, want.data(), ldy, acc);
          QVERIFY2(std::memcmp(got.data(), want.data(), got.size() * 4) == 0,
                   (what + ": batch-invariant result differs with the variable").c_str());
        }
      }
    }
  }
  // Where the CPU has AVX512-BF16, both AVX-512 tables without AMX round.
  QCOMPARE(rounded, cpu_has_bf16 ? 2 : 0);
}

// Each activation keeps all 24 bits of its significand in a batched BF16
// product: with one power-of-two weight per row (zeros elsewhere) every
// output is one exact product, so it must equal w * x bit for bit.
void TestKernelConformance::batchedBf16DecodeKeepsFloatActivations() {
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

void TestKernelConformance::matmulOnSlicesEqualsSliceOfMatmul() {
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
void TestKernelConformance::matmulNvfp4NonFiniteActivations() {
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
        QVERIFY2(
            std::isnan(y[r]) == std::isnan(want[r]) && (std::isnan(want[r]) || y[r] == want[r]),
            (std::string(backend->name()) + " row " + std::to_string(r) + ": got " +
             std::to_string(y[r]) + " want " + std::to_string(want[r]))
                .c_str());
      }
    }
  }
}

// NVFP4 single-row decode from the tile copy (weight.h, TileNvfp4), which
// the AVX2 and AVX-512 backends read (PMADDWD; VPDPBUSD on CPUs with
// AVX512-VNNI), NEON with the dot product instructions too, and the others
// ignore:
// whole matrices and slices that keep their tiles, against the f64
// reference, with zero-scale blocks and blocks of very different magnitude;
// the tile readers within the activations' rounding (Nvfp4TileRoundingBound)
// besides float rounding.
void TestKernelConformance::nvfp4TilesDecode() {
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
      std::vector<double> want(v.rows), scale(v.rows), rounding(v.rows);
      for (int64_t r = 0; r < v.rows; ++r) {
        double d = 0, a = 0;
        for (int64_t c = 0; c < v.cols; ++c) {
          const double p = double(WeightAt(v, r, c)) * x[c];
          d += p;
          a += std::fabs(p);
        }
        want[r] = d;
        scale[r] = a;
        rounding[r] = Nvfp4TileRoundingBound(v, r, x.data());
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
          QVERIFY2(Close(y, w2, s2, 1e-5, &why,
                         backend->UsesNvfp4Tiles() ? rounding : std::vector<double>{}),
                   (std::string(backend->name()) + " n=" + std::to_string(v.rows) +
                    " k=" + std::to_string(v.cols) + ": " + why)
                       .c_str());
        }
      }
    }
  }
}

// A row's output from the tiles is the same floats whatever batch (1 to 8
// rows) it is decoded in: speculative decoding verifies drafts in one
// batched step and must then equal plain one-token decoding exactly.
void TestKernelConformance::nvfp4TilesRowsDoNotDependOnTheBatch() {
  std::mt19937 rng(33);
  OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 208, 1024, rng);  // 3 passes of 64 + 16
  std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
  const WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
  std::vector<float> x = RandomFloats(8 * 1024, rng);
  for (int64_t c = 0; c < 16; ++c) x[c] *= 1e5f;  // a large block and a small one
  for (int64_t c = 16; c < 32; ++c) x[c] *= 1e-5f;
  int readers = 0;
  for (auto& backend : AllBackends(2)) {
    if (!backend->UsesNvfp4Tiles()) continue;
    ++readers;
    for (bool acc : {false, true}) {
      const std::string differs =
          DecodeBatchThatDiffersFromAlone(*backend, x.data(), 1024, tiled, acc);
      QVERIFY2(differs.empty(), (std::string(backend->name()) + " " + differs).c_str());
    }
  }
  if (readers == 0) QSKIP("no backend here reads NVFP4 tiles");
}

// The AVX2 backend's dense decode (F32, BF16, F16; 1 to 8 rows) gives a row
// the same floats whatever batch it is in: every kernel sums each output in
// one vector accumulator, columns in order, and reduces its lanes in one
// order (Hsum, or Hsum8 for eight at once). So n-gram and MTP verification on
// an AVX2 machine equal plain decoding exactly. (Not promised elsewhere: AMX
// decodes 5-8 BF16 rows on tiles, rounding otherwise than one row's FMAs.)
void TestKernelConformance::avx2DenseRowsDoNotDependOnTheBatch() {
  std::mt19937 rng(34);
  std::unique_ptr<KernelBackend> avx2;
  for (auto& backend : AllBackends(2)) {
    if (std::string(backend->name()) == "avx2") avx2 = std::move(backend);
  }
  if (!avx2) QSKIP("this CPU has no AVX2 backend");
  struct Shape {
    int64_t rows, cols;
  };
  // Short rows (one page holds several), column tails on short and long
  // rows, long rows; row counts that leave one or two rows after the pairs
  // and triples.
  for (const Shape s : {Shape{13, 128}, Shape{14, 1000}, Shape{14, 1100}, Shape{7, 2056}}) {
    for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16}) {
      OwnedWeight w = RandomWeight(f, s.rows, s.cols, rng);
      const std::vector<float> x = RandomFloats(8 * s.cols, rng);
      for (bool acc : {false, true}) {
        const std::string differs =
            DecodeBatchThatDiffersFromAlone(*avx2, x.data(), s.cols, w.view, acc);
        QVERIFY2(differs.empty(), (std::string(WeightFormatName(f)) + " " + std::to_string(s.rows) +
                                   "x" + std::to_string(s.cols) + " " + differs)
                                      .c_str());
      }
    }
  }
}

// Batch-invariant (KernelBackend::set_batch_invariant), every CPU backend
// gives each row of a Matmul or MatmulMulti the bits that row gets alone with
// the mode off, in every weight format (NVFP4 row-major, wider than one
// AVX-512 pass takes, and from tiles), up to 64 rows: a speculative verify
// step computes each position as plain one-token decoding does. Row 5 of the
// activations has a block too small for the tiles' integers (below 2^-94): it
// alone takes the row-major kernels, and must not take the others with it.
// And the grouped MoE ops, MatmulGrouped and MatmulScatterAdd. (Off, AMX
// and BFMMLA decode 5-8 BF16 rows on tiles, AVX-512 sums 3-8 dense rows in
// 512-bit lanes, and 9 rows and more take the GEMM: all round otherwise.)
void TestKernelConformance::batchInvariantBackendsKeepEachRowsBits() {
  std::mt19937 rng(35);
  constexpr int64_t kMaxRows = 64;
  const std::vector<int64_t> sizes = {2, 3, 4, 5, 6, 7, 8, 9, 16, 33, kMaxRows};
  struct Case {
    WeightFormat format;
    int64_t rows, cols;
    bool tiles;
  };
  const Case cases[] = {
      {WeightFormat::kF32, 13, 128, false},
      {WeightFormat::kBF16, 14, 1100, false},
      {WeightFormat::kF16, 7, 2056, false},
      {WeightFormat::kBF16, 70, 2048, false},
      {WeightFormat::kBF16, 9, 1050, false},  // 32-column steps, a 16-column one, 10 more
      {WeightFormat::kNvfp4, 21, 1024, false},
      {WeightFormat::kNvfp4, 5, 17408, false},
      {WeightFormat::kNvfp4, 208, 1024, true},
      // F32: a masked last column step and row groups cut short (avx512-rows'
      // 512-bit kernel), and rows wider than that kernel takes.
      {WeightFormat::kF32, 37, 1043, false},
      {WeightFormat::kF32, 11, 2100, false},
  };
  int tested = 0;
  for (const auto& info : ProbeBackends()) {
    if (!info.available) continue;
    auto plain = CreateBackend(info.name, {.threads = 2});
    auto inv = CreateBackend(info.name, {.threads = 2});
    QVERIFY2(plain.ok() && inv.ok(), info.name.c_str());
    QVERIFY2((*inv)->set_batch_invariant(true), info.name.c_str());
    ++tested;
    for (const Case& c : cases) {
      OwnedWeight w = RandomWeight(c.format, c.rows, c.cols, rng);
      if (c.tiles) AddTiles(&w);
      const WeightMatrix& view = w.view;
      std::vector<float> x = RandomFloats(kMaxRows * c.cols, rng);
      for (int64_t i = 0; i < 16; ++i) x[5 * c.cols + i] *= 1e-30f;
      const std::string what = info.name + " " + std::string(WeightFormatName(c.format)) + " " +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                               (c.tiles ? " tiles" : "");
      for (bool acc : {false, true}) {
        const RunRows run = [&](const float* xr, int64_t m, float* y) {
          (*inv)->Matmul(xr, m, c.cols, view, y, c.rows, acc);
        };
        const std::string differs = BatchThatDiffersFromAlone(run, x.data(), c.cols, c.rows, sizes);
        QVERIFY2(differs.empty(), (what + (acc ? " accumulate " : " ") + differs).c_str());
      }
      // Alone, the rows the default kernels give.
      for (int64_t i = 0; i < 3; ++i) {
        std::vector<float> a(c.rows), b(c.rows);
        (*plain)->Matmul(x.data() + i * c.cols, 1, c.cols, view, a.data(), c.rows, false);
        (*inv)->Matmul(x.data() + i * c.cols, 1, c.cols, view, b.data(), c.rows, false);
        QVERIFY2(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                 (what + ": one row differs from the default kernels'").c_str());
      }
    }
    // MatmulMulti (q/k/v, gate/up): a tiled NVFP4 output and a BF16 one.
    OwnedWeight q = RandomWeight(WeightFormat::kNvfp4, 64, 1024, rng);
    AddTiles(&q);
    const WeightMatrix& q_view = q.view;
    OwnedWeight v = RandomWeight(WeightFormat::kBF16, 48, 1024, rng);
    std::vector<float> x = RandomFloats(kMaxRows * 1024, rng);
    for (int64_t i = 0; i < 16; ++i) x[5 * 1024 + 64 + i] *= 1e-30f;
    // Each op with both outputs side by side in each row of y: 64 then 48
    // floats (the scatter: the tiled product's 64 into rows 0..m-1).
    const auto multi = [&](KernelBackend& be) -> RunRows {
      return [&be, &q_view, &v](const float* xr, int64_t m, float* y) {
        const KernelBackend::MatmulOutput outs[2] = {{&q_view, y, 112}, {&v.view, y + 64, 112}};
        be.MatmulMulti(xr, m, 1024, outs, 2);
      };
    };
    const auto grouped = [&](KernelBackend& be) -> RunRows {
      return [&be, &q_view, &v](const float* xr, int64_t m, float* y) {
        const KernelBackend::GroupedProduct ps[2] = {{xr, m, 1024, &q_view, y, 112},
                                                     {xr, m, 1024, &v.view, y + 64, 112}};
        be.MatmulGrouped(ps, 2);
      };
    };
    std::vector<int64_t> identity(kMaxRows);
    for (int64_t i = 0; i < kMaxRows; ++i) identity[i] = i;
    std::vector<float> scratch(kMaxRows * 64);
    const auto scatter = [&](KernelBackend& be) -> RunRows {
      return [&](const float* xr, int64_t m, float* y) {
        const KernelBackend::ScatterProduct ps[1] = {
            {xr, m, 1024, &q_view, identity.data(), nullptr}};
        be.MatmulScatterAdd(ps, 1, 64, y, 112, scratch.data());
      };
    };
    const std::pair<const char*, std::function<RunRows(KernelBackend&)>> ops[] = {
        {"MatmulMulti", multi}, {"MatmulGrouped", grouped}, {"MatmulScatterAdd", scatter}};
    for (const auto& [name, make] : ops) {
      const std::string differs =
          BatchThatDiffersFromAlone(make(**inv), x.data(), 1024, 112, sizes);
      QVERIFY2(differs.empty(), (info.name + " " + name + " " + differs).c_str());
      std::vector<float> a(112, 3.0f), b(112, 3.0f);
      make (**plain)(x.data(), 1, a.data());
      make (**inv)(x.data(), 1, b.data());
      QVERIFY2(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
               (info.name + " " + name + ": one row differs from the default kernels'").c_str());
    }
  }
  QVERIFY(tested > 0);
}

// The tiles are what a tile-reading backend decodes: with the row-major
// codes cleared after tiling it still gives the tiled weights' product
// (the other backends give the cleared matrix's, zero), for one row and for
// the small batches of batched decode (rows ldx apart, outputs ldy apart,
// written or added to).
void TestKernelConformance::nvfp4TilesAreRead() {
  std::mt19937 rng(32);
  OwnedWeight w = RandomWeight(WeightFormat::kNvfp4, 112, 256, rng);  // 64 + 32 + 16 rows
  std::vector<uint8_t> tiles(Nvfp4TilesBytes(w.view));
  WeightMatrix tiled = TileNvfp4(w.view, tiles.data());
  constexpr int64_t ldx = 260, ldy = 115;
  std::vector<float> x = RandomFloats(8 * ldx, rng);
  // Blocks whose largest value lies just below a power of two, where the
  // integers run out (the AVX2 kernel rounds 63.9995 to 2^15 at its scale and
  // saturates it to 2^15 - 1), near it, and at a power of two; each far above
  // the block's other values.
  for (int64_t i = 0; i < 8; ++i) {
    x[i * ldx + 3] = 63.9995f;
    x[i * ldx + 16 + 5] = -127.7f;
    x[i * ldx + 32 + 7] = 31.8744f;
    x[i * ldx + 48 + 9] = 64.0f;
  }
  std::vector<std::vector<float>> want(9);
  for (int64_t m = 1; m <= 8; ++m) {
    want[m].assign(m * ldy, 7.0f);
    Scalar()->Matmul(x.data(), m, ldx, w.view, want[m].data(), ldy, false);
  }
  // What the tile readers' activation rounding may add (before the codes go).
  std::vector<double> rounding(8 * ldy, 0.0);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t r = 0; r < 112; ++r) {
      rounding[i * ldy + r] = Nvfp4TileRoundingBound(w.view, r, x.data() + i * ldx);
    }
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
        QVERIFY2(CloseF(y, expect, 1e-4, 1e-5, &why,
                        backend->UsesNvfp4Tiles() ? rounding : std::vector<double>{}),
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
void TestKernelConformance::nvfp4TilesLimits() {
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
void TestKernelConformance::nvfp4TilesInMatmulMulti() {
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

void TestKernelConformance::matmulMultiEqualsSeparateCalls() {
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
      for (auto [w, y, n] : {std::tuple{&a.view, &ya, 37}, {&b.view, &yb, 5}, {&c.view, &yc, 70}}) {
        std::vector<float> want(m * n);
        backend->Matmul(x.data(), m, 64, *w, want.data(), n, false);
        QCOMPARE(*y, want);
      }
    }
  }
}

QTEST_APPLESS_MAIN(TestKernelConformance)
#include "moc_test_kernel_conformance.cpp"
