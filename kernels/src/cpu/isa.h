// Internal: the single-threaded inner kernels one CPU instruction set provides.
// CpuBackend (cpu_backend.cpp) splits every op into chunks for the thread pool
// and calls these on each chunk; each ISA file fills one table. The scalar
// table is the reference; the AVX2 and NEON tables are checked against it by
// the conformance test (through the public backends).
//
// The ISA files are compiled with their own target flags (-mavx2 ... for
// isa_avx2.cpp), so they must not define or instantiate anything that other
// translation units also instantiate (no std:: templates): the linker could pick
// the AVX2 copy for a caller on a machine without AVX2.
#pragma once

#include <cstdint>

#include "octet/kernels/weight.h"

namespace octet::kernels::cpu {

// Tile limits for dot_tile (the GEMM micro-kernel in dot-product form).
inline constexpr int kTileRows = 4;  // rows of A (activations)
inline constexpr int kTileCols = 3;  // rows of B (weights)
// gemv takes up to this many activation rows per call (weights decoded in registers).
inline constexpr int kGemvMaxRows = 8;

struct IsaKernels {
  const char* name;

  // Dequantizes the block rows [row0, row0+nrows) x cols [col0, col0+ncols) of
  // w into out (row-major, rows `ldo` floats apart). For NVFP4, col0 is a
  // multiple of 16 and ncols is a multiple of 16.
  void (*decode_rows)(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0,
                      int64_t ncols, float* out, int64_t ldo);

  // y[i*ldy + (r - row0)] (+)= x[i*ldx + :] · W[r, :] for i < m (m <= kGemvMaxRows),
  // r in [row0, row1): weights decoded once, in registers.
  void (*gemv)(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate);

  // c[i*ldc + j] (+)= sum_{k < kc} a[i*lda + k] * b[j*ldb + k], i < mr <= 4, j < nr <= 3.
  void (*dot_tile)(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, int mr,
                   int nr, float* c, int64_t ldc, bool accumulate);

  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);  // y += alpha * x
  void (*scale)(float alpha, float* y, int64_t n);                 // y *= alpha
  void (*add)(const float* a, const float* b, int64_t n, float* out);
  // out = x * rsqrt(mean(x^2) + eps) * w (w may be null).
  void (*rmsnorm_row)(const float* x, const float* w, float eps, int64_t n, float* out);
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  // In place. exp: std::exp in the scalar table, a vector exp within 1 ulp in
  // the AVX2 and AVX-512 ones (ExpAvx2), ExpNeon in the NEON ones.
  void (*softmax_row)(float* x, int64_t n);

  // Attention of n_q query heads that share one KV head: for query row i
  // (q + i*q_stride, hd floats) and keys j < n_keys (k + j*kv_stride, likewise
  // v), p_ij = softmax_j(scale * q_i . k_j) and out + i*out_stride gets
  // sum_j p_ij v_j. scores: scratch of n_q * n_keys floats. Null: CpuBackend
  // composes dot, softmax_row and axpy (the reference order; scalar).
  void (*attend)(const float* q, int64_t q_stride, int64_t n_q, const float* k, const float* v,
                 int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                 float* out, int64_t out_stride);
  // The same with keys and values stored as IEEE half floats (an F16 KV cache),
  // widened exactly as they are read; kv_stride counts halves. Null: CpuBackend
  // widens the rows into float scratch and calls attend (scalar).
  void (*attend_f16)(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* k,
                     const uint16_t* v, int64_t kv_stride, int64_t n_keys, int64_t hd, float scale,
                     float* scores, float* out, int64_t out_stride);

  // Batched decode of BF16 weights through a matrix unit (AMX); null in tables
  // without one. CpuBackend packs a call's activations once,
  // pack_gemv_activations(x, m, ldx, k, packed) into gemv_packed_size(m, k)
  // uint16s, then every task calls gemv_packed, which does what gemv does for
  // a BF16 w with w.cols == k and 1 <= m <= kGemvMaxRows (CpuBackend uses it
  // from 5 rows), reading `packed` for the first k / 32 * 32 columns and x for
  // the rest.
  int64_t (*gemv_packed_size)(int64_t m, int64_t k);
  void (*pack_gemv_activations)(const float* x, int64_t m, int64_t ldx, int64_t k,
                                uint16_t* packed);
  void (*gemv_packed)(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                      const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
                      bool accumulate);
  // The same for prefill-sized batches (any m >= 1; CpuBackend uses it above
  // kGemvMaxRows): pack_gemm_activations(x, m, ldx, k, packed) into
  // gemm_packed_size(m, k) uint16s once, then gemm_packed on each task's rows.
  // The packing of rows [16 b, 16 b + 16) is gemm_packed_size(16, k) uint16s
  // at offset b * gemm_packed_size(16, k), so blocks of 16 rows may be packed
  // separately.
  int64_t (*gemm_packed_size)(int64_t m, int64_t k);
  void (*pack_gemm_activations)(const float* x, int64_t m, int64_t ldx, int64_t k,
                                uint16_t* packed);
  // gemm_packed scales each dot product by out_scale before it stores (1 for
  // BF16 weights; an NVFP4 matrix's global scale for its rows decoded by
  // decode_nvfp4_bf16, which writes rows [row0, row0 + nrows) of an NVFP4 w
  // as BF16 E2M1 x E4M3 products, exact, nrows x w.cols).
  void (*gemm_packed)(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                      const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
                      bool accumulate, float out_scale);
  void (*decode_nvfp4_bf16)(const WeightMatrix& w, int64_t row0, int64_t nrows, uint16_t* out);

  // Decode of a few activation rows against NVFP4 weights in integers
  // (AVX512-VNNI, AVX2, SDOT), reading the matrix's tiles (weight.h); null in
  // tables without it. Each 16-value block of an activation row is rounded
  // to integers after a power-of-two scaling, keeping at least 15 bits of
  // its largest value (KernelBackend::UsesNvfp4Tiles). CpuBackend packs each row once:
  // pack_nvfp4_tiles_activation(x, k, packed) writes
  // nvfp4_tiles_packed_size(k) bytes and returns false when x cannot go this
  // way (a value that is not finite, or a block's largest magnitude nonzero
  // but below 2^-94): then the row-major kernels run. gemv_nvfp4_tiles:
  // y[i*ldy + r - row0] (+)= W[r, :] . x_i for i < m and r in [row0, row1),
  // both multiples of 16, w.tiles set and w.cols == k, row i packed at
  // packed + i * nvfp4_tiles_packed_size(k). Every row's weights are decoded
  // once per four rows (the cost grows with m; CpuBackend sends it up to
  // kNvfp4TilesMaxRows).
  int64_t (*nvfp4_tiles_packed_size)(int64_t k);
  bool (*pack_nvfp4_tiles_activation)(const float* x, int64_t k, uint8_t* packed);
  void (*gemv_nvfp4_tiles)(const WeightMatrix& w, int64_t row0, int64_t row1, const uint8_t* packed,
                           int64_t m, float* y, int64_t ldy, bool accumulate);

  // The logit soft-cap in place, x[i] = cap * tanh(x[i] * (1 / cap)), through
  // a vector tanh within kVectorTanhMaxAbsError of the exact tanh for every
  // float (+-inf give +-1, NaN stays NaN, -0 stays -0); the tail of a row
  // goes through the same vector code, so no element depends on n. Null (the
  // scalar table): CpuBackend runs std::tanh per element, the reference.
  void (*soft_cap)(float* x, int64_t n, float cap);

  // nanochat's ReLU² in place, x[i] = x[i] > 0 ? x[i] * x[i] : +0 (NaN, -0
  // and -inf give +0): the same bits as the scalar loop, which CpuBackend
  // runs where this is null.
  void (*relu2)(float* x, int64_t n);

  // The first index of the largest value that is not NaN (0 when all are
  // NaN): greedy decoding and every verified draft take one per vocabulary
  // row. Null: CpuBackend's two-pass loop.
  int64_t (*argmax)(const float* x, int64_t n);

  // gemv, with each row's output the bits gemv gives that row alone
  // (m = 1) whatever m is (KernelBackend::set_batch_invariant). Null where gemv
  // itself is so (every table but AVX-512's, whose 3-8-row dense kernel sums
  // in 512-bit lanes where one row takes the AVX2 kernel's 256).
  void (*gemv_batch_invariant)(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                               int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate);

  // Matmuls of dense weights (F32, BF16, F16) of up to this many rows take
  // gemv, in passes of kGemvMaxRows, rather than the GEMM; 0: 8 (CpuBackend's
  // kGemvBatchRows).
  // (NVFP4 stays at kGemvMaxRows: CpuBackend::DecodeRows.)
  int decode_batch_rows;

  // Causal attention of many rows of one sequence against one KV head (a
  // prefill chunk), a vector's width of query rows at a time (sixteen on
  // AVX-512, eight on AVX2) with the rows in the lanes, so that scores,
  // softmax and weights take no horizontal sums: query
  // row i's `group` heads start at q + i * q_row_stride (hd floats apart) and
  // attend to keys 0..positions[i] (k + j * kv_stride, likewise v); out + i *
  // out_row_stride gets its heads the same way. The same results as attend up
  // to summation order, not the same bits (CpuBackend leaves batch-invariant
  // steps on attend). work: attend_rows_work(hd) floats. Null (or a head size
  // other than 64 or 128): attend a row at a time.
  int64_t (*attend_rows_work)(int64_t hd);
  void (*attend_rows)(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                      const int32_t* positions, const float* k, const float* v, int64_t kv_stride,
                      int64_t hd, float scale, float* out, int64_t out_row_stride, float* work);
  void (*attend_rows_f16)(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                          const int32_t* positions, const uint16_t* k, const uint16_t* v,
                          int64_t kv_stride, int64_t hd, float scale, float* out,
                          int64_t out_row_stride, float* work);

  // attend for n_rows query rows of one sequence at consecutive positions (a
  // speculative verify step's rows, a short chunk): row r (q + r *
  // q_row_stride, its n_q heads hd apart) attends keys [0, n_keys + r) and
  // writes out + r * out_row_stride likewise. Every row gets the bits attend
  // gives it alone (batch-invariant steps take it), the rows sharing their
  // reads of K and V. scores: n_q * (n_rows * n_keys + n_rows * (n_rows - 1)
  // / 2) floats (AttendCausalScores). Null: a row at a time through attend.
  void (*attend_causal)(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q,
                        const float* k, const float* v, int64_t kv_stride, int64_t n_keys,
                        int64_t hd, float scale, float* scores, float* out, int64_t out_row_stride);
  void (*attend_causal_f16)(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q,
                            const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t n_keys,
                            int64_t hd, float scale, float* scores, float* out,
                            int64_t out_row_stride);
};

// The scores scratch attend_causal needs.
inline int64_t AttendCausalScores(int64_t n_rows, int64_t n_q, int64_t n_keys) {
  return n_q * (n_rows * n_keys + n_rows * (n_rows - 1) / 2);
}

// The bound the vector tanh of soft_cap keeps (absolute, against the exact
// tanh; the conformance test checks it on every backend over float bit
// patterns of the whole range). |x| < 0.5 goes through tanh's odd Taylor
// series to x^15 (within 2 ulp, relative), the rest through
// 1 - 2 / (exp(2|x|) + 1) with the ISA's vector exp. Measured over every
// float (AVX-512, 2026-12-02): 9.5e-8 at worst (x = 0.554), 1.06 ulp relative
// below 0.5.
inline constexpr float kVectorTanhMaxAbsError = 1e-7f;

const IsaKernels& ScalarKernels();
#if defined(__x86_64__)
const IsaKernels& Avx2Kernels();  // call only when the CPU has AVX2, FMA and F16C
// out[i] = exp(x[i]) for i < n through the vector exp that the AVX2 (and so the
// AVX-512) softmax_row and silu_mul use: less than 1 ulp from the exact value
// for every float, +-inf and NaN included. Same CPU check as Avx2Kernels.
void ExpAvx2(const float* x, int64_t n, float* out);
// Fills the prefill GEMM entries (gemm_packed ...) of an AVX2 table with a
// packed f32-FMA GEMM of BF16 weights (NVFP4 through decode_nvfp4_bf16) that
// reads the activations in place (gemm_packed_size 0; isa_avx2_gemm.cpp).
// Batched decode stays on the table's gemv (that file says why).
void AddAvx2GemmKernels(IsaKernels* t);
// Fills the NVFP4 tile decode entries (gemv_nvfp4_tiles ...) of an AVX2 table
// with PMADDWD on 16-bit activations (isa_avx2_nvfp4.cpp; 15 bits of each
// block where the VNNI kernel keeps 22).
// The AVX-512 table inherits them and replaces them with VPDPBUSD where the
// CPU has AVX512-VNNI.
void AddAvx2Nvfp4TileKernels(IsaKernels* t);
// The AVX2 table with AVX-512 NVFP4 and batched-decode kernels; call only when
// the CPU has AVX2 and AVX-512 F, BW, DQ, VL and VBMI.
const IsaKernels& Avx512Kernels();
// The AVX-512 table with dense decode (BF16 and F16 rows of up to 4096
// columns, one or two activation rows, and every row when batch-invariant)
// one weight row at a time, and NVFP4 tiles one 16-row group at a time: a
// single memory stream a core, which AMD Zen 4 reads fastest. Also 3-8 dense
// rows with the activations held in registers, and F32 rows of up to 2048
// columns in 512-bit lanes with the same sums for every batch size
// (isa_avx512.cpp says what was measured). Same conditions.
const IsaKernels& Avx512RowsKernels();
// Fills the NVFP4 tile decode entries (gemv_nvfp4_tiles ...) of an AVX-512
// table when the CPU has AVX512-VNNI (isa_avx512_vnni.cpp); leaves t as it is
// otherwise. `one_stream`: a task reads its 16-row groups one after another
// (avx512-rows) instead of four side by side.
void AddAvx512VnniKernels(IsaKernels* t, bool one_stream = false);
// Fills the prefill GEMM entries (gemm_packed ...) of an AVX-512 table with a
// packed f32-FMA GEMM of BF16 and F32 weights that reads the activations in
// place (gemm_packed_size 0; isa_avx512_gemm.cpp). The AMX table replaces
// them with its tile GEMM.
void AddAvx512GemmKernels(IsaKernels* t);
// Replaces them with a GEMM that rounds the activations to BF16 and multiplies
// on VDPBF16PS (isa_avx512_gemm.cpp says when and why; CreateBackend, on
// OCTET_CPU_MATMUL=bf16). False, the table unchanged, where the CPU lacks
// AVX512-BF16.
bool AddAvx512Bf16GemmKernels(IsaKernels* t);
// Whether AMX-BF16 is present and Linux lets this process use the tile state
// (asked once, here). The AVX-512 table plus gemv_packed on AMX tiles; call
// only when Avx512Kernels() may be called and AmxUsable().
bool AmxUsable();
const IsaKernels& AmxKernels();
#endif
#if defined(__aarch64__)
// Plain NEON (every aarch64 CPU): isa_neon.cpp.
const IsaKernels& NeonKernels();
// out[i] = exp(x[i]) for i < n through the vector exp of the NEON softmax_row,
// silu_mul and attention (isa_neon.cpp says how): less than 1 ulp from the
// exact value (test_kernel_vector_exp).
void ExpNeon(const float* x, int64_t n, float* out);
// The NEON table with NVFP4 decode from the matrix's tiles through SDOT
// (isa_neon_ext.cpp); call only when the CPU has the dot product instructions
// (HWCAP_ASIMDDP).
const IsaKernels& NeonDotprodKernels();
// The dotprod table with batched BF16 decode and prefill through BFMMLA (NVFP4
// prefill as exact BF16 products); call only when the CPU has DOTPROD and BF16
// (HWCAP2_BF16).
const IsaKernels& NeonBf16Kernels();
#endif

}  // namespace octet::kernels::cpu
