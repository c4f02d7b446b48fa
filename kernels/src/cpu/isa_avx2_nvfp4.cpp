// AVX2 kernels: NVFP4 decode (1 to a few activation rows) from a matrix's
// tiles (weight.h, TileNvfp4), in integers. Compiled with the AVX2 table's
// flags (-mavx2 -mfma -mf16c); added to it by AddAvx2Nvfp4TileKernels. See
// isa.h for why nothing here may instantiate std:: templates.
//
// Why: the row-major AVX2 kernel (isa_avx2.cpp) turns every 8 E2M1 codes
// into floats with a broadcast, a variable shift, a permute, a shift and an
// xor before its FMAs; two of those are shuffles, and AVX2 CPUs have one or
// two shuffle ports, so it decodes ~3.7 weights a cycle and NVFP4 decode
// stays compute-bound far below what memory delivers.
//
// What: each activation block of 16 values becomes 16-bit integers with a
// power-of-two scale (its largest |q| in [2^14, 2^15], saturated to int16),
// and PMADDWD multiplies them with the codes as 16-bit integers. A tile
// part's 64 bytes are 16 rows x 4 columns (weight.h); a 32-byte half is 8
// rows, a dword per row. One PSHUFB per 4 columns turns the nibbles into
// 2 x E2M1 + 12 (0..24), a byte per column; masking and shifting the 16-bit
// words splits them into the even and the odd columns as int16 (c0 c2 | c1
// c3 per row), so each PMADDWD against a broadcast pair of activations
// (packed in that order) leaves one int32 per row and nothing to reduce
// across lanes. A block's 16 products and the 12 x sum(q) taken off stay
// below 2^24, so each block's sum is exact in a float and takes its scale
// (the tile's E5M3 byte with the block's power of two and the 1/2 of the
// doubled codes in the float's exponent) by one FMA, as in the VNNI kernel.
//
// Not the VNNI kernel's arithmetic, three byte planes of a 22-bit integer:
// on AVX2 that took 15 multiplies per 128 products and row against 8 here,
// and an L1-resident group ran at 17-21 cycles per 8 rows x 16 columns and
// activation row on Zen 3 against 11 (two rows a pass) to 15 (one) here.
// Outputs differ from the VNNI kernel's by the activations' rounding: 15
// bits of each block's largest value where VNNI keeps 22 (finer than FP16's
// 11-bit mantissa; backend.h, UsesNvfp4Tiles). Every row of a batch goes
// through the same arithmetic, so a row's output does not depend on the
// batch it is in (speculative decoding relies on it).
#include <immintrin.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))

// Packed row: per 16-column block 10 vectors of 32 bytes. Vectors 0-7 hold
// the pairs of activations the kernel multiplies, each broadcast to all 8
// dwords so that PMADDWD reads them straight from memory: (q0 q2), (q1 q3),
// (q4 q6), (q5 q7), then the same for 8-15. Vector 8 holds 12 * sum(q),
// vector 9 the block scale's exponent bias, also broadcast. 20 bytes a value
// (40 KiB for a row of 2048), read once per 16 weight rows. On Zen 3 this
// measured 11.2-11.5 cycles per 8 rows x 16 columns and row (two rows a
// pass, L1-resident) against 12.8-13.2 for a compact row (32 bytes a block)
// whose pairs the kernel broadcast as it went, one half-group at a time.
constexpr int64_t kActBlockBytes = 10 * 32;

int64_t PackedSize(int64_t k) { return k / kNvfp4BlockSize * kActBlockBytes; }

OCTET_INLINE int32_t HmaxEpi32(__m256i v) {
  v = _mm256_max_epi32(v, _mm256_permute2x128_si256(v, v, 1));
  v = _mm256_max_epi32(v, _mm256_shuffle_epi32(v, 0x4e));
  v = _mm256_max_epi32(v, _mm256_shuffle_epi32(v, 0xb1));
  return _mm256_cvtsi256_si32(v);
}

OCTET_INLINE int32_t HsumEpi32(__m256i v) {
  v = _mm256_add_epi32(v, _mm256_permute2x128_si256(v, v, 1));
  v = _mm256_add_epi32(v, _mm256_shuffle_epi32(v, 0x4e));
  v = _mm256_add_epi32(v, _mm256_shuffle_epi32(v, 0xb1));
  return _mm256_cvtsi256_si32(v);
}

// One block at a time. False when x cannot go this way (isa.h): a value that
// is not finite, or a block whose largest magnitude is nonzero but below
// 2^-94 (the bound the VNNI kernel needs; this one would take down to 2^-101).
bool PackActivation(const float* x, int64_t k, uint8_t* packed) {
  const int64_t blocks = k / kNvfp4BlockSize;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
  // Within each 128-bit lane, int16 0 1 2 3 4 5 6 7 -> 0 2 1 3 4 6 5 7.
  const __m256i pair_order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,
                                              0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 lo = _mm256_loadu_ps(x + b * 16), hi = _mm256_loadu_ps(x + b * 16 + 8);
    const __m256i alo = _mm256_and_si256(_mm256_castps_si256(lo), abs_mask);
    const __m256i ahi = _mm256_and_si256(_mm256_castps_si256(hi), abs_mask);
    const __m256i bad =
        _mm256_or_si256(_mm256_cmpgt_epi32(alo, max_finite), _mm256_cmpgt_epi32(ahi, max_finite));
    if (!_mm256_testz_si256(bad, bad)) return false;
    // |x| as int32 orders like |x| (non-negative finite floats).
    const int32_t amax = HmaxEpi32(_mm256_max_epi32(alo, ahi));
    int32_t ex = 0;  // scaled by 2^-ex: the largest |q| in [2^14, 2^15]
    if (amax != 0) {
      const int32_t field = amax >> 23;
      if (field < 33) return false;  // the scale's exponent must stay a normal float's
      ex = field - (126 + 15);
    }
    // The scale's float exponent, 116 + ex + (1..18) (the E5M3 byte's), stays
    // within 1..254: ex = field - 141 lies in -108..113.
    const __m256 scale = _mm256_castsi256_ps(_mm256_set1_epi32((127 - ex) << 23));
    const __m256i q_lo = _mm256_cvtps_epi32(_mm256_mul_ps(lo, scale));
    const __m256i q_hi = _mm256_cvtps_epi32(_mm256_mul_ps(hi, scale));
    // PACKS saturates a rounded 2^15 to 32767; lanes: 0-3 8-11 | 4-7 12-15.
    const __m256i q = _mm256_shuffle_epi8(
        _mm256_permute4x64_epi64(_mm256_packs_epi32(q_lo, q_hi), 0xd8), pair_order);
    alignas(32) int32_t pairs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), q);
    __m256i* o = reinterpret_cast<__m256i*>(packed + b * kActBlockBytes);
    for (int j = 0; j < 8; ++j) _mm256_storeu_si256(o + j, _mm256_set1_epi32(pairs[j]));
    // |12 sum(q)| <= 12 * 16 * 2^15
    _mm256_storeu_si256(o + 8, _mm256_set1_epi32(12 * HsumEpi32(_mm256_madd_epi16(q, ones))));
    _mm256_storeu_si256(o + 9, _mm256_set1_epi32((116 + ex) << 23));
  }
  return true;
}

// How far ahead the group's stream is prefetched (as the VNNI kernel).
constexpr int64_t kPrefetchBytes = 4 * kNvfp4TileChunkBytes;

OCTET_INLINE __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 8 rows' codes of 4 columns (a dword per row, byte j column j, 0..24)
// against the block's activation pairs at xp (c0 c2, then c1 c3, broadcast):
// each row's 4-column sum in int32.
OCTET_INLINE __m256i Dot4(__m256i w, __m256i even_mask, const uint8_t* xp) {
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(w, even_mask), Load(xp)),
                          _mm256_madd_epi16(_mm256_srli_epi16(w, 8), Load(xp + 32)));
}

// One 16-row group against M (1 or 2) activation rows, row i's packing at
// packed + i * row_bytes: out[i * ldo + r] (+)= global * row r . x_i. The
// codes of each half-group block are expanded once for the M rows; more rows
// would spill (16 ymm registers), so callers take rows two at a time and the
// group's tiles come from L1 after the first pair.
template <int M>
void GroupPass(const uint8_t* g, int64_t chunks, const uint8_t* packed, int64_t row_bytes,
               float global, float* out, int64_t ldo, bool accumulate) {
  // 2 x E2M1 + 12 for each nibble (PSHUFB looks up within each 128-bit lane).
  const __m256i table = _mm256_setr_epi32(0x0f0e0d0c, 0x18141210, 0x090a0b0c, 0x00040608,
                                          0x0f0e0d0c, 0x18141210, 0x090a0b0c, 0x00040608);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i even = _mm256_set1_epi16(0x00ff);
  // Every loop over h and i is unrolled: an array of vectors indexed by a
  // loop variable would live on the stack.
  __m256 acc[2][M];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
    for (int i = 0; i < M; ++i) acc[h][i] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const uint8_t* src = g + c * kNvfp4TileChunkBytes;
    // The stream runs on into the next group (prefetches never fault).
    const char* pf = reinterpret_cast<const char*>(src + kPrefetchBytes);
    for (int l = 0; l < kNvfp4TileChunkBytes / 64; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
#pragma GCC unroll 1
    for (int bl = 0; bl < 4; ++bl) {
      const uint8_t* xb = packed + (c * 4 + bl) * kActBlockBytes;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        // Parts 2bl and 2bl+1 of the chunk, rows 8h..8h+7: the block's columns
        // 0-3 / 4-7 (low / high nibbles of the first) and 8-11 / 12-15.
        const __m256i v0 = Load(src + 2 * bl * 64 + 32 * h);
        const __m256i v1 = Load(src + (2 * bl + 1) * 64 + 32 * h);
        __m256i t[M];
        {
          const __m256i w0 = _mm256_shuffle_epi8(table, _mm256_and_si256(v0, nibble));
          const __m256i w1 =
              _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v0, 4), nibble));
#pragma GCC unroll 2
          for (int i = 0; i < M; ++i) {
            const uint8_t* xi = xb + i * row_bytes;
            t[i] = _mm256_add_epi32(Dot4(w0, even, xi), Dot4(w1, even, xi + 64));
          }
        }
        const __m256i w2 = _mm256_shuffle_epi8(table, _mm256_and_si256(v1, nibble));
        const __m256i w3 =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v1, 4), nibble));
        // Each row's scale byte, in the float's exponent and top mantissa bits.
        const __m256i e5m3 = _mm256_slli_epi32(
            _mm256_cvtepu8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * 64 + bl * 16 + 8 * h))),
            20);
#pragma GCC unroll 2
        for (int i = 0; i < M; ++i) {
          const uint8_t* xi = xb + i * row_bytes;
          const __m256i s = _mm256_add_epi32(
              t[i], _mm256_add_epi32(Dot4(w2, even, xi + 128), Dot4(w3, even, xi + 192)));
          const __m256 scale = _mm256_castsi256_ps(_mm256_add_epi32(e5m3, Load(xi + 288)));
          acc[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, Load(xi + 256))),
                                      scale, acc[h][i]);
        }
      }
    }
  }
  const __m256 gs = _mm256_set1_ps(global);
#pragma GCC unroll 2
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float* o = out + i * ldo + 8 * h;
      // One explicit FMA when adding, as the VNNI kernel does (a mul and an
      // add are fused by the compiler in some places and not in others).
      const __m256 v = accumulate ? _mm256_fmadd_ps(acc[h][i], gs, _mm256_loadu_ps(o))
                                  : _mm256_mul_ps(acc[h][i], gs);
      _mm256_storeu_ps(o, v);
    }
  }
}

void GemvNvfp4Tiles(const WeightMatrix& w, int64_t row0, int64_t row1, const uint8_t* packed,
                    int64_t m, float* y, int64_t ldy, bool accumulate) {
  const int64_t chunks = w.cols / kNvfp4TileCols;
  const int64_t stride = w.tile_group_stride;
  const int64_t row_bytes = PackedSize(w.cols);
  // A task starts cold: ask for its first chunks at once.
  {
    const char* p = reinterpret_cast<const char*>(w.tiles + row0 / 16 * stride);
    const int64_t bytes = kPrefetchBytes < stride ? kPrefetchBytes : stride;
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
  for (int64_t r = row0; r < row1; r += 16) {
    const uint8_t* g = w.tiles + r / 16 * stride;
    for (int64_t i = 0; i < m; i += 2) {
      float* o = y + i * ldy + (r - row0);
      const uint8_t* p = packed + i * row_bytes;
      if (m - i >= 2) {
        GroupPass<2>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
      } else {
        GroupPass<1>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
      }
    }
  }
}

}  // namespace

void AddAvx2Nvfp4TileKernels(IsaKernels* t) {
  t->nvfp4_tiles_packed_size = PackedSize;
  t->pack_nvfp4_tiles_activation = PackActivation;
  t->gemv_nvfp4_tiles = GemvNvfp4Tiles;
}

}  // namespace octet::kernels::cpu
