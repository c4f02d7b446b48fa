// Every CUDA kernel (octet/kernels/cuda/cuda_ops.h) against the scalar CPU
// backend, the reference every backend answers to, on random shapes including
// ragged ones (k not a multiple of any vector width, n not a multiple of the
// rows per block, unaligned and padded row strides, column slices), and the
// device-side decoding of every code of every format.
//
// Tolerances, relative to the magnitude of the result:
//   matmul      |got - want| <= 3e-5 * Σ_k |x||w|       (float sums in another order)
//   RMSNorm     |got - want| <= 2e-5 * |want| + 1e-7     (sum of squares in another order)
//   RoPE        |got - want| <= 4e-6 * (|a| + |b|)      (sincosf vs libm, 1-2 ulp)
//   SiLU·mul    |got - want| <= 4e-6 * |want| + 1e-7     (expf vs libm, 1-2 ulp)
//   attention   |got - want| <= 2e-5 * max |v|           (split-wise softmax)
//   add, embedding, argmax, NVFP4 code decode: exact.
//
// Without a usable CUDA device the program prints one line
// "no usable CUDA device: <why>" and exits 77 (ctest: skipped) before any test
// function runs, so it never passes on a machine without a GPU.
// OCTET_CUDA_TEST_QUICK=1 keeps only the small shapes (for compute-sanitizer).
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "cuda_test_main.h"
#include "cuda_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/cuda/cuda_device.h"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/weight.h"

using namespace octet;
using namespace octet::kernels;
using namespace octet::kernels::cuda;
using namespace octet::kernels::cuda::test;

namespace {

int g_sm_count = 1;

bool Quick() {
  const char* v = std::getenv("OCTET_CUDA_TEST_QUICK");
  return v && *v && std::string(v) != "0";
}

std::vector<float> Abs(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

}  // namespace

class TestCudaKernels : public QObject {
  Q_OBJECT

  std::unique_ptr<KernelBackend> scalar_;
  std::unique_ptr<CudaStream> stream_;

  // |W| as float (decoded by the reference), for the matmul tolerances.
  std::vector<float> AbsDecoded(const HostWeight& w, int n, int k) {
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = i;
    std::vector<float> wf(static_cast<size_t>(n) * k);
    scalar_->Embedding(w.view, ids.data(), n, wf.data());
    return Abs(wf);
  }

  // The scalar backend's y0 (+)= x · Wᵀ (m rows, ldx / ldy apart) and each
  // element's tolerance: 3e-5 Σ|x||w| (+ |y0| when accumulating); y's gaps
  // between rows must stay exactly as they were.
  void ExpectedGemv(const HostWeight& w, const std::vector<float>& abs_w, int n, int k, int m,
                    int64_t ldx, int64_t ldy, const std::vector<float>& x,
                    const std::vector<float>& y0, bool accumulate, std::vector<float>* want,
                    std::vector<float>* tol) {
    const WeightMatrix abs_view = WeightMatrix::Dense(WeightFormat::kF32, abs_w.data(), n, k);
    *want = y0;
    std::vector<float> mag(m * ldy, 0.0f);
    scalar_->Matmul(x.data(), m, ldx, w.view, want->data(), ldy, accumulate);
    const std::vector<float> abs_x = Abs(x);
    scalar_->Matmul(abs_x.data(), m, ldx, abs_view, mag.data(), ldy, false);
    tol->assign(m * ldy, 0.0f);
    for (size_t i = 0; i < tol->size(); ++i) {
      const bool gap = static_cast<int64_t>(i % ldy) >= n;
      (*tol)[i] = gap ? 0.0f : 3e-5f * (mag[i] + (accumulate ? std::fabs(y0[i]) : 0.0f)) + 1e-30f;
    }
  }

 private slots:
  void initTestCase() {
    auto b = CreateBackend("scalar", BackendOptions{0});
    QVERIFY2(b.ok(), b.status().ToString().c_str());
    scalar_ = std::move(*b);
    auto s = CudaStream::Create();
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    stream_ = std::make_unique<CudaStream>(std::move(*s));
  }

  // ---- matmul ---------------------------------------------------------------

  void gemv_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("layout");
    const char* layouts[] = {"tight", "padded", "slice"};
    for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
      for (int n : {37, 4096}) {
        for (int k : {7, 64, 1000, 4100}) {
          if (Quick() && (n > 64 || k > 1000)) continue;
          for (int l = 0; l < 3; ++l) {
            QTest::addRow("%s n=%d k=%d %s", f == WeightFormat::kBF16 ? "bf16" : "nvfp4", n, k,
                          layouts[l])
                << static_cast<int>(f) << n << k << l;
          }
        }
      }
    }
  }

  // m = 1..8, accumulate on even m; y's gaps between rows must stay as they were.
  void gemv() {
    QFETCH(int, format);
    QFETCH(int, n);
    QFETCH(int, k);
    QFETCH(int, layout);
    std::mt19937 rng(static_cast<uint32_t>(n * 7919 + k * 31 + layout * 3 + format));
    const HostWeight w =
        RandomWeight(static_cast<WeightFormat>(format), n, k, static_cast<Layout>(layout), rng);
    UPLOAD(ddata, w.data);
    UPLOAD(dscales, w.scales);
    const WeightMatrix dw = w.OnDevice(ddata, dscales);
    const std::vector<float> abs_w = AbsDecoded(w, n, k);

    const int64_t ldx = k + 3, ldy = n + 2;
    for (int m = 1; m <= kGemvMaxRows; ++m) {
      const bool accumulate = m % 2 == 0;
      const std::vector<float> x = RandomFloats(m * ldx, rng);
      const std::vector<float> y0 = RandomFloats(m * ldy, rng);
      std::vector<float> want, tol;
      ExpectedGemv(w, abs_w, n, k, m, ldx, ldy, x, y0, accumulate, &want, &tol);
      UPLOAD(dx, x);
      UPLOAD(dy, y0);
      CUDA_VERIFY(
          LaunchGemv(stream_->get(), dx.as<float>(), m, ldx, dw, dy.as<float>(), ldy, accumulate));
      CUDA_VERIFY(stream_->Synchronize());
      std::vector<float> got(y0.size());
      CUDA_VERIFY(Download(dy, &got, *stream_));
      const std::string bad = FirstMismatch(got, want, tol);
      QVERIFY2(bad.empty(), (std::string("m=") + std::to_string(m) + " " + bad).c_str());
    }
  }

  // Every E2M1 code times every E4M3 scale, through both load paths of the
  // float kernel (16-byte rows: vector loads; 17: per element) and through
  // the integer kernel: row r has scale code r, column c code c (block 0) or
  // 31 - c (block 1), and x rows are unit vectors, so y is exactly E2M1 *
  // E4M3 (NaN for 0x7f, 0xff).
  void gemvDecodesEveryNvfp4Code() {
    struct Variant {
      int64_t row_stride;
      bool integer;
    };
    for (const Variant v : {Variant{16, false}, Variant{17, false}, Variant{16, true}}) {
      const int64_t row_stride = v.row_stride;
      std::vector<uint8_t> codes(256 * row_stride, 0), scales(256 * 2);
      auto code_at = [](int c) { return c < 16 ? c : 31 - c; };
      for (int r = 0; r < 256; ++r) {
        for (int c = 0; c < 32; c += 2) {
          codes[r * row_stride + c / 2] = static_cast<uint8_t>(code_at(c) | code_at(c + 1) << 4);
        }
        scales[2 * r] = scales[2 * r + 1] = static_cast<uint8_t>(r);
      }
      UPLOAD(dcodes, codes);
      UPLOAD(dscales, scales);
      WeightMatrix w =
          WeightMatrix::Nvfp4(dcodes.as<uint8_t>(), dscales.as<uint8_t>(), 1.0f, 256, 32);
      w.row_stride = row_stride;
      auto packed = DeviceBuffer::Allocate(Nvfp4IntPackedBytes(8, 32));
      QVERIFY2(packed.ok(), packed.status().ToString().c_str());
      for (int pass = 0; pass < 4; ++pass) {
        std::vector<float> x(8 * 32, 0.0f);
        for (int i = 0; i < 8; ++i) x[i * 32 + pass * 8 + i] = 1.0f;
        UPLOAD(dx, x);
        std::vector<float> y(8 * 256, 0.0f);
        UPLOAD(dy, y);
        if (v.integer) {
          CUDA_VERIFY(LaunchPackNvfp4Int(stream_->get(), dx.as<float>(), 8, 32, 32, packed->data(),
                                         Nvfp4IntPackedBytes(8, 32)));
          CUDA_VERIFY(
              LaunchGemvNvfp4Int(stream_->get(), packed->data(), 8, w, dy.as<float>(), 256, false));
        } else {
          CUDA_VERIFY(
              LaunchGemv(stream_->get(), dx.as<float>(), 8, 32, w, dy.as<float>(), 256, false));
        }
        CUDA_VERIFY(Download(dy, &y, *stream_));
        for (int i = 0; i < 8; ++i) {
          const int c = pass * 8 + i;
          for (int r = 0; r < 256; ++r) {
            const float want = kE2m1Values[code_at(c)] * E4m3ToF32(static_cast<uint8_t>(r));
            const float got = y[i * 256 + r];
            const bool ok = std::isnan(want) ? std::isnan(got) : got == want;
            QVERIFY2(ok, qPrintable(QString("%1 kernel, stride %2 column %3 scale 0x%4: got %5 "
                                            "want %6")
                                        .arg(v.integer ? "integer" : "float")
                                        .arg(row_stride)
                                        .arg(c)
                                        .arg(r, 0, 16)
                                        .arg(got)
                                        .arg(want)));
          }
        }
      }
    }
  }

  // ---- the integer NVFP4 matmul (gemv_int.cu) --------------------------------

  void gemvInt_data() {
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("layout");
    const char* layouts[] = {"tight", "padded"};
    // k = 64 and 1024: groups of 32 threads a row; 4096 and 4608: of 128.
    for (int n : {37, 4096}) {
      for (int k : {64, 1024, 4096, 4608}) {
        if (Quick() && (n > 64 || k > 1024)) continue;
        for (int l = 0; l < 2; ++l) {
          QTest::addRow("n=%d k=%d %s", n, k, layouts[l]) << n << k << l;
        }
      }
    }
  }

  // As gemv (m = 1..8, accumulate on even m, y's gaps untouched, the same
  // tolerance), packed once per m and multiplied twice: the packing is reused.
  void gemvInt() {
    QFETCH(int, n);
    QFETCH(int, k);
    QFETCH(int, layout);
    std::mt19937 rng(static_cast<uint32_t>(n * 7919 + k * 31 + layout * 3 + 11));
    const HostWeight w = RandomWeight(WeightFormat::kNvfp4, n, k, static_cast<Layout>(layout), rng);
    UPLOAD(ddata, w.data);
    UPLOAD(dscales, w.scales);
    const WeightMatrix dw = w.OnDevice(ddata, dscales);
    QVERIFY(GemvNvfp4IntSupports(dw));
    const std::vector<float> abs_w = AbsDecoded(w, n, k);

    const int64_t ldx = k + 3, ldy = n + 2;
    for (int m = 1; m <= kGemvMaxRows; ++m) {
      const bool accumulate = m % 2 == 0;
      std::vector<float> x = RandomFloats(m * ldx, rng);
      for (int j = 0; j < 16; ++j) x[j] *= 1e-6f;  // a block far below the rest
      const std::vector<float> y0 = RandomFloats(m * ldy, rng);
      std::vector<float> want, tol;
      ExpectedGemv(w, abs_w, n, k, m, ldx, ldy, x, y0, accumulate, &want, &tol);
      UPLOAD(dx, x);
      const int64_t packed_bytes = Nvfp4IntPackedBytes(m, k);
      auto packed = DeviceBuffer::Allocate(packed_bytes);
      QVERIFY2(packed.ok(), packed.status().ToString().c_str());
      CUDA_VERIFY(LaunchPackNvfp4Int(stream_->get(), dx.as<float>(), m, ldx, k, packed->data(),
                                     packed_bytes));
      for (int round = 0; round < 2; ++round) {
        UPLOAD(dy, y0);
        CUDA_VERIFY(LaunchGemvNvfp4Int(stream_->get(), packed->data(), m, dw, dy.as<float>(), ldy,
                                       accumulate));
        CUDA_VERIFY(stream_->Synchronize());
        std::vector<float> got(y0.size());
        CUDA_VERIFY(Download(dy, &got, *stream_));
        const std::string bad = FirstMismatch(got, want, tol);
        QVERIFY2(bad.empty(), (std::string("m=") + std::to_string(m) + " round " +
                               std::to_string(round) + " " + bad)
                                  .c_str());
      }
    }
  }

  // Infinities and NaN in the activations give what float arithmetic gives
  // (the scalar backend): the same infinities, NaN where it has NaN.
  void gemvIntNonFiniteActivations() {
    const int n = 64, k = 64, m = 4;
    std::mt19937 rng(5);
    const HostWeight w = RandomWeight(WeightFormat::kNvfp4, n, k, Layout::kTight, rng);
    UPLOAD(ddata, w.data);
    UPLOAD(dscales, w.scales);
    const WeightMatrix dw = w.OnDevice(ddata, dscales);
    std::vector<float> x = RandomFloats(m * k, rng);
    const float inf = std::numeric_limits<float>::infinity();
    x[0 * k + 5] = inf;            // row 0: one infinity
    x[1 * k + 3] = std::nanf("");  // row 1: a NaN
    x[2 * k + 7] = inf;            // row 2: opposite infinities in one block
    x[2 * k + 9] = -inf;
    x[3 * k + 40] = -inf;  // row 3: an infinity in the second block
    std::vector<float> want(m * n);
    scalar_->Matmul(x.data(), m, k, w.view, want.data(), n, false);
    UPLOAD(dx, x);
    std::vector<float> y(m * n, 0.0f);
    UPLOAD(dy, y);
    auto packed = DeviceBuffer::Allocate(Nvfp4IntPackedBytes(m, k));
    QVERIFY2(packed.ok(), packed.status().ToString().c_str());
    CUDA_VERIFY(LaunchPackNvfp4Int(stream_->get(), dx.as<float>(), m, k, k, packed->data(),
                                   Nvfp4IntPackedBytes(m, k)));
    CUDA_VERIFY(
        LaunchGemvNvfp4Int(stream_->get(), packed->data(), m, dw, dy.as<float>(), n, false));
    CUDA_VERIFY(Download(dy, &y, *stream_));
    for (int i = 0; i < m * n; ++i) {
      QVERIFY2(!std::isfinite(want[i]), "every output meets a non-finite activation");
      QVERIFY2(SameFloat(y[i], want[i]) || (std::isnan(y[i]) && std::isnan(want[i])),
               qPrintable(QString("row %1 output %2: got %3 want %4")
                              .arg(i / n)
                              .arg(i % n)
                              .arg(y[i])
                              .arg(want[i])));
    }
  }

  void gemvIntRejectsWhatItCannotDo() {
    std::mt19937 rng(3);
    const HostWeight slice = RandomWeight(WeightFormat::kNvfp4, 8, 64, Layout::kSlice, rng);
    UPLOAD(ddata, slice.data);
    UPLOAD(dscales, slice.scales);
    const WeightMatrix off = slice.OnDevice(ddata, dscales);  // codes 8 bytes off 16
    QVERIFY(!GemvNvfp4IntSupports(off));
    std::vector<float> buf(4096, 0.0f);
    UPLOAD(d, buf);
    const Status s1 = LaunchGemvNvfp4Int(stream_->get(), d.data(), 1, off, d.as<float>(), 8, false);
    QCOMPARE(s1.code(), StatusCode::kUnimplemented);
    const WeightMatrix k48 = WeightMatrix::Nvfp4(d.as<uint8_t>(), d.as<uint8_t>(), 1.0f, 8,
                                                 48);  // k not a multiple of 32
    QVERIFY(!GemvNvfp4IntSupports(k48));
    const Status s2 = LaunchPackNvfp4Int(stream_->get(), d.as<float>(), 9, 64, 64, d.data(),
                                         4096 * sizeof(float));
    QCOMPARE(s2.code(), StatusCode::kInvalidArgument);  // m = 9
    const Status s3 = LaunchPackNvfp4Int(stream_->get(), d.as<float>(), 1, 64, 64, d.data(),
                                         Nvfp4IntPackedBytes(1, 64) - 1);
    QCOMPARE(s3.code(), StatusCode::kInvalidArgument);  // too little space
  }

  void gemvRejectsWhatItCannotDo() {
    std::vector<float> buf(64, 0.0f);
    UPLOAD(d, buf);
    const WeightMatrix f32 = WeightMatrix::Dense(WeightFormat::kF32, d.data(), 4, 4);
    const Status s1 = LaunchGemv(stream_->get(), d.as<float>(), 1, 4, f32, d.as<float>(), 4, false);
    QCOMPARE(s1.code(), StatusCode::kUnimplemented);
    const WeightMatrix bf16 = WeightMatrix::Dense(WeightFormat::kBF16, d.data(), 4, 4);
    const Status s2 =
        LaunchGemv(stream_->get(), d.as<float>(), 9, 4, bf16, d.as<float>(), 4, false);
    QCOMPARE(s2.code(), StatusCode::kInvalidArgument);
  }

  // ---- row-wise and element-wise ops ----------------------------------------

  void rmsNorm() {
    std::mt19937 rng(11);
    for (int dim : {1, 37, 1024, 4096, 5120}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool weighted = variant & 1, in_place = variant & 2;
        const int rows = 7, stride = dim + 3;
        const std::vector<float> x = RandomFloats(rows * stride, rng, 3.0f);
        const std::vector<float> wt = RandomFloats(dim, rng);
        std::vector<float> want = x;  // the gaps stay as they are
        scalar_->RmsNorm(x.data(), weighted ? wt.data() : nullptr, 1e-6f, rows, dim, stride,
                         want.data());
        UPLOAD(dx, x);
        UPLOAD(dw, wt);
        UPLOAD(dout, x);
        float* out = in_place ? dx.as<float>() : dout.as<float>();
        CUDA_VERIFY(LaunchRmsNorm(stream_->get(), dx.as<float>(),
                                  weighted ? dw.as<float>() : nullptr, 1e-6f, rows, dim, stride,
                                  out));
        std::vector<float> got(x.size()), tol(x.size());
        CUDA_VERIFY(Download(in_place ? dx : dout, &got, *stream_));
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2e-5f * std::fabs(want[i]) + 1e-7f;
        const std::string bad = FirstMismatch(got, want, tol);
        QVERIFY2(bad.empty(), qPrintable(QString("dim %1 variant %2: %3")
                                             .arg(dim)
                                             .arg(variant)
                                             .arg(QString::fromStdString(bad))));
      }
    }
  }

  void rope() {
    std::mt19937 rng(12);
    for (int head_dim : {2, 64, 128, 256}) {
      for (int n_heads : {1, 8, 32}) {
        const int rows = 5, row_stride = n_heads * head_dim + 5;
        std::vector<float> x = RandomFloats(rows * row_stride, rng);
        std::vector<int32_t> pos(rows);
        for (auto& p : pos) p = static_cast<int32_t>(rng() % 131072);
        pos[0] = 0;
        std::vector<float> inv_freq(head_dim / 2);
        for (int i = 0; i < head_dim / 2; ++i) {
          inv_freq[i] = std::pow(1e6f, -2.0f * i / head_dim);
        }
        std::vector<float> want = x, tol(x.size(), 0.0f);
        scalar_->Rope(want.data(), rows, row_stride, n_heads, head_dim, pos.data(),
                      inv_freq.data());
        for (int r = 0; r < rows; ++r) {
          for (int h = 0; h < n_heads; ++h) {
            for (int i = 0; i < head_dim / 2; ++i) {
              const int64_t a = r * row_stride + h * head_dim + i, b = a + head_dim / 2;
              tol[a] = tol[b] = 4e-6f * (std::fabs(x[a]) + std::fabs(x[b]));
            }
          }
        }
        UPLOAD(dx, x);
        UPLOAD(dpos, pos);
        UPLOAD(dfreq, inv_freq);
        CUDA_VERIFY(LaunchRope(stream_->get(), dx.as<float>(), rows, row_stride, n_heads, head_dim,
                               dpos.as<int32_t>(), dfreq.as<float>()));
        std::vector<float> got(x.size());
        CUDA_VERIFY(Download(dx, &got, *stream_));
        const std::string bad = FirstMismatch(got, want, tol);
        QVERIFY2(bad.empty(), qPrintable(QString("head_dim %1 heads %2: %3")
                                             .arg(head_dim)
                                             .arg(n_heads)
                                             .arg(QString::fromStdString(bad))));
      }
    }
  }

  void siluMulAndAdd() {
    std::mt19937 rng(13);
    for (int n : {1, 1000, 4099}) {
      for (bool alias : {false, true}) {
        const int rows = 3, stride = n + 5;
        const std::vector<float> gate = RandomFloats(rows * stride, rng, 4.0f);
        const std::vector<float> up = RandomFloats(rows * stride, rng);
        std::vector<float> want = gate;
        scalar_->SiluMul(gate.data(), up.data(), rows, n, stride, want.data());
        UPLOAD(dg, gate);
        UPLOAD(du, up);
        UPLOAD(dout, gate);
        float* out = alias ? dg.as<float>() : dout.as<float>();
        CUDA_VERIFY(
            LaunchSiluMul(stream_->get(), dg.as<float>(), du.as<float>(), rows, n, stride, out));
        std::vector<float> got(want.size()), tol(want.size());
        CUDA_VERIFY(Download(alias ? dg : dout, &got, *stream_));
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = 4e-6f * std::fabs(want[i]) + 1e-7f;
        const std::string bad = FirstMismatch(got, want, tol);
        QVERIFY2(bad.empty(),
                 qPrintable(QString("silu n %1: %2").arg(n).arg(QString::fromStdString(bad))));
      }
    }
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
      const std::vector<float> a = RandomFloats(n, rng), b = RandomFloats(n, rng);
      std::vector<float> want(n);
      scalar_->Add(a.data(), b.data(), n, want.data());
      UPLOAD(da, a);
      UPLOAD(db, b);
      CUDA_VERIFY(LaunchAdd(stream_->get(), da.as<float>(), db.as<float>(), n, da.as<float>()));
      std::vector<float> got(n);
      CUDA_VERIFY(Download(da, &got, *stream_));
      for (int64_t i = 0; i < n; ++i) QVERIFY(SameFloat(got[i], want[i]));
    }
  }

  // ---- embedding and argmax -------------------------------------------------

  void embeddingEveryFormat() {
    std::mt19937 rng(14);
    const int rows = 50, cols = 1000;
    for (WeightFormat f :
         {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kNvfp4}) {
      HostWeight t;
      if (f == WeightFormat::kBF16 || f == WeightFormat::kNvfp4) {
        t = RandomWeight(f, rows, cols, Layout::kPadded, rng);
      } else {
        const std::vector<float> v = RandomFloats(rows * cols, rng);
        t.data.resize(rows * cols * (f == WeightFormat::kF32 ? 4 : 2));
        for (int i = 0; i < rows * cols; ++i) {
          if (f == WeightFormat::kF32) {
            std::memcpy(t.data.data() + 4 * i, &v[i], 4);
          } else {
            const uint16_t h = F32ToF16(v[i]);
            std::memcpy(t.data.data() + 2 * i, &h, 2);
          }
        }
        t.view = WeightMatrix::Dense(f, t.data.data(), rows, cols);
      }
      std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1};
      std::vector<float> want(ids.size() * cols);
      scalar_->Embedding(t.view, ids.data(), static_cast<int64_t>(ids.size()), want.data());
      ids.push_back(-1);  // out of range: a NaN row, not a fault
      ids.push_back(rows);
      want.resize(ids.size() * cols, std::numeric_limits<float>::quiet_NaN());
      UPLOAD(ddata, t.data);
      UPLOAD(dscales, t.scales);
      UPLOAD(dids, ids);
      std::vector<float> got(want.size());
      UPLOAD(dout, got);
      CUDA_VERIFY(LaunchEmbedding(stream_->get(), t.OnDevice(ddata, dscales), dids.as<int32_t>(),
                                  static_cast<int64_t>(ids.size()), dout.as<float>()));
      CUDA_VERIFY(Download(dout, &got, *stream_));
      for (size_t i = 0; i < want.size(); ++i) {
        QVERIFY2(SameFloat(got[i], want[i]),
                 qPrintable(QString("%1 element %2").arg(WeightFormatName(f).data()).arg(i)));
      }
    }
  }

  // Every BF16 and F16 code decoded on the device (through the gather).
  void embeddingDecodesEveryCode() {
    for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kF16}) {
      std::vector<uint16_t> table(65536);
      for (int i = 0; i < 65536; ++i) table[i] = static_cast<uint16_t>(i);
      std::vector<int32_t> ids(256);
      for (int i = 0; i < 256; ++i) ids[i] = i;
      UPLOAD(dtable, table);
      UPLOAD(dids, ids);
      std::vector<float> got(65536);
      UPLOAD(dout, got);
      const WeightMatrix t = WeightMatrix::Dense(f, dtable.data(), 256, 256);
      CUDA_VERIFY(LaunchEmbedding(stream_->get(), t, dids.as<int32_t>(), 256, dout.as<float>()));
      CUDA_VERIFY(Download(dout, &got, *stream_));
      for (int c = 0; c < 65536; ++c) {
        const float want = f == WeightFormat::kBF16 ? Bf16ToF32(static_cast<uint16_t>(c))
                                                    : F16ToF32(static_cast<uint16_t>(c));
        QVERIFY2(SameFloat(got[c], want), qPrintable(QString("code 0x%1").arg(c, 0, 16)));
      }
    }
  }

  void argmax() {
    std::mt19937 rng(15);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<std::vector<float>> cases = {{1.0f},
                                             {nan},
                                             {nan, nan, nan},
                                             {-inf, nan, -inf},
                                             {nan, 2.0f, 3.0f, 3.0f, nan},
                                             {0.0f, -0.0f, -1.0f},
                                             {-0.0f, 0.0f},
                                             {1.0f, inf, inf}};
    cases.push_back(RandomFloats(1000, rng));
    cases.push_back(RandomFloats(151936, rng));
    std::vector<float> late(151936, -1.0f);
    late.back() = 5.0f;  // the largest at the very end
    late[1234] = nan;
    cases.push_back(late);
    std::vector<float> ties(70000, 7.0f);  // every element equal: index 0
    cases.push_back(ties);
    ties[0] = nan;  // the first equal one after a NaN
    cases.push_back(ties);
    for (size_t t = 0; t < cases.size(); ++t) {
      const std::vector<float>& x = cases[t];
      const int64_t want = scalar_->Argmax(x.data(), static_cast<int64_t>(x.size()));
      UPLOAD(dx, x);
      std::vector<int64_t> got(1, -7);
      UPLOAD(dindex, got);
      CUDA_VERIFY(LaunchArgmax(stream_->get(), dx.as<float>(), static_cast<int64_t>(x.size()),
                               dindex.as<int64_t>()));
      CUDA_VERIFY(Download(dindex, &got, *stream_));
      QVERIFY2(got[0] == want,
               qPrintable(QString("case %1: got %2 want %3").arg(t).arg(got[0]).arg(want)));
    }
  }

  // ---- attention ------------------------------------------------------------

  void attention_data() {
    QTest::addColumn<int>("n_heads");
    QTest::addColumn<int>("n_kv_heads");
    QTest::addColumn<int>("head_dim");
    QTest::addColumn<int>("f16");
    QTest::addColumn<QString>("positions");
    struct Case {
      int h, kv, d;
      const char* pos;
    };
    const Case cases[] = {
        {8, 8, 64, "0"},               // one key, no grouping
        {16, 8, 128, "0,1,130,1000"},  // group 2, four sequences
        {32, 4, 128, "4095,17"},       // group 8
        {12, 1, 256, "300"},           // group 12: two blocks of heads (8 + 4)
        {6, 2, 80, "777,5"},           // group 3 (a 4-wide block, one idle), head_dim 80
        {14, 2, 64, "513"},            // group 7
        {4, 4, 256, "2000,1,64"},
    };
    for (const Case& c : cases) {
      for (int f16 = 0; f16 < 2; ++f16) {
        if (Quick() && std::string(c.pos).find("4095") != std::string::npos) continue;
        QTest::addRow("h=%d kv=%d d=%d %s pos=%s", c.h, c.kv, c.d, f16 ? "f16" : "f32", c.pos)
            << c.h << c.kv << c.d << f16 << QString(c.pos);
      }
    }
  }

  // The default plan and forced split lengths (37: not a multiple of a warp;
  // 64; 512: the largest) against the scalar backend. Cache positions past a
  // sequence's own are NaN: reading one would show.
  void attention() {
    QFETCH(int, n_heads);
    QFETCH(int, n_kv_heads);
    QFETCH(int, head_dim);
    QFETCH(int, f16);
    QFETCH(QString, positions);
    std::vector<int32_t> pos;
    for (const QString& p : positions.split(',')) pos.push_back(p.toInt());
    const int n_seqs = static_cast<int>(pos.size());
    const int max_keys = *std::max_element(pos.begin(), pos.end()) + 1;
    const int64_t capacity = max_keys + 3;
    const int64_t seq_stride = (n_kv_heads * capacity * head_dim + 7) / 8 * 8 + 8;
    std::mt19937 rng(static_cast<uint32_t>(n_heads * 131 + head_dim * 7 + max_keys + f16));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> kf(n_seqs * seq_stride, nan), vf(n_seqs * seq_stride, nan);
    float max_v = 0.0f;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int s = 0; s < n_seqs; ++s) {
      for (int g = 0; g < n_kv_heads; ++g) {
        for (int p = 0; p <= pos[s]; ++p) {
          for (int c = 0; c < head_dim; ++c) {
            const int64_t at = s * seq_stride + (g * capacity + p) * head_dim + c;
            // Stored values are what the cache holds: F16 rounds them once.
            kf[at] = f16 ? F16ToF32(F32ToF16(nd(rng))) : nd(rng);
            vf[at] = f16 ? F16ToF32(F32ToF16(nd(rng))) : nd(rng);
            max_v = std::max(max_v, std::fabs(vf[at]));
          }
        }
      }
    }
    std::vector<uint16_t> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
      kh[i] = F32ToF16(kf[i]);
      vh[i] = F32ToF16(vf[i]);
    }
    const int64_t row = n_heads * head_dim;
    const std::vector<float> q = RandomFloats(n_seqs * (row + 3), rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    const KvDtype dtype = f16 ? KvDtype::kF16 : KvDtype::kF32;

    // The reference: one token per sequence, head-major caches.
    std::vector<AttentionSequence> seqs(n_seqs);
    for (int s = 0; s < n_seqs; ++s) {
      AttentionSequence& a = seqs[s];
      a.first_token = s;
      a.n_tokens = 1;
      a.k_cache =
          f16 ? static_cast<const void*>(kh.data() + s * seq_stride) : kf.data() + s * seq_stride;
      a.v_cache =
          f16 ? static_cast<const void*>(vh.data() + s * seq_stride) : vf.data() + s * seq_stride;
      a.positions = &pos[s];
      a.kv_dtype = dtype;
      a.position_stride = head_dim;
      a.head_stride = capacity * head_dim;
    }
    const int64_t out_stride = row + 1;
    std::vector<float> want(n_seqs * out_stride, 0.0f);
    AttentionArgs ref;
    ref.q = q.data();
    ref.q_row_stride = row + 3;
    ref.out = want.data();
    ref.out_row_stride = out_stride;
    ref.n_heads = n_heads;
    ref.n_kv_heads = n_kv_heads;
    ref.head_dim = head_dim;
    ref.scale = scale;
    ref.sequences = seqs.data();
    ref.n_sequences = n_seqs;
    scalar_->Attention(ref);

    UPLOAD(dq, q);
    UPLOAD(dpos, pos);
    UPLOAD(dkf, kf);
    UPLOAD(dvf, vf);
    UPLOAD(dkh, kh);
    UPLOAD(dvh, vh);
    DecodeAttentionArgs a;
    a.q = dq.as<float>();
    a.q_row_stride = row + 3;
    a.out_row_stride = out_stride;
    a.k_cache = f16 ? dkh.data() : dkf.data();
    a.v_cache = f16 ? dvh.data() : dvf.data();
    a.kv_dtype = dtype;
    a.capacity = capacity;
    a.seq_stride = seq_stride;
    a.positions = dpos.as<int32_t>();
    a.n_seqs = n_seqs;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = scale;
    std::vector<float> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i) {
      tol[i] = static_cast<int64_t>(i % out_stride) < row ? 2e-5f * max_v : 0.0f;
    }
    for (int64_t forced : {int64_t{0}, int64_t{37}, int64_t{64}, int64_t{512}}) {
      const DecodeAttentionPlan plan = PlanDecodeAttention(a, max_keys, g_sm_count, forced);
      auto ws = DeviceBuffer::Allocate(plan.workspace_bytes);
      QVERIFY2(ws.ok(), ws.status().ToString().c_str());
      std::vector<float> got(want.size(), 0.0f);
      UPLOAD(dout, got);
      a.out = dout.as<float>();
      CUDA_VERIFY(LaunchDecodeAttention(stream_->get(), a, plan, ws->data(), ws->size()));
      CUDA_VERIFY(Download(dout, &got, *stream_));
      const std::string bad = FirstMismatch(got, want, tol);
      QVERIFY2(bad.empty(), qPrintable(QString("keys_per_split %1 (%2 splits): %3")
                                           .arg(plan.keys_per_split)
                                           .arg(plan.splits)
                                           .arg(QString::fromStdString(bad))));
    }
  }

  // A position the plan does not cover, or outside the cache, gives NaN
  // outputs, never a softmax over part of the keys.
  void attentionUncoveredPositionIsNaN() {
    const int head_dim = 64, capacity = 200;
    std::vector<float> cache(capacity * head_dim, 0.5f), q(head_dim, 1.0f);
    std::vector<int32_t> pos = {150};
    UPLOAD(dk, cache);
    UPLOAD(dq, q);
    UPLOAD(dpos, pos);
    std::vector<float> out(head_dim, 0.0f);
    UPLOAD(dout, out);
    DecodeAttentionArgs a;
    a.q = dq.as<float>();
    a.q_row_stride = head_dim;
    a.out = dout.as<float>();
    a.out_row_stride = head_dim;
    a.k_cache = a.v_cache = dk.data();
    a.capacity = capacity;
    a.positions = dpos.as<int32_t>();
    a.n_seqs = a.n_heads = a.n_kv_heads = 1;
    a.head_dim = head_dim;
    for (int32_t p : {150, 250}) {  // past the plan's 100 keys; past the cache
      pos[0] = p;
      CUDA_VERIFY(dpos.CopyFromHost(pos.data(), sizeof(int32_t), *stream_));
      const DecodeAttentionPlan plan = PlanDecodeAttention(a, 100, g_sm_count, 64);
      auto ws = DeviceBuffer::Allocate(plan.workspace_bytes);
      QVERIFY2(ws.ok(), ws.status().ToString().c_str());
      CUDA_VERIFY(LaunchDecodeAttention(stream_->get(), a, plan, ws->data(), ws->size()));
      CUDA_VERIFY(Download(dout, &out, *stream_));
      for (float v : out) QVERIFY(std::isnan(v));
    }
  }
};

// Not QTEST_MAIN: without a usable device the program must say so and exit 77
// before Qt Test runs (and reports) any test function.
int main(int argc, char** argv) {
  CudaProbeResult probe;
  if (!octet::test::CudaDeviceOrSkip(&probe)) return 77;
  g_sm_count = probe.devices[0].sm_count;
  TestCudaKernels tc;
  return QTest::qExec(&tc, argc, argv);
}

#include "test_cuda_kernels.moc"
