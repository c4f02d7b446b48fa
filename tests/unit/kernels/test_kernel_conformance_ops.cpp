// Kernel conformance (see test_kernel_conformance.cpp): GEMM in every
// transpose, the elementwise ops, RoPE, attention, embedding, argmax and top-k,
// buffers and copies, and the forward pass's small ops, on every CPU backend
// against references written here or the scalar backend.
#include <QtTest>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "conformance_reference.h"
#include "kernel_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"
#include "test_kernel_conformance.h"

using namespace octet::kernels;
using namespace octet::kernels::testing;

void TestKernelConformance::gemmAllTransposes() {
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

void TestKernelConformance::elementwiseOpsMatchScalar() {
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

void TestKernelConformance::ropeMatchesFormula() {
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
          QVERIFY(std::fabs(y[r * stride + h * hd + i] - (a * std::cos(ang) - b * std::sin(ang))) <
                  1e-5);
          QVERIFY(std::fabs(y[r * stride + h * hd + i + hd / 2] -
                            (b * std::cos(ang) + a * std::sin(ang))) < 1e-5);
        }
      }
    }
  }
}

// RopeHeads (partial rotary: the first rotary_dim features of heads lying
// head_stride apart) on every backend equals the interface's definition, one
// Rope call a head, bit for bit; the heads' tails and the row's padding stay
// as they were.
void TestKernelConformance::ropeHeadsEqualsRopeOnEachHead() {
  std::mt19937 rng(15);
  for (auto& backend : AllBackends(2)) {
    for (int64_t rotary : {8, 24}) {
      const int64_t rows = 40, heads = 5, head_stride = 24, stride = heads * head_stride + 3;
      std::vector<float> x = RandomFloats(rows * stride, rng);
      std::vector<int32_t> pos(rows);
      for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>(r * 37 % 5000);
      std::vector<float> inv(rotary / 2);
      for (int64_t i = 0; i < rotary / 2; ++i) inv[i] = std::pow(1e4f, -2.0f * i / rotary);
      std::vector<float> one_call = x, per_head = x;
      backend->RopeHeads(one_call.data(), rows, stride, heads, head_stride, rotary, pos.data(),
                         inv.data());
      backend->KernelBackend::RopeHeads(per_head.data(), rows, stride, heads, head_stride, rotary,
                                        pos.data(), inv.data());
      std::string why;
      QVERIFY2(CloseF(one_call, per_head, 0, 0, &why),
               (std::string(backend->name()) + " rotary " + std::to_string(rotary) + ": " + why)
                   .c_str());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < stride; ++c) {
          const bool rotated = c < heads * head_stride && c % head_stride < rotary;
          if (!rotated) QCOMPARE(one_call[r * stride + c], x[r * stride + c]);
        }
      }
      if (rotary < head_stride) QVERIFY(one_call != x);  // something rotated
    }
  }
}

// The CPU backends keep RopeHeads' angles by position (a table grown as
// positions come, for the inv_freq last given): rows at positions it holds get
// the bits of the same rows with their angles computed for the call (a call
// with a position past the table's reach computes every row's), positions
// again after a larger one too, and another inv_freq (another model on the
// backend) gets its own angles, not the first one's.
void TestKernelConformance::ropeAnglesKeptByPosition() {
  std::mt19937 rng(16);
  for (auto& backend : AllBackends(2)) {
    const int64_t heads = 2, hd = 64, stride = heads * hd;
    const std::vector<int32_t> kept = {3, 700, 5000, 2}, computed = {3, 700, 5000, 2, 1 << 28};
    const std::vector<float> x = RandomFloats(5 * stride, rng);
    for (float base : {10000.0f, 500000.0f}) {
      std::vector<float> inv(hd / 2);
      for (int64_t i = 0; i < hd / 2; ++i) inv[i] = std::pow(base, -2.0f * i / hd);
      std::vector<float> a = x, b = x;
      // One row a call: the table grows for 3, 700 and 5000; 2 is in it.
      for (int64_t r = 0; r < 4; ++r) {
        backend->RopeHeads(a.data() + r * stride, 1, stride, heads, hd, hd, &kept[r], inv.data());
      }
      backend->RopeHeads(b.data(), 5, stride, heads, hd, hd, computed.data(), inv.data());
      a.resize(4 * stride);
      b.resize(4 * stride);
      std::string why;
      QVERIFY2(
          CloseF(a, b, 0, 0, &why),
          (std::string(backend->name()) + " base " + std::to_string(base) + ": " + why).c_str());
      // And against the formula (not the other base's angles).
      const float ang = float(kept[1]) * inv[5];
      const double want = double(x[stride + 5]) * std::cos(double(ang)) -
                          double(x[stride + 5 + hd / 2]) * std::sin(double(ang));
      QVERIFY2(std::fabs(a[stride + 5] - want) < 1e-4, backend->name().data());
    }
  }
}

void TestKernelConformance::attentionMatchesNaive() {
  std::mt19937 rng(6);
  struct Shape {
    int64_t heads, kv, hd, cap;
    int32_t decode_pos;
  };
  // Odd sizes, a 128 + 8-column head (the AVX2 64-column value blocks and
  // their tail) and a Qwen3 head of 128 (the AVX-512 path), over a
  // 100-position cache.
  // Heads of 64 with groups of 4 and 1 (AVX-512's prefill tiles take 64 and
  // 128), and of 128 with groups of 1 (AVX-512's decode rows: the AVX2 kernel).
  const Shape shapes[] = {{6, 2, 20, 40, 12},   {4, 2, 136, 120, 100}, {4, 2, 128, 120, 100},
                          {8, 2, 64, 120, 100}, {2, 2, 64, 120, 90},   {3, 3, 128, 120, 77}};
  // Each cache as float and as IEEE half (an F16 KV cache: the reference
  // reads the half values widened, which is exact), position-major and
  // head-major (the engine's layout: explicit strides).
  // The first sequence prefills 5 tokens (rows together through
  // attend_causal where the table has it, else a row at a time) or 37
  // (16-row tiles, the last one cut short).
  for (int64_t n1 : {5, 37})
    for (bool head_major : {false, true})
      for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16})
        for (const Shape& sh : shapes)
          for (auto& backend : AllBackends(2)) {
            const int64_t heads = sh.heads, kv = sh.kv, hd = sh.hd, cap = sh.cap;
            // Two sequences: one prefilling n1 tokens at positions 3.., one decoding.
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
                  for (int64_t i = 0; i < hd; ++i)
                    out[(g * cap + p) * hd + i] = v[(p * kv + g) * hd + i];
              return out;
            };
            const std::vector<float> k1a = arrange(k1), v1a = arrange(v1), k2a = arrange(k2),
                                     v2a = arrange(v2);
            const std::vector<uint16_t> k1ha = arrange(k1h), v1ha = arrange(v1h),
                                        k2ha = arrange(k2h), v2ha = arrange(v2h);
            auto cache = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) {
              return dtype == KvDtype::kF16 ? static_cast<const void*>(h.data())
                                            : static_cast<const void*>(f.data());
            };
            const int64_t pos_stride = head_major ? hd : 0, head_stride = head_major ? cap * hd : 0;
            std::vector<int32_t> p1(n1), p2 = {sh.decode_pos};
            for (int64_t i = 0; i < n1; ++i) p1[i] = static_cast<int32_t>(3 + i);
            const int64_t tokens = n1 + 1, qs = heads * hd + 3, os = heads * hd + 1;
            std::vector<float> q = RandomFloats(tokens * qs, rng);
            std::vector<float> out(tokens * os, 0.0f);
            AttentionSequence seqs[2] = {{0, n1, cache(k1a, k1ha), cache(v1a, v1ha), p1.data(),
                                          dtype, pos_stride, head_stride},
                                         {n1, 1, cache(k2a, k2ha), cache(v2a, v2ha), p2.data(),
                                          dtype, pos_stride, head_stride}};
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
              const bool first = t < n1;
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

namespace {

// One shape of batchInvariantAttentionKeepsEachRowsBits on every CPU backend.
void BatchInvariantAttentionShape(int64_t heads, int64_t kv, int64_t hd, int64_t n,
                                  int64_t first_pos, KvDtype dtype) {
  std::mt19937 rng(44 + heads * 7 + hd + n + first_pos);
  const int64_t cap = first_pos + n;
  std::vector<float> k = RandomFloats(kv * cap * hd, rng), v = RandomFloats(kv * cap * hd, rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = F32ToF16(k[i]);
    v16[i] = F32ToF16(v[i]);
  }
  std::vector<float> q = RandomFloats(n * heads * hd, rng);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first_pos + i);
  const std::string shape = std::to_string(heads) + ":" + std::to_string(kv) + " heads of " +
                            std::to_string(hd) + ", " + std::to_string(n) + " rows from " +
                            std::to_string(first_pos) +
                            (dtype == KvDtype::kF16 ? ", f16 KV" : ", f32 KV");
  for (const auto& info : ProbeBackends()) {
    if (!info.available) continue;
    auto b = CreateBackend(info.name, {.threads = 2});
    QVERIFY2(b.ok() && (*b)->set_batch_invariant(true), info.name.c_str());
    auto run = [&](int64_t first, int64_t rows, float* out) {
      // Rows [first, first + rows) of q, head-major cache.
      const bool f16 = dtype == KvDtype::kF16;
      AttentionSequence seq{0,
                            rows,
                            f16 ? static_cast<const void*>(k16.data()) : k.data(),
                            f16 ? static_cast<const void*>(v16.data()) : v.data(),
                            pos.data() + first,
                            dtype,
                            hd,
                            cap * hd};
      AttentionArgs a;
      a.q = q.data() + first * heads * hd;
      a.q_row_stride = heads * hd;
      a.out = out;
      a.out_row_stride = heads * hd;
      a.n_heads = heads;
      a.n_kv_heads = kv;
      a.head_dim = hd;
      a.scale = 0.0884f;
      a.sequences = &seq;
      a.n_sequences = 1;
      (*b)->Attention(a);
    };
    std::vector<float> all(n * heads * hd), alone(n * heads * hd);
    run(0, n, all.data());
    for (int64_t i = 0; i < n; ++i) run(i, 1, alone.data() + i * heads * hd);
    QVERIFY2(std::memcmp(all.data(), alone.data(), all.size() * 4) == 0,
             (info.name + ": " + shape).c_str());
  }
}

}  // namespace

// A batch-invariant backend (speculative verify steps) gives each row of a
// many-row attention call the bits that row gets alone: the prefill tiles
// (attend_rows) sum in another order, so they stay out of such steps, and
// the rows taken together (attend_causal: a verify step's rows sharing their
// K and V reads, two query vectors at a time) must each sum as one alone.
// Shapes: Qwen3's heads of 128 in groups of 2, nanochat's 64 in groups of 1
// (rows paired), groups of 3 (pairs across rows) and of 4; a first position
// at each remainder mod 4 (where a row's 4-key passes end); 37 rows (runs of
// 8 and a rest) and a verify step's 5.
void TestKernelConformance::batchInvariantAttentionKeepsEachRowsBits() {
  struct Shape {
    int64_t heads, kv, hd, n, first_pos;
  };
  for (const Shape sh : {Shape{4, 2, 128, 37, 20}, Shape{2, 2, 64, 5, 97}, Shape{2, 2, 64, 37, 6},
                         Shape{6, 2, 64, 5, 99}, Shape{8, 2, 64, 7, 100}, Shape{2, 1, 128, 5, 3},
                         Shape{3, 3, 40, 5, 9}, Shape{2, 2, 96, 6, 1}}) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
      BatchInvariantAttentionShape(sh.heads, sh.kv, sh.hd, sh.n, sh.first_pos, dtype);
      if (QTest::currentTestFailed()) return;
    }
  }
}

void TestKernelConformance::embeddingArgmaxTopK() {
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
void TestKernelConformance::buffersAndCopies() {
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
void TestKernelConformance::forwardPassSmallOps() {
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
    // Relu2 bit for bit, the vector body and every table's tail: NaN, -0
    // and -inf give +0, +inf stays, a square that underflows is +0.
    {
      const float inf = std::numeric_limits<float>::infinity();
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> r = RandomFloats(37, rng, 4.0f);
      const std::vector<std::pair<int, float>> special = {{0, nan},  {1, -0.0f},  {2, -inf},
                                                          {3, inf},  {4, 1e-30f}, {17, -1e-30f},
                                                          {35, nan}, {36, -0.0f}};
      for (auto [i, v] : special) r[i] = v;
      for (int64_t n : {int64_t{37}, int64_t{36}, int64_t{33}}) {
        std::vector<float> got = r;
        backend->Relu2(got.data(), n);
        for (int64_t i = 0; i < 37; ++i) {
          const float want = i >= n ? r[i] : (r[i] > 0.0f ? r[i] * r[i] : 0.0f);
          QCOMPARE(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want));
        }
      }
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
void TestKernelConformance::argmaxIsTheFirstLargestOnLongRows() {
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

void TestKernelConformance::unknownBackendIsAnError() {
  auto b = CreateBackend("tpu");
  QVERIFY(!b.ok());
  QVERIFY(b.status().message().find("tpu") != std::string::npos);
  auto a = CreateBackend("auto");
  QVERIFY(a.ok());
}
