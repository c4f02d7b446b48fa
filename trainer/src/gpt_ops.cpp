#include "gpt_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace octet::trainer::ops {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits [0, n) into contiguous chunks of at least `min_chunk` items (about
// four per thread so uneven chunks balance) and runs fn(begin, end) on each.
void ParallelRange(kernels::ThreadPool* pool, int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = pool ? pool->size() : 1;
  const int64_t chunk = std::max(min_chunk, CeilDiv(n, int64_t{threads} * 4));
  const int64_t tasks = CeilDiv(n, chunk);
  ParallelFor(pool, tasks, [&](int64_t t) {
    const int64_t begin = t * chunk;
    fn(begin, std::min(n, begin + chunk));
  });
}

}  // namespace

void ParallelFor(kernels::ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (!pool || pool->size() == 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool->ParallelFor(n, [&](int64_t task, int) { fn(task); });
}

// ---- token embedding ---------------------------------------------------------

void EmbeddingForward(kernels::ThreadPool* pool, float* out, const int32_t* ids, const float* wte,
                      int64_t n, int64_t C) {
  ParallelRange(pool, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(out + i * C, wte + int64_t{ids[i]} * C, C * sizeof(float));
    }
  });
}

void EmbeddingBackward(kernels::ThreadPool* pool, float* dwte, const float* dout,
                       const int32_t* ids, int64_t n, int64_t C) {
  // Parallel over column blocks: each task owns its columns of every row of
  // dwte and adds positions in order, so repeated ids never race.
  constexpr int64_t kCols = 64;
  ParallelFor(pool, CeilDiv(C, kCols), [&](int64_t task) {
    const int64_t c0 = task * kCols;
    const int64_t c1 = std::min(C, c0 + kCols);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dwte + int64_t{ids[i]} * C;
      const float* src = dout + i * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

// ---- parameter-free RMSNorm ----------------------------------------------------

void RmsNormForward(kernels::ThreadPool* pool, float* out, float* rstd, const float* x,
                    int64_t rows, int64_t heads, int64_t dim, int64_t ld, float eps) {
  ParallelRange(pool, rows * heads, 8, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const int64_t at = (v / heads) * ld + (v % heads) * dim;
      const float* xv = x + at;
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += double{xv[i]} * xv[i];
      const float mean_sq = static_cast<float>(ss / static_cast<double>(dim));
      const float s = 1.0f / std::sqrt(mean_sq + eps);
      float* o = out + at;
      for (int64_t i = 0; i < dim; ++i) o[i] = xv[i] * s;
      rstd[v] = s;
    }
  });
}

void RmsNormBackward(kernels::ThreadPool* pool, float* dx, const float* dout, const float* out,
                     const float* rstd, int64_t rows, int64_t heads, int64_t dim, int64_t ld,
                     bool accumulate) {
  // y = x·r with r = (mean(x²)+eps)^-1/2:  dx = r·(dy − y·(dy·y)/dim).
  ParallelRange(pool, rows * heads, 8, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const int64_t at = (v / heads) * ld + (v % heads) * dim;
      const float* dy = dout + at;
      const float* y = out + at;
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot += double{dy[i]} * y[i];
      const float m = static_cast<float>(dot / static_cast<double>(dim));
      const float s = rstd[v];
      float* d = dx + at;
      if (accumulate) {
        for (int64_t i = 0; i < dim; ++i) d[i] += s * (dy[i] - y[i] * m);
      } else {
        for (int64_t i = 0; i < dim; ++i) d[i] = s * (dy[i] - y[i] * m);
      }
    }
  });
}

// ---- linear layers ----------------------------------------------------------------

void MatmulForward(kernels::KernelBackend* be, float* out, int64_t ld_out, const float* in,
                   int64_t ld_in, const float* w, int64_t N, int64_t IC, int64_t OC,
                   bool accumulate) {
  // out[N, OC] = in[N, IC] · W[OC, IC]ᵀ
  be->Gemm(false, true, N, OC, IC, 1.0f, in, ld_in, w, IC, accumulate ? 1.0f : 0.0f, out, ld_out);
}

void MatmulBackward(kernels::KernelBackend* be, float* din, int64_t ld_din, float* dw,
                    const float* dout, int64_t ld_dout, const float* in, int64_t ld_in,
                    const float* w, int64_t N, int64_t IC, int64_t OC, bool accumulate_din) {
  // dW[OC, IC] += dout[N, OC]ᵀ · in[N, IC]
  be->Gemm(true, false, OC, IC, N, 1.0f, dout, ld_dout, in, ld_in, 1.0f, dw, IC);
  // din[N, IC] (+)= dout[N, OC] · W[OC, IC]
  if (din) {
    be->Gemm(false, false, N, IC, OC, 1.0f, dout, ld_dout, w, IC, accumulate_din ? 1.0f : 0.0f, din,
             ld_din);
  }
}

// ---- causal self-attention ---------------------------------------------------------

void AttentionForward(kernels::KernelBackend* be, kernels::ThreadPool* pool,
                      const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* probs, float* y) {
  const int64_t T = s.T, D = s.D, group = s.H / s.Hkv;
  // scores[b,h] = scale · q[b,:,h] · k[b,:,h/group]ᵀ   [T, T] (full square;
  // the part above the diagonal is masked below).
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const float* qbh = q + b * T * s.ld_q + h * D;
      const float* kbj = k + b * T * s.ld_kv + (h / group) * D;
      float* p = probs + (b * s.H + h) * T * T;
      be->Gemm(false, true, T, T, D, s.scale, qbh, s.ld_q, kbj, s.ld_kv, 0.0f, p, T);
    }
  }
  // Causal softmax of each row t over keys 0..t; zeros after.
  ParallelRange(pool, s.B * s.H * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % T;
      float* p = probs + row * T;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j <= t; ++j) mx = std::max(mx, p[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j <= t; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= t; ++j) p[j] *= inv;
      for (int64_t j = t + 1; j < T; ++j) p[j] = 0.0f;
    }
  });
  // y[b,:,h] = probs[b,h] · v[b,:,h/group]   [T, D]
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const float* p = probs + (b * s.H + h) * T * T;
      const float* vbj = v + b * T * s.ld_kv + (h / group) * D;
      float* ybh = y + b * T * s.ld_y + h * D;
      be->Gemm(false, false, T, D, T, 1.0f, p, T, vbj, s.ld_kv, 0.0f, ybh, s.ld_y);
    }
  }
}

void AttentionBackward(kernels::KernelBackend* be, kernels::ThreadPool* pool,
                       const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* probs, const float* dy, float* dprobs, float* dq, float* dk,
                       float* dv) {
  const int64_t T = s.T, D = s.D, group = s.H / s.Hkv;
  // dprobs[b,h] = dy[b,:,h] · v[b,:,j]ᵀ   [T, T]
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const float* dybh = dy + b * T * s.ld_y + h * D;
      const float* vbj = v + b * T * s.ld_kv + (h / group) * D;
      float* dp = dprobs + (b * s.H + h) * T * T;
      be->Gemm(false, true, T, T, D, 1.0f, dybh, s.ld_y, vbj, s.ld_kv, 0.0f, dp, T);
    }
  }
  // Softmax backward in place: dscores = p·(dp − Σ_j p·dp); zero above the diagonal.
  ParallelRange(pool, s.B * s.H * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % T;
      const float* p = probs + row * T;
      float* dp = dprobs + row * T;
      float dot = 0.0f;
      for (int64_t j = 0; j <= t; ++j) dot += p[j] * dp[j];
      for (int64_t j = 0; j <= t; ++j) dp[j] = p[j] * (dp[j] - dot);
      for (int64_t j = t + 1; j < T; ++j) dp[j] = 0.0f;
    }
  });
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t j = h / group;
      const bool first_in_group = h % group == 0;  // overwrites dk/dv; the others add
      const float* ds = dprobs + (b * s.H + h) * T * T;
      const float* p = probs + (b * s.H + h) * T * T;
      const float* qbh = q + b * T * s.ld_q + h * D;
      const float* kbj = k + b * T * s.ld_kv + j * D;
      const float* dybh = dy + b * T * s.ld_y + h * D;
      // dq[b,:,h] = scale · dscores · k   [T, D]
      be->Gemm(false, false, T, D, T, s.scale, ds, T, kbj, s.ld_kv, 0.0f,
               dq + b * T * s.ld_q + h * D, s.ld_q);
      // dk[b,:,j] (+)= scale · dscoresᵀ · q   [T, D]
      be->Gemm(true, false, T, D, T, s.scale, ds, T, qbh, s.ld_q, first_in_group ? 0.0f : 1.0f,
               dk + b * T * s.ld_kv + j * D, s.ld_kv);
      // dv[b,:,j] (+)= probsᵀ · dy   [T, D]
      be->Gemm(true, false, T, D, T, 1.0f, p, T, dybh, s.ld_y, first_in_group ? 0.0f : 1.0f,
               dv + b * T * s.ld_kv + j * D, s.ld_kv);
    }
  }
}

// ---- ReLU² ---------------------------------------------------------------------------

void Relu2Forward(kernels::ThreadPool* pool, float* out, const float* x, int64_t n) {
  ParallelRange(pool, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float r = x[i] > 0.0f ? x[i] : 0.0f;
      out[i] = r * r;
    }
  });
}

void Relu2Backward(kernels::ThreadPool* pool, float* dx, const float* dout, const float* x,
                   int64_t n) {
  ParallelRange(pool, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float r = x[i] > 0.0f ? x[i] : 0.0f;
      dx[i] = dout[i] * 2.0f * r;
    }
  });
}

// ---- soft-cap + cross-entropy ----------------------------------------------------

void SoftcapCrossEntropyForward(kernels::ThreadPool* pool, float* logits, float* lse, float* losses,
                                const int32_t* targets, int64_t N, int64_t V, float cap) {
  ParallelRange(pool, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* l = logits + i * V;
      if (cap > 0.0f) {
        const float inv_cap = 1.0f / cap;
        for (int64_t j = 0; j < V; ++j) l[j] = cap * std::tanh(l[j] * inv_cap);
      }
      if (!targets) continue;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, l[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(double{l[j]} - mx);
      const float row_lse = mx + static_cast<float>(std::log(sum));
      lse[i] = row_lse;
      losses[i] = row_lse - l[targets[i]];
    }
  });
}

void SoftcapCrossEntropyBackward(kernels::ThreadPool* pool, float* logits, const float* lse,
                                 const int32_t* targets, int64_t N, int64_t V, float cap,
                                 float dloss) {
  ParallelRange(pool, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* l = logits + i * V;
      const float row_lse = lse[i];
      const int64_t target = targets[i];
      const float inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
      for (int64_t j = 0; j < V; ++j) {
        const float capped = l[j];
        float g = std::exp(capped - row_lse) - (j == target ? 1.0f : 0.0f);
        g *= dloss;
        if (cap > 0.0f) {
          const float t = capped * inv_cap;  // tanh(raw/cap)
          g *= 1.0f - t * t;
        }
        l[j] = g;
      }
    }
  });
}

}  // namespace octet::trainer::ops
