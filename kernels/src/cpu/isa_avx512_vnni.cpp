// AVX512-VNNI kernels: NVFP4 decode (1 to a few rows) from a matrix's tiles
// (weight.h, TileNvfp4). Compiled with -mavx512... -mavx512vnni in a file of
// their own, so nothing else is built for VNNI; added to the AVX-512 table by
// AddAvx512VnniKernels only after the CPUID check. See isa.h for why nothing
// here may instantiate std:: templates.
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#include "cpu/isa.h"
#include "cpu/isa_avx512_reduce.h"

// GCC 12 reports its own AVX-512 intrinsics (the masked forms behind the
// reductions) as reading an uninitialised value (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))

// ---- NVFP4 single-row decode from a matrix's tiles (AVX512-VNNI) -----------
//
// Why: the row-major kernel (isa_avx512.cpp) issues a shift, a permute and an FMA per 16
// weights and, from L2, runs at ~22 G weights/s a core, below what memory
// delivers. From the tile copy (weight.h, TileNvfp4) the codes come as 16 rows
// x 4 columns per 64 bytes, which is VPDPBUSD's layout: each of its 16 lanes
// (weight rows) sums 4 byte products. One VPERMB turns 64 packed bytes into
// two such vectors of 2 x E2M1 + 12 (unsigned, 0..24), and one VPDPBUSD against
// 4 activation bytes broadcast does 64 multiply-adds. Nothing is stored.
//
// The activation in integers, exactly enough: each 16-column block's values
// are scaled by a power of two so the largest lies in [2^21, 2^22), rounded
// to integers q (a relative error below 2^-22 of the block's largest, about
// f32's own 2^-24 per value), and q is split into three signed bytes, q = b0 +
// 256 b1 + 65536 b2, one VPDPBUSD chain per part. The +12 of the codes comes
// off as 12 * (sum of the block's q), which starts part 0's sums. The parts
// combine in int32 (|sum| < 2^31, exact), convert, and take the block's scale:
// its E5M3 byte from the tiles with the block's power of two and the 1/2 of
// the doubled codes folded into the float's exponent.
//
// A/B in one process (1024 x 1024, from L2, one thread): 40 G weights/s
// against 22-24 for the row-major kernel and 27-30 for the same layout through
// AMX-INT8 tiles (stores to build each tile, tile loads and tile stores
// excluded each other there); 4096 x 1024 from DRAM, two threads: 43-44
// against 32-33 and 35-39.

constexpr int64_t kTileActBlockBytes = 3 * 16;  // one block's three parts

// Packed row: per 16-column block, its three parts (16 signed bytes each);
// then per block an int32 of 12 * sum(q) and one of its scale's exponent bias.
int64_t Nvfp4TilesPackedSize(int64_t k) {
  const int64_t blocks = k / kNvfp4BlockSize;
  return blocks * kTileActBlockBytes + blocks * 8;
}

// A block's q into its three parts (16 signed bytes each) at o. q = b0 + 256
// b1 + 65536 b2 with signed bytes: b0 is q's low byte and (q - b0) / 256 =
// (q + 128) >> 8, likewise for b1 and b2; one VPERMT2B gathers the low bytes
// of q and q1.
OCTET_INLINE void StoreParts(__m512i q, uint8_t* o) {
  const __m512i q1 = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(128)), 8);
  const __m512i q2 = _mm512_srai_epi32(_mm512_add_epi32(q1, _mm512_set1_epi32(128)), 8);
  const __m512i low_bytes =
      _mm512_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                      0, 0, 0, 0, 0, 0, 124, 120, 116, 112, 108, 104, 100, 96, 92, 88, 84, 80, 76,
                      72, 68, 64, 60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o),
                      _mm512_castsi512_si256(_mm512_permutex2var_epi8(q, low_bytes, q1)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32), _mm512_cvtepi32_epi8(q2));
}

OCTET_INLINE __m512 MaxPs(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
OCTET_INLINE __m512 AddEpi32(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
// Block kPackOrder[i] goes into v[i], so that lane p of TransposeReduce16 is block p.
using avx512::kPackOrder;
using avx512::TransposeReduce16;

// Blocks [b, b + n) with n 1..16, their values at x + 16 b: parts, 12 sum(q) and
// the scale bias; false when a block cannot go this way (isa.h).
OCTET_INLINE bool PackBlocks(const float* x, int64_t b, int n, uint8_t* packed, int32_t* corr,
                             int32_t* bias) {
  __m512 v[16], a[16];
  __mmask16 bad = 0;
  for (int i = 0; i < 16; ++i) {
    const int blk = kPackOrder[i];
    v[i] = blk < n ? _mm512_loadu_ps(x + (b + blk) * 16) : _mm512_setzero_ps();
    bad |= _mm512_fpclass_ps_mask(v[i], 0x01 | 0x80 | 0x08 | 0x10);  // QNaN, SNaN, +inf, -inf
    a[i] = _mm512_abs_ps(v[i]);
  }
  if (bad != 0) return false;
  // Per block: amax < 2^e (frexp's e = the float's exponent field - 126);
  // scaled by 2^-ex, ex = e - 22, the block's |q| <= 2^22. The scale's float
  // exponent, 116 + ex + (1..18), must stay in 1..254: ex >= -115, i.e. a
  // field of at least 33 (so subnormal maxima, field 0, are turned away too).
  const __m512i bits = _mm512_castps_si512(TransposeReduce16(a, MaxPs));
  const __m512i field = _mm512_srli_epi32(bits, 23);
  const __mmask16 nonzero = _mm512_test_epi32_mask(bits, bits);
  if (_mm512_mask_cmplt_epi32_mask(nonzero, field, _mm512_set1_epi32(33)) != 0) return false;
  const __m512i ex = _mm512_maskz_sub_epi32(nonzero, field, _mm512_set1_epi32(126 + 22));
  alignas(64) float scale[16];
  _mm512_store_ps(scale, _mm512_castsi512_ps(
                             _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), ex), 23)));
  alignas(64) int32_t bias16[16];
  _mm512_store_si512(bias16, _mm512_slli_epi32(_mm512_add_epi32(_mm512_set1_epi32(116), ex), 23));
  __m512 q[16];
  for (int i = 0; i < 16; ++i) {
    const int blk = kPackOrder[i];
    const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], _mm512_set1_ps(scale[blk])));
    q[i] = _mm512_castsi512_ps(qi);
    if (blk < n) StoreParts(qi, packed + (b + blk) * kTileActBlockBytes);
  }
  alignas(64) int32_t corr16[16];  // |12 sum| <= 12 * 16 * 2^22 < 2^31
  _mm512_store_si512(corr16, _mm512_mullo_epi32(_mm512_castps_si512(TransposeReduce16(q, AddEpi32)),
                                                _mm512_set1_epi32(12)));
  for (int i = 0; i < n; ++i) {
    corr[b + i] = corr16[i];
    bias[b + i] = bias16[i];
  }
  return true;
}

bool PackNvfp4TilesActivation(const float* x, int64_t k, uint8_t* packed) {
  const int64_t blocks = k / kNvfp4BlockSize;
  int32_t* corr = reinterpret_cast<int32_t*>(packed + blocks * kTileActBlockBytes);
  int32_t* bias = corr + blocks;
  // 16 blocks at a time, with their maxima and sums reduced together: 3x the
  // rate of one block at a time (0.33 against 0.98 us at 1024 columns), the
  // same bytes (checked against it on 20000 random rows, zero, tiny,
  // subnormal and non-finite blocks included). It is on the critical path of
  // every decode matmul (packed before the tasks start).
  for (int64_t b = 0; b < blocks; b += 16) {
    const int n = blocks - b < 16 ? static_cast<int>(blocks - b) : 16;
    if (!PackBlocks(x, b, n, packed, corr, bias)) return false;
  }
  return true;
}

// How far ahead each group's stream is prefetched: 4 chunks (as measured for
// the AMX version of this loop: 2 and 4 best, none 0.7x).
constexpr int64_t kTilePrefetchBytes = 4 * kNvfp4TileChunkBytes;

OCTET_INLINE __m512i Bcast4(const uint8_t* p) {
  int32_t d;
  memcpy(&d, p, 4);
  return _mm512_set1_epi32(d);
}

// G (1, 2 or 4) 16-row groups, group j's tiles at g0 + j * group_stride;
// out[16 j + i] (+)= global * row i of group j . x. Tasks take passes of 4
// groups where they can: four sequential streams a core keep more of memory's
// latency covered than two. A/B in one process, 2 threads from DRAM: 4
// groups 30-31 GB/s against 28.5-29.6 (1 group: 23); bench_gemv, the decode
// step's NVFP4 matmuls 7-18% faster (prefetching 2 or 6 chunks ahead, or 8
// groups, measured no better).
template <int G>
void Nvfp4TilesPass(const uint8_t* g0, int64_t group_stride, int64_t chunks, const uint8_t* packed,
                    float global, float* out, bool accumulate) {
  const int64_t blocks = chunks * 4;
  const int32_t* corr = reinterpret_cast<const int32_t*>(packed + blocks * kTileActBlockBytes);
  const int32_t* bias = corr + blocks;
  // 2 x E2M1 + 12 for VPERMB's 6-bit index: repeated 4 times, so the two bits
  // above a nibble do not matter.
  const __m512i table = _mm512_set4_epi32(0x00040608, 0x090a0b0c, 0x18141210, 0x0f0e0d0c);
  __m512 acc[G];
  for (int j = 0; j < G; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const uint8_t* src = g0 + j * group_stride + c * kNvfp4TileChunkBytes;
      // The stream runs on into the next pass's group j (prefetches never fault).
      int64_t ahead = c * kNvfp4TileChunkBytes + kTilePrefetchBytes;
      if (ahead >= group_stride) ahead += (G - 1) * group_stride;
      const char* pf = reinterpret_cast<const char*>(g0 + j * group_stride + ahead);
      for (int l = 0; l < kNvfp4TileChunkBytes / 64; ++l) {
        _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int bl = 0; bl < 4; ++bl) {
        const int64_t b = c * 4 + bl;
        // Parts 2bl and 2bl+1: the block's columns 0-3 / 4-7 (low / high
        // nibbles of the first) and 8-11 / 12-15 (of the second).
        const __m512i v0 = _mm512_loadu_si512(src + 2 * bl * 64);
        const __m512i v1 = _mm512_loadu_si512(src + (2 * bl + 1) * 64);
        const __m512i w0 = _mm512_permutexvar_epi8(v0, table);
        const __m512i w1 = _mm512_permutexvar_epi8(_mm512_srli_epi16(v0, 4), table);
        const __m512i w2 = _mm512_permutexvar_epi8(v1, table);
        const __m512i w3 = _mm512_permutexvar_epi8(_mm512_srli_epi16(v1, 4), table);
        const uint8_t* xb = packed + b * kTileActBlockBytes;
        __m512i part[3];
#pragma GCC unroll 3
        for (int p = 0; p < 3; ++p) {
          const uint8_t* xp = xb + 16 * p;
          __m512i s = p == 0 ? _mm512_set1_epi32(-corr[b]) : _mm512_setzero_si512();
          s = _mm512_dpbusd_epi32(s, w0, Bcast4(xp));
          s = _mm512_dpbusd_epi32(s, w1, Bcast4(xp + 4));
          s = _mm512_dpbusd_epi32(s, w2, Bcast4(xp + 8));
          s = _mm512_dpbusd_epi32(s, w3, Bcast4(xp + 12));
          part[p] = s;
        }
        const __m512i t = _mm512_add_epi32(
            part[0],
            _mm512_add_epi32(_mm512_slli_epi32(part[1], 8), _mm512_slli_epi32(part[2], 16)));
        const __m512i e5m3 = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8 * 64 + bl * 16)));
        const __m512 scale = _mm512_castsi512_ps(
            _mm512_add_epi32(_mm512_slli_epi32(e5m3, 20), _mm512_set1_epi32(bias[b])));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[j]);
      }
    }
  }
  for (int j = 0; j < G; ++j) {
    // One explicit FMA when adding: the compiler may not fuse a mul and an
    // add on its own in one place and not in another (the AVX2 kernel's
    // outputs are these, bit for bit).
    const __m512 g = _mm512_set1_ps(global);
    const __m512 v = accumulate ? _mm512_fmadd_ps(acc[j], g, _mm512_loadu_ps(out + 16 * j))
                                : _mm512_mul_ps(acc[j], g);
    _mm512_storeu_ps(out + 16 * j, v);
  }
}

// The same for M (2..4) activation rows, row i's packing at packed + i *
// row_bytes: out[i * ldo + 16 j + r] (+)= global * row r of group j . x_i.
// The codes are expanded once (the VPERMBs) for all rows and each row adds
// its own three VPDPBUSD chains, so a small decode batch (a mixture of
// experts gives most experts one to three tokens a step) reads the weights
// once, from the tiles. The blocks of a chunk are not unrolled here: with G x
// M accumulators that keeps them in registers.
template <int G, int M>
void Nvfp4TilesPassRows(const uint8_t* g0, int64_t group_stride, int64_t chunks,
                        const uint8_t* packed, int64_t row_bytes, float global, float* out,
                        int64_t ldo, bool accumulate) {
  const int64_t blocks = chunks * 4;
  const uint8_t* xs[M];
  const int32_t* corr[M];
  const int32_t* bias[M];
  for (int i = 0; i < M; ++i) {
    xs[i] = packed + i * row_bytes;
    corr[i] = reinterpret_cast<const int32_t*>(xs[i] + blocks * kTileActBlockBytes);
    bias[i] = corr[i] + blocks;
  }
  // 2 x E2M1 + 12 for VPERMB's 6-bit index: repeated 4 times, so the two bits
  // above a nibble do not matter.
  const __m512i table = _mm512_set4_epi32(0x00040608, 0x090a0b0c, 0x18141210, 0x0f0e0d0c);
  __m512 acc[G][M];
  for (int j = 0; j < G; ++j) {
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const uint8_t* src = g0 + j * group_stride + c * kNvfp4TileChunkBytes;
      // The stream runs on into the next pass's group j (prefetches never fault).
      int64_t ahead = c * kNvfp4TileChunkBytes + kTilePrefetchBytes;
      if (ahead >= group_stride) ahead += (G - 1) * group_stride;
      const char* pf = reinterpret_cast<const char*>(g0 + j * group_stride + ahead);
      for (int l = 0; l < kNvfp4TileChunkBytes / 64; ++l) {
        _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
      }
#pragma GCC unroll 1
      for (int bl = 0; bl < 4; ++bl) {
        const int64_t b = c * 4 + bl;
        // Parts 2bl and 2bl+1: the block's columns 0-3 / 4-7 (low / high
        // nibbles of the first) and 8-11 / 12-15 (of the second).
        const __m512i v0 = _mm512_loadu_si512(src + 2 * bl * 64);
        const __m512i v1 = _mm512_loadu_si512(src + (2 * bl + 1) * 64);
        const __m512i w0 = _mm512_permutexvar_epi8(v0, table);
        const __m512i w1 = _mm512_permutexvar_epi8(_mm512_srli_epi16(v0, 4), table);
        const __m512i w2 = _mm512_permutexvar_epi8(v1, table);
        const __m512i w3 = _mm512_permutexvar_epi8(_mm512_srli_epi16(v1, 4), table);
        const __m512i e5m3 = _mm512_slli_epi32(
            _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8 * 64 + bl * 16))),
            20);
#pragma GCC unroll 4
        for (int i = 0; i < M; ++i) {
          const uint8_t* xb = xs[i] + b * kTileActBlockBytes;
          __m512i part[3];
#pragma GCC unroll 3
          for (int p = 0; p < 3; ++p) {
            const uint8_t* xp = xb + 16 * p;
            __m512i s = p == 0 ? _mm512_set1_epi32(-corr[i][b]) : _mm512_setzero_si512();
            s = _mm512_dpbusd_epi32(s, w0, Bcast4(xp));
            s = _mm512_dpbusd_epi32(s, w1, Bcast4(xp + 4));
            s = _mm512_dpbusd_epi32(s, w2, Bcast4(xp + 8));
            s = _mm512_dpbusd_epi32(s, w3, Bcast4(xp + 12));
            part[p] = s;
          }
          const __m512i t = _mm512_add_epi32(
              part[0],
              _mm512_add_epi32(_mm512_slli_epi32(part[1], 8), _mm512_slli_epi32(part[2], 16)));
          const __m512 scale =
              _mm512_castsi512_ps(_mm512_add_epi32(e5m3, _mm512_set1_epi32(bias[i][b])));
          acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[j][i]);
        }
      }
    }
  }
  for (int j = 0; j < G; ++j) {
    for (int i = 0; i < M; ++i) {
      float* o = out + i * ldo + 16 * j;
      const __m512 g = _mm512_set1_ps(global);
      const __m512 v = accumulate ? _mm512_fmadd_ps(acc[j][i], g, _mm512_loadu_ps(o))
                                  : _mm512_mul_ps(acc[j][i], g);
      _mm512_storeu_ps(o, v);
    }
  }
}

// One pass of G groups for all m rows: one row by the single-row pass,
// more four at a time; the first four stream the pass's tiles from memory,
// later ones find them in L2 (a pass of 64 rows is 36 KiB per 1024 columns).
template <int G>
void Nvfp4TilesPassAllRows(const uint8_t* g0, int64_t group_stride, int64_t chunks,
                           const uint8_t* packed, int64_t row_bytes, int64_t m, float global,
                           float* out, int64_t ldo, bool accumulate) {
  for (int64_t i = 0; i < m; i += 4) {
    const uint8_t* p = packed + i * row_bytes;
    float* o = out + i * ldo;
    switch (m - i < 4 ? m - i : 4) {
      case 1:
        Nvfp4TilesPass<G>(g0, group_stride, chunks, p, global, o, accumulate);
        break;
      case 2:
        Nvfp4TilesPassRows<G, 2>(g0, group_stride, chunks, p, row_bytes, global, o, ldo,
                                 accumulate);
        break;
      case 3:
        Nvfp4TilesPassRows<G, 3>(g0, group_stride, chunks, p, row_bytes, global, o, ldo,
                                 accumulate);
        break;
      default:
        Nvfp4TilesPassRows<G, 4>(g0, group_stride, chunks, p, row_bytes, global, o, ldo,
                                 accumulate);
        break;
    }
  }
}

void GemvNvfp4Tiles(const WeightMatrix& w, int64_t row0, int64_t row1, const uint8_t* packed,
                    int64_t m, float* y, int64_t ldy, bool accumulate) {
  const int64_t chunks = w.cols / kNvfp4TileCols;
  const int64_t stride = w.tile_group_stride;
  const int64_t row_bytes = Nvfp4TilesPackedSize(w.cols);
  // A task starts cold: ask for the first chunks of its first groups at
  // once (the passes prefetch the rest as they go).
  for (int64_t g = 0; g < 4 && row0 + 16 * g < row1; ++g) {
    const char* p = reinterpret_cast<const char*>(w.tiles + (row0 / 16 + g) * stride);
    const int64_t bytes = kTilePrefetchBytes < stride ? kTilePrefetchBytes : stride;
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
  int64_t r = row0;
  for (; r + 64 <= row1; r += 64) {
    Nvfp4TilesPassAllRows<4>(w.tiles + r / 16 * stride, stride, chunks, packed, row_bytes, m,
                             w.global_scale, y + (r - row0), ldy, accumulate);
  }
  for (; r + 32 <= row1; r += 32) {
    Nvfp4TilesPassAllRows<2>(w.tiles + r / 16 * stride, stride, chunks, packed, row_bytes, m,
                             w.global_scale, y + (r - row0), ldy, accumulate);
  }
  if (r < row1) {
    Nvfp4TilesPassAllRows<1>(w.tiles + r / 16 * stride, stride, chunks, packed, row_bytes, m,
                             w.global_scale, y + (r - row0), ldy, accumulate);
  }
}

// GemvNvfp4Tiles in passes of one group: a task reads its groups in order,
// one memory stream (the avx512-rows table's; isa_avx512.cpp says why). Each
// row's sums are those of the 4-group passes. D (AMD Zen 4), bench_gemv
// --format nvfp4 --shape 8b, one row: the step's NVFP4 matmuls 1.15-1.35x
// as fast; the MoE model's c1 decode 20.0-21.1 -> 23.5-29.7 tok/s.
void GemvNvfp4TilesOneStream(const WeightMatrix& w, int64_t row0, int64_t row1,
                             const uint8_t* packed, int64_t m, float* y, int64_t ldy,
                             bool accumulate) {
  const int64_t chunks = w.cols / kNvfp4TileCols;
  const int64_t stride = w.tile_group_stride;
  const int64_t row_bytes = Nvfp4TilesPackedSize(w.cols);
  for (int64_t r = row0; r < row1; r += 16) {
    Nvfp4TilesPassAllRows<1>(w.tiles + r / 16 * stride, stride, chunks, packed, row_bytes, m,
                             w.global_scale, y + (r - row0), ldy, accumulate);
  }
}

}  // namespace

void AddAvx512VnniKernels(IsaKernels* t, bool one_stream) {
  unsigned a, b, c, d;  // AVX512-VNNI: CPUID.7.0:ECX[11]
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((c >> 11) & 1)) return;
  t->nvfp4_tiles_packed_size = Nvfp4TilesPackedSize;
  t->pack_nvfp4_tiles_activation = PackNvfp4TilesActivation;
  t->gemv_nvfp4_tiles = one_stream ? GemvNvfp4TilesOneStream : GemvNvfp4Tiles;
}

}  // namespace octet::kernels::cpu
