// CpuBackend: every KernelBackend op for the CPU, split into chunks for the
// thread pool, with the inner loops taken from one ISA table (isa.h).
#include "cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace octet::kernels::cpu {
namespace {

// Matmul blocking. The GEMM path decodes a panel of kPanelRows weight rows x
// kDepth columns into float once and reuses it for up to kBlockRows activation
// rows; 48 x 512 floats (96 KiB) stays in L1/L2 while the 4x3 dot tiles sweep it.
constexpr int64_t kPanelRows = 48;  // a multiple of kTileCols
constexpr int64_t kDepth = 512;     // a multiple of the NVFP4 block
constexpr int64_t kBlockRows = 128;
// Up to this many activation rows go through gemv passes (cheaper than
// decoding a panel for the dot-tile GEMM when the batch is small), where the
// table does not say otherwise (IsaKernels::decode_batch_rows).
constexpr int64_t kGemvBatchRows = 8;

// Batches from this many rows take isa_.gemv_packed where the table has it.
// bench_gemv (a decode step's matmuls, interleaved, 2 threads): AMX against
// AVX-512 FMAs at 3 / 4 / 5 / 6 rows 121 / 169 / 123 / 91 ms against
// 92 / 128 / 140 / 111; at 8, 95 against 132.
constexpr int64_t kGemvPackedMinRows = 5;

// Larger batches (prefill) of BF16 and NVFP4 weights take gemm_packed, where
// the table has it: each task's weight rows (up to kPackedTaskRows, 384 KiB of
// BF16 at 3072 columns; NVFP4 decoded to BF16 first) come from memory once and
// from L2 for every further 16 activation rows, so the tile multiplies, not
// the FMA ports, set the rate. Matrices narrower than one 32-column tile block
// stay on FMAs.
constexpr int64_t kPackedTaskRows = 64;
constexpr int64_t kPackedBlockCols = 32;

// A sequence with this many rows in an attention call (a prefill chunk) takes
// attend_rows, in tiles of kAttendRowsTile rows a task.
constexpr int64_t kAttendRowsMin = 16;
constexpr int64_t kAttendRowsTile = 16;
// Fewer rows of a sequence (a verify step's, a short chunk; or more in a
// batch-invariant step) at consecutive positions take attend_causal, up to
// kAttendCausalRows rows a task.
constexpr int64_t kAttendCausalRows = 8;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row-wise ops (norms, RoPE, SiLU, softmax) group rows so that a task holds at
// least this many elements: claiming a task and handing its cache lines
// between cores costs ~0.1-0.3 us, more than normalising one 128-wide head
// (a decode step's QK-norm is 16 + 8 of them), so small ops run inline.
constexpr int64_t kRowTaskElements = 8192;

template <typename Fn>
void ForRows(ThreadPool& pool, int64_t rows, int64_t elements_per_row, const Fn& fn) {
  const int64_t per_task =
      std::max<int64_t>(1, kRowTaskElements / std::max<int64_t>(1, elements_per_row));
  pool.ParallelFor(CeilDiv(rows, per_task), [&](int64_t task, int) {
    const int64_t end = std::min(rows, (task + 1) * per_task);
    for (int64_t r = task * per_task; r < end; ++r) fn(r);
  });
}

// NVFP4 tile decode (gemv_nvfp4_tiles) tasks: whole 64-row passes of four
// groups (isa_avx512_vnni.cpp), at least 4 tasks per thread.
int64_t TileRowsPerTask(int64_t rows, int threads) {
  return std::clamp<int64_t>(rows / (4 * static_cast<int64_t>(threads)) / 64 * 64, 64, 256);
}

int64_t DefaultDecodeRows(const IsaKernels& isa) {
  return isa.decode_batch_rows > 0 ? isa.decode_batch_rows : kGemvBatchRows;
}

// The table a batch-invariant backend runs (CpuBackend::set_batch_invariant):
// no batched decode on a matrix unit, and the gemv whose rows do not depend on
// the batch. The tile kernels (gemv_nvfp4_tiles) are so already.
IsaKernels InvariantTable(const IsaKernels& isa) {
  IsaKernels t = isa;
  t.gemv_packed_size = nullptr;
  t.pack_gemv_activations = nullptr;
  t.gemv_packed = nullptr;
  if (t.gemv_batch_invariant) t.gemv = t.gemv_batch_invariant;
  return t;
}

// Decode tasks take a few 4-row groups of one matrix: up to 64 rows or 128 KiB
// of weights, whichever is more, so a task streams one long run of memory
// (the gemv kernels prefetch ahead within the task and each task starts cold),
// but at least 4 tasks per thread so the cores stay balanced. 64 dense rows of
// 1024 columns are 128 KiB; 64 NVFP4 rows only 36 KiB, so NVFP4 takes up to
// 224 rows.
int64_t GemvRowsPerTask(const WeightMatrix& w, int threads) {
  constexpr int64_t kTaskBytes = 128 << 10;
  const int64_t per_task = w.rows / (4 * static_cast<int64_t>(threads));
  const int64_t row_bytes = std::max<int64_t>(1, w.BytesRead() / std::max<int64_t>(1, w.rows));
  const int64_t max_rows = std::max<int64_t>(64, kTaskBytes / row_bytes / 4 * 4);
  return std::clamp<int64_t>(per_task / 4 * 4, 16, max_rows);
}

// gemv_packed tasks (AMX): 32-row passes, up to 8 of them, at least 4 tasks
// per thread. A pass prefetches the next pass's rows only within its task,
// so each task starts cold: GemvRowsPerTask's 128 KiB (32 rows of 2048 BF16
// columns) made every pass a cold start. bench_gemv, BF16 Qwen3-0.6B step,
// 2 threads, on a shared machine, this and the old size alternating: 8 rows
// 69 / 116 / 117 ms against 105 / 127 / 210, 6 rows 65 / 103 / 109 against
// 95 / 114 / 184 (and 8 rows with 128- or 256-row tasks 88-103 against
// 102-117 in five pairs before).
int64_t PackedGemvRowsPerTask(int64_t rows, int threads) {
  return std::clamp<int64_t>(rows / (4 * static_cast<int64_t>(threads)) / 32 * 32, 32, 256);
}

// Attention of the query heads of one KV head from an ISA's dot, softmax and
// axpy (the reference order), for tables without their own attend.
void AttendComposed(const IsaKernels& isa, const float* q, int64_t q_stride, int64_t n_q,
                    const float* k, const float* v, int64_t kv_stride, int64_t n_keys, int64_t hd,
                    float scale, float* scores, float* out, int64_t out_stride) {
  for (int64_t i = 0; i < n_q; ++i) {
    float* s = scores + i * n_keys;
    for (int64_t j = 0; j < n_keys; ++j) {
      s[j] = isa.dot(q + i * q_stride, k + j * kv_stride, hd) * scale;
    }
    isa.softmax_row(s, n_keys);
    float* o = out + i * out_stride;
    std::fill(o, o + hd, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j) isa.axpy(s[j], v + j * kv_stride, o, hd);
  }
}

}  // namespace

CpuBackend::CpuBackend(const IsaKernels& isa, int threads)
    : default_table_(isa),
      invariant_table_(InvariantTable(isa)),
      isa_(isa),
      decode_rows_(DefaultDecodeRows(isa)),
      pool_(threads),
      scratch_(pool_.size()) {
  for (auto& s : scratch_) s.resize(kPanelRows * kDepth);
}

bool CpuBackend::set_batch_invariant(bool on) {
  batch_invariant_ = on;
  isa_ = on ? invariant_table_ : default_table_;
  decode_rows_ = on ? std::numeric_limits<int64_t>::max() : DefaultDecodeRows(default_table_);
  return true;
}

int64_t CpuBackend::DecodeRows(const WeightMatrix& w) const {
  return w.format == WeightFormat::kNvfp4 && !batch_invariant_
             ? std::min(decode_rows_, kGemvBatchRows)
             : decode_rows_;
}

// Decode batches read NVFP4 tiles where a matrix has them rather than the
// row-major codes (gemv).
bool CpuBackend::TakesNvfp4Tiles(const WeightMatrix& w, int64_t m) const {
  return m >= 1 && m <= DecodeRows(w) && w.format == WeightFormat::kNvfp4 && w.tiles != nullptr &&
         isa_.gemv_nvfp4_tiles != nullptr;
}

bool CpuBackend::supports(WeightFormat format) const {
  switch (format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
    case WeightFormat::kNvfp4:
      return true;
  }
  return false;
}

void CpuBackend::Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                        int64_t ldy, bool accumulate) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  if (m <= 0 || n <= 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + n, 0.0f);
    }
    return;
  }
  if (TakesNvfp4Tiles(w, m)) {
    if (const uint8_t* packed = PackForNvfp4Tiles(x, m, ldx, k)) {
      const int64_t rows_per_task = TileRowsPerTask(n, pool_.size());
      pool_.ParallelFor(CeilDiv(n, rows_per_task), [&](int64_t task, int) {
        const int64_t r0 = task * rows_per_task;
        const int64_t r1 = std::min(n, r0 + rows_per_task);
        isa_.gemv_nvfp4_tiles(w, r0, r1, packed, m, y + r0, ldy, accumulate);
      });
      return;
    }
    if (batch_invariant_ && m > 1) {
      // A row that cannot take the tiles sends the whole batch to the
      // row-major kernels; alone, the others would take them.
      for (int64_t i = 0; i < m; ++i) Matmul(x + i * ldx, 1, ldx, w, y + i * ldy, ldy, accumulate);
      return;
    }
  }
  if (m <= DecodeRows(w)) {
    // Small batches (decode): weights decoded in registers, kGemvMaxRows
    // activation rows per pass; a task's weight rows stay in cache between passes.
    const uint16_t* packed = w.format == WeightFormat::kBF16 ? PackForGemv(x, m, ldx, k) : nullptr;
    const int64_t rows_per_task = packed ? PackedGemvRowsPerTask(n, pool_.size())
                                         : GemvRowsPerTask(w, pool_.size());
    pool_.ParallelFor(CeilDiv(n, rows_per_task), [&](int64_t task, int) {
      const int64_t r0 = task * rows_per_task;
      const int64_t r1 = std::min(n, r0 + rows_per_task);
      if (packed) {
        isa_.gemv_packed(w, r0, r1, packed, x, m, ldx, y + r0, ldy, accumulate);
        return;
      }
      for (int64_t i = 0; i < m; i += kGemvMaxRows) {
        isa_.gemv(w, r0, r1, x + i * ldx, std::min<int64_t>(kGemvMaxRows, m - i), ldx,
                  y + i * ldy + r0, ldy, accumulate);
      }
    });
    return;
  }
  if (isa_.gemm_packed && k >= kPackedBlockCols &&
      (w.format == WeightFormat::kBF16 ||
       (w.format == WeightFormat::kNvfp4 && isa_.decode_nvfp4_bf16))) {
    MatmulPackedBlocks(x, m, ldx, w, y, ldy, accumulate);
    return;
  }
  // Float weights with a float-aligned stride are used in place; others are
  // decoded panel by panel.
  const bool in_place = w.format == WeightFormat::kF32 && w.row_stride % 4 == 0 &&
                        reinterpret_cast<uintptr_t>(w.data) % 4 == 0;
  const int64_t n_panels = CeilDiv(n, kPanelRows);
  const int64_t m_blocks = CeilDiv(m, kBlockRows);
  pool_.ParallelFor(n_panels * m_blocks, [&](int64_t task, int thread) {
    const int64_t n0 = (task % n_panels) * kPanelRows;
    const int64_t nb = std::min(kPanelRows, n - n0);
    const int64_t m0 = (task / n_panels) * kBlockRows;
    const int64_t mb = std::min(kBlockRows, m - m0);
    float* buf = scratch_[thread].data();
    for (int64_t kb = 0; kb < k; kb += kDepth) {
      const int64_t kc = std::min(kDepth, k - kb);
      const float* b;
      int64_t ldb;
      if (in_place) {
        ldb = w.row_stride / 4;
        b = static_cast<const float*>(w.data) + n0 * ldb + kb;
      } else {
        isa_.decode_rows(w, n0, nb, kb, kc, buf, kDepth);
        b = buf;
        ldb = kDepth;
      }
      const bool acc = accumulate || kb > 0;
      for (int64_t i = 0; i < mb; i += kTileRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kTileRows, mb - i));
        const float* a = x + (m0 + i) * ldx + kb;
        float* c = y + (m0 + i) * ldy + n0;
        for (int64_t j = 0; j < nb; j += kTileCols) {
          const int nr = static_cast<int>(std::min<int64_t>(kTileCols, nb - j));
          isa_.dot_tile(a, ldx, b + j * ldb, ldb, kc, mr, nr, c + j, ldy, acc);
        }
      }
    }
  });
}

void CpuBackend::MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                             int n_outputs) {
  bool decode = m <= decode_rows_;
  for (int i = 0; i < n_outputs && decode; ++i) decode = m <= DecodeRows(*outputs[i].w);
  if (!decode) {  // compute-bound: one call each is as good
    for (int i = 0; i < n_outputs; ++i) {
      Matmul(x, m, ldx, *outputs[i].w, outputs[i].y, outputs[i].ldy, false);
    }
    return;
  }
  // Task t covers rows of one output: outputs are laid end to end in task space.
  // Outputs share x, so BF16 ones share one packing (when their widths agree).
  const uint16_t* packed = nullptr;
  int64_t packed_cols = -1;
  for (int i = 0; i < n_outputs; ++i) {
    const WeightMatrix& w = *outputs[i].w;
    if (w.format != WeightFormat::kBF16) continue;
    if (packed_cols == -1) packed_cols = w.cols;
    if (w.cols != packed_cols) packed_cols = -2;
  }
  if (packed_cols > 0) packed = PackForGemv(x, m, ldx, packed_cols);
  // Likewise one packing for the NVFP4 outputs with tiles.
  int64_t tiles_cols = -1;
  for (int i = 0; i < n_outputs; ++i) {
    const WeightMatrix& w = *outputs[i].w;
    if (!TakesNvfp4Tiles(w, m)) continue;
    if (tiles_cols == -1) tiles_cols = w.cols;
    if (w.cols != tiles_cols) tiles_cols = -2;
  }
  const uint8_t* tiles_packed = tiles_cols > 0 ? PackForNvfp4Tiles(x, m, ldx, tiles_cols) : nullptr;
  if (batch_invariant_ && m > 1 && tiles_cols > 0 && !tiles_packed) {
    // As in Matmul: a row at a time, each taking the tiles if it can alone.
    std::vector<MatmulOutput> row(outputs, outputs + n_outputs);
    for (int64_t i = 0; i < m; ++i) {
      for (int o = 0; o < n_outputs; ++o) row[o].y = outputs[o].y + i * outputs[o].ldy;
      MatmulMulti(x + i * ldx, 1, ldx, row.data(), n_outputs);
    }
    return;
  }
  std::vector<int64_t> first_task(n_outputs + 1, 0), rows_per_task(n_outputs);
  for (int i = 0; i < n_outputs; ++i) {
    const WeightMatrix& w = *outputs[i].w;
    rows_per_task[i] = tiles_packed && TakesNvfp4Tiles(w, m) ? TileRowsPerTask(w.rows, pool_.size())
                       : packed && w.format == WeightFormat::kBF16
                           ? PackedGemvRowsPerTask(w.rows, pool_.size())
                           : GemvRowsPerTask(w, pool_.size());
    first_task[i + 1] = first_task[i] + CeilDiv(w.rows, rows_per_task[i]);
  }
  pool_.ParallelFor(first_task[n_outputs], [&](int64_t task, int) {
    int o = 0;
    while (task >= first_task[o + 1]) ++o;
    const WeightMatrix& w = *outputs[o].w;
    const int64_t r0 = (task - first_task[o]) * rows_per_task[o];
    const int64_t r1 = std::min(w.rows, r0 + rows_per_task[o]);
    if (w.cols == 0) {
      for (int64_t i = 0; i < m; ++i)
        std::fill(outputs[o].y + i * outputs[o].ldy + r0, outputs[o].y + i * outputs[o].ldy + r1,
                  0.0f);
      return;
    }
    if (packed && w.format == WeightFormat::kBF16) {
      isa_.gemv_packed(w, r0, r1, packed, x, m, ldx, outputs[o].y + r0, outputs[o].ldy, false);
      return;
    }
    if (tiles_packed && TakesNvfp4Tiles(w, m)) {
      isa_.gemv_nvfp4_tiles(w, r0, r1, tiles_packed, m, outputs[o].y + r0, outputs[o].ldy, false);
      return;
    }
    for (int64_t i = 0; i < m; i += kGemvMaxRows) {
      isa_.gemv(w, r0, r1, x + i * ldx, std::min<int64_t>(kGemvMaxRows, m - i), ldx,
                outputs[o].y + i * outputs[o].ldy + r0, outputs[o].ldy, false);
    }
  });
}

void CpuBackend::MatmulPackedBlocks(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                    float* y, int64_t ldy, bool accumulate) {
  const int64_t n = w.rows, k = w.cols;
  const int64_t size = isa_.gemm_packed_size(m, k);
  if (static_cast<int64_t>(packed_x_.size()) < size) packed_x_.resize(size);
  uint16_t* packed = packed_x_.data();
  // Token blocks of 16 pack independently, each into its own span.
  constexpr int64_t kTokenBlock = 16;
  const int64_t block_size = isa_.gemm_packed_size(kTokenBlock, k);
  pool_.ParallelFor(CeilDiv(m, kTokenBlock), [&](int64_t b, int) {
    const int64_t i0 = b * kTokenBlock;
    isa_.pack_gemm_activations(x + i0 * ldx, std::min(kTokenBlock, m - i0), ldx, k,
                               packed + b * block_size);
  });
  const int64_t rows_per_task = std::min<int64_t>(kPackedTaskRows, CeilDiv(n, pool_.size()));
  if (w.format == WeightFormat::kBF16) {
    pool_.ParallelFor(CeilDiv(n, rows_per_task), [&](int64_t task, int) {
      const int64_t r0 = task * rows_per_task;
      const int64_t r1 = std::min(n, r0 + rows_per_task);
      isa_.gemm_packed(w, r0, r1, packed, x, m, ldx, y + r0, ldy, accumulate, 1.0f);
    });
    return;
  }
  // NVFP4: each task decodes its rows to BF16 (exact products of code and
  // block scale) in its own buffer, then multiplies; the global scale goes on
  // the sums, as in the decode kernels.
  if (bf16_scratch_.size() != scratch_.size()) bf16_scratch_.resize(scratch_.size());
  pool_.ParallelFor(CeilDiv(n, rows_per_task), [&](int64_t task, int thread) {
    const int64_t r0 = task * rows_per_task;
    const int64_t r1 = std::min(n, r0 + rows_per_task);
    std::vector<uint16_t>& buf = bf16_scratch_[thread];
    if (static_cast<int64_t>(buf.size()) < (r1 - r0) * k) buf.resize((r1 - r0) * k);
    isa_.decode_nvfp4_bf16(w, r0, r1 - r0, buf.data());
    const WeightMatrix rows = WeightMatrix::Dense(WeightFormat::kBF16, buf.data(), r1 - r0, k);
    isa_.gemm_packed(rows, 0, r1 - r0, packed, x, m, ldx, y + r0, ldy, accumulate,
                     w.global_scale);
  });
}

const uint16_t* CpuBackend::PackForGemv(const float* x, int64_t m, int64_t ldx, int64_t k) {
  // Up to four rows the FMA kernels keep up (the tile passes wait on memory).
  if (!isa_.gemv_packed || m < kGemvPackedMinRows || m > kGemvMaxRows) return nullptr;
  const int64_t size = isa_.gemv_packed_size(m, k);
  if (size == 0) return nullptr;
  if (static_cast<int64_t>(packed_x_.size()) < size) packed_x_.resize(size);
  isa_.pack_gemv_activations(x, m, ldx, k, packed_x_.data());
  return packed_x_.data();
}

const uint8_t* CpuBackend::PackForNvfp4Tiles(const float* x, int64_t m, int64_t ldx, int64_t k) {
  if (!isa_.gemv_nvfp4_tiles || k % kNvfp4TileCols != 0) return nullptr;
  const int64_t size = isa_.nvfp4_tiles_packed_size(k);
  if (static_cast<int64_t>(tiles_x_.size()) < m * size) tiles_x_.resize(m * size);
  for (int64_t i = 0; i < m; ++i) {
    if (!isa_.pack_nvfp4_tiles_activation(x + i * ldx, k, tiles_x_.data() + i * size)) {
      return nullptr;
    }
  }
  return tiles_x_.data();
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  // Bring both operands to "rows along K" (the dot-product form Matmul uses).
  std::vector<float> at, bt;
  const float* a = A;
  int64_t a_ld = lda;
  if (trans_a) {  // A is [K, M]
    at.resize(M * K);
    pool_.ParallelFor(M, [&](int64_t i, int) {
      for (int64_t kk = 0; kk < K; ++kk) at[i * K + kk] = A[kk * lda + i];
    });
    a = at.data();
    a_ld = K;
  }
  const float* b = B;
  int64_t b_ld = ldb;
  if (!trans_b) {  // B is [K, N]
    bt.resize(N * K);
    pool_.ParallelFor(N, [&](int64_t j, int) {
      for (int64_t kk = 0; kk < K; ++kk) bt[j * K + kk] = B[kk * ldb + j];
    });
    b = bt.data();
    b_ld = K;
  }
  WeightMatrix wb = WeightMatrix::Dense(WeightFormat::kF32, b, N, K);
  wb.row_stride = b_ld * 4;

  if (beta == 0.0f) {
    Matmul(a, M, a_ld, wb, C, ldc, /*accumulate=*/false);
    if (alpha != 1.0f) {
      for (int64_t i = 0; i < M; ++i) isa_.scale(alpha, C + i * ldc, N);
    }
    return;
  }
  if (beta != 1.0f) {
    for (int64_t i = 0; i < M; ++i) isa_.scale(beta, C + i * ldc, N);
  }
  if (alpha == 1.0f) {
    Matmul(a, M, a_ld, wb, C, ldc, /*accumulate=*/true);
    return;
  }
  std::vector<float> tmp(M * N);
  Matmul(a, M, a_ld, wb, tmp.data(), N, /*accumulate=*/false);
  for (int64_t i = 0; i < M; ++i) isa_.axpy(alpha, tmp.data() + i * N, C + i * ldc, N);
}

void CpuBackend::RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                         int64_t stride, float* out) {
  ForRows(pool_, rows, dim,
          [&](int64_t r) { isa_.rmsnorm_row(x + r * stride, weight, eps, dim, out + r * stride); });
}

void CpuBackend::Rope(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
                      const int32_t* positions, const float* inv_freq) {
  RopeHeads(x, rows, row_stride, n_heads, head_dim, head_dim, positions, inv_freq);
}

namespace {

// A position's rotation angles' cos and sin (half of each).
void RopeAngles(int32_t position, const float* inv_freq, int64_t half, float* cs, float* sn) {
  const float pos = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];  // float32, as transformers computes it
    cs[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

}  // namespace

bool CpuBackend::RopeTableCovers(const float* inv_freq, int64_t half, const int32_t* positions,
                                 int64_t rows) {
  int32_t last = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0) return false;
    last = std::max(last, positions[r]);
  }
  const int64_t row_floats = 2 * half;
  const int64_t most = kRopeTableBytes / (row_floats * static_cast<int64_t>(sizeof(float)));
  if (last >= most) return false;
  if (static_cast<int64_t>(rope_.inv_freq.size()) != half ||
      !std::equal(rope_.inv_freq.begin(), rope_.inv_freq.end(), inv_freq)) {
    rope_.inv_freq.assign(inv_freq, inv_freq + half);
    rope_.positions = 0;
  }
  if (last < rope_.positions) return true;
  // Doubling, so a growing sequence recomputes nothing and grows log times.
  const int64_t want =
      std::min(most, std::max<int64_t>({int64_t{last} + 1, 2 * rope_.positions, int64_t{256}}));
  rope_.cos_sin.resize(static_cast<size_t>(want * row_floats));
  for (int64_t p = rope_.positions; p < want; ++p) {
    float* cs = rope_.cos_sin.data() + p * row_floats;
    RopeAngles(static_cast<int32_t>(p), inv_freq, half, cs, cs + half);
  }
  rope_.positions = want;
  return true;
}

// Every head of a row from one table of cos/sin: partial rotary (GLM) as one
// call instead of a Rope call a head, each of which computed the row's
// angles again (at a 512-token prefill of a 96-head model, 104 passes of
// 512 x rotary_dim/2 sincos a layer instead of one).
void CpuBackend::RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                           int64_t head_stride, int64_t rotary_dim, const int32_t* positions,
                           const float* inv_freq) {
  const int64_t half = rotary_dim / 2;
  const bool tabled = RopeTableCovers(inv_freq, half, positions, rows);
  ForRows(pool_, rows, n_heads * rotary_dim, [&](int64_t r) {
    float own[1024];  // head_dim <= 1024
    const float* cs = own;
    if (tabled) {
      cs = rope_.cos_sin.data() + positions[r] * 2 * half;
    } else {
      RopeAngles(positions[r], inv_freq, half, own, own + half);
    }
    const float* sn = cs + half;
    float* row = x + r * row_stride;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = row + h * head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  });
}

void CpuBackend::Attention(const AttentionArgs& args) {
  // One task per (query token, KV head) over all sequences (a decode step's
  // rows): the query heads of a KV head read its keys and values together.
  // A sequence's several rows go as tiles or runs (below).
  struct TokenRef {
    const AttentionSequence* seq;
    int64_t row;    // row in q/out
    int64_t index;  // index within the sequence's positions
  };
  // A sequence's rows of a prefill chunk go sixteen at a time through
  // attend_rows where the table has it (not in batch-invariant steps, whose
  // rows must keep the bits they get alone): one task per (tile, KV head).
  struct TileRef {
    const AttentionSequence* seq;
    int64_t index;  // the tile's first row within the sequence
  };
  // Otherwise a sequence's rows at consecutive positions (a verify step's, a
  // short chunk's, any chunk's in a batch-invariant step) go up to
  // kAttendCausalRows at a time through attend_causal: one task per (run, KV
  // head), each row with the bits it gets alone, the rows sharing K and V.
  struct RunRef {
    const AttentionSequence* seq;
    int64_t index;  // the run's first row within the sequence
    int64_t rows;
  };
  const int64_t hd = args.head_dim;
  const int64_t group = args.n_heads / args.n_kv_heads;
  const bool tiles_ok =
      !batch_invariant_ && (hd == 64 || hd == 128) && isa_.attend_rows && isa_.attend_rows_f16;
  const auto consecutive = [](const AttentionSequence& seq) {
    for (int64_t t = 1; t < seq.n_tokens; ++t) {
      if (seq.positions[t] != seq.positions[0] + t) return false;
    }
    return true;
  };
  std::vector<TokenRef> tokens;
  std::vector<TileRef> tiles;
  std::vector<RunRef> runs;
  for (int64_t s = 0; s < args.n_sequences; ++s) {
    const AttentionSequence& seq = args.sequences[s];
    if (tiles_ok && seq.n_tokens >= kAttendRowsMin) {
      for (int64_t t = 0; t < seq.n_tokens; t += kAttendRowsTile) tiles.push_back({&seq, t});
      continue;
    }
    const bool causal_ok = seq.kv_dtype == KvDtype::kF16 ? isa_.attend_causal_f16 != nullptr
                                                         : isa_.attend_causal != nullptr;
    if (causal_ok && seq.n_tokens >= 2 && consecutive(seq)) {
      for (int64_t t = 0; t < seq.n_tokens; t += kAttendCausalRows) {
        runs.push_back({&seq, t, std::min(kAttendCausalRows, seq.n_tokens - t)});
      }
      continue;
    }
    for (int64_t t = 0; t < seq.n_tokens; ++t) tokens.push_back({&seq, seq.first_token + t, t});
  }
  if (attn_scratch_.size() != scratch_.size()) attn_scratch_.resize(scratch_.size());
  if (kv_scratch_.size() != scratch_.size()) kv_scratch_.resize(scratch_.size());
  // A sequence's cache elements between positions, and KV head kvh's first.
  struct KvLayout {
    int64_t stride, head0;
  };
  const auto kv_layout = [&](const AttentionSequence& seq, int64_t kvh) {
    const bool packed = seq.position_stride == 0 && seq.head_stride == 0;
    return KvLayout{packed ? args.n_kv_heads * hd : seq.position_stride,
                    kvh * (packed ? hd : seq.head_stride)};
  };
  const int64_t n_tile_tasks = static_cast<int64_t>(tiles.size()) * args.n_kv_heads;
  const int64_t n_run_tasks = static_cast<int64_t>(runs.size()) * args.n_kv_heads;
  pool_.ParallelFor(
      n_tile_tasks + n_run_tasks + static_cast<int64_t>(tokens.size()) * args.n_kv_heads,
      [&](int64_t task, int thread) {
        if (task < n_tile_tasks) {
          const TileRef& tile = tiles[task / args.n_kv_heads];
          const AttentionSequence& seq = *tile.seq;
          const int64_t kvh = task % args.n_kv_heads;
          const int64_t rows = std::min(kAttendRowsTile, seq.n_tokens - tile.index);
          const auto [kv_stride, head0] = kv_layout(seq, kvh);
          std::vector<float>& work = attn_scratch_[thread];
          const int64_t need = isa_.attend_rows_work(hd);
          if (static_cast<int64_t>(work.size()) < need) work.resize(need);
          const int64_t row = seq.first_token + tile.index;
          const float* q = args.q + row * args.q_row_stride + kvh * group * hd;
          float* out = args.out + row * args.out_row_stride + kvh * group * hd;
          const int32_t* positions = seq.positions + tile.index;
          if (seq.kv_dtype == KvDtype::kF16) {
            isa_.attend_rows_f16(q, args.q_row_stride, rows, group, positions,
                                 static_cast<const uint16_t*>(seq.k_cache) + head0,
                                 static_cast<const uint16_t*>(seq.v_cache) + head0, kv_stride, hd,
                                 args.scale, out, args.out_row_stride, work.data());
          } else {
            isa_.attend_rows(q, args.q_row_stride, rows, group, positions,
                             static_cast<const float*>(seq.k_cache) + head0,
                             static_cast<const float*>(seq.v_cache) + head0, kv_stride, hd,
                             args.scale, out, args.out_row_stride, work.data());
          }
          return;
        }
        task -= n_tile_tasks;
        if (task < n_run_tasks) {
          const RunRef& run = runs[task / args.n_kv_heads];
          const AttentionSequence& seq = *run.seq;
          const int64_t kvh = task % args.n_kv_heads;
          const auto [kv_stride, head0] = kv_layout(seq, kvh);
          const int64_t n_keys = static_cast<int64_t>(seq.positions[run.index]) + 1;
          std::vector<float>& scores = attn_scratch_[thread];
          const int64_t need = AttendCausalScores(run.rows, group, n_keys);
          if (static_cast<int64_t>(scores.size()) < need) scores.resize(need);
          const int64_t row = seq.first_token + run.index;
          const float* q = args.q + row * args.q_row_stride + kvh * group * hd;
          float* out = args.out + row * args.out_row_stride + kvh * group * hd;
          if (seq.kv_dtype == KvDtype::kF16) {
            isa_.attend_causal_f16(q, args.q_row_stride, run.rows, group,
                                   static_cast<const uint16_t*>(seq.k_cache) + head0,
                                   static_cast<const uint16_t*>(seq.v_cache) + head0, kv_stride,
                                   n_keys, hd, args.scale, scores.data(), out, args.out_row_stride);
          } else {
            isa_.attend_causal(q, args.q_row_stride, run.rows, group,
                               static_cast<const float*>(seq.k_cache) + head0,
                               static_cast<const float*>(seq.v_cache) + head0, kv_stride, n_keys,
                               hd, args.scale, scores.data(), out, args.out_row_stride);
          }
          return;
        }
        task -= n_run_tasks;
        const TokenRef& tr = tokens[task / args.n_kv_heads];
        const int64_t kvh = task % args.n_kv_heads;
        const int64_t n_keys = static_cast<int64_t>(tr.seq->positions[tr.index]) + 1;
        std::vector<float>& scores = attn_scratch_[thread];
        if (static_cast<int64_t>(scores.size()) < group * n_keys) {
          scores.resize(group * n_keys);
        }
        const int64_t h0 = kvh * group;  // its first query head
        const float* q = args.q + tr.row * args.q_row_stride + h0 * hd;
        float* out = args.out + tr.row * args.out_row_stride + h0 * hd;
        const auto [kv_stride, head0] = kv_layout(*tr.seq, kvh);
        const float* k;
        const float* v;
        int64_t stride = kv_stride;
        if (tr.seq->kv_dtype == KvDtype::kF16) {
          const uint16_t* kh = static_cast<const uint16_t*>(tr.seq->k_cache) + head0;
          const uint16_t* vh = static_cast<const uint16_t*>(tr.seq->v_cache) + head0;
          if (isa_.attend_f16) {
            isa_.attend_f16(q, hd, group, kh, vh, kv_stride, n_keys, hd, args.scale, scores.data(),
                            out, hd);
            return;
          }
          // Widen this KV head's rows (exactly) and attend over the float copy.
          std::vector<float>& wide = kv_scratch_[thread];
          if (static_cast<int64_t>(wide.size()) < 2 * n_keys * hd) wide.resize(2 * n_keys * hd);
          for (int64_t j = 0; j < n_keys; ++j) {
            for (int64_t c = 0; c < hd; ++c) {
              wide[j * hd + c] = F16ToF32(kh[j * kv_stride + c]);
              wide[(n_keys + j) * hd + c] = F16ToF32(vh[j * kv_stride + c]);
            }
          }
          k = wide.data();
          v = wide.data() + n_keys * hd;
          stride = hd;
        } else {
          k = static_cast<const float*>(tr.seq->k_cache) + head0;
          v = static_cast<const float*>(tr.seq->v_cache) + head0;
        }
        if (isa_.attend) {
          isa_.attend(q, hd, group, k, v, stride, n_keys, hd, args.scale, scores.data(), out, hd);
        } else {
          AttendComposed(isa_, q, hd, group, k, v, stride, n_keys, hd, args.scale, scores.data(),
                         out, hd);
        }
      });
}

void CpuBackend::SiluMul(const float* gate, const float* up, int64_t rows, int64_t n,
                         int64_t stride, float* out) {
  ForRows(pool_, rows, n, [&](int64_t r) {
    isa_.silu_mul(gate + r * stride, up + r * stride, n, out + r * stride);
  });
}

void CpuBackend::Softmax(float* x, int64_t rows, int64_t n) {
  ForRows(pool_, rows, n, [&](int64_t r) { isa_.softmax_row(x + r * n, n); });
}

void CpuBackend::Add(const float* a, const float* b, int64_t n, float* out) {
  constexpr int64_t kChunk = 1 << 16;
  pool_.ParallelFor(CeilDiv(n, kChunk), [&](int64_t t, int) {
    const int64_t i0 = t * kChunk;
    isa_.add(a + i0, b + i0, std::min(kChunk, n - i0), out + i0);
  });
}

void CpuBackend::Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  pool_.ParallelFor(n, [&](int64_t i, int) {
    isa_.decode_rows(table, ids[i], 1, 0, table.cols, out + i * table.cols, table.cols);
  });
}

int64_t CpuBackend::Argmax(const float* x, int64_t n) {
  // The first index of the largest value that is not NaN (0 when all are NaN).
  // The vector tables have a kernel of their own (IsaKernels::argmax); the
  // scalar table takes two passes the compiler vectorises (greedy decoding
  // runs this over the whole vocabulary every token; one branchy pass took
  // ~110 us at 151936): the maximum in independent lanes (a NaN never
  // compares greater, so it never enters), then the first block that holds it.
  if (isa_.argmax) return isa_.argmax(x, n);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float& l : lane) l = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  }
  float m = kNegInf;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (float l : lane) m = l > m ? l : m;
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    bool any = false;
    for (int64_t j = b; j < end; ++j) any |= x[j] == m;
    if (!any) continue;
    for (int64_t j = b; j < end; ++j) {
      if (x[j] == m) return j;
    }
  }
  return 0;
}

void CpuBackend::TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  k = std::min(k, n);
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  auto key = [&](int32_t i) {
    return std::isnan(x[i]) ? -std::numeric_limits<float>::infinity() : x[i];
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    const float va = key(a), vb = key(b);
    return va > vb || (va == vb && a < b);
  });
  for (int64_t i = 0; i < k; ++i) {
    indices[i] = idx[i];
    values[i] = x[idx[i]];
  }
}

// ---- memory and the forward pass's small ops ----

bool CpuBackend::supports(Op op, WeightFormat format) const {
  switch (op) {
    case Op::kMatmul:
    case Op::kEmbedding:
      return supports(format);
    default:
      return op < Op::kCount;
  }
}

// ---- memory: plain host memory ----

Result<Buffer> CpuBackend::Allocate(int64_t bytes) {
  if (bytes < 0) return InvalidArgumentError("Allocate: negative size");
  // Large blocks come from mmap, populated now: a KV cache is committed when
  // it is made (a budget that does not fit fails at start, not mid-request),
  // and decode steps do not take page faults as the cache fills.
  constexpr int64_t kMapFrom = int64_t{1} << 20;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (bytes >= kMapFrom) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhaustedError("cannot map " + std::to_string(bytes) +
                                    " bytes of host memory: " + std::strerror(errno));
    }
    return Buffer(p, bytes, MemoryKind::kHost, [](void* q, int64_t n) {
      ::munmap(q, static_cast<size_t>(std::max<int64_t>(n, 1)));
    });
  }
  void* p = nullptr;
  if (::posix_memalign(&p, 64, size) != 0 || p == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(bytes) +
                                  " bytes of host memory");
  }
  std::memset(p, 0, size);
  return Buffer(p, bytes, MemoryKind::kHost, [](void* q, int64_t) { std::free(q); });
}

void CpuBackend::CopyToDevice(void* dst, const void* host_src, int64_t bytes) {
  if (bytes > 0 && dst != host_src) std::memcpy(dst, host_src, static_cast<size_t>(bytes));
}

void CpuBackend::CopyToHost(void* host_dst, const void* src, int64_t bytes) {
  if (bytes > 0 && host_dst != src) std::memcpy(host_dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids,
                                int64_t n, float* out) {
  pool_.ParallelFor(n, [&](int64_t i, int) {
    const int64_t local = static_cast<int64_t>(ids[i]) - first_row;
    float* row = out + i * table.cols;
    if (local >= 0 && local < table.rows) {
      isa_.decode_rows(table, local, 1, 0, table.cols, row, table.cols);
    } else {
      std::memset(row, 0, static_cast<size_t>(table.cols) * sizeof(float));
    }
  });
}

void CpuBackend::KvStore(const KvStoreArgs& a) {
  const int64_t hd = a.head_dim;
  for (int64_t t = 0; t < a.n; ++t) {
    for (int64_t h = 0; h < a.n_kv_heads; ++h) {
      const int64_t dst = h * a.head_stride + (a.first_pos + t) * a.position_stride;
      const float* ks = a.k + t * a.row_stride + h * hd;
      const float* vs = a.v + t * a.row_stride + h * hd;
      if (a.dtype == KvDtype::kF32) {
        std::memcpy(static_cast<float*>(a.k_cache) + dst, ks, hd * sizeof(float));
        std::memcpy(static_cast<float*>(a.v_cache) + dst, vs, hd * sizeof(float));
        continue;
      }
      // Half: saturate at the largest finite half instead of overflowing to inf.
      constexpr float kMaxHalf = 65504.0f;
      uint16_t* kh = static_cast<uint16_t*>(a.k_cache) + dst;
      uint16_t* vh = static_cast<uint16_t*>(a.v_cache) + dst;
      for (int64_t c = 0; c < hd; ++c) {
        kh[c] = F32ToF16(std::clamp(ks[c], -kMaxHalf, kMaxHalf));
        vh[c] = F32ToF16(std::clamp(vs[c], -kMaxHalf, kMaxHalf));
      }
    }
  }
}

void CpuBackend::AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) {
  for (int64_t r = 0; r < rows; ++r) isa_.add(x + r * stride, v, n, x + r * stride);
}

void CpuBackend::Relu2(float* x, int64_t n) {
  // The vector tables: the same bits in 8-16 lanes (D, 2048 elements, one
  // MLP row of nanochat-demo's four layers: 1.27 us this loop, 0.15 us).
  if (isa_.relu2) {
    isa_.relu2(x, n);
    return;
  }
  // The scalar table. Branch-free: the square's bits masked by the sign test
  // (GCC turns a ternary back into a branch). The sign of an MLP activation is
  // a coin toss, and the branchy loop mispredicted half of them (~5 us per
  // 2048 elements, 6% of a 5-row nanochat verify step). NaN and -inf give 0.
  for (int64_t i = 0; i < n; ++i) {
    const float square = x[i] * x[i];
    uint32_t bits;
    std::memcpy(&bits, &square, sizeof(bits));
    bits &= 0u - static_cast<uint32_t>(x[i] > 0.0f);
    std::memcpy(&x[i], &bits, sizeof(bits));
  }
}

void CpuBackend::SoftCap(float* x, int64_t n, float cap) {
  if (!isa_.soft_cap) {  // the scalar table: the reference
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
    return;
  }
  // A decode step's few vocabulary rows take ~1 us each: no thread hand-off.
  // Prefill logits of every row are spread; elements do not depend on the split.
  constexpr int64_t kChunk = int64_t{1} << 16;
  if (n <= kChunk) {
    isa_.soft_cap(x, n, cap);
    return;
  }
  pool_.ParallelFor(CeilDiv(n, kChunk), [&](int64_t t, int) {
    const int64_t i0 = t * kChunk;
    isa_.soft_cap(x + i0, std::min(kChunk, n - i0), cap);
  });
}

void CpuBackend::Fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

void CpuBackend::GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows,
                            int64_t n, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(out + r * n, x + rows[r] * ldx, static_cast<size_t>(n) * sizeof(float));
  }
}

void CpuBackend::ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows,
                                const float* weights, int64_t n_rows, int64_t n, float* out,
                                int64_t ldo) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float w = weights ? weights[r] : 1.0f;
    const float* src = x + r * ldx;
    float* dst = out + rows[r] * ldo;
    for (int64_t c = 0; c < n; ++c) dst[c] += w * src[c];
  }
}

void CpuBackend::Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace octet::kernels::cpu
