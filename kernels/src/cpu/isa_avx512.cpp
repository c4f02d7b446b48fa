// AVX-512 (F, BW, DQ, VL, VBMI) kernels on x86-64 for the decode GEMVs that
// are compute-bound on AVX2: NVFP4 at every batch size, and dense weights
// against 3-8 activation rows; everything else is the AVX2 table. Compiled
// with -mavx512... and only called after the runtime check in backend.cpp; see
// isa.h for why nothing here may instantiate std:: templates.
//
// Why NVFP4 needs it: on AVX2 an NVFP4 GEMV is compute-bound. Turning 8 E2M1
// codes into floats takes five shuffle/shift ops there (AVX2 has no 16-entry
// permute), so two cores decode ~10 GB/s of packed weights, a third of this
// machine's memory bandwidth. With AVX-512, one shift puts each of a block's
// 16 codes in its own lane and one 16-entry VPERMPS maps code (sign included)
// to value: two ops per 16 weights.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/isa.h"
#include "cpu/isa_avx512_reduce.h"

// GCC 12 reports its own AVX-512 intrinsics (the masked forms behind
// _mm512_multishift_epi64_epi8 and _mm512_reduce_add_ps) as reading an
// uninitialised value (GCC PR 105593); the code here has none.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))
#define OCTET_INLINE_LAMBDA __attribute__((always_inline))

// One NVFP4 block (8 bytes, 16 codes, low nibble first) -> its 16 E2M1 values
// in column order (the prefill panels' decode; decode GEMVs use
// Nvfp4ShiftDecoder16 below).
struct Nvfp4Decoder16 {
  // Byte 4i%8 of qword i/2 (the low byte of 32-bit lane i) takes the 8 bits at
  // 4i of the block's 64-bit word: code i in its low 4 bits. VPERMPS reads
  // only those 4 bits, so the rest of each lane does not matter.
  __m512i select =
      _mm512_set_epi64((60LL << 32) | 56, (52LL << 32) | 48, (44LL << 32) | 40, (36LL << 32) | 32,
                       (28LL << 32) | 24, (20LL << 32) | 16, (12LL << 32) | 8, (4LL << 32) | 0);
  __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                 -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);

  OCTET_INLINE __m512 Decode16(const uint8_t* block) const {
    int64_t word;
    memcpy(&word, block, 8);
    const __m512i codes = _mm512_multishift_epi64_epi8(select, _mm512_set1_epi64(word));
    return _mm512_permutexvar_ps(codes, values);
  }
};

// The 16 E2M1 values times each of the 256 E4M3 scales (exact in f32): one
// 64-byte row per scale byte, 16 KiB that stay in L1. Loading a block's row
// replaces a broadcast and a multiply on the two vector ports that the
// decode is bound by; filled once, by Avx512Kernels().
alignas(64) float g_scaled_values[256][16];

void FillScaledValues() {
  static const float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const float* e4m3 = E4m3Table();
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 16; ++c) g_scaled_values[s][c] = kValues[c] * e4m3[s];
  }
}

OCTET_INLINE __m512 ScaledValues(uint8_t scale) { return _mm512_load_ps(g_scaled_values[scale]); }

OCTET_INLINE void Store(float* out, float v, bool accumulate) { *out = accumulate ? *out + v : v; }

OCTET_INLINE __m512 AddPs(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

// The batched kernels are templates on their activation rows M: fn(RowCount<M>{})
// runs the one for m, M = kMin..8 (8 for more; the callers pass m >= kMin).
template <int M>
struct RowCount {
  static constexpr int kM = M;
};
template <int kMin, class Fn>
OCTET_INLINE void WithRowCount(int64_t m, Fn fn) {
  static_assert(kMin >= 1 && kMin <= 3);
  if constexpr (kMin <= 1) {
    if (m <= 1) return fn(RowCount<1>{});
  }
  if constexpr (kMin <= 2) {
    if (m == 2) return fn(RowCount<2>{});
  }
  switch (m) {
    case 3:
      return fn(RowCount<3>{});
    case 4:
      return fn(RowCount<4>{});
    case 5:
      return fn(RowCount<5>{});
    case 6:
      return fn(RowCount<6>{});
    case 7:
      return fn(RowCount<7>{});
    default:
      return fn(RowCount<8>{});
  }
}

// `v`, kept in a register: GCC otherwise folds a vector load that feeds
// several FMAs into each of them as a memory operand (see GemvRDenseMx).
OCTET_INLINE __m512 InRegister(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}

// Prefetch distance: the same columns of the next group of 4 rows (0: none).
// See isa_avx2.cpp (Gemv4Dense) for why decode prefetches.
OCTET_INLINE void Prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// One NVFP4 block -> its 16 values through a 16-entry table, the codes spread
// by a shift instead of a shuffle (see Gemv4Nvfp4 for why): VPSRLVD on the
// broadcast 64-bit word leaves code j (the low word shifted by 4j) in 32-bit
// lane 2j and code 8+j (the high word shifted by 4j) in lane 2j+1. The values
// come out in that interleaved order, so they meet activations stored the same
// way (InterleaveBlocks).
struct Nvfp4ShiftDecoder16 {
  __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);

  OCTET_INLINE __m512 Decode16(const uint8_t* block, __m512 table) const {
    int64_t word;
    memcpy(&word, block, 8);
    const __m512i codes = _mm512_srlv_epi32(_mm512_set1_epi64(word), shifts);
    return _mm512_permutexvar_ps(codes, table);
  }
};

// out[16b + 2j] = x[16b + j], out[16b + 2j + 1] = x[16b + 8 + j]: the
// activation order of Nvfp4ShiftDecoder16, for `cols` (a multiple of 16).
void InterleaveBlocks(const float* x, int64_t cols, float* out) {
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  for (int64_t c = 0; c < cols; c += 16) {
    _mm512_store_ps(out + c, _mm512_permutexvar_ps(order, _mm512_loadu_ps(x + c)));
  }
}

// Activations are interleaved on the stack, at most this many floats (64 KiB)
// per call; longer rows go through in column slices.
constexpr int64_t kMaxInterleavedFloats = 16384;

// Four weight rows (rows past nrows repeat row 0 and are not stored) against
// M = 1..4 activation rows, row i at xi + i * ldxi in InterleaveBlocks order.
// Each block is decoded once, through its scale's row of g_scaled_values (the
// reference's dequantized weight before the global scale), and used M times;
// the global scale is applied once at the end.
//
// Why the shift decoder: on this CPU family 512-bit shuffles issue only on
// port 5, 512-bit FMAs and shifts on port 0. Spreading the codes with
// VPMULTISHIFTQB put two port-5 ops on every 16 weights (spread, then the
// 16-entry permute); VPSRLVD moves the spread to port 0, beside the FMA. A/B
// from L2, one thread, M = 1: 17.9-18.7 -> 20.6-21.4 G weights/s (rows split
// between the two decoders was in between, 18.7-19.2).
// `prefetch`: bytes ahead of each row to prefetch (0: none).
template <int M>
void Gemv4Nvfp4(const WeightMatrix& w, const uint8_t* const* rows, const uint8_t* const* scales,
                int nrows, int64_t prefetch, const float* xi, int64_t ldxi, float* y, int64_t ldy,
                bool accumulate) {
  static_assert(M >= 1 && M <= 4);
  const Nvfp4ShiftDecoder16 dec;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  // Fully unrolled (constant indices), so the arrays live in registers.
  __m512 acc[4][M];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  auto block = [&](int64_t b) OCTET_INLINE_LAMBDA {
    __m512 xv[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) xv[i] = _mm512_load_ps(xi + i * ldxi + b * 16);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 wv = dec.Decode16(rows[j] + b * 8, ScaledValues(scales[j][b]));
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) acc[j][i] = _mm512_fmadd_ps(wv, xv[i], acc[j][i]);
    }
  };
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {  // 8 blocks = one 64-byte line per row
    if (prefetch != 0) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) Prefetch(rows[j] + prefetch + b * 8);
    }
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) block(b + u);
  }
  for (; b < blocks; ++b) block(b);
  for (int j = 0; j < nrows; ++j) {
    for (int i = 0; i < M; ++i) {
      Store(y + i * ldy + j, _mm512_reduce_add_ps(acc[j][i]) * w.global_scale, accumulate);
    }
  }
}

// y[i * ldy + r - row0] (+)= W[r, :] · x[i * ldx + :] for r in [row0, row1),
// i < m <= 4, W NVFP4.
void GemvNvfp4(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  const int64_t slice = kMaxInterleavedFloats / m / kNvfp4BlockSize * kNvfp4BlockSize;
  if (w.cols > slice) {
    for (int64_t c0 = 0; c0 < w.cols; c0 += slice) {
      const int64_t nc = w.cols - c0 < slice ? w.cols - c0 : slice;
      GemvNvfp4(w.ColSlice(c0, nc), row0, row1, x + c0, m, ldx, y, ldy, accumulate || c0 > 0);
    }
    return;
  }
  alignas(64) float xi[kMaxInterleavedFloats];
  for (int64_t i = 0; i < m; ++i) InterleaveBlocks(x + i * ldx, w.cols, xi + i * w.cols);
  // Prefetch the same columns of the group of 4 rows at least 4 KiB on (two
  // groups for 1024 columns, where one group is 2 KiB), whole groups.
  constexpr int64_t kPrefetchBytes = 4096;
  const int64_t group_bytes = 4 * w.row_stride;
  const int64_t ahead = (kPrefetchBytes + group_bytes - 1) / group_bytes;
  for (int64_t r = row0; r < row1; r += 4) {
    const int nrows = static_cast<int>(row1 - r < 4 ? row1 - r : 4);
    const uint8_t* rows[4];
    const uint8_t* scales[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r + (j < nrows ? j : 0);
      rows[j] = static_cast<const uint8_t*>(w.data) + row * w.row_stride;
      scales[j] = w.scales + row * w.scale_row_stride;
    }
    // Past this call's rows too (see the AVX2 Gemv).
    const int64_t prefetch = ahead * group_bytes;
    float* out = y + (r - row0);
    switch (m) {
      case 1:
        Gemv4Nvfp4<1>(w, rows, scales, nrows, prefetch, xi, w.cols, out, ldy, accumulate);
        break;
      case 2:
        Gemv4Nvfp4<2>(w, rows, scales, nrows, prefetch, xi, w.cols, out, ldy, accumulate);
        break;
      case 3:
        Gemv4Nvfp4<3>(w, rows, scales, nrows, prefetch, xi, w.cols, out, ldy, accumulate);
        break;
      default:
        Gemv4Nvfp4<4>(w, rows, scales, nrows, prefetch, xi, w.cols, out, ldy, accumulate);
        break;
    }
  }
}

// ---- dense batched decode: two weight rows x M = 2..8 activation rows -----

// 16 BF16 / F16 / F32 weights as floats.
OCTET_INLINE __m512 LoadBf16x16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
struct LoadBf16 {
  static constexpr int kBytes = 2;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return LoadBf16x16(row + c * 2);
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 2)));
  }
};
struct LoadF32 {
  static constexpr int kBytes = 4;
  static OCTET_INLINE __m512 Load(const uint8_t* row, int64_t c) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row + c * 4));
  }
};

// The weight value at column c of a dense row (the < 16-column tail).
float DenseAt(const WeightMatrix& w, const uint8_t* row, int64_t c) {
  switch (w.format) {
    case WeightFormat::kBF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    case WeightFormat::kF16: {
      uint16_t h;
      memcpy(&h, row + c * 2, 2);
      return _cvtsh_ss(h);
    }
    default: {
      float f;
      memcpy(&f, row + c * 4, 4);
      return f;
    }
  }
}

// Two weight rows (r1 may equal r0; then only row 0 is stored) against M
// activation rows: each 16-weight vector is converted once and used M times,
// 2*M accumulators of the 32 registers. A batch of 8 decode rows is one pass
// over the weights instead of two (or, for 2 rows, instead of the AVX2
// kernel's two passes). Prefetches `prefetch` bytes ahead like the AVX2
// kernels.
//
// What bounds it at 8 rows (an AVX-512 Xeon without AMX, family 6 model 207,
// 2 cores): not the FMA units, which issue two 512-bit FMAs a cycle (5.4 G/s
// a core in a register-only loop; one with a 512-bit load operand from L1
// 4.5 G/s when the load is 64-byte aligned, 2.3 when it is not: the
// backend's buffers are 64-byte aligned, and activation rows of the usual
// widths, multiples of 16 floats, stay so). This loop runs at 4.4-4.8 G
// FMAs/s a core on weights in L1, 3.1-3.3 from L2 and 2.25 streaming a
// 151936 x 2048 lm_head from DRAM on both cores (35 ms, 18 GB/s of weights
// against STREAM's 27): each FMA needs 4 bytes of weights, and the stream
// and the FMAs do not fully overlap. Measured without gain (35-44 ms against
// 35-39): prefetching 2 or 8 rows ahead instead of 4, an L2 prefetch 16 rows
// ahead, non-temporal prefetches (0.5x), column blocks of 512, 768 or 2048,
// tasks of 32-256 rows, three weight rows a pass, and BF16 split into even
// and odd halves (one op per 16 weights instead of two, activations packed
// to match).
template <class L, int M>
void Gemv2DenseMx(const WeightMatrix& w, const uint8_t* r0, const uint8_t* r1, bool store_r1,
                  int64_t prefetch, const float* x, int64_t ldx, float* y, int64_t ldy,
                  bool accumulate) {
  static_assert(M >= 2 && M <= 8);
  const int64_t k = w.cols;
  // Fully unrolled (constant indices), so the arrays live in registers.
  __m512 a[M], b[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) a[i] = b[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    if (prefetch != 0 && (c * L::kBytes) % 64 == 0) {
      Prefetch(r0 + prefetch + c * L::kBytes);
      Prefetch(r1 + prefetch + c * L::kBytes);
    }
    const __m512 w0 = L::Load(r0, c), w1 = L::Load(r1, c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
      a[i] = _mm512_fmadd_ps(w0, xv, a[i]);
      b[i] = _mm512_fmadd_ps(w1, xv, b[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float s0 = _mm512_reduce_add_ps(a[i]), s1 = _mm512_reduce_add_ps(b[i]);
    for (int64_t t = c; t < k; ++t) {
      s0 += DenseAt(w, r0, t) * x[i * ldx + t];
      s1 += DenseAt(w, r1, t) * x[i * ldx + t];
    }
    Store(y + i * ldy, s0, accumulate);
    if (store_r1) Store(y + i * ldy + 1, s1, accumulate);
  }
}

// Batched decode walks the columns in blocks of this many: M activation rows
// of a block (8 x 4 KiB) stay in L1 while the task's weight rows stream past;
// whole 3072-column rows (8 x 12 KiB of activations) do not. A/B, 8 rows, 2
// threads, BF16 from DRAM: 1024 x 3072 64 -> 78-84 GFLOP/s, 1024 x 2048 62-65
// -> 68-77; matrices of up to 1024 columns are unchanged (one block).
constexpr int64_t kBatchColumnBlock = 1024;

template <class L, int M>
void GemvDenseBatch(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
                    float* y, int64_t ldy, bool accumulate) {
  const int64_t block = w.cols > kBatchColumnBlock ? kBatchColumnBlock : w.cols;
  for (int64_t c0 = 0; c0 < w.cols; c0 += block) {
    const int64_t nc = w.cols - c0 < block ? w.cols - c0 : block;
    const WeightMatrix part = nc == w.cols ? w : w.ColSlice(c0, nc);
    for (int64_t r = row0; r < row1; r += 2) {
      const uint8_t* r0 = static_cast<const uint8_t*>(part.data) + r * part.row_stride;
      const bool pair = r + 1 < row1;
      // Two pairs ahead, past this call's rows too (see the AVX2 Gemv).
      const int64_t prefetch = 4 * part.row_stride;
      Gemv2DenseMx<L, M>(part, r0, pair ? r0 + part.row_stride : r0, pair, prefetch, x + c0, ldx,
                         y + (r - row0), ldy, accumulate || c0 > 0);
    }
  }
}

// m >= 3 (Gemv gives 1 and 2 rows to the AVX2 kernel).
template <class L>
void GemvDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
               int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  WithRowCount<3>(m, [&](auto rows) OCTET_INLINE_LAMBDA {
    GemvDenseBatch<L, decltype(rows)::kM>(w, row0, row1, x, ldx, y, ldy, accumulate);
  });
}

void Gemv(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m, int64_t ldx,
          float* y, int64_t ldy, bool accumulate) {
  if (w.format != WeightFormat::kNvfp4) {
    // One row: memory-bound, and the AVX2 kernel keeps up. Two rows: its
    // 4-row passes beat the 2-row ones below (bench_gemv, BF16 Qwen3-0.6B
    // step, 2 threads, avx2 / avx512 at M=2: 53.1 / 62.9 and 58.7 / 68.8 ms;
    // at M=3 and 4 the AVX-512 kernel is ahead, 67.9 / 75.7 and 71.3 / 79.1).
    if (m <= 2) return Avx2Kernels().gemv(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    switch (w.format) {
      case WeightFormat::kBF16:
        return GemvDense<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      case WeightFormat::kF16:
        return GemvDense<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
      default:
        return GemvDense<LoadF32>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
    }
  }
  if (m > 4) {  // passes of at most 4 activation rows
    Gemv(w, row0, row1, x, 4, ldx, y, ldy, accumulate);
    Gemv(w, row0, row1, x + 4 * ldx, m - 4, ldx, y + 4 * ldy, ldy, accumulate);
    return;
  }
  GemvNvfp4(w, row0, row1, x, m, ldx, y, ldy, accumulate);
}

// ---- avx512-rows: dense decode one weight row at a time ----
//
// On AMD Zen 4 (a 2-core VM, docs/performance.md, "A fourth CPU") one core reads
// a single ascending stream of memory at 25-30 GB/s but two or four streams
// (rows read side by side, or far apart) at 19-22: the 4-row passes above
// read a BF16 matrix at 16-18 GB/s a core. One row at a time, a task's rows
// are one stream: 24-30 GB/s a core through CpuBackend::Matmul on 1024- to
// 4096-column rows (1 thread, 16384 x 4096: 17.1 -> 25.3 GB/s; 151936 x 1024:
// 16.0 -> 28.7). A decode of a Qwen3-30B-A3B-shaped model there ran at ~18
// tok/s whether the machine's STREAM rate was 38 or 67 GB/s: the passes, not
// the memory, bound it. Rows longer than kSequentialMaxCols keep the 4-row
// passes: one row at a time reloads the activation for every weight row, and
// past L1 (4096 x 14336: 18.0 -> 12.9 GB/s) that costs more than the stream
// gains. Intel's AVX-512 machines keep the passes they were measured with:
// this is a table of its own, "avx512-rows", which auto takes on AMD CPUs
// (backend.cpp).
constexpr int64_t kSequentialMaxCols = 4096;

bool TakesSequentialRows(const WeightMatrix& w) {
  return (w.format == WeightFormat::kBF16 || w.format == WeightFormat::kF16) &&
         w.cols <= kSequentialMaxCols;
}

// Rows row0..row1 against M = 1 or 2 activation rows, in memory order; two
// accumulators per activation row (columns 32j..32j+15 and 32j+16..32j+31:
// one 64-byte line of BF16 a step), each weight vector converted once. A
// row's sums depend on its weight row and activation row only, never on M.
template <class L, int M>
void GemvRowsSequential(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                        int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(M == 1 || M == 2);
  const int64_t k = w.cols;
  const float* x1 = x + (M - 1) * ldx;
  for (int64_t r = row0; r < row1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
      const __m512 w0 = L::Load(row, c), w1 = L::Load(row, c + 16);
      a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), a0);
      b0 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), b0);
      if constexpr (M == 2) {
        a1 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x1 + c), a1);
        b1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x1 + c + 16), b1);
      }
    }
    if (c + 16 <= k) {
      const __m512 w0 = L::Load(row, c);
      a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), a0);
      if constexpr (M == 2) a1 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x1 + c), a1);
      c += 16;
    }
    float s0 = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0));
    for (int64_t t = c; t < k; ++t) s0 += DenseAt(w, row, t) * x[t];
    Store(y + (r - row0), s0, accumulate);
    if constexpr (M == 2) {
      float s1 = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1));
      for (int64_t t = c; t < k; ++t) s1 += DenseAt(w, row, t) * x1[t];
      Store(y + ldy + (r - row0), s1, accumulate);
    }
  }
}

// m activation rows in passes of two (and one) over the task's rows: every
// activation row gets the bits it gets alone (the batch-invariant table's
// verify steps). Only the first pass reads the rows from memory; a task
// (GemvRowsPerTask: 64 rows, 512 KiB at 4096 BF16 columns) stays in L2 for
// the others, which cost a fraction of it. bench_mtp's verify steps (2
// threads, the GLM checkpoint at Qwen3-30B-A3B's shape) against one pass of
// all m rows with these sums: 4 rows 49 -> 40-43 ms, 8 rows 90 -> 66 ms (the
// avx512 table's 38-40 and 58-60 ms; 2 rows 32-33 there, 28 here).
template <class L>
void GemvSequentialRowsOf(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                          int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    GemvRowsSequential<L, 2>(w, row0, row1, x + i * ldx, ldx, y + i * ldy, ldy, accumulate);
  }
  if (i < m) {
    GemvRowsSequential<L, 1>(w, row0, row1, x + i * ldx, ldx, y + i * ldy, ldy, accumulate);
  }
}

void GemvSequentialRows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                        int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  if (w.format == WeightFormat::kBF16) {
    return GemvSequentialRowsOf<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  GemvSequentialRowsOf<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
}

// Batched decode (3-8 activation rows) for avx512-rows: R weight rows x M
// activation rows a pass, each activation vector loaded once into a register.
// Gemv2DenseMx lets GCC fold the activation loads into the FMAs as memory
// operands, so each activation vector is loaded once per weight row: Zen 4
// (machine D) loads one 512-bit vector a cycle, and an 8-row step of two
// weight rows issues 18 loads for 16 FMAs. Loaded once and reused R times
// (the 2 + 8 loads of R = 2 become R + M), a 240 x 1024 BF16 matrix in L2 on
// one core: 4 rows 29 -> 54 GFMA/s with R = 4 (the core's FMA peak is 56),
// 8 rows 24 -> 42 with R = 3. R * M accumulators, R weight vectors and one
// activation vector fit the 32 registers for R = 4 up to M = 6 and R = 3 for
// M = 7 and 8. Rows past `nrows` (< R) alias row 0 and are not stored.
template <class L, int R, int M>
void GemvRDenseMx(const WeightMatrix& w, const uint8_t* r0, int nrows, int64_t prefetch,
                  const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(R * M + R + 1 <= 32);
  const int64_t k = w.cols;
  const uint8_t* rows[R];
#pragma GCC unroll 4
  for (int j = 0; j < R; ++j) rows[j] = j < nrows ? r0 + j * w.row_stride : r0;
  __m512 acc[R][M];
#pragma GCC unroll 4
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    if (prefetch != 0 && (c * L::kBytes) % 64 == 0) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) Prefetch(rows[j] + prefetch + c * L::kBytes);
    }
    __m512 wv[R];
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j) wv[j] = L::Load(rows[j], c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = InRegister(_mm512_loadu_ps(x + i * ldx + c));
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < R; ++j) {
    if (j >= nrows) break;
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      float s = _mm512_reduce_add_ps(acc[j][i]);
      for (int64_t t = c; t < k; ++t) s += DenseAt(w, rows[j], t) * x[i * ldx + t];
      Store(y + i * ldy + j, s, accumulate);
    }
  }
}

template <class L, int M>
void GemvRowsBatch(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
                   float* y, int64_t ldy, bool accumulate) {
  constexpr int R = M <= 6 ? 4 : 3;
  const int64_t block = w.cols > kBatchColumnBlock ? kBatchColumnBlock : w.cols;
  for (int64_t c0 = 0; c0 < w.cols; c0 += block) {
    const int64_t nc = w.cols - c0 < block ? w.cols - c0 : block;
    const WeightMatrix part = nc == w.cols ? w : w.ColSlice(c0, nc);
    for (int64_t r = row0; r < row1; r += R) {
      const uint8_t* r0 = static_cast<const uint8_t*>(part.data) + r * part.row_stride;
      const int n = row1 - r < R ? static_cast<int>(row1 - r) : R;
      // Two groups ahead, past this call's rows too (see the AVX2 Gemv).
      GemvRDenseMx<L, R, M>(part, r0, n, 2 * R * part.row_stride, x + c0, ldx, y + (r - row0), ldy,
                            accumulate || c0 > 0);
    }
  }
}

// m >= 3.
template <class L>
void GemvRowsDense(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                   int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  WithRowCount<3>(m, [&](auto rows) OCTET_INLINE_LAMBDA {
    GemvRowsBatch<L, decltype(rows)::kM>(w, row0, row1, x, ldx, y, ldy, accumulate);
  });
}

// ---- avx512-rows: F32 decode, the same sums for every batch size ----
//
// F32 matrices (the models trained here, nanochat-demo): R weight rows x M
// activation rows a pass, R = 16 / M (4 for one row), so the R * M outputs
// are one TransposeReduce16 and leave as vectors, a masked store per
// activation row. Output o = i * R + j (activation row i, weight row j)
// accumulates in acc[kPackOrder[o]] and comes out in lane o. Every output sums
// its 16 lanes over the columns in order (the last 1-15 columns through
// zero-filled masked loads), then reduces them in _mm512_reduce_add_ps's
// order whatever R and M are: gemv and gemv_batch_invariant are one function,
// and a speculative verify step gets one-row decoding's bits from batched
// passes. The avx512 table gives F32 to the AVX2 kernel (8-wide lanes, one
// Hsum8 per 8 outputs, short rows in 4 streams); on a 128-column matrix an
// output is only 8 FMAs here, so a reduction of its own (8 shuffles and adds)
// would double the work: 16 at once take 45.
//
// D (AMD Zen 4), 1 thread, batch-invariant, a nanochat-demo decode step's
// matmuls (4 layers of 384/128/512 x 128 and 128 x 512, a 4096 x 128 lm_head;
// 5.2 MB in L3), us for 1 / 2 / 3 / 4 / 5 / 8 activation rows: AVX2 kernel
// 128 / 123 / 122 / 141 / 173 / 270, this 83 / 116 / 101 / 113 / 142 / 246.
// bench_speculative (KJV prompt, nanochat-demo): plain decoding 9,041 ->
// 10,700 tok/s, n-gram speculation (auto, K = 4) 11,831 -> 14,400.
// The weight vectors are pinned in registers (InRegister) as the activations
// are: GCC had folded each weight load into the M FMAs that use it, so R = 8,
// M = 2 read every weight vector twice from L1 and took 112-116 us where
// three rows took 97; pinned, 82-86 (bench_decode_steps, 2 sequences: a step
// 118-120 -> 104-108 us).
template <int R, int M>
void GemvF32Pass(const WeightMatrix& w, const uint8_t* r0, int nrows, int64_t prefetch,
                 const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  static_assert(R * M <= 16);
  const int64_t k = w.cols;
  const float* rows[R];
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) {
    rows[j] = reinterpret_cast<const float*>(j < nrows ? r0 + j * w.row_stride : r0);
  }
  __m512 acc[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  auto step = [&](int64_t c, __mmask16 mask) OCTET_INLINE_LAMBDA {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int j = 0; j < R; ++j) wv[j] = InRegister(_mm512_maskz_loadu_ps(mask, rows[j] + c));
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = InRegister(_mm512_maskz_loadu_ps(mask, x + i * ldx + c));
#pragma GCC unroll 16
      for (int j = 0; j < R; ++j) {
        __m512& a = acc[avx512::kPackOrder[i * R + j]];
        a = _mm512_fmadd_ps(wv[j], xv, a);
      }
    }
  };
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
#pragma GCC unroll 16
    for (int j = 0; j < R; ++j) Prefetch(reinterpret_cast<const uint8_t*>(rows[j] + c) + prefetch);
    step(c, 0xffff);
  }
  if (c < k) step(c, static_cast<__mmask16>((1u << (k - c)) - 1));
  if constexpr (R * M <= 4) {
    // Few outputs (one activation row): one reduction each, the same bits.
#pragma GCC unroll 4
    for (int o = 0; o < R * M; ++o) {
      const int i = o / R, j = o % R;
      if (j >= nrows) continue;
      const float s = _mm512_reduce_add_ps(acc[avx512::kPackOrder[o]]);
      Store(y + i * ldy + j, s, accumulate);
    }
    return;
  }
  const __m512 sums = avx512::TransposeReduce16(acc, AddPs);
  const __mmask16 out_mask = static_cast<__mmask16>((1u << nrows) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    // Lanes i * R .. i * R + R - 1 down to 0 .. R - 1.
    __m512 v =
        i == 0 ? sums
               : _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9,
                                                                         8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                        _mm512_set1_epi32(i * R)),
                                       sums);
    float* out = y + i * ldy;
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(out_mask, out), v);
    _mm512_mask_storeu_ps(out, out_mask, v);
  }
}

template <int M>
void GemvF32Rows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t ldx,
                 float* y, int64_t ldy, bool accumulate) {
  constexpr int R = M == 1 ? 4 : 16 / M;
  for (int64_t r = row0; r < row1; r += R) {
    const uint8_t* r0 = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
    const int n = row1 - r < R ? static_cast<int>(row1 - r) : R;
    // Two passes ahead, past this call's rows too (see the AVX2 Gemv).
    GemvF32Pass<R, M>(w, r0, n, 2 * R * w.row_stride, x, ldx, y + (r - row0), ldy, accumulate);
  }
}

// Which F32 matrices take GemvRowsF32 (for every m, so the choice depends on
// the matrix only): rows of up to kF32RowsMaxCols columns. Wider ones keep
// the avx512 table's kernels: D, 2 threads, a 1280 x 5120 matrix (26 MB)
// took 1.3-1.9x as long at 2 and 8 rows this way (R = 8 rows of 20 KiB side
// by side, and 8 activation rows of 20 KiB past L1), while 5120 x 1280 and
// 65536 x 1280 ran 1.0-1.9x as fast at 1-8 rows.
constexpr int64_t kF32RowsMaxCols = 2048;

bool TakesF32Rows(const WeightMatrix& w) {
  return w.format == WeightFormat::kF32 && w.cols <= kF32RowsMaxCols;
}

void GemvRowsF32(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
                 int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  for (; m > 8; m -= 8, x += 8 * ldx, y += 8 * ldy) {
    GemvF32Rows<8>(w, row0, row1, x, ldx, y, ldy, accumulate);
  }
  WithRowCount<1>(m, [&](auto rows) OCTET_INLINE_LAMBDA {
    GemvF32Rows<decltype(rows)::kM>(w, row0, row1, x, ldx, y, ldy, accumulate);
  });
}

void GemvBatchInvariant(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                        int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate);

// The avx512-rows table's gemv and gemv_batch_invariant. F32 of up to 2048
// columns: GemvRowsF32 in both (the same bits for every m). BF16/F16 of up to
// 4096 columns: one weight row at a time for one or two activation rows (two:
// as fast as the 4-row passes), and for every row in the batch-invariant
// table (the same bits). 3-8 dense rows otherwise through GemvRDenseMx;
// everything else (NVFP4, wider matrices' one or two rows, and the
// batch-invariant table's wider ones) as the avx512 table.
void GemvRows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x, int64_t m,
              int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  if (TakesF32Rows(w)) return GemvRowsF32(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  if (m <= 2 && TakesSequentialRows(w)) {
    return GemvSequentialRows(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m >= 3 && w.format == WeightFormat::kBF16) {
    return GemvRowsDense<LoadBf16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m >= 3 && w.format == WeightFormat::kF16) {
    return GemvRowsDense<LoadF16>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  if (m >= 3 && w.format == WeightFormat::kF32) {
    return GemvRowsDense<LoadF32>(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  Gemv(w, row0, row1, x, m, ldx, y, ldy, accumulate);
}
void GemvBatchInvariantRows(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                            int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  if (TakesF32Rows(w)) return GemvRowsF32(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  if (TakesSequentialRows(w)) {
    return GemvSequentialRows(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  GemvBatchInvariant(w, row0, row1, x, m, ldx, y, ldy, accumulate);
}

// Gemv with every row's bits those of Gemv on that row alone. Dense weights:
// the AVX2 kernel, which Gemv gives one row, for every m (its rows do not
// depend on the batch). NVFP4: Gemv itself, whose rows keep their sums in a
// pass of any 1-4 rows unless the pass splits the columns into slices that one
// row would not (GemvNvfp4: kMaxInterleavedFloats / m columns a slice); a
// matrix that wide goes a row at a time.
void GemvBatchInvariant(const WeightMatrix& w, int64_t row0, int64_t row1, const float* x,
                        int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  if (w.format != WeightFormat::kNvfp4) {
    return Avx2Kernels().gemv(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  const int64_t pass = m < 4 ? m : 4;
  if (w.cols <= kMaxInterleavedFloats / pass / kNvfp4BlockSize * kNvfp4BlockSize) {
    return Gemv(w, row0, row1, x, m, ldx, y, ldy, accumulate);
  }
  for (int64_t i = 0; i < m; ++i)
    Gemv(w, row0, row1, x + i * ldx, 1, ldx, y + i * ldy, ldy, accumulate);
}

void DecodeRows(const WeightMatrix& w, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                float* out, int64_t ldo) {
  if (w.format != WeightFormat::kNvfp4) {
    Avx2Kernels().decode_rows(w, row0, nrows, col0, ncols, out, ldo);
    return;
  }
  const float* e4m3 = E4m3Table();
  const Nvfp4Decoder16 dec;
  const __m512 gs = _mm512_set1_ps(w.global_scale);
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
    float* o = out + r * ldo;
    for (int64_t c = 0; c < ncols; c += kNvfp4BlockSize) {
      const int64_t col = col0 + c;
      // (E2M1 * scale) is exact; then the global scale: the reference order.
      const __m512 s = _mm512_set1_ps(e4m3[scales[col / kNvfp4BlockSize]]);
      _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_mul_ps(dec.Decode16(row + col / 2), s), gs));
    }
  }
}

// ---- attention -----------------------------------------------------------

// Decode attention with whole 128-column heads in registers, one pass over
// the cache (online softmax): per pair of query heads sharing a KV head, keys
// go by in blocks of 16; a block's scores (each key row read once for both
// heads), their exps (Exp16) and its value rows' weighted sum follow one
// another, so each key's K and V rows are read once, close together, and the
// sums of earlier blocks are rescaled when the running maximum rises. Each
// score step prefetches that key's K and V rows one block ahead. Why: at c8
// and a 512-token context the step's attention streams 0.94 GB of float32 KV
// and waits on memory (perf: most samples on the prefetches, fill buffers
// full). bench_attention, loaded machine, interleaved: the two-pass kernel (K
// then V, 8 rows ahead; deeper prefetch did not help) best round 82.4 ms ->
// one pass with a block's 256 prefetches issued at once 77.8 -> spread one
// key at a time 71.4 (faster than the burst in 8 of 8 rounds). Other head
// sizes and odd group sizes go to the AVX2 op.
// E: the cache's element (float, or uint16_t half widened by VCVTPH2PS).
OCTET_INLINE __m512 LoadKv16(const float* p) { return _mm512_loadu_ps(p); }
OCTET_INLINE __m512 LoadKv16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
void AttendAvx2(const float* q, int64_t q_stride, int64_t n_q, const float* k, const float* v,
                int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                float* out, int64_t out_stride) {
  Avx2Kernels().attend(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                       out_stride);
}
void AttendAvx2(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* k, const uint16_t* v,
                int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores,
                float* out, int64_t out_stride) {
  Avx2Kernels().attend_f16(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                           out_stride);
}

// exp of 16 floats by the method of the AVX2 table's Exp8 (isa_avx2.cpp: less
// than 1 ulp from the exact value for every float, +-inf and NaN included),
// the same result lane for lane.
OCTET_INLINE __m512 Exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  const __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  return _mm512_mask_add_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

template <class E>
void Attend(const float* q, int64_t q_stride, int64_t n_q, const E* k, const E* v,
            int64_t kv_stride, int64_t n_keys, int64_t hd, float scale, float* scores, float* out,
            int64_t out_stride) {
  if (hd != 128 || n_q % 2 != 0) {
    AttendAvx2(q, q_stride, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out, out_stride);
    return;
  }
  constexpr int kLines = 128 * sizeof(E) / 64;  // 64-byte lines per cache row
  constexpr int kBlock = 16;                    // keys per block (one Exp16)
  for (int64_t i = 0; i < n_q; i += 2) {
    const float* q0 = q + i * q_stride;
    const float* q1 = q0 + q_stride;
    // Fully unrolled (constant indices), so the accumulators live in registers.
    __m512 a[8], b[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) a[c] = b[c] = _mm512_setzero_ps();
    // Running maximum score and sum of exp(score - max), per head.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    alignas(64) float s0[kBlock], s1[kBlock];
    for (int64_t j0 = 0; j0 < n_keys; j0 += kBlock) {
      const int nb = n_keys - j0 < kBlock ? static_cast<int>(n_keys - j0) : kBlock;
      for (int t = 0; t < nb; ++t) {
        const E* kj = k + (j0 + t) * kv_stride;
        if (j0 + t + kBlock < n_keys) {  // K and V rows one block ahead, a key at a time
          const int64_t ahead = kBlock * kv_stride;
          for (int line = 0; line < kLines; ++line) {
            Prefetch(reinterpret_cast<const uint8_t*>(kj + ahead) + line * 64);
            Prefetch(reinterpret_cast<const uint8_t*>(v + (j0 + t) * kv_stride + ahead) +
                     line * 64);
          }
        }
        __m512 x = _mm512_setzero_ps(), y = x;
#pragma GCC unroll 8
        for (int c = 0; c < 128; c += 16) {
          const __m512 kv = LoadKv16(kj + c);
          x = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), kv, x);
          y = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + c), kv, y);
        }
        s0[t] = _mm512_reduce_add_ps(x) * scale;
        s1[t] = _mm512_reduce_add_ps(y) * scale;
      }
      for (int t = nb; t < kBlock; ++t) s0[t] = s1[t] = -INFINITY;  // exp gives 0
      const __m512 x0 = _mm512_load_ps(s0), x1 = _mm512_load_ps(s1);
      const float bm0 = _mm512_reduce_max_ps(x0), bm1 = _mm512_reduce_max_ps(x1);
      const float nm0 = bm0 > m0 ? bm0 : m0, nm1 = bm1 > m1 ? bm1 : m1;
      if (nm0 > m0 || nm1 > m1) {  // rescale what earlier keys summed: exp(old - new max)
        alignas(64) float alpha[16];
        _mm512_store_ps(alpha, Exp16(_mm512_setr_ps(m0 - nm0, m1 - nm1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                    0, 0, 0, 0, 0)));
        const __m512 r0 = _mm512_set1_ps(alpha[0]), r1 = _mm512_set1_ps(alpha[1]);
        l0 *= alpha[0];
        l1 *= alpha[1];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          a[c] = _mm512_mul_ps(a[c], r0);
          b[c] = _mm512_mul_ps(b[c], r1);
        }
        m0 = nm0;
        m1 = nm1;
      }
      const __m512 p0 = Exp16(_mm512_sub_ps(x0, _mm512_set1_ps(m0)));
      const __m512 p1 = Exp16(_mm512_sub_ps(x1, _mm512_set1_ps(m1)));
      l0 += _mm512_reduce_add_ps(p0);
      l1 += _mm512_reduce_add_ps(p1);
      _mm512_store_ps(s0, p0);
      _mm512_store_ps(s1, p1);
      for (int t = 0; t < nb; ++t) {
        const E* vj = v + (j0 + t) * kv_stride;
        const __m512 p = _mm512_set1_ps(s0[t]), r = _mm512_set1_ps(s1[t]);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m512 x = LoadKv16(vj + 16 * c);
          a[c] = _mm512_fmadd_ps(p, x, a[c]);
          b[c] = _mm512_fmadd_ps(r, x, b[c]);
        }
      }
    }
    float* o0 = out + i * out_stride;
    float* o1 = o0 + out_stride;
    const __m512 inv0 = _mm512_set1_ps(1.0f / l0), inv1 = _mm512_set1_ps(1.0f / l1);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      _mm512_storeu_ps(o0 + 16 * c, _mm512_mul_ps(a[c], inv0));
      _mm512_storeu_ps(o1 + 16 * c, _mm512_mul_ps(b[c], inv1));
    }
  }
}

// IsaKernels::attend_causal: what Attend sends to the AVX2 op (heads of 64,
// odd groups) through the AVX2 table's rows-together kernel, the same bits;
// pairs of 128-wide heads a row at a time through Attend above.
void AttendCausalAvx2(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q,
                      const float* k, const float* v, int64_t kv_stride, int64_t n_keys, int64_t hd,
                      float scale, float* scores, float* out, int64_t out_row_stride) {
  Avx2Kernels().attend_causal(q, q_row_stride, n_rows, n_q, k, v, kv_stride, n_keys, hd, scale,
                              scores, out, out_row_stride);
}
void AttendCausalAvx2(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q,
                      const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t n_keys,
                      int64_t hd, float scale, float* scores, float* out, int64_t out_row_stride) {
  Avx2Kernels().attend_causal_f16(q, q_row_stride, n_rows, n_q, k, v, kv_stride, n_keys, hd, scale,
                                  scores, out, out_row_stride);
}
template <class E>
void AttendCausal(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t n_q, const E* k,
                  const E* v, int64_t kv_stride, int64_t n_keys, int64_t hd, float scale,
                  float* scores, float* out, int64_t out_row_stride) {
  if (hd != 128 || n_q % 2 != 0) {
    AttendCausalAvx2(q, q_row_stride, n_rows, n_q, k, v, kv_stride, n_keys, hd, scale, scores, out,
                     out_row_stride);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    Attend(q + r * q_row_stride, hd, n_q, k, v, kv_stride, n_keys + r, hd, scale, scores,
           out + r * out_row_stride, hd);
  }
}

// An F16 cache's block of n keys widened to floats (a float cache is read in place).
OCTET_INLINE void WidenKeys16(const uint16_t* src, int64_t stride, int n, int hd, float* dst) {
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < hd; c += 16)
      _mm512_storeu_ps(dst + t * hd + c, LoadKv16(src + t * stride + c));
  }
}

// qt, acc and kb (16 x hd each), pt (16 x 16), al and inv (16 each).
int64_t AttendRowsWork(int64_t hd) { return 3 * 16 * hd + 16 * 16 + 2 * 16; }

// Prefill attention (IsaKernels::attend_rows): sixteen query rows of one
// head at a time, one per lane. Per block of 16 keys, score vector t (key
// j0 + t, one lane a row) sums K[j0 + t][d] (broadcast) x Qt[d] over the
// head's features, Qt the tile's queries transposed once per tile; the
// block's maximum, the rescale of earlier sums and the exps are lane-wise,
// one Exp16 a key for all sixteen rows; then each row's weighted sum of the
// value rows, kept in `acc` between blocks, takes the key's probability as a
// broadcast. No horizontal sum anywhere: the one-row kernel (Attend) reduces
// each key's score across lanes, and a prefill chunk run through it a row at
// a time was a fifth of a 512-token prefill of the Qwen3-0.6B shape on D.
// Keys past a row's position get -inf (exp gives 0); value rows past the
// tile's last key are never read. Lanes past n_rows repeat the last row and
// are not stored.
template <int HD, class E>
void AttendRowsHd(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                  const int32_t* positions, const E* k, const E* v, int64_t kv_stride, float scale,
                  float* out, int64_t out_row_stride, float* work) {
  constexpr int C = HD / 16;  // vectors a head row
  float* qt = work;           // [HD][16]: the tile's queries, transposed
  float* acc = qt + 16 * HD;  // [16][HD]: each row's weighted sum of values
  float* kb = acc + 16 * HD;  // [16][HD]: a block of keys as floats
  float* pt = kb + 16 * HD;   // [16][16]: a block's probabilities, key-major
  float* al = pt + 16 * 16;   // [16]: a block's rescale factors
  float* inv = al + 16;       // [16]: 1 / each row's sum
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
    const int nr = n_rows - r0 < 16 ? static_cast<int>(n_rows - r0) : 16;
    alignas(64) int32_t pos[16];
    int32_t last = 0;
    for (int i = 0; i < 16; ++i) {
      pos[i] = positions[r0 + (i < nr ? i : nr - 1)];
      last = pos[i] > last ? pos[i] : last;
    }
    const __m512i posv = _mm512_load_si512(pos);
    const int64_t n_keys = static_cast<int64_t>(last) + 1;
    for (int64_t g = 0; g < group; ++g) {
      for (int i = 0; i < 16; ++i) {
        const float* qi = q + (r0 + (i < nr ? i : nr - 1)) * q_row_stride + g * HD;
        for (int d = 0; d < HD; ++d) qt[d * 16 + i] = qi[d];
      }
      for (int i = 0; i < 16 * HD; i += 16) _mm512_storeu_ps(acc + i, _mm512_setzero_ps());
      __m512 m = neg_inf, l = _mm512_setzero_ps();
      for (int64_t j0 = 0; j0 < n_keys; j0 += 16) {
        const int nb = n_keys - j0 < 16 ? static_cast<int>(n_keys - j0) : 16;
        const float* kf;
        int64_t kstride;
        if constexpr (sizeof(E) == 4) {
          kf = reinterpret_cast<const float*>(k) + j0 * kv_stride;
          kstride = kv_stride;
        } else {
          WidenKeys16(k + j0 * kv_stride, kv_stride, nb, HD, kb);
          kf = kb;
          kstride = HD;
        }
        __m512 sc[16];
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) sc[t] = _mm512_setzero_ps();
        for (int d = 0; d < HD; ++d) {
          const __m512 qd = _mm512_loadu_ps(qt + d * 16);
#pragma GCC unroll 16
          for (int t = 0; t < 16; ++t) {
            if (t < nb) sc[t] = _mm512_fmadd_ps(_mm512_set1_ps(kf[t * kstride + d]), qd, sc[t]);
          }
        }
        __m512 bm = neg_inf;
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
          // Key j0 + t: -inf in the lanes of rows before it, and past the block.
          const __mmask16 later =
              _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(static_cast<int32_t>(j0 + t)), posv);
          sc[t] =
              t < nb ? _mm512_mask_mov_ps(_mm512_mul_ps(sc[t], vscale), later, neg_inf) : neg_inf;
          bm = _mm512_max_ps(bm, sc[t]);
        }
        // Key 0 is in every row's range, so from the first block on m is finite.
        const __m512 nm = _mm512_max_ps(m, bm);
        const __m512 alpha = Exp16(_mm512_sub_ps(m, nm));
        m = nm;
        __m512 bl = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
          const __m512 p = Exp16(_mm512_sub_ps(sc[t], nm));
          bl = _mm512_add_ps(bl, p);
          _mm512_storeu_ps(pt + t * 16, p);
        }
        l = _mm512_fmadd_ps(l, alpha, bl);
        _mm512_storeu_ps(al, alpha);
        for (int c = 0; c < C; ++c) {
          __m512 a[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) {
            a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + i * HD + c * 16), _mm512_set1_ps(al[i]));
          }
          for (int t = 0; t < nb; ++t) {
            const __m512 vv = LoadKv16(v + (j0 + t) * kv_stride + c * 16);
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
              a[i] = _mm512_fmadd_ps(_mm512_set1_ps(pt[t * 16 + i]), vv, a[i]);
            }
          }
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) _mm512_storeu_ps(acc + i * HD + c * 16, a[i]);
        }
      }
      _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
      for (int i = 0; i < nr; ++i) {
        float* o = out + (r0 + i) * out_row_stride + g * HD;
        const __m512 s = _mm512_set1_ps(inv[i]);
        for (int c = 0; c < C; ++c) {
          _mm512_storeu_ps(o + c * 16, _mm512_mul_ps(_mm512_loadu_ps(acc + i * HD + c * 16), s));
        }
      }
    }
  }
}

template <class E>
void AttendRows(const float* q, int64_t q_row_stride, int64_t n_rows, int64_t group,
                const int32_t* positions, const E* k, const E* v, int64_t kv_stride, int64_t hd,
                float scale, float* out, int64_t out_row_stride, float* work) {
  if (hd == 128) {
    AttendRowsHd<128>(q, q_row_stride, n_rows, group, positions, k, v, kv_stride, scale, out,
                      out_row_stride, work);
  } else {  // 64: CpuBackend sends no other
    AttendRowsHd<64>(q, q_row_stride, n_rows, group, positions, k, v, kv_stride, scale, out,
                     out_row_stride, work);
  }
}

// tanh of 16 floats by the method of the AVX2 table's Tanh8 (isa_avx2.cpp:
// within kVectorTanhMaxAbsError), the same result lane for lane.
OCTET_INLINE __m512 Tanh16(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(-929569.0f / 638512875.0f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(21844.0f / 6081075.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1382.0f / 155925.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(62.0f / 2835.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(ax, x2), p, ax);
  const __mmask16 use_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_NGE_UQ);
  __m512 t = small;
  if (use_small != 0xffff) {  // the exp and the division only where a lane needs them
    const __m512 axc = _mm512_min_ps(ax, _mm512_set1_ps(10.0f));
    const __m512 e = Exp16(_mm512_add_ps(axc, axc));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 big =
        _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    t = _mm512_mask_blend_ps(use_small, big, small);
  }
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

void SoftCap(float* x, int64_t n, float cap) {
  const __m512 inv = _mm512_set1_ps(1.0f / cap), c = _mm512_set1_ps(cap);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(x + i, _mm512_mul_ps(c, Tanh16(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv))));
  }
  if (i < n) {  // the tail through the same vector code, masked
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(c, Tanh16(_mm512_mul_ps(v, inv))));
  }
}

void Relu2(float* x, int64_t n) {
  const __m512 zero = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(x + i, _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v, v));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m,
                          _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v, v));
  }
}

// The AVX2 table's Argmax in 16 lanes, the tail masked (lanes past n stay
// -inf; a NaN never enters, MAXPS giving its second operand).
int64_t Argmax(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
  }
  for (; i < n; i += 16) {
    const __mmask16 k =
        n - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - i)) - 1);
    m0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, x + i), m0);
  }
  const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  const __m512 mv = _mm512_set1_ps(m);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k =
        n - j >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __mmask16 hit =
        _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + j), mv, _CMP_EQ_OQ);
    if (hit != 0) return j + __builtin_ctz(hit);
  }
  return 0;
}

}  // namespace

const IsaKernels& Avx512Kernels() {
  static const IsaKernels k = [] {
    FillScaledValues();
    IsaKernels t = Avx2Kernels();
    t.name = "avx512";
    t.gemv = Gemv;
    t.gemv_batch_invariant = GemvBatchInvariant;
    // The AVX2 table's 32 was measured against the AVX2 GEMM; this table's
    // (AVX-512, AMX) is another, not measured so.
    t.decode_batch_rows = 0;
    t.decode_rows = DecodeRows;
    t.attend = Attend<float>;
    t.attend_f16 = Attend<uint16_t>;
    t.attend_rows_work = AttendRowsWork;
    t.attend_rows = AttendRows<float>;
    t.attend_rows_f16 = AttendRows<uint16_t>;
    t.attend_causal = AttendCausal<float>;
    t.attend_causal_f16 = AttendCausal<uint16_t>;
    t.soft_cap = SoftCap;
    t.relu2 = Relu2;
    t.argmax = Argmax;
    AddAvx512VnniKernels(&t);
    AddAvx512GemmKernels(&t);
    return t;
  }();
  return k;
}

const IsaKernels& Avx512RowsKernels() {
  static const IsaKernels k = [] {
    IsaKernels t = Avx512Kernels();
    t.name = "avx512-rows";
    t.gemv = GemvRows;
    t.gemv_batch_invariant = GemvBatchInvariantRows;
    AddAvx512VnniKernels(&t, /*one_stream=*/true);
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
