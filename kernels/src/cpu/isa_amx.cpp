// AMX-BF16 (Sapphire Rapids and later) batched decode of BF16 weights: the
// AVX-512 table with one more pair of entries, pack_gemv_activations and
// gemv_packed (isa.h). Compiled with -mamx-tile -mamx-bf16 -mavx512...; used
// only after AmxUsable() (CPUID, and Linux's permission for the tile state).
// See isa.h for why nothing here may instantiate std:: templates.
//
// Why: with 8 activation rows the AVX-512 dense kernel is bound by its FMA
// ports (16 multiply-adds per 16 weights, ~35-40 GFLOP/s a core here), so a
// batch of 8 decodes at a third of the speed the weights stream from memory.
// A tile multiply (TDPBF16PS) does 16 x 16 x 32 multiply-adds in ~16 cycles.
//
// Exactness: AMX multiplies BF16 by BF16. The weights are BF16 already; each
// f32 activation is split into three BF16 parts, x = hi + mid + lo, by
// truncation (hi keeps the top 8 significand bits, mid the next 8 of x - hi,
// lo the last 8), which is exact for every normal float down to ~2^-110. Each
// product w * part is exact in f32 and accumulates in f32, so the result is the
// f32 dot product up to summation order, as the FMA kernels are. No
// activation is rounded.
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu/isa.h"

// GCC 12 reports its own AVX-512 intrinsics (the masked forms behind
// _mm512_reduce_add_ps and the scatter) as reading an uninitialised value
// (GCC PR 105593); the code here has none.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))
#define OCTET_INLINE_LAMBDA __attribute__((always_inline))

constexpr int64_t kBlockCols = 32;  // columns per tile multiply: 16 BF16 pairs
constexpr int kSplits = 3;          // hi, mid, lo

// Weight rows are prefetched into L2 this many 32-column blocks ahead of the
// tile loads (along the pass's rows, then into the next pass's). A tile
// register is not renamed, so a tile load waits for the multiply that read the
// register before it: a pass is a chain of loads, and each one that misses L2
// stalls the chain. A/B (bench_gemv-style interleaved, 2 threads, 3072 x 1024
// from DRAM, 8 rows): none 14-17 GB/s, 8 blocks ahead 17.8; into L1 (T0) was
// slower than none (32 rows 2048 bytes apart share two L1 sets).
constexpr int64_t kPrefetchBlocks = 8;

// The 64-byte tile configuration LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of tile t
  uint8_t rows[16];    // rows of tile t
};

// Tiles, for two groups g = 0, 1 of 16 weight rows: C_hm[g] (0, 1: 16 rows x
// 2m f32, the hi products in columns [0, m), the mid ones in [m, 2m)), C_lo[g]
// (2, 3: 16 x m f32), A[g] (4, 5: 16 rows x 32 BF16 weights), B_hm (6: 16
// column pairs x 2m BF16 pairs) and B_lo (7: 16 x m). Two multiplies per A
// tile; m <= 8 keeps 2m within a tile's 16 columns.
void ConfigureTiles(int64_t m) {
  TileConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16;
  cfg.colsb[0] = cfg.colsb[1] = cfg.colsb[6] = static_cast<uint16_t>(8 * m);
  cfg.colsb[2] = cfg.colsb[3] = cfg.colsb[7] = static_cast<uint16_t>(4 * m);
  cfg.colsb[4] = cfg.colsb[5] = 64;
  _tile_loadconfig(&cfg);
}

OCTET_INLINE __m512 LoadBf16x16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

float Bf16At(const uint8_t* row, int64_t c) {
  uint16_t h;
  memcpy(&h, row + c * 2, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// sum over columns [c0, k) of row . x, in f32 FMAs (the ragged columns and rows).
float DotBf16(const uint8_t* row, const float* x, int64_t c0, int64_t k) {
  __m512 acc = _mm512_setzero_ps();
  int64_t c = c0;
  for (; c + 16 <= k; c += 16) {
    acc = _mm512_fmadd_ps(LoadBf16x16(row + c * 2), _mm512_loadu_ps(x + c), acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  for (; c < k; ++c) s += Bf16At(row, c) * x[c];
  return s;
}

OCTET_INLINE void PrefetchRowsL2(const uint8_t* p, int64_t stride, int rows) {
  for (int j = 0; j < rows; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(p + j * stride), _MM_HINT_T1);
  }
}

OCTET_INLINE void Store(float* out, float v, bool accumulate) { *out = accumulate ? *out + v : v; }

// Packed activations: per 32-column block b, 48 * m dwords: first B_hm (16
// column pairs p x 2m dwords: dword (p, i) the hi BF16 pair of x[i] at columns
// 32b+2p (low half) and 32b+2p+1 (high half), dword (p, m + i) the mid pair),
// then B_lo (16 x m dwords, the lo pairs): the VNNI layout TDPBF16PS takes for
// its B operand.
int64_t PackedSize(int64_t m, int64_t k) { return (k / kBlockCols) * kSplits * 16 * m * 2; }

// The three exact BF16 parts (hi, mid, lo; see the top of this file) of 32
// consecutive floats at xs, each as 16 dwords of BF16 pairs in column order:
// dword p holds columns 2p (low half) and 2p + 1 (high half).
OCTET_INLINE void SplitPairs32(const float* xs, __m512i pairs[kSplits]) {
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512i half[2][kSplits];  // columns 0-15 and 16-31: each part, BF16 in the top 16 bits
  for (int h = 0; h < 2; ++h) {
    const __m512 v = _mm512_loadu_ps(xs + 16 * h);
    const __m512i hi = _mm512_and_si512(_mm512_castps_si512(v), top);
    const __m512 r1 = _mm512_sub_ps(v, _mm512_castsi512_ps(hi));  // exact
    const __m512i mid = _mm512_and_si512(_mm512_castps_si512(r1), top);
    const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(mid));  // exact, <= 8 bits
    half[h][0] = hi;
    half[h][1] = mid;
    half[h][2] = _mm512_and_si512(_mm512_castps_si512(r2), top);
  }
  for (int s = 0; s < kSplits; ++s) {
    const __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(half[0][s], 16));
    const __m256i hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(half[1][s], 16));
    pairs[s] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
}

void PackActivations(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* packed) {
  const int64_t blocks = k / kBlockCols;
  // Dword p of a row's block goes m (B_lo) or 2m (B_hm) dwords after dword p - 1.
  const __m512i index_lo =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(m)));
  const __m512i index_hm = _mm512_add_epi32(index_lo, index_lo);
  int* out = reinterpret_cast<int*>(packed);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      __m512i pairs[kSplits];
      SplitPairs32(x + i * ldx + b * kBlockCols, pairs);
      int* block = out + b * kSplits * 16 * m;
      for (int s = 0; s < kSplits; ++s) {
        if (s < 2) {
          _mm512_i32scatter_epi32(block + s * m + i, index_hm, pairs[s], 4);
        } else {
          _mm512_i32scatter_epi32(block + 32 * m + i, index_lo, pairs[s], 4);
        }
      }
    }
  }
}

// y[i*ldy + (r - row0)] (+)= W[r, :] . x_i for r in [row0, row1), i < m
// (1 <= m <= 8), W BF16 with k = w.cols: 32 weight rows per pass (then 16)
// through the tiles, the columns past the last whole 32-column block and the
// rows past the last whole 16 in f32 FMAs.
void GemvPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  const int64_t k = w.cols;
  const int64_t blocks = k / kBlockCols;
  const int64_t k_main = blocks * kBlockCols;
  const int64_t stride = w.row_stride;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  const int64_t block_u16 = kSplits * 16 * m * 2;    // packed uint16s per block
  const int64_t hm_bytes = 8 * m, lo_bytes = 4 * m;  // bytes per row of B_hm / B_lo
  alignas(64) float c_hm[2][16 * 16], c_lo[2][16 * 8];
  // Sums the groups' hi, mid and lo products (and the ragged columns) into y.
  auto finish = [&](int64_t r, int groups) OCTET_INLINE_LAMBDA {
    for (int g = 0; g < groups; ++g) {
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t row = r + 16 * g + j;
        const uint8_t* wr = data + row * stride;
        for (int64_t i = 0; i < m; ++i) {
          float s = (c_hm[g][j * 2 * m + i] + c_hm[g][j * 2 * m + m + i]) + c_lo[g][j * m + i];
          if (k_main < k) s += DotBf16(wr, x + i * ldx, k_main, k);
          Store(y + i * ldy + (row - row0), s, accumulate);
        }
      }
    }
  };
  int64_t r = row0;
  if (blocks > 0 && row1 - row0 >= 16) {
    ConfigureTiles(m);
    for (; r + 32 <= row1; r += 32) {
      const uint8_t* a0 = data + r * stride;
      const uint8_t* a1 = a0 + 16 * stride;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t ahead = b + kPrefetchBlocks;
        if (ahead < blocks) {
          PrefetchRowsL2(a0 + ahead * 64, stride, 32);
        } else if (r + 64 <= row1 && ahead - blocks < blocks) {
          PrefetchRowsL2(a0 + 32 * stride + (ahead - blocks) * 64, stride, 32);
        }
        const uint16_t* pb = packed + b * block_u16;
        _tile_loadd(6, pb, hm_bytes);
        _tile_loadd(7, pb + 64 * m, lo_bytes);
        _tile_loadd(4, a0 + b * 64, stride);
        _tile_loadd(5, a1 + b * 64, stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(1, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c_hm[0], hm_bytes);
      _tile_stored(1, c_hm[1], hm_bytes);
      _tile_stored(2, c_lo[0], lo_bytes);
      _tile_stored(3, c_lo[1], lo_bytes);
      finish(r, 2);
    }
    if (r + 16 <= row1) {
      const uint8_t* a0 = data + r * stride;
      _tile_zero(0);
      _tile_zero(2);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t* pb = packed + b * block_u16;
        _tile_loadd(6, pb, hm_bytes);
        _tile_loadd(7, pb + 64 * m, lo_bytes);
        _tile_loadd(4, a0 + b * 64, stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 4, 7);
      }
      _tile_stored(0, c_hm[0], hm_bytes);
      _tile_stored(2, c_lo[0], lo_bytes);
      finish(r, 1);
      r += 16;
    }
    _tile_release();
  }
  for (; r < row1; ++r) {  // fewer than 16 rows left (or no whole block): f32 FMAs
    const uint8_t* wr = data + r * stride;
    for (int64_t i = 0; i < m; ++i) {
      Store(y + i * ldy + (r - row0), DotBf16(wr, x + i * ldx, 0, k), accumulate);
    }
  }
}

// ---- prefill: 16 activation rows per tile ---------------------------------
//
// With many activation rows (a prompt's tokens), a tile's 16 columns hold 16
// tokens and the three parts of each activation take three multiplies into
// the same accumulator tile. Per 32-column block: two weight tiles (32 rows)
// stay loaded while six activation tiles (two 16-token blocks x 3 parts) pass
// through, 12 full 16 x 16 x 32 multiplies per 8 tile loads (batched decode's
// gemv_packed: 4 per 4, on half-empty tiles).

constexpr int64_t kGemmTokens = 16;  // activation rows per tile
// uint16s of one token block's part tile for one 32-column block (16 column
// pairs x 16 tokens, dwords).
constexpr int64_t kPartTileU16 = 16 * kGemmTokens * 2;

int64_t GemmPackedSize(int64_t m, int64_t k) {
  return (m + kGemmTokens - 1) / kGemmTokens * (k / kBlockCols) * kSplits * kPartTileU16;
}

// Packed rows: per 16-token block tb (rows past m are zero), per 32-column
// block b, per part s: a B tile, dword (p, t) the part-s BF16 pair of token
// 16 tb + t at columns 32b+2p (low half) and 32b+2p+1 (high half).
void PackGemmActivations(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* packed) {
  const int64_t blocks = k / kBlockCols;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i index = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192,
                                          208, 224, 240);  // dword p at row p of the tile
  int* out = reinterpret_cast<int*>(packed);
  const int64_t token_blocks = (m + kGemmTokens - 1) / kGemmTokens;
  for (int64_t tb = 0; tb < token_blocks; ++tb) {
    int* tb_out = out + tb * blocks * kSplits * (kPartTileU16 / 2);
    for (int64_t t = 0; t < kGemmTokens; ++t) {
      const int64_t i = tb * kGemmTokens + t;
      for (int64_t b = 0; b < blocks; ++b) {
        __m512i pairs[kSplits] = {zero, zero, zero};  // rows past m are zero
        if (i < m) SplitPairs32(x + i * ldx + b * kBlockCols, pairs);
        int* tiles = tb_out + b * kSplits * (kPartTileU16 / 2);
        for (int s = 0; s < kSplits; ++s) {
          _mm512_i32scatter_epi32(tiles + s * (kPartTileU16 / 2) + t, index, pairs[s], 4);
        }
      }
    }
  }
}

// Tiles: C (0-3: 16 weight rows x 16 tokens f32, C[g][j] = tile 2g + j for
// weight group g and token block j), A (4, 5: 16 rows x 32 BF16 weights),
// B (6, 7: one part tile, alternating so a load need not wait for the
// multiply that read the other).
void ConfigureGemmTiles() {
  TileConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// y[i*ldy + (r - row0)] (+)= out_scale * W[r, :] . x_i for r in [row0, row1),
// i < m, W BF16 with k = w.cols, x packed by PackGemmActivations: 32 (then 16) weight
// rows x 32 (then 16) tokens per pass through the tiles; the columns past the
// last whole 32-column block and the rows past the last whole 16 in f32 FMAs.
void GemmPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                float out_scale) {
  const int64_t k = w.cols;
  const int64_t blocks = k / kBlockCols;
  const int64_t k_main = blocks * kBlockCols;
  const int64_t stride = w.row_stride;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  const int64_t token_blocks = (m + kGemmTokens - 1) / kGemmTokens;
  const int64_t tb_u16 = blocks * kSplits * kPartTileU16;  // packed uint16s per token block
  alignas(64) float c[4][16 * 16];
  int64_t r = row0;
  if (blocks > 0 && row1 - row0 >= 16) {
    ConfigureGemmTiles();
    for (; r + 16 <= row1;) {
      const int groups = r + 32 <= row1 ? 2 : 1;
      const uint8_t* a0 = data + r * stride;
      const uint8_t* a1 = a0 + 16 * stride;
      for (int64_t tb = 0; tb < token_blocks; tb += 2) {
        const int tbs = tb + 1 < token_blocks ? 2 : 1;
        const uint16_t* p0 = packed + tb * tb_u16;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t b = 0; b < blocks; ++b) {
          _tile_loadd(4, a0 + b * 64, stride);
          if (groups == 2) _tile_loadd(5, a1 + b * 64, stride);
          // Tile numbers must be constants: the six part tiles, unrolled.
// (j, s): token block and part; c0 / c1: its accumulators for weight groups
// 0 / 1 (tiles j and 2 + j).
#define OCTET_PART(j, s, breg, c0, c1)                                           \
  _tile_loadd(breg, p0 + (j) * tb_u16 + (b * kSplits + (s)) * kPartTileU16, 64); \
  _tile_dpbf16ps(c0, 4, breg);                                                   \
  if (groups == 2) _tile_dpbf16ps(c1, 5, breg);
          OCTET_PART(0, 0, 6, 0, 2)
          OCTET_PART(0, 1, 7, 0, 2)
          OCTET_PART(0, 2, 6, 0, 2)
          if (tbs == 2) {
            OCTET_PART(1, 0, 7, 1, 3)
            OCTET_PART(1, 1, 6, 1, 3)
            OCTET_PART(1, 2, 7, 1, 3)
          }
#undef OCTET_PART
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        // Token by token, so each token's 16 or 32 outputs are one run of y.
        for (int j = 0; j < tbs; ++j) {
          for (int64_t t = 0; t < kGemmTokens; ++t) {
            const int64_t i = (tb + j) * kGemmTokens + t;
            if (i >= m) break;
            for (int g = 0; g < groups; ++g) {
              const float* cg = c[2 * g + j];
              for (int64_t row = 0; row < 16; ++row) {
                const int64_t wr = r + 16 * g + row;
                float v = cg[row * 16 + t];
                if (k_main < k) v += DotBf16(data + wr * stride, x + i * ldx, k_main, k);
                Store(y + i * ldy + (wr - row0), v * out_scale, accumulate);
              }
            }
          }
        }
      }
      r += 16 * groups;
    }
    _tile_release();
  }
  for (; r < row1; ++r) {  // fewer than 16 rows left (or no whole block): f32 FMAs
    const uint8_t* wr = data + r * stride;
    for (int64_t i = 0; i < m; ++i) {
      Store(y + i * ldy + (r - row0), DotBf16(wr, x + i * ldx, 0, k) * out_scale, accumulate);
    }
  }
}

}  // namespace

bool AmxUsable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    // Linux enables the 8 KiB tile state per process on request
    // (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); refused on older kernels.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return usable;
}

const IsaKernels& AmxKernels() {
  static const IsaKernels k = [] {
    IsaKernels t = Avx512Kernels();
    t.name = "avx512-amx";
    t.gemv_packed_size = PackedSize;
    t.pack_gemv_activations = PackActivations;
    t.gemv_packed = GemvPacked;
    t.gemm_packed_size = GemmPackedSize;
    t.pack_gemm_activations = PackGemmActivations;
    t.gemm_packed = GemmPacked;
    // decode_nvfp4_bf16: the AVX-512 table's (isa_avx512_gemm.cpp).
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
