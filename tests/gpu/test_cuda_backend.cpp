// Every op of the CUDA KernelBackend (octet/kernels/cuda/cuda_backend.h)
// against the scalar CPU backend, through the KernelBackend interface only:
// inputs are made on the host, brought in with Allocate + CopyToDevice (and
// PrepareWeight for weights), the results read back with CopyToHost, on
// random shapes including ragged ones.
//
// Tolerances, relative to the magnitude of the result:
//   Matmul (every format, m = 1..8 GEMV and m > 8 cuBLAS), Gemm:
//       |got - want| <= 3e-5 * Σ_k |x||w| + 1e-6       (summation order; the split
//       BF16 activations carry 16 significant bits: 2^-17 relative)
//   RmsNorm, Softmax, SiluMul, SoftCap:  2e-5 * |want| + 1e-6
//   Rope:       4e-6 * (|a| + |b|) + 1e-7
//   Attention:  3e-5 * max |v| (online softmax over chunks and splits)
//   Add, AddRowVector, Relu2, Scale, Fill, GatherRows, Embedding(Shard),
//   KvStore, Argmax, TopK: exact. ScatterAddRows: exact (same order of adds).
//
// Without a usable CUDA device the program prints one line
// "no usable CUDA device: <why>" and exits 77 (ctest: skipped) before any test
// function runs, so it never passes on a machine without a GPU.
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_main.h"
#include "cuda_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/backends.h"
#include "octet/kernels/cuda/cuda_device.h"
#include "octet/kernels/weight.h"

using namespace octet;
using namespace octet::kernels;
using octet::kernels::cuda::test::FirstMismatch;
using octet::kernels::cuda::test::HostWeight;
using octet::kernels::cuda::test::Layout;
using octet::kernels::cuda::test::RandomFloats;

namespace {

#define OK_OR_FAIL(expr)                                        \
  do {                                                          \
    const ::octet::Status ok_or_fail_ = (expr);                 \
    QVERIFY2(ok_or_fail_.ok(), ok_or_fail_.ToString().c_str()); \
  } while (0)

// A host weight matrix in any format, tight rows.
HostWeight MakeWeight(WeightFormat f, int64_t n, int64_t k, Layout layout, std::mt19937& rng) {
  if (f == WeightFormat::kBF16 || f == WeightFormat::kNvfp4) {
    return cuda::test::RandomWeight(f, n, k, layout, rng);
  }
  HostWeight h;
  const int64_t elt = f == WeightFormat::kF32 ? 4 : 2;
  const int64_t pad = layout == Layout::kPadded ? 3 : 0;  // elements of padding per row
  h.data.assign(n * (k + pad) * elt, 0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      uint8_t* p = h.data.data() + (r * (k + pad) + c) * elt;
      const float v = nd(rng);
      if (f == WeightFormat::kF32) {
        std::memcpy(p, &v, 4);
      } else {
        const uint16_t b = F32ToF16(v);
        std::memcpy(p, &b, 2);
      }
    }
  }
  h.view = WeightMatrix::Dense(f, h.data.data(), n, k);
  h.view.row_stride = (k + pad) * elt;
  return h;
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

class TestCudaBackend : public QObject {
  Q_OBJECT

  std::unique_ptr<KernelBackend> ref_;  // scalar
  std::unique_ptr<KernelBackend> gpu_;
  std::unique_ptr<KernelBackend> gpu_tensor_;  // OCTET_CUDA_PREFILL_ATTENTION=tensor
  std::vector<Buffer> keep_;                   // device buffers of the current test function

  // A device copy of a host vector.
  template <typename T>
  T* Up(const std::vector<T>& v) {
    auto b = gpu_->Allocate(static_cast<int64_t>(v.size() * sizeof(T)));
    if (!b.ok()) qFatal("%s", b.status().ToString().c_str());
    gpu_->CopyToDevice(b->data(), v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    T* p = b->as<T>();
    keep_.push_back(std::move(*b));
    return p;
  }
  template <typename T>
  std::vector<T> Down(const T* p, size_t n) {
    std::vector<T> v(n);
    gpu_->CopyToHost(v.data(), p, static_cast<int64_t>(n * sizeof(T)));
    return v;
  }
  Status Sync() { return gpu_->Synchronize(); }

 private slots:
  void initTestCase() {
    auto r = CreateBackend("scalar", BackendOptions{1});
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    ref_ = std::move(*r);
    auto g = CreateAnyBackend("cuda");
    QVERIFY2(g.ok(), g.status().ToString().c_str());
    gpu_ = std::move(*g);
    // A second backend with the long prefills over F16 caches on the tensor
    // cores (OCTET_CUDA_PREFILL_ATTENTION=tensor, opt-in), for attention().
    {
      const QByteArray before = qgetenv("OCTET_CUDA_PREFILL_ATTENTION");
      qputenv("OCTET_CUDA_PREFILL_ATTENTION", "tensor");
      auto t = CreateAnyBackend("cuda");
      if (before.isNull()) {
        qunsetenv("OCTET_CUDA_PREFILL_ATTENTION");
      } else {
        qputenv("OCTET_CUDA_PREFILL_ATTENTION", before);
      }
      QVERIFY2(t.ok(), t.status().ToString().c_str());
      gpu_tensor_ = std::move(*t);
    }
    QCOMPARE(gpu_->name(), std::string_view("cuda"));
    QVERIFY(gpu_->memory_kind() == MemoryKind::kDevice);
    // Every op of the forward pass, the mixture-of-experts grouped ops
    // included, which the engine takes at decode steps of up to 8 tokens.
    for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
      const Op o = static_cast<Op>(op);
      QVERIFY2(gpu_->supports(o, WeightFormat::kNvfp4), std::string(OpName(o)).c_str());
    }
    QCOMPARE(gpu_->grouped_experts_max_tokens(), int64_t{8});
  }
  void cleanup() {
    OK_OR_FAIL(Sync());
    keep_.clear();
  }

  // ---- matmul -----------------------------------------------------------------

  void matmul_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("layout");
    QTest::addColumn<bool>("accumulate");
    const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                    WeightFormat::kNvfp4};
    for (WeightFormat f : formats) {
      for (int m : {1, 3, 8, 9, 33, 130}) {
        for (auto [n, k] : {std::pair{37, 96}, std::pair{256, 512}, std::pair{129, 1040}}) {
          for (int layout : {0, 1}) {
            const bool acc = (m + n + layout) % 2 == 0;
            QTest::newRow((std::string(WeightFormatName(f)) + " m" + std::to_string(m) + " " +
                           std::to_string(n) + "x" + std::to_string(k) +
                           (layout ? " padded" : " tight") + (acc ? " acc" : ""))
                              .c_str())
                << static_cast<int>(f) << m << n << k << layout << acc;
          }
        }
      }
    }
    // Ragged k (BF16 only: NVFP4 rows are whole scale blocks in practice).
    QTest::newRow("bf16 m5 ragged k 100")
        << int(WeightFormat::kBF16) << 5 << 70 << 100 << 2 << false;
    QTest::newRow("bf16 m20 ragged k 100")
        << int(WeightFormat::kBF16) << 20 << 70 << 100 << 2 << true;
  }
  void matmul() {
    QFETCH(int, format);
    QFETCH(int, m);
    QFETCH(int, n);
    QFETCH(int, k);
    QFETCH(int, layout);
    QFETCH(bool, accumulate);
    std::mt19937 rng(static_cast<uint32_t>(format * 1000 + m * 7 + n + k));
    HostWeight w =
        MakeWeight(static_cast<WeightFormat>(format), n, k, static_cast<Layout>(layout), rng);
    const int64_t ldx = k + 5, ldy = n + 3;
    std::vector<float> x = RandomFloats(m * ldx, rng);
    std::vector<float> y0 = RandomFloats(m * ldy, rng);
    std::vector<float> want = y0;
    ref_->Matmul(x.data(), m, ldx, w.view, want.data(), ldy, accumulate);
    std::vector<Buffer> storage;
    auto dw = gpu_->PrepareWeight(w.view, &storage);
    QVERIFY2(dw.ok(), dw.status().ToString().c_str());
    float* dx = Up(x);
    float* dy = Up(y0);
    gpu_->Matmul(dx, m, ldx, *dw, dy, ldy, accumulate);
    std::vector<float> got = Down(dy, y0.size());
    OK_OR_FAIL(Sync());
    // Tolerance from Σ|x||w| per output.
    std::vector<float> ax(x.size()), tol(got.size(), 0.0f);
    for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
    std::vector<float> mag(m * ldy, 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const float aw = std::fabs(WeightAt(w.view, r, c));
        for (int64_t i = 0; i < m; ++i) mag[i * ldy + r] += ax[i * ldx + c] * aw;
      }
    }
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = 3e-5f * mag[i] + 1e-6f;
    const std::string bad = FirstMismatch(got, want, tol);
    QVERIFY2(bad.empty(), bad.c_str());
  }

  void matmulMulti() {
    std::mt19937 rng(5);
    for (int m : {2, 12}) {
      HostWeight a = MakeWeight(WeightFormat::kBF16, 64, 256, Layout::kTight, rng);
      HostWeight b = MakeWeight(WeightFormat::kNvfp4, 48, 256, Layout::kTight, rng);
      std::vector<float> x = RandomFloats(m * 256, rng);
      std::vector<float> ya(m * 64), yb(m * 50);
      const KernelBackend::MatmulOutput ro[2] = {{&a.view, ya.data(), 64},
                                                 {&b.view, yb.data(), 50}};
      ref_->MatmulMulti(x.data(), m, 256, ro, 2);
      std::vector<Buffer> storage;
      auto da = gpu_->PrepareWeight(a.view, &storage);
      auto db = gpu_->PrepareWeight(b.view, &storage);
      QVERIFY(da.ok() && db.ok());
      float* dx = Up(x);
      float* dya = Up(std::vector<float>(ya.size()));
      float* dyb = Up(std::vector<float>(yb.size()));
      const KernelBackend::MatmulOutput go[2] = {{&*da, dya, 64}, {&*db, dyb, 50}};
      gpu_->MatmulMulti(dx, m, 256, go, 2);
      std::vector<float> ga = Down(dya, ya.size()), gb = Down(dyb, yb.size());
      OK_OR_FAIL(Sync());
      const float tol = 3e-5f * 256 * 4.0f * 6.0f;
      for (size_t i = 0; i < ga.size(); ++i) QVERIFY(std::fabs(ga[i] - ya[i]) <= tol);
      for (int i = 0; i < m; ++i) {
        for (int c = 0; c < 48; ++c) {
          QVERIFY(std::fabs(gb[i * 50 + c] - yb[i * 50 + c]) <= tol);
        }
      }
    }
  }

  // The fused decode ops (on unless OCTET_CUDA_FUSED=off). MatmulMulti runs
  // its decode products as one grouped launch: each output is its own
  // Matmul bit for bit. NormMatmulMulti applies the RMSNorm as the GEMV
  // stages x: bit for bit RmsNorm then MatmulMulti on this backend (the
  // kernel repeats RmsNorm's reduction), and the scalar backend's within the
  // matmul tolerance; where it cannot fuse (12 rows: cuBLAS; mixed formats)
  // it makes the two calls, also checked.
  void normAndMatmulsInOneLaunch() {
    std::mt19937 rng(23);
    struct Case {
      std::vector<WeightFormat> formats;
      int64_t k;
    };
    const Case cases[] = {
        {{WeightFormat::kBF16, WeightFormat::kBF16, WeightFormat::kBF16}, 256},
        {{WeightFormat::kNvfp4, WeightFormat::kNvfp4, WeightFormat::kNvfp4}, 1056},  // 2 tiles
        {{WeightFormat::kBF16, WeightFormat::kBF16}, 100},                           // ragged k
        {{WeightFormat::kNvfp4}, 512},
        {{WeightFormat::kBF16, WeightFormat::kNvfp4}, 256},  // mixed: the two calls
    };
    const int64_t rows_of[] = {96, 40, 37};
    for (const Case& cs : cases) {
      const int n_out = static_cast<int>(cs.formats.size());
      std::vector<HostWeight> w;
      std::vector<Buffer> storage;
      std::vector<WeightMatrix> dw;
      for (int o = 0; o < n_out; ++o) {
        w.push_back(MakeWeight(cs.formats[o], rows_of[o], cs.k,
                               o == 1 ? Layout::kPadded : Layout::kTight, rng));
      }
      std::vector<std::vector<float>> abs_w(n_out);  // |W|, for the tolerances
      for (int o = 0; o < n_out; ++o) {
        auto d = gpu_->PrepareWeight(w[o].view, &storage);
        QVERIFY2(d.ok(), d.status().ToString().c_str());
        dw.push_back(*d);
        abs_w[o].resize(rows_of[o] * cs.k);
        for (int64_t r = 0; r < rows_of[o]; ++r) {
          for (int64_t c = 0; c < cs.k; ++c) {
            abs_w[o][r * cs.k + c] = std::fabs(WeightAt(w[o].view, r, c));
          }
        }
      }
      for (int m : {1, 2, 5, 8, 12}) {
        for (bool with_w : {true, false}) {
          const std::string what = std::string(WeightFormatName(cs.formats[0])) + " x" +
                                   std::to_string(n_out) + " k " + std::to_string(cs.k) + " m " +
                                   std::to_string(m) + (with_w ? "" : " no scale");
          const int64_t k = cs.k;
          std::vector<float> x = RandomFloats(m * k, rng, 2.0f), nw = RandomFloats(k, rng);
          float* dx = Up(x);
          float* dnw = with_w ? Up(nw) : nullptr;
          float* dxn = Up(std::vector<float>(m * k));
          std::vector<float*> fused(n_out), composed(n_out), single(n_out);
          std::vector<KernelBackend::MatmulOutput> fo(n_out), co(n_out);
          for (int o = 0; o < n_out; ++o) {
            const std::vector<float> y0(m * (rows_of[o] + 2), 7.0f);
            fused[o] = Up(y0);
            composed[o] = Up(y0);
            single[o] = Up(y0);
            fo[o] = {&dw[o], fused[o], rows_of[o] + 2};
            co[o] = {&dw[o], composed[o], rows_of[o] + 2};
          }
          gpu_->NormMatmulMulti(dx, m, k, dnw, 1e-6f, dxn, fo.data(), n_out);
          gpu_->RmsNorm(dx, dnw, 1e-6f, m, k, k, dxn);
          gpu_->MatmulMulti(dxn, m, k, co.data(), n_out);
          for (int o = 0; o < n_out; ++o) {
            gpu_->Matmul(dxn, m, k, dw[o], single[o], rows_of[o] + 2, false);
          }
          // The scalar backend's norm and products.
          std::vector<float> xn(m * k);
          ref_->RmsNorm(x.data(), with_w ? nw.data() : nullptr, 1e-6f, m, k, k, xn.data());
          for (int o = 0; o < n_out; ++o) {
            const int64_t n = rows_of[o], ldy = n + 2;
            const std::vector<float> got = Down(fused[o], m * ldy);
            const std::vector<float> comp = Down(composed[o], m * ldy);
            const std::vector<float> one = Down(single[o], m * ldy);
            OK_OR_FAIL(Sync());
            const std::vector<float> exact(got.size(), 0.0f);
            std::string bad = FirstMismatch(got, comp, exact);
            QVERIFY2(bad.empty(), (what + ", output " + std::to_string(o) +
                                   ": fused against RmsNorm + MatmulMulti: " + bad)
                                      .c_str());
            bad = FirstMismatch(comp, one, exact);
            QVERIFY2(bad.empty(), (what + ", output " + std::to_string(o) +
                                   ": MatmulMulti against Matmul: " + bad)
                                      .c_str());
            std::vector<float> want(m * ldy, 7.0f);
            ref_->Matmul(xn.data(), m, k, w[o].view, want.data(), ldy, false);
            std::vector<float> tol(want.size(), 0.0f);  // the padding: untouched
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t r = 0; r < n; ++r) {
                float mag = 0.0f;
                for (int64_t c = 0; c < k; ++c)
                  mag += std::fabs(xn[i * k + c]) * abs_w[o][r * k + c];
                tol[i * ldy + r] = 3e-5f * mag + 1e-6f;
              }
            }
            bad = FirstMismatch(got, want, tol);
            QVERIFY2(bad.empty(), (what + ", output " + std::to_string(o) +
                                   ": against the scalar backend: " + bad)
                                      .c_str());
          }
        }
      }
    }
  }

  // SiluMulMatmul (the dense MLP's down projection with its input): the GEMV
  // forms silu(gate) * up as it stages it, bit for bit SiluMul then Matmul
  // on this backend, accumulating or not, gate/up rows wider than k; the
  // scalar backend's within the matmul tolerance; 12 rows (cuBLAS): the two
  // calls.
  void siluMulInTheDownMatmul() {
    std::mt19937 rng(31);
    for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
      for (int64_t k : {int64_t{768}, int64_t{1056}}) {
        const int64_t n = 72, stride = k + 8, ldy = n + 1;
        HostWeight w = MakeWeight(f, n, k, Layout::kTight, rng);
        std::vector<Buffer> storage;
        auto dw = gpu_->PrepareWeight(w.view, &storage);
        QVERIFY2(dw.ok(), dw.status().ToString().c_str());
        for (int m : {1, 3, 8, 12}) {
          for (bool acc : {false, true}) {
            const std::string what = std::string(WeightFormatName(f)) + " k " + std::to_string(k) +
                                     " m " + std::to_string(m) + (acc ? " accumulate" : "");
            const std::vector<float> g = RandomFloats(m * stride, rng, 3.0f);
            const std::vector<float> u = RandomFloats(m * stride, rng);
            const std::vector<float> y0 = RandomFloats(m * ldy, rng);
            float* fused_g = Up(g);
            float* comp_g = Up(g);
            float* du = Up(u);
            float* fused_y = Up(y0);
            float* comp_y = Up(y0);
            gpu_->SiluMulMatmul(fused_g, du, m, stride, *dw, fused_y, ldy, acc);
            gpu_->SiluMul(comp_g, du, m, k, stride, comp_g);
            gpu_->Matmul(comp_g, m, stride, *dw, comp_y, ldy, acc);
            const std::vector<float> got = Down(fused_y, y0.size());
            const std::vector<float> comp = Down(comp_y, y0.size());
            OK_OR_FAIL(Sync());
            std::string bad = FirstMismatch(got, comp, std::vector<float>(got.size(), 0.0f));
            QVERIFY2(bad.empty(), (what + ": against SiluMul + Matmul: " + bad).c_str());
            std::vector<float> h = g, want = y0;
            ref_->SiluMul(h.data(), u.data(), m, k, stride, h.data());
            ref_->Matmul(h.data(), m, stride, w.view, want.data(), ldy, acc);
            std::vector<float> tol(want.size(), 0.0f);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t r = 0; r < n; ++r) {
                float mag = acc ? std::fabs(y0[i * ldy + r]) : 0.0f;
                for (int64_t c = 0; c < k; ++c) {
                  mag += std::fabs(h[i * stride + c] * WeightAt(w.view, r, c));
                }
                tol[i * ldy + r] = 3e-5f * mag + 1e-6f;
              }
            }
            bad = FirstMismatch(got, want, tol);
            QVERIFY2(bad.empty(), (what + ": against the scalar backend: " + bad).c_str());
          }
        }
      }
    }
  }

  // PrepareQk in one launch: bit for bit the RmsNorm, RopeHeads and
  // KvStoreBatch calls it replaces on this backend (KernelBackend's default),
  // q, k and every cache byte, for QK-norm before RoPE (Qwen3), after it
  // (nanochat) and none (Llama), partial rotary (GLM), heads narrower than
  // the block and as wide as 256, f32 and f16 caches, 1 to 3 sequences and
  // 17 (more than one launch's stores: they follow as KvStoreBatch); q and
  // k against the scalar backend within the norm and RoPE tolerances.
  void qkNormAndRopeInOneLaunch() {
    std::mt19937 rng(29);
    struct Shape {
      int64_t head_dim, rotary;
    };
    for (const Shape sh : {Shape{128, 128}, Shape{128, 64}, Shape{48, 48}, Shape{256, 256}}) {
      for (int norm = 0; norm < 3; ++norm) {
        for (int64_t rows : {1, 3, 7, 17}) {
          const int64_t qh = 6, kh = 2, hd = sh.head_dim;
          const std::string what = "head_dim " + std::to_string(hd) + " rotary " +
                                   std::to_string(sh.rotary) + " norm " +
                                   (norm == 0   ? "none"
                                    : norm == 1 ? "before"
                                                : "after") +
                                   " rows " + std::to_string(rows);
          std::vector<float> q = RandomFloats(rows * qh * hd, rng, 3.0f);
          std::vector<float> k = RandomFloats(rows * kh * hd, rng, 3.0f);
          std::vector<float> qn = RandomFloats(hd, rng), kn = RandomFloats(hd, rng);
          std::vector<int32_t> pos(rows);
          for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>(r * 977 % 40000);
          std::vector<float> inv(sh.rotary / 2);
          for (int64_t i = 0; i < sh.rotary / 2; ++i) {
            inv[i] = std::pow(1e6f, -2.0f * i / sh.rotary);
          }
          KernelBackend::QkPrepArgs a;
          a.q_heads = qh;
          a.k_heads = kh;
          a.rows = rows;
          a.head_dim = hd;
          a.rotary_dim = sh.rotary;
          a.qk_norm = norm != 0;
          a.norm_after_rope = norm == 2;
          a.eps = 1e-6f;
          KernelBackend::QkPrepArgs fused = a, composed = a, host = a;
          fused.q = Up(q);
          fused.k = Up(k);
          composed.q = Up(q);
          composed.k = Up(k);
          fused.positions = composed.positions = Up(pos);
          fused.inv_freq = composed.inv_freq = Up(inv);
          fused.q_norm = composed.q_norm = Up(qn);
          fused.k_norm = composed.k_norm = rows == 3 ? nullptr : Up(kn);  // no scale: once
          // The rows as sequences (17: one row each), each with its own
          // cache: f32 and f16 in turn, head-major, 64 positions, the new
          // rows from position 5 + 11 s.
          std::vector<int64_t> lengths = rows == 1   ? std::vector<int64_t>{1}
                                         : rows == 3 ? std::vector<int64_t>{1, 2}
                                         : rows == 7 ? std::vector<int64_t>{3, 1, 3}
                                                     : std::vector<int64_t>(17, 1);
          const int64_t kvd = kh * hd, max_pos = 64;
          const float* dv = Up(RandomFloats(rows * kvd, rng));
          struct Cache {
            std::vector<uint8_t*> fused, composed;  // k, v
            int64_t bytes;
          };
          std::vector<Cache> caches;
          std::vector<KvStoreArgs> fused_stores, composed_stores;
          int64_t row = 0;
          for (size_t si = 0; si < lengths.size(); ++si) {
            KvStoreArgs st;
            st.k = fused.k + row * kvd;
            st.v = dv + row * kvd;
            st.row_stride = kvd;
            st.n = lengths[si];
            st.n_kv_heads = kh;
            st.head_dim = hd;
            st.dtype = si % 2 == 0 ? KvDtype::kF32 : KvDtype::kF16;
            st.position_stride = hd;
            st.head_stride = max_pos * hd;
            st.first_pos = 5 + 11 * static_cast<int64_t>(si);
            Cache c;
            c.bytes = kh * max_pos * hd * (st.dtype == KvDtype::kF32 ? 4 : 2);
            const std::vector<uint8_t> zeros(c.bytes, 0);
            for (int i = 0; i < 2; ++i) {
              c.fused.push_back(Up(zeros));
              c.composed.push_back(Up(zeros));
            }
            KvStoreArgs cst = st;
            cst.k = composed.k + row * kvd;
            st.k_cache = c.fused[0];
            st.v_cache = c.fused[1];
            cst.k_cache = c.composed[0];
            cst.v_cache = c.composed[1];
            fused_stores.push_back(st);
            composed_stores.push_back(cst);
            caches.push_back(std::move(c));
            row += lengths[si];
          }
          fused.stores = fused_stores.data();
          fused.n_stores = static_cast<int64_t>(fused_stores.size());
          composed.stores = composed_stores.data();
          composed.n_stores = fused.n_stores;
          gpu_->PrepareQk(fused);
          gpu_->KernelBackend::PrepareQk(composed);
          const std::vector<float> gq = Down(fused.q, q.size()), gk = Down(fused.k, k.size());
          const std::vector<float> cq = Down(composed.q, q.size());
          const std::vector<float> ck = Down(composed.k, k.size());
          for (size_t si = 0; si < caches.size(); ++si) {
            for (int i = 0; i < 2; ++i) {
              const std::vector<uint8_t> f = Down(caches[si].fused[i], caches[si].bytes);
              const std::vector<uint8_t> c = Down(caches[si].composed[i], caches[si].bytes);
              QVERIFY2(f == c, (what + ": sequence " + std::to_string(si) + "'s " +
                                (i == 0 ? "key" : "value") + " cache differs from KvStoreBatch's")
                                   .c_str());
            }
          }
          OK_OR_FAIL(Sync());
          std::string bad = FirstMismatch(gq, cq, std::vector<float>(q.size(), 0.0f));
          QVERIFY2(bad.empty(), (what + ": q against the composed ops: " + bad).c_str());
          bad = FirstMismatch(gk, ck, std::vector<float>(k.size(), 0.0f));
          QVERIFY2(bad.empty(), (what + ": k against the composed ops: " + bad).c_str());
          std::vector<float> wq = q, wk = k;
          host.q = wq.data();
          host.k = wk.data();
          host.positions = pos.data();
          host.inv_freq = inv.data();
          host.q_norm = qn.data();
          host.k_norm = rows == 3 ? nullptr : kn.data();
          ref_->PrepareQk(host);
          const float tq = 2e-5f * MaxAbs(wq) + 1e-6f, tk = 2e-5f * MaxAbs(wk) + 1e-6f;
          bad = FirstMismatch(gq, wq, std::vector<float>(q.size(), tq));
          QVERIFY2(bad.empty(), (what + ": q against the scalar backend: " + bad).c_str());
          bad = FirstMismatch(gk, wk, std::vector<float>(k.size(), tk));
          QVERIFY2(bad.empty(), (what + ": k against the scalar backend: " + bad).c_str());
        }
      }
    }
  }

  // OCTET_CUDA_NVFP4_GEMV=int (read when a backend is made): NVFP4 decode
  // matmuls through the integer kernel, against the scalar backend: one
  // Matmul, a MatmulMulti of two NVFP4 matrices of one k (one packing for
  // both), and what the integer kernel does not take going to the others (k
  // not a multiple of 32: the float kernel; 12 rows: the GEMM).
  void nvfp4IntKernelThroughTheBackend() {
    setenv("OCTET_CUDA_NVFP4_GEMV", "int", 1);
    auto made = CreateAnyBackend("cuda");
    unsetenv("OCTET_CUDA_NVFP4_GEMV");
    QVERIFY2(made.ok(), made.status().ToString().c_str());
    std::unique_ptr<KernelBackend> gpu = std::move(*made);
    std::mt19937 rng(17);
    struct Case {
      int m, k;
    };
    for (const Case c : {Case{1, 512}, Case{3, 4096}, Case{8, 1024}, Case{5, 48}, Case{12, 512}}) {
      HostWeight a = MakeWeight(WeightFormat::kNvfp4, 40, c.k, Layout::kTight, rng);
      HostWeight b = MakeWeight(WeightFormat::kNvfp4, 72, c.k, Layout::kPadded, rng);
      std::vector<float> x = RandomFloats(c.m * c.k, rng);
      std::vector<float> ya(c.m * 40), yb(c.m * 72), ya1(c.m * 40);
      const KernelBackend::MatmulOutput ro[2] = {{&a.view, ya.data(), 40},
                                                 {&b.view, yb.data(), 72}};
      ref_->MatmulMulti(x.data(), c.m, c.k, ro, 2);
      std::vector<Buffer> storage;
      auto da = gpu->PrepareWeight(a.view, &storage);
      auto db = gpu->PrepareWeight(b.view, &storage);
      QVERIFY(da.ok() && db.ok());
      float* dx = Up(x);
      float* dya = Up(std::vector<float>(ya.size()));
      float* dyb = Up(std::vector<float>(yb.size()));
      float* dya1 = Up(std::vector<float>(ya.size()));
      OK_OR_FAIL(Sync());  // the uploads ran on the other backend's stream
      const KernelBackend::MatmulOutput go[2] = {{&*da, dya, 40}, {&*db, dyb, 72}};
      gpu->MatmulMulti(dx, c.m, c.k, go, 2);
      gpu->Matmul(dx, c.m, c.k, *da, dya1, 40, false);
      OK_OR_FAIL(gpu->Synchronize());
      const std::vector<float> ga = Down(dya, ya.size()), gb = Down(dyb, yb.size()),
                               ga1 = Down(dya1, ya.size());
      OK_OR_FAIL(Sync());
      // |x| <= ~4.5, |w| <= 6 x the largest scale code used (0x60: 2^5) x 0.0173.
      const float tol = 3e-5f * static_cast<float>(c.k) * 4.5f * 6.0f * 32.0f * 0.0173f;
      const std::string where = "m " + std::to_string(c.m) + " k " + std::to_string(c.k);
      for (size_t i = 0; i < ya.size(); ++i) {
        QVERIFY2(std::fabs(ga[i] - ya[i]) <= tol, ("MatmulMulti a, " + where).c_str());
        QVERIFY2(std::fabs(ga1[i] - ya[i]) <= tol, ("Matmul a, " + where).c_str());
      }
      for (size_t i = 0; i < yb.size(); ++i) {
        QVERIFY2(std::fabs(gb[i] - yb[i]) <= tol, ("MatmulMulti b, " + where).c_str());
      }
    }
  }

  // MatmulGrouped: a decode step's expert products in a few launches, each
  // product exactly (bit for bit) its own Matmul call: NVFP4 and BF16
  // experts with 1, 2, 3 and 8 rows, gate/up pairs sharing their rows, more
  // than one launch's 32 products of one kind, and products the grouped
  // kernel does not take (12 rows: cuBLAS; F32) in the same call. Then
  // MatmulScatterAdd over the same experts' down products (more than one
  // launch's 64; tokens named by several experts, one product unweighted)
  // against KernelBackend's composition (a Matmul and a ScatterAddRows per
  // product), also exactly, and a product of the wrong width refused.
  void groupedExpertOps() {
    std::mt19937 rng(23);
    const int64_t H = 256, F = 96, kTokens = 8;
    struct Expert {
      HostWeight gate, up, down;
      WeightMatrix dgate, dup, ddown;
    };
    std::vector<Buffer> storage;
    std::vector<Expert> experts(70);
    for (size_t e = 0; e < experts.size(); ++e) {
      const WeightFormat f = e % 5 == 4 ? WeightFormat::kBF16 : WeightFormat::kNvfp4;
      Expert& x = experts[e];
      x.gate = MakeWeight(f, F, H, Layout::kTight, rng);
      x.up = MakeWeight(f, F, H, e % 7 == 0 ? Layout::kPadded : Layout::kTight, rng);
      x.down = MakeWeight(f, H, F, Layout::kTight, rng);
      auto g = gpu_->PrepareWeight(x.gate.view, &storage);
      auto u = gpu_->PrepareWeight(x.up.view, &storage);
      auto d = gpu_->PrepareWeight(x.down.view, &storage);
      QVERIFY(g.ok() && u.ok() && d.ok());
      x.dgate = *g;
      x.dup = *u;
      x.ddown = *d;
    }
    HostWeight f32 = MakeWeight(WeightFormat::kF32, F, H, Layout::kTight, rng);
    auto df32 = gpu_->PrepareWeight(f32.view, &storage);
    QVERIFY(df32.ok());
    // Expert e sees rows(e) of the tokens' rows: mostly 1, some 2, 3 or 8, one 12.
    auto rows_of = [](size_t e) -> int64_t {
      return e == 5 ? 12 : e % 9 == 1 ? 2 : e % 11 == 2 ? 3 : e % 13 == 3 ? 8 : 1;
    };
    std::vector<float> x = RandomFloats(12 * H, rng);
    float* dx = Up(x);
    std::vector<KernelBackend::GroupedProduct> grouped;
    std::vector<float*> outs;
    std::vector<int64_t> sizes;
    for (size_t e = 0; e < experts.size(); ++e) {
      const int64_t m = rows_of(e);
      const float* xe = dx + (e % 4) * H;  // overlapping row windows, as experts share tokens
      for (const WeightMatrix* w : {&experts[e].dgate, &experts[e].dup}) {
        outs.push_back(Up(std::vector<float>(m * (F + 1), -1.0f)));
        sizes.push_back(m * (F + 1));
        grouped.push_back({e == 5 ? dx : xe, m, H, w, outs.back(), F + 1});
      }
    }
    outs.push_back(Up(std::vector<float>(2 * F, -1.0f)));
    sizes.push_back(2 * F);
    grouped.push_back({dx, 2, H, &*df32, outs.back(), F});
    gpu_->MatmulGrouped(grouped.data(), static_cast<int>(grouped.size()));
    OK_OR_FAIL(Sync());
    for (size_t i = 0; i < grouped.size(); ++i) {
      const KernelBackend::GroupedProduct& p = grouped[i];
      float* alone = Up(std::vector<float>(sizes[i], -1.0f));
      gpu_->Matmul(p.x, p.m, p.ldx, *p.w, alone, p.ldy, false);
      const std::vector<float> want = Down(alone, sizes[i]);
      const std::vector<float> got = Down(outs[i], sizes[i]);
      OK_OR_FAIL(Sync());
      QVERIFY2(got == want, ("product " + std::to_string(i) + ", " + std::to_string(p.m) +
                             " rows: not its Matmul's result")
                                .c_str());
    }
    // A product through the scalar backend too, so that equality above is
    // not two copies of one wrong answer.
    {
      const Expert& e = experts[1];  // NVFP4, 2 rows
      std::vector<float> want(2 * (F + 1), -1.0f);
      ref_->Matmul(x.data() + H, 2, H, e.gate.view, want.data(), F + 1, false);
      const std::vector<float> got = Down(outs[2], want.size());
      OK_OR_FAIL(Sync());
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t r = 0; r < F; ++r) {
          float mag = 0;  // the matmul test's bound: 3e-5 Σ|x||w| + 1e-6
          for (int64_t c = 0; c < H; ++c) {
            mag += std::fabs(x[(1 + i) * H + c] * WeightAt(e.gate.view, r, c));
          }
          const int64_t at = i * (F + 1) + r;
          QVERIFY2(std::fabs(got[at] - want[at]) <= 3e-5f * mag + 1e-6f,
                   ("scalar backend, row " + std::to_string(i) + " feature " + std::to_string(r))
                       .c_str());
        }
      }
    }

    // The down products: token rows per expert (some tokens in several),
    // router weights, the last product unweighted.
    std::vector<float> acts = RandomFloats(16 * F, rng);
    float* dacts = Up(acts);
    std::vector<KernelBackend::ScatterProduct> down;
    for (size_t e = 0; e < experts.size(); ++e) {
      const int64_t m = rows_of(e);
      std::vector<int64_t> to(m);
      std::vector<float> wts(m);
      for (int64_t j = 0; j < m; ++j) {
        to[j] = static_cast<int64_t>((e * 3 + j * 5) % kTokens);
        wts[j] = std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
      }
      const bool weighted = e + 1 < experts.size();
      down.push_back(
          {dacts + (e % 4) * F, m, F, &experts[e].ddown, Up(to), weighted ? Up(wts) : nullptr});
    }
    const int64_t ldo = H + 5;
    std::vector<float> out0 = RandomFloats(kTokens * ldo, rng);
    float* fused = Up(out0);
    float* composed = Up(out0);
    float* scratch = Up(std::vector<float>(12 * H));  // the composed op: the largest product's rows
    gpu_->MatmulScatterAdd(down.data(), static_cast<int>(down.size()), H, fused, ldo, scratch);
    gpu_->KernelBackend::MatmulScatterAdd(down.data(), static_cast<int>(down.size()), H, composed,
                                          ldo, scratch);
    const std::vector<float> got = Down(fused, out0.size());
    const std::vector<float> want = Down(composed, out0.size());
    OK_OR_FAIL(Sync());
    QVERIFY(got != out0);
    QVERIFY2(got == want, "MatmulScatterAdd differs from a Matmul and a ScatterAddRows each");

    // A product whose matrix has another width: refused, named, nothing added.
    KernelBackend::ScatterProduct wrong = down[0];
    wrong.w = &experts[0].dgate;  // F outputs, not H
    gpu_->MatmulScatterAdd(&wrong, 1, H, fused, ldo, scratch);
    const Status s = Sync();
    QVERIFY(!s.ok());
    QVERIFY2(s.message().find("product 0 has 96 output features, not 256") != std::string::npos,
             s.ToString().c_str());
    QVERIFY(Down(fused, out0.size()) == got);
    OK_OR_FAIL(Sync());
  }

  // PrepareExperts: declined (Unimplemented, the engine routes on the host)
  // unless OCTET_CUDA_MOE_ROUTING=device; then a table, and an expert of the
  // wrong shape refused by name. MoeDecode refuses a step without a table, of
  // more tokens than the decode kernels take, or of shapes other than the
  // table's, before queueing anything.
  // (test_cuda_engine's deviceRoutedExperts runs it against the fixtures.)
  void expertTablesAndTheirRefusals() {
    std::mt19937 rng(41);
    std::vector<Buffer> storage;
    std::vector<WeightMatrix> mats;
    for (int i = 0; i < 6; ++i) {  // 2 experts: gate, up [32, 64], down [64, 32]
      HostWeight h = MakeWeight(WeightFormat::kNvfp4, i % 3 == 2 ? 64 : 32, i % 3 == 2 ? 32 : 64,
                                Layout::kTight, rng);
      auto d = gpu_->PrepareWeight(h.view, &storage);
      QVERIFY(d.ok());
      mats.push_back(*d);
    }
    const WeightMatrix* gate[2] = {&mats[0], &mats[3]};
    const WeightMatrix* up[2] = {&mats[1], &mats[4]};
    const WeightMatrix* down[2] = {&mats[2], &mats[5]};
    // The switch is read when a backend is made: one made without it, one with.
    const char* outer = std::getenv("OCTET_CUDA_MOE_ROUTING");
    const std::string saved = outer ? outer : "";
    unsetenv("OCTET_CUDA_MOE_ROUTING");
    auto plain = CreateAnyBackend("cuda");
    setenv("OCTET_CUDA_MOE_ROUTING", "device", 1);
    auto made = CreateAnyBackend("cuda");
    if (outer) {
      setenv("OCTET_CUDA_MOE_ROUTING", saved.c_str(), 1);
    } else {
      unsetenv("OCTET_CUDA_MOE_ROUTING");
    }
    QVERIFY2(plain.ok(), plain.status().ToString().c_str());
    auto declined = (*plain)->PrepareExperts(gate, up, down, 2);
    QCOMPARE(declined.status().code(), StatusCode::kUnimplemented);
    QVERIFY2(made.ok(), made.status().ToString().c_str());
    std::unique_ptr<KernelBackend> gpu = std::move(*made);
    auto table = gpu->PrepareExperts(gate, up, down, 2);
    QVERIFY2(table.ok(), table.status().ToString().c_str());
    const WeightMatrix* wrong_down[2] = {&mats[2], &mats[4]};  // expert 1's down is [32, 64]
    auto wrong = gpu->PrepareExperts(gate, up, wrong_down, 2);
    QVERIFY(!wrong.ok());
    QVERIFY2(wrong.status().message().find("expert 1's down") != std::string::npos,
             wrong.status().ToString().c_str());
    KernelBackend::MoeDecodeArgs a{};
    a.tokens = 9;  // more than the decode kernels take
    a.route.num_experts = 2;
    a.route.experts_per_token = 1;
    a.experts = table->data();
    a.hidden = 64;
    a.width = 32;
    const Status too_many = gpu->MoeDecode(a);
    QVERIFY2(too_many.code() == StatusCode::kInvalidArgument &&
                 too_many.message().find("9 tokens") != std::string::npos,
             too_many.ToString().c_str());
    a.experts = nullptr;
    a.tokens = 1;
    QCOMPARE(gpu->MoeDecode(a).code(), StatusCode::kInvalidArgument);
    // A step whose shapes are not the table's is refused, naming both (the
    // kernels would write past a slot's rows).
    auto x = gpu->Allocate(64 * sizeof(float));
    auto logits = gpu->Allocate(2 * sizeof(float));
    auto out = gpu->Allocate(64 * sizeof(float));
    QVERIFY(x.ok() && logits.ok() && out.ok());
    a.experts = table->data();
    a.x = x->as<const float>();
    a.ldx = 64;
    a.router_logits = logits->as<const float>();
    a.out = out->as<float>();
    a.ldo = 64;
    a.width = 48;
    const Status wider = gpu->MoeDecode(a);
    QVERIFY2(wider.code() == StatusCode::kInvalidArgument &&
                 wider.message().find("2 experts of width 32 over hidden 64") != std::string::npos,
             wider.ToString().c_str());
    a.width = 32;
    a.route.num_experts = 3;
    QCOMPARE(gpu->MoeDecode(a).code(), StatusCode::kInvalidArgument);
    OK_OR_FAIL(gpu->Synchronize());
  }

  void gemm_data() {
    QTest::addColumn<bool>("ta");
    QTest::addColumn<bool>("tb");
    QTest::addColumn<float>("beta");
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 0.5f}) {
          QTest::newRow(
              (std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " beta " + std::to_string(beta))
                  .c_str())
              << ta << tb << beta;
        }
      }
    }
  }
  void gemm() {
    QFETCH(bool, ta);
    QFETCH(bool, tb);
    QFETCH(float, beta);
    std::mt19937 rng(ta * 2 + tb);
    const int64_t M = 33, N = 47, K = 65;
    const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 4;
    std::vector<float> A = RandomFloats((ta ? K : M) * lda, rng);
    std::vector<float> B = RandomFloats((tb ? N : K) * ldb, rng);
    std::vector<float> C = RandomFloats(M * ldc, rng);
    if (beta == 0.0f) C[0] = NAN;  // beta 0 ignores C, NaN included
    std::vector<float> want = C;
    ref_->Gemm(ta, tb, M, N, K, 1.5f, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
    float* dA = Up(A);
    float* dB = Up(B);
    float* dC = Up(C);
    gpu_->Gemm(ta, tb, M, N, K, 1.5f, dA, lda, dB, ldb, beta, dC, ldc);
    std::vector<float> got = Down(dC, C.size());
    OK_OR_FAIL(Sync());
    std::vector<float> tol(got.size(), 3e-5f * K * 1.5f * 4.0f + 1e-5f);
    const std::string bad = FirstMismatch(got, want, tol);
    QVERIFY2(bad.empty(), bad.c_str());
  }

  // ---- row and element-wise ops -------------------------------------------------

  void rowOps() {
    std::mt19937 rng(11);
    // RmsNorm: rows strided, with and without weight, in place.
    for (auto [rows, dim, stride] : {std::tuple{5, 1000, 1003}, std::tuple{24, 128, 128}}) {
      std::vector<float> x = RandomFloats(rows * stride, rng), w = RandomFloats(dim, rng);
      for (bool with_w : {true, false}) {
        std::vector<float> want = x;
        ref_->RmsNorm(want.data(), with_w ? w.data() : nullptr, 1e-6f, rows, dim, stride,
                      want.data());
        float* dx = Up(x);
        float* dw = Up(w);
        gpu_->RmsNorm(dx, with_w ? dw : nullptr, 1e-6f, rows, dim, stride, dx);
        std::vector<float> got = Down(dx, x.size());
        std::vector<float> tol(got.size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2e-5f * std::fabs(want[i]) + 1e-6f;
        QVERIFY2(FirstMismatch(got, want, tol).empty(), FirstMismatch(got, want, tol).c_str());
      }
    }
    // Rope: 3 heads of 64 (and a partial-rotary style 32-wide call), rows strided.
    for (int64_t hd : {64, 32}) {
      const int64_t rows = 7, heads = 3, stride = heads * 64 + 5;
      std::vector<float> x = RandomFloats(rows * stride, rng);
      std::vector<int32_t> pos = {0, 1, 5, 100, 4095, 17, 33000};
      std::vector<float> inv(hd / 2);
      for (int64_t i = 0; i < hd / 2; ++i) inv[i] = std::pow(1e6f, -2.0f * i / hd);
      std::vector<float> want = x;
      ref_->Rope(want.data(), rows, stride, heads, hd, pos.data(), inv.data());
      float* dx = Up(x);
      gpu_->Rope(dx, rows, stride, heads, hd, Up(pos), Up(inv));
      std::vector<float> got = Down(dx, x.size());
      std::vector<float> tol(got.size(), 0.0f);
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 4e-6f * 2 * MaxAbs(x) + 1e-7f;
      QVERIFY2(FirstMismatch(got, want, tol).empty(), FirstMismatch(got, want, tol).c_str());
    }
    // RopeHeads: 5 heads of 80 floats with the first 32 / 80 rotated, in one
    // call, against the scalar backend's (default: Rope once a head); the
    // unrotated tail of each head and the row's padding stay as they were.
    for (int64_t rotary : {32, 80}) {
      const int64_t rows = 6, heads = 5, head_stride = 80, stride = heads * head_stride + 3;
      std::vector<float> x = RandomFloats(rows * stride, rng);
      std::vector<int32_t> pos = {0, 3, 77, 4000, 12, 65000};
      std::vector<float> inv(rotary / 2);
      for (int64_t i = 0; i < rotary / 2; ++i) inv[i] = std::pow(1e4f, -2.0f * i / rotary);
      std::vector<float> want = x;
      ref_->RopeHeads(want.data(), rows, stride, heads, head_stride, rotary, pos.data(),
                      inv.data());
      float* dx = Up(x);
      gpu_->RopeHeads(dx, rows, stride, heads, head_stride, rotary, Up(pos), Up(inv));
      std::vector<float> got = Down(dx, x.size());
      std::vector<float> tol(got.size(), 0.0f);
      for (int64_t i = 0; i < static_cast<int64_t>(tol.size()); ++i) {
        const int64_t in_head = i % stride % head_stride;
        const bool rotated = i % stride < heads * head_stride && in_head < rotary;
        tol[i] = rotated ? 4e-6f * 2 * MaxAbs(x) + 1e-7f : 0.0f;  // untouched: exact
      }
      QVERIFY2(FirstMismatch(got, want, tol).empty(), FirstMismatch(got, want, tol).c_str());
    }
    // SiluMul strided, out aliasing gate; Softmax; SoftCap.
    {
      const int64_t rows = 3, n = 700, stride = 705;
      std::vector<float> g = RandomFloats(rows * stride, rng, 3.0f),
                         u = RandomFloats(rows * stride, rng);
      std::vector<float> want = g;
      ref_->SiluMul(want.data(), u.data(), rows, n, stride, want.data());
      float* dg = Up(g);
      gpu_->SiluMul(dg, Up(u), rows, n, stride, dg);
      std::vector<float> got = Down(dg, g.size());
      std::vector<float> tol(got.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2e-5f * std::fabs(want[i]) + 1e-6f;
      QVERIFY2(FirstMismatch(got, want, tol).empty(), FirstMismatch(got, want, tol).c_str());

      std::vector<float> s = RandomFloats(4 * 1001, rng, 5.0f), sw = s;
      ref_->Softmax(sw.data(), 4, 1001);
      float* ds = Up(s);
      gpu_->Softmax(ds, 4, 1001);
      got = Down(ds, s.size());
      tol.assign(got.size(), 0);
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2e-5f * std::fabs(sw[i]) + 1e-7f;
      QVERIFY2(FirstMismatch(got, sw, tol).empty(), FirstMismatch(got, sw, tol).c_str());

      std::vector<float> c = RandomFloats(999, rng, 40.0f), cw = c;
      ref_->SoftCap(cw.data(), 999, 15.0f);
      float* dc = Up(c);
      gpu_->SoftCap(dc, 999, 15.0f);
      got = Down(dc, c.size());
      tol.assign(got.size(), 0);
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2e-5f * std::fabs(cw[i]) + 1e-6f;
      QVERIFY2(FirstMismatch(got, cw, tol).empty(), FirstMismatch(got, cw, tol).c_str());
    }
    OK_OR_FAIL(Sync());
  }

  void exactOps() {
    std::mt19937 rng(13);
    const int64_t n = 10007;
    std::vector<float> a = RandomFloats(n, rng), b = RandomFloats(n, rng);
    // Add (out aliasing a), Relu2, Scale, Fill.
    std::vector<float> want(n);
    ref_->Add(a.data(), b.data(), n, want.data());
    float* da = Up(a);
    gpu_->Add(da, Up(b), n, da);
    QCOMPARE(Down(da, n), want);
    ref_->Relu2(want.data(), n);
    gpu_->Relu2(da, n);
    QCOMPARE(Down(da, n), want);
    ref_->Scale(want.data(), n, -1.25f);
    gpu_->Scale(da, n, -1.25f);
    QCOMPARE(Down(da, n), want);
    ref_->Fill(want.data(), 77, 3.5f);
    gpu_->Fill(da, 77, 3.5f);
    QCOMPARE(Down(da, n), want);
    // AddRowVector, strided.
    {
      const int64_t rows = 9, cols = 300, stride = 311;
      std::vector<float> x = RandomFloats(rows * stride, rng), v = RandomFloats(cols, rng);
      std::vector<float> w = x;
      ref_->AddRowVector(w.data(), rows, cols, stride, v.data());
      float* dx = Up(x);
      gpu_->AddRowVector(dx, rows, cols, stride, Up(v));
      QCOMPARE(Down(dx, x.size()), w);
    }
    // GatherRows and ScatterAddRows (a row named twice, weights and none).
    {
      const int64_t rows = 6, cols = 130, ldx = 133, ldo = 135;
      std::vector<float> x = RandomFloats(rows * ldx, rng);
      std::vector<int64_t> pick = {5, 0, 5, 2};
      std::vector<float> g(pick.size() * cols);
      ref_->GatherRows(x.data(), ldx, pick.data(), 4, cols, g.data());
      float* dg = Up(std::vector<float>(g.size()));
      gpu_->GatherRows(Up(x), ldx, Up(pick), 4, cols, dg);
      QCOMPARE(Down(dg, g.size()), g);
      std::vector<int64_t> to = {2, 0, 2, 4};
      std::vector<float> wts = {0.5f, -2.0f, 3.0f, 1.0f};
      for (bool weighted : {true, false}) {
        std::vector<float> out = RandomFloats(5 * ldo, rng), expect = out;
        ref_->ScatterAddRows(g.data(), cols, to.data(), weighted ? wts.data() : nullptr, 4, cols,
                             expect.data(), ldo);
        float* dout = Up(out);
        gpu_->ScatterAddRows(dg, cols, Up(to), weighted ? Up(wts) : nullptr, 4, cols, dout, ldo);
        QCOMPARE(Down(dout, out.size()), expect);
      }
    }
    // Embedding and EmbeddingShard in every format.
    for (WeightFormat f :
         {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kNvfp4}) {
      HostWeight t = MakeWeight(f, 50, 96, Layout::kTight, rng);
      std::vector<Buffer> storage;
      auto dt = gpu_->PrepareWeight(t.view, &storage);
      QVERIFY2(dt.ok(), dt.status().ToString().c_str());
      std::vector<int32_t> ids = {0, 49, 7, 7, 23};
      std::vector<float> want_e(ids.size() * 96);
      ref_->Embedding(t.view, ids.data(), 5, want_e.data());
      float* de = Up(std::vector<float>(want_e.size()));
      int32_t* dids = Up(ids);
      gpu_->Embedding(*dt, dids, 5, de);
      QCOMPARE(Down(de, want_e.size()), want_e);
      // Shard: the table is rows [20, 70) of a vocabulary.
      std::vector<int32_t> sids = {19, 20, 69, 70, 45};
      std::vector<float> want_s(sids.size() * 96);
      ref_->EmbeddingShard(t.view, 20, sids.data(), 5, want_s.data());
      float* ds = Up(RandomFloats(want_s.size(), rng));
      gpu_->EmbeddingShard(*dt, 20, Up(sids), 5, ds);
      QCOMPARE(Down(ds, want_s.size()), want_s);
    }
    // Argmax: ties go to the first, NaN never wins. TopK: descending, ties by index.
    {
      std::vector<float> v = RandomFloats(151936, rng);
      v[100] = 9.0f;
      v[90000] = 9.0f;
      v[5] = NAN;
      QCOMPARE(gpu_->Argmax(Up(v), int64_t(v.size())), ref_->Argmax(v.data(), v.size()));
      QCOMPARE(gpu_->Argmax(Up(v), int64_t(v.size())), int64_t{100});
      std::vector<int32_t> wi(40), gi(40);
      std::vector<float> wv(40), gv(40);
      ref_->TopK(v.data(), v.size(), 40, wi.data(), wv.data());
      int32_t* di = Up(gi);
      float* dv = Up(gv);
      gpu_->TopK(Up(v), v.size(), 40, di, dv);
      QCOMPARE(Down(di, 40), wi);
      QCOMPARE(Down(dv, 40), wv);
    }
    OK_OR_FAIL(Sync());
  }

  void kvStore() {
    std::mt19937 rng(17);
    for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16}) {
      for (bool head_major : {true, false}) {
        const int64_t kvh = 3, hd = 40, cap = 20, n = 6, row = kvh * hd + 4;
        KvStoreArgs a;
        std::vector<float> k = RandomFloats(n * row, rng, 100.0f), v = RandomFloats(n * row, rng);
        k[3] = 1e5f;  // saturates in f16
        k[4] = -7e4f;
        const int64_t bytes = cap * kvh * hd * KvDtypeBytes(dt);
        std::vector<uint8_t> kc(bytes, 0), vc(bytes, 0);
        a.row_stride = row;
        a.n = n;
        a.n_kv_heads = kvh;
        a.head_dim = hd;
        a.dtype = dt;
        a.position_stride = head_major ? hd : kvh * hd;
        a.head_stride = head_major ? cap * hd : hd;
        a.first_pos = 11;
        KvStoreArgs r = a;
        r.k = k.data();
        r.v = v.data();
        r.k_cache = kc.data();
        r.v_cache = vc.data();
        ref_->KvStore(r);
        KvStoreArgs g = a;
        g.k = Up(k);
        g.v = Up(v);
        uint8_t* dk = Up(std::vector<uint8_t>(bytes, 0));
        uint8_t* dv = Up(std::vector<uint8_t>(bytes, 0));
        g.k_cache = dk;
        g.v_cache = dv;
        gpu_->KvStore(g);
        QCOMPARE(Down(dk, bytes), kc);
        QCOMPARE(Down(dv, bytes), vc);
      }
    }
    OK_OR_FAIL(Sync());
  }

  // KvStoreBatch: 19 sequences (two launches of up to 16), each its own
  // cache, length (one with none) and first position, in one call, against
  // the scalar backend's KvStore of each; both dtypes.
  void kvStoreBatch() {
    std::mt19937 rng(23);
    for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16}) {
      const int64_t kvh = 2, hd = 72, cap = 24, row = kvh * hd + 8, seqs = 19;
      const int64_t bytes = cap * kvh * hd * KvDtypeBytes(dt);
      std::vector<KvStoreArgs> ref(seqs), dev(seqs);
      std::vector<std::vector<float>> ks(seqs), vs(seqs);
      std::vector<std::vector<uint8_t>> kc(seqs, std::vector<uint8_t>(bytes, 0)), vc = kc;
      std::vector<uint8_t*> dk(seqs), dv(seqs);
      for (int64_t s = 0; s < seqs; ++s) {
        const int64_t n = s == 5 ? 0 : 1 + static_cast<int64_t>(rng() % 7);
        ks[s] = RandomFloats(std::max<int64_t>(n, 1) * row, rng, 100.0f);
        vs[s] = RandomFloats(std::max<int64_t>(n, 1) * row, rng);
        ks[s][0] = 1e5f;  // saturates in f16
        KvStoreArgs a;
        a.row_stride = row;
        a.n = n;
        a.n_kv_heads = kvh;
        a.head_dim = hd;
        a.dtype = dt;
        a.position_stride = s % 2 ? hd : kvh * hd;  // head-major and position-major
        a.head_stride = s % 2 ? cap * hd : hd;
        a.first_pos = static_cast<int64_t>(rng() % (cap - 7));
        ref[s] = a;
        ref[s].k = ks[s].data();
        ref[s].v = vs[s].data();
        ref[s].k_cache = kc[s].data();
        ref[s].v_cache = vc[s].data();
        ref_->KvStore(ref[s]);
        dev[s] = a;
        dev[s].k = Up(ks[s]);
        dev[s].v = Up(vs[s]);
        dk[s] = Up(std::vector<uint8_t>(bytes, 0));
        dv[s] = Up(std::vector<uint8_t>(bytes, 0));
        dev[s].k_cache = dk[s];
        dev[s].v_cache = dv[s];
      }
      gpu_->KvStoreBatch(dev.data(), seqs);
      for (int64_t s = 0; s < seqs; ++s) {
        QVERIFY2(Down(dk[s], bytes) == kc[s], ("keys of sequence " + std::to_string(s)).c_str());
        QVERIFY2(Down(dv[s], bytes) == vc[s], ("values of sequence " + std::to_string(s)).c_str());
      }
    }
    OK_OR_FAIL(Sync());
  }

  // ---- attention --------------------------------------------------------------------

  void attention_data() {
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("kv_heads");
    QTest::addColumn<int>("head_dim");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<int>("layout");    // 0 head-major, 1 position-major, 2 packed (strides 0)
    QTest::addColumn<QString>("seqs");  // "n_tokens@start,..."
    QTest::addColumn<bool>("n_keys");   // n_keys given: prefills of 32+ queries through GEMMs
    struct Case {
      int h, kv, d, layout;
      const char* seqs;
    };
    const Case cases[] = {
        {8, 2, 64, 0, "17@0,1@40,5@3"},            // prefill + decode mixed, group 4
        {4, 4, 128, 1, "1@0,1@700,1@99"},          // decode, group 1, long context (splits)
        {32, 8, 128, 0, "1@1500,1@2,1@300,1@77"},  // decode batch, group 4
        {6, 1, 80, 2, "33@0,2@70"},                // group 6 (a block of 8, two idle), head_dim 80
        {16, 2, 256, 0, "70@0"},                   // group 8, head_dim 256, prefill over chunks
        {2, 1, 40, 1, "130@5"},                    // prefill after a cached prefix
        // Long prefills: with n_keys given, GemmAttention, in tiles of 1024
        // queries (two here), and after 1030 cached positions; over F16 caches
        // with head_dim 64, 80, 96 and 128 also on the tensor cores.
        {4, 2, 64, 0, "1100@0,3@9"},
        {4, 1, 128, 2, "40@1030"},
        // Position-major with its strides, head_dim 96, after a cached prefix.
        {8, 4, 96, 1, "48@16"},
        // The largest table passed in the kernels' parameters (16 query
        // tokens) and the smallest uploaded one (17 one-token sequences).
        {8, 2, 64, 0, "16@0"},
        {4, 2, 64, 2,
         "1@0,1@5,1@9,1@30,1@2,1@64,1@100,1@1,1@7,1@11,1@13,1@17,1@19,1@23,1@29,1@31,1@200"},
    };
    for (const Case& c : cases) {
      for (int dtype : {0, 1}) {
        for (bool n_keys : {false, true}) {
          QTest::newRow((std::to_string(c.h) + "/" + std::to_string(c.kv) + " d" +
                         std::to_string(c.d) + " layout" + std::to_string(c.layout) + " " +
                         (dtype ? "f16 " : "f32 ") + c.seqs + (n_keys ? " n_keys" : ""))
                            .c_str())
              << c.h << c.kv << c.d << dtype << c.layout << QString(c.seqs) << n_keys;
        }
      }
    }
  }
  void attention() {
    QFETCH(int, heads);
    QFETCH(int, kv_heads);
    QFETCH(int, head_dim);
    QFETCH(int, dtype);
    QFETCH(int, layout);
    QFETCH(QString, seqs);
    QFETCH(bool, n_keys);
    std::mt19937 rng(heads * 31 + head_dim + dtype);
    struct Seq {
      int64_t n, start;
    };
    std::vector<Seq> ss;
    for (const QString& part : seqs.split(',')) {
      const QStringList p = part.split('@');
      ss.push_back({p[0].toLongLong(), p[1].toLongLong()});
    }
    const KvDtype kd = dtype ? KvDtype::kF16 : KvDtype::kF32;
    const int64_t hd = head_dim, qd = heads * hd;
    int64_t tokens = 0;
    for (const Seq& s : ss) tokens += s.n;
    const int64_t q_stride = qd + 8, o_stride = qd + 3;
    std::vector<float> q = RandomFloats(tokens * q_stride, rng);
    std::vector<std::vector<uint8_t>> kc(ss.size()), vc(ss.size());
    std::vector<std::vector<int32_t>> pos(ss.size());
    std::vector<AttentionSequence> host_seqs(ss.size()), dev_seqs(ss.size());
    float vmax = 0;
    int64_t first = 0;
    for (size_t i = 0; i < ss.size(); ++i) {
      const int64_t cap = ss[i].start + ss[i].n + 3;
      const int64_t elems = cap * kv_heads * hd;
      std::vector<float> kf = RandomFloats(elems, rng), vf = RandomFloats(elems, rng);
      vmax = std::max(vmax, MaxAbs(vf));
      const int64_t eb = KvDtypeBytes(kd);
      kc[i].resize(elems * eb);
      vc[i].resize(elems * eb);
      for (int64_t e = 0; e < elems; ++e) {
        if (kd == KvDtype::kF16) {
          const uint16_t kh = F32ToF16(kf[e]), vh = F32ToF16(vf[e]);
          std::memcpy(&kc[i][e * 2], &kh, 2);
          std::memcpy(&vc[i][e * 2], &vh, 2);
        } else {
          std::memcpy(&kc[i][e * 4], &kf[e], 4);
          std::memcpy(&vc[i][e * 4], &vf[e], 4);
        }
      }
      for (int64_t t = 0; t < ss[i].n; ++t) pos[i].push_back(static_cast<int32_t>(ss[i].start + t));
      AttentionSequence& h = host_seqs[i];
      h.first_token = first;
      h.n_tokens = ss[i].n;
      h.k_cache = kc[i].data();
      h.v_cache = vc[i].data();
      h.positions = pos[i].data();
      h.kv_dtype = kd;
      h.position_stride = layout == 0 ? hd : (layout == 1 ? kv_heads * hd : 0);
      h.head_stride = layout == 0 ? cap * hd : (layout == 1 ? hd : 0);
      AttentionSequence& d = dev_seqs[i];
      d = h;
      d.k_cache = Up(kc[i]);
      d.v_cache = Up(vc[i]);
      d.positions = Up(pos[i]);
      if (n_keys) d.n_keys = ss[i].start + ss[i].n;
      first += ss[i].n;
    }
    AttentionArgs a;
    a.q_row_stride = q_stride;
    a.out_row_stride = o_stride;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.n_sequences = static_cast<int64_t>(ss.size());
    std::vector<float> want(tokens * o_stride, 0.0f);
    AttentionArgs r = a;
    r.q = q.data();
    r.out = want.data();
    r.sequences = host_seqs.data();
    ref_->Attention(r);
    AttentionArgs g = a;
    g.q = Up(q);
    float* dout = Up(std::vector<float>(want.size(), 0.0f));
    g.out = dout;
    g.sequences = dev_seqs.data();
    gpu_->Attention(g);
    std::vector<float> got = Down(dout, want.size());
    OK_OR_FAIL(Sync());
    std::vector<float> tol(got.size(), 3e-5f * vmax);
    const std::string bad = FirstMismatch(got, want, tol);
    QVERIFY2(bad.empty(), bad.c_str());

    // The same on the tensor cores where that path applies: an F16 cache, a
    // sequence of 32+ queries with n_keys, head_dim a multiple of 16 up to
    // 128 (the others go as above).
    bool long_prefill = false;
    for (const Seq& sq : ss) long_prefill |= sq.n >= 32;
    if (kd != KvDtype::kF16 || !n_keys || !long_prefill || hd % 16 != 0 || hd > 128) return;
    float* tout = Up(std::vector<float>(want.size(), 0.0f));
    OK_OR_FAIL(Sync());  // the inputs, uploaded on gpu_'s stream
    AttentionArgs t = g;
    t.out = tout;
    gpu_tensor_->Attention(t);
    OK_OR_FAIL(gpu_tensor_->Synchronize());
    std::vector<float> got_tensor = Down(tout, want.size());
    OK_OR_FAIL(Sync());
    const std::string bad_tensor = FirstMismatch(got_tensor, want, tol);
    QVERIFY2(bad_tensor.empty(), ("tensor cores: " + bad_tensor).c_str());
    // It ran: its products are exact where the GEMMs' float sums round, so
    // the two differ in some last bit.
    QVERIFY(std::memcmp(got_tensor.data(), got.data(), got.size() * sizeof(float)) != 0);
  }

  // The load-time memory check's figure: the device's free memory (or, on
  // unified memory, MemAvailable where that is larger), named; more than
  // nothing, and no more than the device holds unless it is the host's.
  void availableMemoryNamesItsFigure() {
    auto budget = gpu_->AvailableMemory();
    QVERIFY2(budget.ok(), budget.status().ToString().c_str());
    QVERIFY(budget->bytes > 0);
    const bool driver = budget->source.find("cudaMemGetInfo") != std::string::npos;
    const bool host = budget->source.rfind("MemAvailable", 0) == 0;
    QVERIFY2(driver != host, budget->source.c_str());
    const cuda::CudaProbeResult probe = cuda::CudaProbe();
    QVERIFY(probe.usable && !probe.devices.empty());
    if (driver) QVERIFY(budget->bytes <= probe.devices[0].total_memory_bytes);
    if (host) QVERIFY(probe.devices[0].integrated);
  }

  // ---- errors ----------------------------------------------------------------------

  // A refused argument is reported by the next Synchronize, once.
  void refusedArgumentsReachSynchronize() {
    gpu_->Fill(nullptr, 10, 1.0f);
    const Status s = gpu_->Synchronize();
    QVERIFY(!s.ok());
    QVERIFY2(s.message().find("Fill") != std::string::npos, s.ToString().c_str());
    QVERIFY(gpu_->Synchronize().ok());
    auto big = gpu_->Allocate(int64_t{1} << 50);
    QVERIFY(!big.ok());
    QCOMPARE(big.status().code(), StatusCode::kResourceExhausted);
  }
};

// Not QTEST_MAIN: without a usable device the program must say so and exit 77
// before Qt runs any test function.
int main(int argc, char** argv) {
  if (!octet::test::CudaDeviceOrSkip()) return 77;
  TestCudaBackend t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_cuda_backend.moc"
