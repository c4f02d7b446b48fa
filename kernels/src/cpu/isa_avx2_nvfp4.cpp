// AVX2 kernels: NVFP4 decode (1 to a few activation rows) from a matrix's
// tiles (weight.h, TileNvfp4), in integers. Compiled with the AVX2 table's
// flags (-mavx2 -mfma -mf16c); added to it by AddAvx2Nvfp4TileKernels. See
// isa.h for why nothing here may instantiate std:: templates.
//
// Why: the row-major AVX2 kernel (isa_avx2.cpp) turns every 8 E2M1 codes
// into floats with a broadcast, a variable shift, a permute, a shift and an
// xor before its FMAs; two of those are shuffles, and AVX2 CPUs have one or
// two shuffle ports, so it decodes ~3.7 weights a cycle and NVFP4 decode
// stays compute-bound far below what memory delivers (bench_gemv, 2 threads:
// 7 GB/s against 19 for the AVX-512 tile kernel on the same machine).
//
// What: the AVX512-VNNI tile kernel's arithmetic (isa_avx512_vnni.cpp), with
// PMADDUBSW + PMADDWD in place of VPDPBUSD. A tile part's 64 bytes are 16
// rows x 4 columns; a 32-byte half is 8 rows. One PSHUFB per 4 columns turns
// the nibbles into 2 x E2M1 + 12 (unsigned, 0..24), and PMADDUBSW against 4
// activation bytes broadcast gives each row's pair sums in int16: at most
// 2 x 24 x 128 per lane, so the four column groups of a block add in int16
// (<= 24576) before one PMADDWD widens them. The activation is packed as the
// VNNI kernel packs it (three signed bytes of a 22-bit integer per value, a
// power-of-two scale per 16-column block, 12 x sum(q) to take off), so the
// integer sums are the same, exactly, and so is every output: each block's
// sum converts and takes its scale (the tile's E5M3 byte with the block's
// power of two and the 1/2 of the doubled codes in the float's exponent) by
// one FMA, as there. The byte planes combine in int32 (PMADDWD by 256 for the
// second, and a shift by 8 more for the third).
#include <immintrin.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

#define OCTET_INLINE inline __attribute__((always_inline))

constexpr int64_t kActBlockBytes = 3 * 16;  // one block's three byte planes

// Packed row, as the VNNI kernel's: per 16-column block its three planes (16
// signed bytes each); then per block an int32 of 12 * sum(q) and one of its
// scale's exponent bias.
int64_t PackedSize(int64_t k) {
  const int64_t blocks = k / kNvfp4BlockSize;
  return blocks * kActBlockBytes + blocks * 8;
}

// The low bytes of 16 int32 (lo: values 0-7, hi: 8-15) of a and of b, in
// order: 32 bytes, a's then b's. PACKUS interleaves the 128-bit lanes; one
// dword permute puts them back.
OCTET_INLINE __m256i LowBytes16x2(__m256i a_lo, __m256i a_hi, __m256i b_lo, __m256i b_hi) {
  const __m256i ff = _mm256_set1_epi32(0xff);
  const __m256i a = _mm256_packus_epi32(_mm256_and_si256(a_lo, ff), _mm256_and_si256(a_hi, ff));
  const __m256i b = _mm256_packus_epi32(_mm256_and_si256(b_lo, ff), _mm256_and_si256(b_hi, ff));
  // Lane 0: a0-3 a8-11 b0-3 b8-11, lane 1: a4-7 a12-15 b4-7 b12-15 (dwords).
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, b),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

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

// One block at a time (the VNNI packing reduces 16 blocks together with
// AVX-512's wide shuffles; here a block's two vectors reduce in three steps).
// False when x cannot go this way (isa.h): a value that is not finite, or a
// block whose largest magnitude is nonzero but below 2^-94.
bool PackActivation(const float* x, int64_t k, uint8_t* packed) {
  const int64_t blocks = k / kNvfp4BlockSize;
  int32_t* corr = reinterpret_cast<int32_t*>(packed + blocks * kActBlockBytes);
  int32_t* bias = corr + blocks;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
  const __m256i round = _mm256_set1_epi32(128);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 lo = _mm256_loadu_ps(x + b * 16), hi = _mm256_loadu_ps(x + b * 16 + 8);
    const __m256i alo = _mm256_and_si256(_mm256_castps_si256(lo), abs_mask);
    const __m256i ahi = _mm256_and_si256(_mm256_castps_si256(hi), abs_mask);
    const __m256i bad =
        _mm256_or_si256(_mm256_cmpgt_epi32(alo, max_finite), _mm256_cmpgt_epi32(ahi, max_finite));
    if (!_mm256_testz_si256(bad, bad)) return false;
    // |x| as int32 orders like |x| (non-negative finite floats).
    const int32_t amax = HmaxEpi32(_mm256_max_epi32(alo, ahi));
    int32_t ex = 0;  // scaled by 2^-ex: the largest |q| in [2^21, 2^22]
    if (amax != 0) {
      const int32_t field = amax >> 23;
      if (field < 33) return false;  // the scale's exponent must stay a normal float's
      ex = field - (126 + 22);
    }
    const __m256 scale = _mm256_castsi256_ps(_mm256_set1_epi32((127 - ex) << 23));
    const __m256i q_lo = _mm256_cvtps_epi32(_mm256_mul_ps(lo, scale));
    const __m256i q_hi = _mm256_cvtps_epi32(_mm256_mul_ps(hi, scale));
    // q = b0 + 256 b1 + 65536 b2 with signed bytes: (q + 128) >> 8 drops b0.
    const __m256i q1_lo = _mm256_srai_epi32(_mm256_add_epi32(q_lo, round), 8);
    const __m256i q1_hi = _mm256_srai_epi32(_mm256_add_epi32(q_hi, round), 8);
    const __m256i q2_lo = _mm256_srai_epi32(_mm256_add_epi32(q1_lo, round), 8);
    const __m256i q2_hi = _mm256_srai_epi32(_mm256_add_epi32(q1_hi, round), 8);
    uint8_t* o = packed + b * kActBlockBytes;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), LowBytes16x2(q_lo, q_hi, q1_lo, q1_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32),
                     _mm256_castsi256_si128(LowBytes16x2(q2_lo, q2_hi, q2_lo, q2_hi)));
    corr[b] = 12 * HsumEpi32(_mm256_add_epi32(q_lo, q_hi));  // |.| <= 12 * 16 * 2^22 < 2^31
    bias[b] = (116 + ex) << 23;
  }
  return true;
}

OCTET_INLINE __m256i Bcast4(const uint8_t* p) {
  int32_t d;
  memcpy(&d, p, 4);
  return _mm256_set1_epi32(d);
}

// One byte plane of a block against 8 rows' codes (w0..w3: columns 0-3,
// 4-7, 8-11, 12-15): each row's two pair sums per 128-bit lane, in int16.
OCTET_INLINE __m256i PlaneDot(__m256i w0, __m256i w1, __m256i w2, __m256i w3, const uint8_t* xp) {
  const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w0, Bcast4(xp)),
                                     _mm256_maddubs_epi16(w1, Bcast4(xp + 4)));
  const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(w2, Bcast4(xp + 8)),
                                     _mm256_maddubs_epi16(w3, Bcast4(xp + 12)));
  return _mm256_add_epi16(a, b);
}

// How far ahead the group's stream is prefetched (as the VNNI kernel).
constexpr int64_t kPrefetchBytes = 4 * kNvfp4TileChunkBytes;

// One 16-row group against M (1 or 2) activation rows, row i's packing at
// packed + i * row_bytes: out[i * ldo + r] (+)= global * row r . x_i. The
// codes of each half-group block are expanded once for the M rows; more than
// two rows would spill the accumulators (16 ymm registers), so callers take
// rows two at a time and the group's tiles come from L1 after the first pair.
template <int M>
void GroupPass(const uint8_t* g, int64_t chunks, const uint8_t* packed, int64_t row_bytes,
               float global, float* out, int64_t ldo, bool accumulate) {
  const int64_t blocks = chunks * 4;
  const uint8_t* xs[M];
  const int32_t* corr[M];
  const int32_t* bias[M];
  for (int i = 0; i < M; ++i) {
    xs[i] = packed + i * row_bytes;
    corr[i] = reinterpret_cast<const int32_t*>(xs[i] + blocks * kActBlockBytes);
    bias[i] = corr[i] + blocks;
  }
  // 2 x E2M1 + 12 for each nibble (PSHUFB looks up within each 128-bit lane).
  const __m256i table = _mm256_setr_epi32(0x0f0e0d0c, 0x18141210, 0x090a0b0c, 0x00040608,
                                          0x0f0e0d0c, 0x18141210, 0x090a0b0c, 0x00040608);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1), x256 = _mm256_set1_epi16(256);
  __m256 acc[2][M];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < M; ++i) acc[h][i] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const uint8_t* src = g + c * kNvfp4TileChunkBytes;
    // The stream runs on into the next group (prefetches never fault).
    const char* pf = reinterpret_cast<const char*>(src + kPrefetchBytes);
    for (int l = 0; l < kNvfp4TileChunkBytes / 64; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
#pragma GCC unroll 1
    for (int bl = 0; bl < 4; ++bl) {
      const int64_t b = c * 4 + bl;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        // Parts 2bl and 2bl+1 of the chunk, rows 8h..8h+7: the block's columns
        // 0-3 / 4-7 (low / high nibbles of the first) and 8-11 / 12-15.
        const __m256i v0 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * bl * 64 + 32 * h));
        const __m256i v1 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (2 * bl + 1) * 64 + 32 * h));
        const __m256i w0 = _mm256_shuffle_epi8(table, _mm256_and_si256(v0, nibble));
        const __m256i w1 =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v0, 4), nibble));
        const __m256i w2 = _mm256_shuffle_epi8(table, _mm256_and_si256(v1, nibble));
        const __m256i w3 =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v1, 4), nibble));
        const __m256i e5m3 = _mm256_slli_epi32(
            _mm256_cvtepu8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * 64 + bl * 16 + 8 * h))),
            20);
#pragma GCC unroll 2
        for (int i = 0; i < M; ++i) {
          const uint8_t* xb = xs[i] + b * kActBlockBytes;
          const __m256i p0 = _mm256_madd_epi16(PlaneDot(w0, w1, w2, w3, xb), ones);
          const __m256i p1 = _mm256_madd_epi16(PlaneDot(w0, w1, w2, w3, xb + 16), x256);
          const __m256i p2 = _mm256_madd_epi16(PlaneDot(w0, w1, w2, w3, xb + 32), x256);
          const __m256i t =
              _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_slli_epi32(p2, 8)),
                               _mm256_set1_epi32(corr[i][b]));
          const __m256 scale =
              _mm256_castsi256_ps(_mm256_add_epi32(e5m3, _mm256_set1_epi32(bias[i][b])));
          acc[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), scale, acc[h][i]);
        }
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int h = 0; h < 2; ++h) {
      float* o = out + i * ldo + 8 * h;
      // One explicit FMA when adding, as the VNNI kernel does (a mul and an
      // add are fused by the compiler in some places and not in others).
      const __m256 g = _mm256_set1_ps(global);
      const __m256 v = accumulate ? _mm256_fmadd_ps(acc[h][i], g, _mm256_loadu_ps(o))
                                  : _mm256_mul_ps(acc[h][i], g);
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
