// Standalone (no Qt): every op of every non-scalar backend against the scalar
// backend, for running the NEON kernels under qemu-aarch64 (run_under_qemu.sh).
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"
using namespace octet::kernels;
static int fails = 0, checks = 0;
static void Check(const char* what, const std::vector<float>& a, const std::vector<float>& b,
                  double rtol) {
  ++checks;
  double worst = 0;
  double scale = 1e-6;
  for (float v : b) scale = std::max(scale, (double)std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs((double)a[i] - b[i]));
  if (!(worst <= rtol * scale)) {
    ++fails;
    std::printf("FAIL %s: max diff %g (scale %g)\n", what, worst, scale);
  }
}
int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto ref = std::move(*CreateBackend("scalar", {1}));
  for (const auto& info : ProbeBackends()) {
    if (!info.available || info.name == "scalar") continue;
    auto be = std::move(*CreateBackend(info.name, {2}));
    std::printf("backend %s\n", info.name.c_str());
    for (WeightFormat f :
         {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kNvfp4}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{7, 48}, {33, 272}, {50, 528}, {5, 1040}}) {
        if (f != WeightFormat::kNvfp4) k += 3;
        std::vector<uint8_t> data, scales;
        WeightMatrix w;
        if (f == WeightFormat::kNvfp4) {
          data.resize(n * k / 2);
          scales.resize(n * k / 16);
          for (auto& b : data) b = rng() & 0xff;
          for (auto& s : scales) s = 1 + rng() % 0x60;
          w = WeightMatrix::Nvfp4(data.data(), scales.data(), 0.0173f, n, k);
        } else {
          int es = f == WeightFormat::kF32 ? 4 : 2;
          data.resize(n * k * es);
          for (int64_t i = 0; i < n * k; ++i) {
            float v = nd(rng);
            if (es == 4)
              std::memcpy(&data[i * 4], &v, 4);
            else {
              uint16_t h = f == WeightFormat::kBF16 ? F32ToBf16(v) : F32ToF16(v);
              std::memcpy(&data[i * 2], &h, 2);
            }
          }
          w = WeightMatrix::Dense(f, data.data(), n, k);
        }
        for (int64_t m : {1, 2, 3, 5, 9}) {
          std::vector<float> x(m * k);
          for (auto& v : x) v = nd(rng);
          std::vector<float> y1(m * n), y2(m * n);
          ref->Matmul(x.data(), m, k, w, y1.data(), n, false);
          be->Matmul(x.data(), m, k, w, y2.data(), n, false);
          char what[128];
          std::snprintf(what, sizeof what, "matmul %s n=%ld k=%ld m=%ld",
                        std::string(WeightFormatName(f)).c_str(), (long)n, (long)k, (long)m);
          Check(what, y2, y1, 1e-5);
          // exact element decode via Embedding vs WeightAt
        }
        std::vector<int32_t> ids = {0, (int32_t)n - 1, 2};
        std::vector<float> e(3 * k), want(3 * k);
        be->Embedding(w, ids.data(), 3, e.data());
        for (int i = 0; i < 3; ++i)
          for (int64_t c = 0; c < k; ++c) want[i * k + c] = WeightAt(w, ids[i], c);
        Check("embedding (exact decode)", e, want, 0);
      }
    }
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        int64_t M = 17, N = 23, K = 37;
        std::vector<float> A(M * K), B(K * N), C1(M * N, 1.f), C2(M * N, 1.f);
        for (auto& v : A) v = nd(rng);
        for (auto& v : B) v = nd(rng);
        ref->Gemm(ta, tb, M, N, K, 0.5f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.25f,
                  C1.data(), N);
        be->Gemm(ta, tb, M, N, K, 0.5f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.25f,
                 C2.data(), N);
        Check("gemm", C2, C1, 1e-5);
      }
    for (int64_t dim : {1, 7, 64, 131}) {
      std::vector<float> x(5 * dim), w(dim), g(5 * dim), u(5 * dim);
      for (auto& v : x) v = nd(rng) * 3;
      for (auto& v : w) v = nd(rng);
      for (auto& v : g) v = nd(rng) * 4;
      for (auto& v : u) v = nd(rng);
      std::vector<float> a(5 * dim), b(5 * dim);
      ref->RmsNorm(x.data(), w.data(), 1e-6f, 5, dim, dim, a.data());
      be->RmsNorm(x.data(), w.data(), 1e-6f, 5, dim, dim, b.data());
      Check("rmsnorm", b, a, 1e-5);
      ref->SiluMul(g.data(), u.data(), 5, dim, dim, a.data());
      be->SiluMul(g.data(), u.data(), 5, dim, dim, b.data());
      Check("silumul", b, a, 1e-5);
      a = x;
      b = x;
      ref->Softmax(a.data(), 5, dim);
      be->Softmax(b.data(), 5, dim);
      Check("softmax", b, a, 1e-5);
      ref->Add(x.data(), g.data(), 5 * dim, a.data());
      be->Add(x.data(), g.data(), 5 * dim, b.data());
      Check("add", b, a, 0);
    }
    {
      const int64_t heads = 6, kv = 2, hd = 20, cap = 40;
      std::vector<float> k1(cap * kv * hd), v1(cap * kv * hd), q(6 * heads * hd);
      for (auto& v : k1) v = nd(rng);
      for (auto& v : v1) v = nd(rng);
      for (auto& v : q) v = nd(rng);
      std::vector<int32_t> pos = {3, 4, 5, 6, 7, 12};
      AttentionSequence seq{0, 6, k1.data(), v1.data(), pos.data()};
      AttentionArgs a;
      a.q = q.data();
      a.q_row_stride = heads * hd;
      a.n_heads = heads;
      a.n_kv_heads = kv;
      a.head_dim = hd;
      a.out_row_stride = heads * hd;
      a.scale = 0.2f;
      a.sequences = &seq;
      a.n_sequences = 1;
      std::vector<float> o1(6 * heads * hd), o2(6 * heads * hd);
      a.out = o1.data();
      ref->Attention(a);
      a.out = o2.data();
      be->Attention(a);
      Check("attention", o2, o1, 1e-5);
      // An F16 KV cache: NEON against scalar over the same half values.
      std::vector<uint16_t> k1h, v1h;
      for (float x : k1) k1h.push_back(F32ToF16(x));
      for (float x : v1) v1h.push_back(F32ToF16(x));
      AttentionSequence seq_h{0, 6, k1h.data(), v1h.data(), pos.data(), KvDtype::kF16};
      a.sequences = &seq_h;
      a.out = o1.data();
      ref->Attention(a);
      a.out = o2.data();
      be->Attention(a);
      Check("attention f16 kv", o2, o1, 1e-5);
      a.sequences = &seq;
      std::vector<int32_t> p2 = pos;
      std::vector<float> r1 = q, r2 = q;
      std::vector<float> inv(hd / 2, 0.01f);
      ref->Rope(r1.data(), 6, heads * hd, heads, hd, pos.data(), inv.data());
      be->Rope(r2.data(), 6, heads * hd, heads, hd, pos.data(), inv.data());
      Check("rope", r2, r1, 1e-6);
    }
  }
  std::printf("%d passed, %d failed\n", checks - fails, fails);
  return fails ? 1 : 0;
}
