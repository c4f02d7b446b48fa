// Prefill GEMM of BF16 and F32 weights in AVX-512 FMAs, blocked and packed,
// for x86 CPUs with AVX-512 but without AMX (Zen 4/5, Ice Lake, Cascade
// Lake; AMX machines take the AMX table's tile GEMM instead). Compiled with
// the AVX-512 flags of isa_avx512.cpp; see isa.h for why nothing here may
// instantiate std:: templates.
//
// Exact like the other kernels: activations stay f32 (no BF16 rounding), the
// BF16 weights widen exactly, products accumulate in f32 FMAs; only the
// summation order differs from the reference.
//
// Layout: each task packs its weight rows, 32 at a time, into per-thread
// panels of floats [k][32] (two vectors per depth step; BF16 rows through
// 32-bit gathers, each a depth pair of 16 rows), all of the task's panels
// before any multiply, then for each depth block of kDepth columns sweeps
// every activation row in tiles of 12 and, per tile, every panel: 24
// accumulators, each depth step two panel loads and twelve broadcast FMA
// pairs, FMA-bound rather than load-bound (kDepth: the depth blocks are
// whole rows of up to 4096 columns). A tile's activations come from
// memory once per depth block for all of the task's panels, not once per
// panel. The old path (decode_rows into a row-major panel, 4x3 dot-product
// tiles with a horizontal sum per output) did 12 FMAs per 7 loads.
//
// Measured on the build machine (Sapphire-Rapids-class, one thread, CPU
// time, the Qwen3-0.6B layer matmuls at 512 rows): packing a BF16 panel
// element by element took 14-16% of the GEMM's time, through gathers ~1.5%;
// the FMA micro-tile alone, in cache, runs at 86% of the FMA peak.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu/isa.h"

// GCC 12 reports its own AVX-512 intrinsics as reading an uninitialised value
// (GCC PR 105593); the code here has none.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace octet::kernels::cpu {
namespace {

constexpr int64_t kPanelCols = 32;  // weight rows per panel (two vectors of 16)
constexpr int kMaxTileRows = 12;    // activation rows per micro-tile
// Columns per depth block. Whole rows up to this many: a tile then stores
// its sums once and each of its activation rows is one long stream the
// prefetcher follows (one thread, the Qwen3-0.6B layer matmuls at 512 rows,
// CPU time, interleaved: blocks of 128 / 256 / 512 / 1024 / 4096 columns ran
// at 131-138 / 146-158 / 158-175 / 167-182 / 177-190 GFLOP/s; the FMA peak
// is ~228). At 4096 columns a panel part is 512 KiB and a 12-row activation
// tile 192 KiB, both in L2.
constexpr int64_t kDepth = 4096;
// Panels packed at once (a task's rows; CpuBackend sends up to 64): up to
// 8 x 32 x k floats, 3 MiB at k = 3072.
constexpr int64_t kMaxPanels = 8;

// A panel buffer per thread, grown as needed (never shrinks).
struct PanelBuffer {
  float* data = nullptr;
  int64_t size = 0;  // floats
  ~PanelBuffer() { std::free(data); }
  float* Get(int64_t n) {
    if (n > size) {
      std::free(data);
      const int64_t bytes = (n * 4 + 63) / 64 * 64;
      data = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(bytes)));
      size = data ? n : 0;
    }
    return data;
  }
};
thread_local PanelBuffer tls_panel;

// Rows [r0, r0 + n) (n <= 16) of a BF16 w into out[c * 32 + j] = W[r0 + j][c]
// for j < 16 (zero past n rows), c < k: one 32-bit gather per depth pair
// (W[r][c] in the low half, W[r][c + 1] in the high half of each lane).
void PackHalfBf16(const WeightMatrix& w, int64_t r0, int64_t n, float* out) {
  const int64_t k = w.cols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + r0 * w.row_stride;
  const __mmask16 valid = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
  const __m512i index =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(w.row_stride)));
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  int64_t c = 0;
  for (; c + 2 <= k; c += 2) {
    const __m512i g =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index, base + c * 2, 1);
    _mm512_store_ps(out + c * kPanelCols, _mm512_castsi512_ps(_mm512_slli_epi32(g, 16)));
    _mm512_store_ps(out + (c + 1) * kPanelCols, _mm512_castsi512_ps(_mm512_and_si512(g, high)));
  }
  if (c < k) {  // odd k: the last column
    for (int64_t j = 0; j < 16; ++j) {
      uint32_t bits = 0;
      if (j < n) {
        uint16_t h;
        std::memcpy(&h, base + j * w.row_stride + c * 2, 2);
        bits = static_cast<uint32_t>(h) << 16;
      }
      std::memcpy(out + c * kPanelCols + j, &bits, 4);
    }
  }
}

// Weight rows [r0, r0 + n) (n <= 32) of w (BF16 or F32) into
// panel[c * 32 + j] = W[r0 + j][c], zero past n rows.
void PackPanel(const WeightMatrix& w, int64_t r0, int64_t n, float* panel) {
  const int64_t k = w.cols;
  // The gathers' row offsets (up to 15 rows) are 32-bit.
  if (w.format == WeightFormat::kBF16 && w.row_stride <= INT32_MAX / 16) {
    PackHalfBf16(w, r0, n < 16 ? n : 16, panel);
    PackHalfBf16(w, r0 + 16, n > 16 ? n - 16 : 0, panel + 16);
    return;
  }
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  if (n < kPanelCols) {
    for (int64_t c = 0; c < k; ++c)
      std::memset(panel + c * kPanelCols + n, 0, (kPanelCols - n) * 4);
  }
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = base + (r0 + j) * w.row_stride;
    float* out = panel + j;
    if (w.format == WeightFormat::kBF16) {
      for (int64_t c = 0; c < k; ++c) {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(out + c * kPanelCols, &bits, 4);
      }
    } else {  // F32
      for (int64_t c = 0; c < k; ++c) std::memcpy(out + c * kPanelCols, row + c * 4, 4);
    }
  }
}

// c[i * ldc + j] (+)= scale * acc{0,1}[i] lane j, i < MR, j < ncols (<= 32):
// the micro-tiles' epilogue.
template <int MR>
inline __attribute__((always_inline)) void StoreTile(const __m512* acc0, const __m512* acc1,
                                                     float* c, int64_t ldc, int ncols, bool add,
                                                     float scale) {
  const __mmask16 m0 = static_cast<__mmask16>(ncols >= 16 ? 0xffffu : (1u << ncols) - 1u);
  const __mmask16 m1 =
      static_cast<__mmask16>(ncols >= 32 ? 0xffffu : (ncols > 16 ? (1u << (ncols - 16)) - 1u : 0u));
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    __m512 v0 = _mm512_mul_ps(acc0[i], s), v1 = _mm512_mul_ps(acc1[i], s);
    if (add) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
}

// c[i * ldc + j] (+)= scale * sum_{d < kc} a[i * lda + d] * panel[d * 32 + j] for
// i < MR, j < ncols; `add` adds to what c holds.
template <int MR>
void MicroTile(const float* a, int64_t lda, const float* panel, int64_t kc, float* c, int64_t ldc,
               int ncols, bool add, float scale) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  const float* b = panel;
  for (int64_t d = 0; d < kc; ++d, b += kPanelCols) {
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + d]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
  StoreTile<MR>(acc0, acc1, c, ldc, ncols, add, scale);
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int, bool,
                         float);
constexpr MicroFn kMicro[kMaxTileRows + 1] = {
    nullptr,       MicroTile<1>,  MicroTile<2>, MicroTile<3>, MicroTile<4>,
    MicroTile<5>,  MicroTile<6>,  MicroTile<7>, MicroTile<8>, MicroTile<9>,
    MicroTile<10>, MicroTile<11>, MicroTile<12>};

// Activations are read where they are: nothing to pack.
int64_t GemmPackedSize(int64_t, int64_t) { return 0; }
void PackGemmActivations(const float*, int64_t, int64_t, int64_t, uint16_t*) {}

// The blocking both GEMMs share. Rows [row0, row1) go in groups of up to
// kMaxPanels panels of 32: pack(p, n0, n) packs each group's panel p (rows
// n0..n0 + n) into the thread's buffer first; then for each block of up to
// `block` depth steps of `depth` (columns, or column pairs), each tile of up
// to 12 activation rows and each panel, tile(i, mr, p, d0, dc, ncols, y_tile,
// add) multiplies. A tile's activations come from memory once per depth block
// for all of the group's panels.
template <class Pack, class Tile>
inline __attribute__((always_inline)) void SweepPanels(int64_t row0, int64_t row1, int64_t m,
                                                       int64_t depth, int64_t block, float* y,
                                                       int64_t ldy, bool accumulate,
                                                       const Pack& pack, const Tile& tile) {
  for (int64_t g0 = row0; g0 < row1; g0 += kMaxPanels * kPanelCols) {
    const int64_t g1 = row1 - g0 < kMaxPanels * kPanelCols ? row1 : g0 + kMaxPanels * kPanelCols;
    const int64_t n_panels = (g1 - g0 + kPanelCols - 1) / kPanelCols;
    for (int64_t p = 0; p < n_panels; ++p) {
      const int64_t n0 = g0 + p * kPanelCols;
      pack(p, n0, g1 - n0 < kPanelCols ? g1 - n0 : kPanelCols);
    }
    float* yg = y + (g0 - row0);
    for (int64_t d0 = 0; d0 < depth; d0 += block) {
      const int64_t dc = depth - d0 < block ? depth - d0 : block;
      const bool add = accumulate || d0 > 0;
      for (int64_t i = 0; i < m; i += kMaxTileRows) {
        const int mr = static_cast<int>(m - i < kMaxTileRows ? m - i : kMaxTileRows);
        for (int64_t p = 0; p < n_panels; ++p) {
          const int64_t n0 = g0 + p * kPanelCols;
          const int ncols = static_cast<int>(g1 - n0 < kPanelCols ? g1 - n0 : kPanelCols);
          tile(i, mr, p, d0, dc, ncols, yg + i * ldy + p * kPanelCols, add);
        }
      }
    }
  }
}

// y[i * ldy + r - row0] (+)= out_scale * x_i . W[r, :] for i < m, r in
// [row0, row1), W BF16 or F32 (isa.h's gemm_packed; `packed` unused).
void GemmPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* /*packed*/,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                float out_scale) {
  const int64_t k = w.cols;
  const int64_t task_panels = (row1 - row0 + kPanelCols - 1) / kPanelCols;
  float* panel =
      tls_panel.Get((task_panels < kMaxPanels ? task_panels : kMaxPanels) * k * kPanelCols);
  if (!panel) std::abort();  // no memory for the task's rows of weights
  SweepPanels(
      row0, row1, m, k, kDepth, y, ldy, accumulate,
      [&](int64_t p, int64_t n0, int64_t n) { PackPanel(w, n0, n, panel + p * k * kPanelCols); },
      [&](int64_t i, int mr, int64_t p, int64_t d0, int64_t kc, int ncols, float* c, bool add) {
        kMicro[mr](x + i * ldx + d0, ldx, panel + p * k * kPanelCols + d0 * kPanelCols, kc, c, ldy,
                   ncols, add, out_scale);
      });
}

// Rows [row0, row0 + nrows) of an NVFP4 w as BF16, E2M1 value x E4M3 scale
// without the global scale (gemm_packed's out_scale): the product has at
// most 6 significant bits and lies within 2^-10..2688, so BF16 holds it
// exactly. out: nrows x w.cols. The AMX table uses it too.
//
// A block's 16 codes at once: VPMULTISHIFTQB puts code i in the low bits of
// byte 4i (a float lane each), VPERMPS looks up its value (it reads only the
// index's low 4 bits), one multiply by the scale and the top halves narrowed.
// The scalar loop it replaced took about a third of a mixture-of-experts
// prefill's matmul time: each expert's weights are decoded once per call for
// only the ~32 tokens routed to it.
void DecodeNvfp4Bf16(const WeightMatrix& w, int64_t row0, int64_t nrows, uint16_t* out) {
  const float* e4m3 = E4m3Table();
  // Byte 4i%8 of qword i/2 takes the bits at 4i of the block: code i in its low 4 bits.
  const __m512i select =
      _mm512_set_epi64((60LL << 32) | 56, (52LL << 32) | 48, (44LL << 32) | 40, (36LL << 32) | 32,
                       (28LL << 32) | 24, (20LL << 32) | 16, (12LL << 32) | 8, (4LL << 32) | 0);
  const __m512 values = _mm512_loadu_ps(kE2m1Values);
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
    uint16_t* o = out + r * w.cols;
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t word;
      memcpy(&word, row + b * 8, 8);
      const __m512i codes = _mm512_multishift_epi64_epi8(select, _mm512_set1_epi64(word));
      const __m512 v =
          _mm512_mul_ps(_mm512_permutexvar_ps(codes, values), _mm512_set1_ps(e4m3[scales[b]]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + b * 16),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
    for (int64_t c = blocks * kNvfp4BlockSize; c < w.cols; ++c) {  // a partial last block
      const uint8_t byte = row[c / 2];
      const float v = kE2m1Values[c % 2 ? byte >> 4 : byte & 0xf] * e4m3[scales[blocks]];
      uint32_t bits;
      memcpy(&bits, &v, 4);
      o[c] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

// ---- BF16 activations on VDPBF16PS (opt-in: OCTET_CPU_MATMUL=bf16) ----
//
// The GEMM above keeps every activation in f32, so its rate is the FMA's: 16
// multiply-adds a 512-bit instruction. VDPBF16PS does 32 (a pair of BF16
// products a lane) at the same instruction rate on Zen 4, but takes BF16 on
// both sides: here each activation is rounded to BF16 once (to nearest even,
// a relative error below 2^-9, as llama.cpp and PyTorch's BF16 matmuls do),
// the BF16 weights are used as they are, and products accumulate in f32.
// Split activations (hi + lo, as the AMX and NEON kernels do to stay exact)
// would cost one VDPBF16PS a part, no faster than the FMAs; hence opt-in.
//
// Layout: activations packed to BF16 rows of kp = k rounded up to even (a
// zero pads an odd k); weights packed 32 rows a panel as BF16 pairs,
// panel[p * 32 + j] = (W[r0 + j][2p], W[r0 + j][2p + 1]) as one 32-bit word,
// which the gathers of PackHalfBf16 read before they split them. The micro
// tile is MicroTile's: 12 activation rows x 32 weight rows, 24 accumulators,
// each depth pair two panel loads and 12 broadcast pairs.

inline int64_t EvenCols(int64_t k) { return k + (k & 1); }

int64_t Bf16PackedSize(int64_t m, int64_t k) { return m * EvenCols(k); }

__attribute__((target("avx512bf16"))) void PackBf16Activations(const float* x, int64_t m,
                                                               int64_t ldx, int64_t k,
                                                               uint16_t* packed) {
  const int64_t kp = EvenCols(k);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    uint16_t* out = packed + i * kp;
    for (int64_t c = 0; c < kp; c += 32) {
      const int64_t left = k - c;
      const __mmask16 m0 = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
      const __mmask16 m1 = static_cast<__mmask16>(
          left >= 32 ? 0xffffu : (left > 16 ? (1u << (left - 16)) - 1u : 0u));
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xi + c);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, xi + c + 16);
      // Element e of the result is lo's e for e < 16 and hi's e - 16 above.
      const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      const int64_t n = kp - c < 32 ? kp - c : 32;  // even, so whole pairs
      _mm512_mask_storeu_epi16(out + c, static_cast<__mmask32>(n >= 32 ? ~0u : (1u << n) - 1u), v);
    }
  }
}

// Rows [r0, r0 + n) (n <= 16) of a BF16 w as pairs: out[p * 32 + j] for j < 16
// (zero past n rows), p < kp / 2.
void PackPairsBf16(const WeightMatrix& w, int64_t r0, int64_t n, uint32_t* out) {
  const int64_t k = w.cols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + r0 * w.row_stride;
  const __mmask16 valid = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
  const __m512i index =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(w.row_stride)));
  int64_t c = 0;
  for (; c + 2 <= k; c += 2) {
    const __m512i g =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index, base + c * 2, 1);
    _mm512_store_si512(out + (c / 2) * kPanelCols, g);
  }
  if (c < k) {  // odd k: the last column with a zero partner
    for (int64_t j = 0; j < 16; ++j) {
      uint16_t h = 0;
      if (j < n) std::memcpy(&h, base + j * w.row_stride + c * 2, 2);
      out[(c / 2) * kPanelCols + j] = h;
    }
  }
}

template <int MR>
__attribute__((target("avx512bf16"))) void MicroTileBf16(const uint16_t* a, int64_t lda,
                                                         const uint32_t* panel, int64_t pairs,
                                                         float* c, int64_t ldc, int ncols, bool add,
                                                         float scale) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  const uint32_t* b = panel;
  for (int64_t p = 0; p < pairs; ++p, b += kPanelCols) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 16));
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      int32_t pair;  // activations 2p and 2p + 1 of row i
      std::memcpy(&pair, a + i * lda + 2 * p, 4);
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], b0, av);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], b1, av);
    }
  }
  StoreTile<MR>(acc0, acc1, c, ldc, ncols, add, scale);
}

using MicroBf16Fn = void (*)(const uint16_t*, int64_t, const uint32_t*, int64_t, float*, int64_t,
                             int, bool, float);
constexpr MicroBf16Fn kMicroBf16[kMaxTileRows + 1] = {
    nullptr,           MicroTileBf16<1>,  MicroTileBf16<2>, MicroTileBf16<3>, MicroTileBf16<4>,
    MicroTileBf16<5>,  MicroTileBf16<6>,  MicroTileBf16<7>, MicroTileBf16<8>, MicroTileBf16<9>,
    MicroTileBf16<10>, MicroTileBf16<11>, MicroTileBf16<12>};

// gemm_packed for BF16 w (NVFP4 arrives decoded to BF16) from activations
// packed by PackBf16Activations; F32 w (never sent here by CpuBackend) would
// take the f32 GEMM.
void GemmPackedBf16(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                    const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                    float out_scale) {
  if (w.format != WeightFormat::kBF16 || w.row_stride > INT32_MAX / 16) {
    return GemmPacked(w, row0, row1, packed, x, m, ldx, y, ldy, accumulate, out_scale);
  }
  const int64_t kp = EvenCols(w.cols);
  const int64_t panel_words = kp / 2 * kPanelCols;  // one panel, as 32-bit pairs
  const int64_t task_panels = (row1 - row0 + kPanelCols - 1) / kPanelCols;
  // The f32 GEMM's buffer holds twice this for the same rows.
  uint32_t* panel = reinterpret_cast<uint32_t*>(
      tls_panel.Get((task_panels < kMaxPanels ? task_panels : kMaxPanels) * panel_words));
  if (!panel) std::abort();  // no memory for the task's rows of weights
  // Depth in column pairs; the out_scale goes on each depth block's sum (with
  // one block, k up to 4096, that is the whole dot product), as in GemmPacked.
  SweepPanels(
      row0, row1, m, kp / 2, kDepth / 2, y, ldy, accumulate,
      [&](int64_t p, int64_t n0, int64_t n) {
        PackPairsBf16(w, n0, n < 16 ? n : 16, panel + p * panel_words);
        PackPairsBf16(w, n0 + 16, n > 16 ? n - 16 : 0, panel + p * panel_words + 16);
      },
      [&](int64_t i, int mr, int64_t p, int64_t d0, int64_t pc, int ncols, float* c, bool add) {
        kMicroBf16[mr](packed + i * kp + 2 * d0, kp, panel + p * panel_words + d0 * kPanelCols, pc,
                       c, ldy, ncols, add, out_scale);
      });
}

}  // namespace

bool AddAvx512Bf16GemmKernels(IsaKernels* t) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) return false;
  t->gemm_packed_size = Bf16PackedSize;
  t->pack_gemm_activations = PackBf16Activations;
  t->gemm_packed = GemmPackedBf16;
  t->decode_nvfp4_bf16 = DecodeNvfp4Bf16;
  return true;
}

void AddAvx512GemmKernels(IsaKernels* t) {
  t->gemm_packed_size = GemmPackedSize;
  t->pack_gemm_activations = PackGemmActivations;
  t->gemm_packed = GemmPacked;
  t->decode_nvfp4_bf16 = DecodeNvfp4Bf16;
}

}  // namespace octet::kernels::cpu
