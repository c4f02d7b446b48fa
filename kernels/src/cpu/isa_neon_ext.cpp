// aarch64 kernels beyond the NEON baseline, each compiled for its extension
// through a function-level target (#pragma GCC target), so the one binary
// still runs on a plain ARMv8.0 CPU: the tables here are chosen only after
// getauxval says the CPU has the extension (backend.cpp).
//
//  * neon-dotprod (SDOT, FEAT_DotProd): NVFP4 decode of 1 to 8 activation rows
//    from a matrix's tiles (weight.h, TileNvfp4) in integers, with exact
//    per-block scaling, as the AVX512-VNNI kernel does (isa_avx512_vnni.cpp).
//  * neon-bf16 (BFMMLA, FEAT_BF16; with dotprod): batched BF16 decode (5 to 8
//    rows) and prefill GEMM of BF16 weights, and of NVFP4 weights decoded to
//    exact BF16 products, on the 2x4 by 4x2 BF16 matrix multiply.
//
// See isa.h for why nothing here may instantiate std:: templates.
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// ---- NVFP4 decode from tiles through SDOT ------------------------------------
//
// The activation row in integers, as the VNNI kernel has it: each 16-column
// block scaled by a power of two so its largest magnitude lies in [2^21,
// 2^22), rounded to integers q (to nearest even; a relative error below 2^-22
// of the block's largest), and q split into three signed bytes, q = b0 + 256
// b1 + 65536 b2. SDOT is signed by signed, so the weights go in as the signed
// doubled E2M1 values (-12..12, one table lookup per 16 codes) and need no
// offset correction. Per block and row the three partial sums combine in
// int32 (|sum| <= 16 * 12 * 2^22 < 2^31, exact), convert once, and take the
// block's scale: the E5M3 byte of the tiles with the block's power of two and
// the 1/2 of the doubled codes folded into the float's exponent.

constexpr int64_t kActBlockBytes = 3 * 16;  // one block's three parts

// Packed row: per 16-column block its three parts (16 signed bytes each),
// then per block an int32 that carries the block's exponent bias.
int64_t Nvfp4TilesPackedSize(int64_t k) {
  const int64_t blocks = k / kNvfp4BlockSize;
  return blocks * kActBlockBytes + blocks * 4;
}

bool PackNvfp4TilesActivation(const float* x, int64_t k, uint8_t* packed) {
  const int64_t blocks = k / kNvfp4BlockSize;
  int32_t* bias = reinterpret_cast<int32_t*>(packed + blocks * kActBlockBytes);
  const float32x4_t finite_max = vdupq_n_f32(3.40282347e38f);
  for (int64_t b = 0; b < blocks; ++b) {
    float32x4_t v[4];
    uint32x4_t finite = vdupq_n_u32(~0u);
    float32x4_t mx = vdupq_n_f32(0.0f);
    for (int j = 0; j < 4; ++j) {
      v[j] = vld1q_f32(x + b * 16 + 4 * j);
      const float32x4_t a = vabsq_f32(v[j]);
      finite = vandq_u32(finite, vcleq_f32(a, finite_max));  // false for NaN and +-inf
      mx = vmaxq_f32(mx, a);
    }
    if (vminvq_u32(finite) == 0) return false;
    uint32_t bits;
    const float m = vmaxvq_f32(mx);
    memcpy(&bits, &m, 4);
    int32_t ex = 0;
    if (bits != 0) {
      const int32_t field = static_cast<int32_t>(bits >> 23);
      if (field < 33) return false;  // largest below 2^-94: the row-major kernels take it
      ex = field - (126 + 22);
    }
    const uint32_t scale_bits = static_cast<uint32_t>(127 - ex) << 23;
    float scale;
    memcpy(&scale, &scale_bits, 4);
    int8_t* o = reinterpret_cast<int8_t*>(packed + b * kActBlockBytes);
    for (int j = 0; j < 4; ++j) {
      const int32x4_t q = vcvtnq_s32_f32(vmulq_n_f32(v[j], scale));
      const int32x4_t q1 = vshrq_n_s32(vaddq_s32(q, vdupq_n_s32(128)), 8);
      const int32x4_t q2 = vshrq_n_s32(vaddq_s32(q1, vdupq_n_s32(128)), 8);
      int32_t t[4], t1[4], t2[4];
      vst1q_s32(t, q);
      vst1q_s32(t1, q1);
      vst1q_s32(t2, q2);
      for (int l = 0; l < 4; ++l) {
        o[4 * j + l] = static_cast<int8_t>(t[l] - 256 * t1[l]);
        o[16 + 4 * j + l] = static_cast<int8_t>(t1[l] - 256 * t2[l]);
        o[32 + 4 * j + l] = static_cast<int8_t>(t2[l]);
      }
    }
    bias[b] = static_cast<int32_t>(static_cast<uint32_t>(116 + ex) << 23);
  }
  return true;
}

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")

// One 16-row group of the tiles (`g`, its chunks one after another) against
// M packed activation rows: out[i * ldo + 0..15] (+)= the 16 rows' sums.
template <int M>
void Nvfp4TilesGroup(const uint8_t* g, int64_t chunks, const uint8_t* packed, int64_t row_bytes,
                     float global, float* out, int64_t ldo, bool accumulate) {
  static const int8_t kTwiceE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int8x16_t table = vld1q_s8(kTwiceE2m1);
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  const int64_t blocks = chunks * 4;
  for (int q4 = 0; q4 < 4; ++q4) {  // rows 4 q4 .. 4 q4 + 3 of the group
    float32x4_t acc[M];
    for (int i = 0; i < M; ++i) acc[i] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < chunks; ++c) {
      const uint8_t* src = g + c * kNvfp4TileChunkBytes;
      for (int bl = 0; bl < 4; ++bl) {
        const int64_t b = c * 4 + bl;
        // Parts 2 bl and 2 bl + 1: these four rows' 16 bytes of each.
        const uint8x16_t v0 = vld1q_u8(src + 2 * bl * 64 + 16 * q4);
        const uint8x16_t v1 = vld1q_u8(src + (2 * bl + 1) * 64 + 16 * q4);
        const int8x16_t w0 = vqtbl1q_s8(table, vandq_u8(v0, low4));  // columns 0..3
        const int8x16_t w1 = vqtbl1q_s8(table, vshrq_n_u8(v0, 4));   // columns 4..7
        const int8x16_t w2 = vqtbl1q_s8(table, vandq_u8(v1, low4));  // columns 8..11
        const int8x16_t w3 = vqtbl1q_s8(table, vshrq_n_u8(v1, 4));   // columns 12..15
        uint8_t e[4];
        memcpy(e, src + 8 * 64 + bl * 16 + 4 * q4, 4);
        const uint32x4_t e5m3 = vshlq_n_u32(
            vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(
                static_cast<uint64_t>(e[0]) | static_cast<uint64_t>(e[1]) << 8 |
                static_cast<uint64_t>(e[2]) << 16 | static_cast<uint64_t>(e[3]) << 24)))),
            20);
        for (int i = 0; i < M; ++i) {
          const uint8_t* xb = packed + i * row_bytes + b * kActBlockBytes;
          const int32_t bias =
              reinterpret_cast<const int32_t*>(packed + i * row_bytes + blocks * kActBlockBytes)[b];
          int32x4_t part[3];
          for (int p = 0; p < 3; ++p) {
            const int8x16_t xq = vld1q_s8(reinterpret_cast<const int8_t*>(xb + 16 * p));
            int32x4_t s = vdupq_n_s32(0);
            s = vdotq_laneq_s32(s, w0, xq, 0);
            s = vdotq_laneq_s32(s, w1, xq, 1);
            s = vdotq_laneq_s32(s, w2, xq, 2);
            s = vdotq_laneq_s32(s, w3, xq, 3);
            part[p] = s;
          }
          const int32x4_t t =
              vaddq_s32(part[0], vaddq_s32(vshlq_n_s32(part[1], 8), vshlq_n_s32(part[2], 16)));
          const float32x4_t scale =
              vreinterpretq_f32_u32(vaddq_u32(e5m3, vdupq_n_u32(static_cast<uint32_t>(bias))));
          acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(t), scale);
        }
      }
    }
    for (int i = 0; i < M; ++i) {
      float* o = out + i * ldo + 4 * q4;
      // One explicit FMA when adding: a multiply and an add are fused by the
      // compiler in some of the M instances and not in others, and a row's
      // output must not depend on the batch it is in.
      const float32x4_t r =
          accumulate ? vfmaq_n_f32(vld1q_f32(o), acc[i], global) : vmulq_n_f32(acc[i], global);
      vst1q_f32(o, r);
    }
  }
}

void GemvNvfp4Tiles(const WeightMatrix& w, int64_t row0, int64_t row1, const uint8_t* packed,
                    int64_t m, float* y, int64_t ldy, bool accumulate) {
  const int64_t chunks = w.cols / kNvfp4TileCols;
  const int64_t row_bytes = Nvfp4TilesPackedSize(w.cols);
  for (int64_t r = row0; r < row1; r += kNvfp4TileRows) {
    const uint8_t* g = w.tiles + r / kNvfp4TileRows * w.tile_group_stride;
    for (int64_t i = 0; i < m; i += 4) {
      const uint8_t* p = packed + i * row_bytes;
      float* o = y + i * ldy + (r - row0);
      switch (m - i < 4 ? m - i : 4) {
        case 1:
          Nvfp4TilesGroup<1>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
          break;
        case 2:
          Nvfp4TilesGroup<2>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
          break;
        case 3:
          Nvfp4TilesGroup<3>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
          break;
        default:
          Nvfp4TilesGroup<4>(g, chunks, p, row_bytes, w.global_scale, o, ldy, accumulate);
          break;
      }
    }
  }
}

#pragma GCC pop_options

// ---- BF16 batches through BFMMLA ---------------------------------------------
//
// Each activation keeps its 24-bit significand: x = hi + mid + lo, three BF16
// values (hi: x's top 8 significant bits, mid the next 8 of the remainder, lo
// the rest, each exact), so every product with a BF16 weight is exact and the
// three partial sums add to the full-precision dot (hi first, then mid, then
// lo: a single power-of-two weight gives w * x bit for bit). A row with a
// value that is not finite keeps that value in hi and zeros in mid and lo
// (inf * w stays inf, NaN stays NaN).
//
// Packed activations, per block of 16 rows: 48 virtual rows (row t's hi, mid,
// lo at 3t, 3t + 1, 3t + 2; rows past m are zeros) in 24 pairs; pair p holds,
// per 4 columns, virtual row 2p's four values then 2p + 1's (BFMMLA's first
// operand, 2x4). Only the first k / 32 * 32 columns are packed (isa.h); the
// rest come from x in floats.
constexpr int64_t kBlockTokens = 16;
constexpr int64_t kVirtualRows = 3 * kBlockTokens;

int64_t PackedCols(int64_t k) { return k / 32 * 32; }

int64_t GemmPackedSize(int64_t m, int64_t k) {
  return (m + kBlockTokens - 1) / kBlockTokens * kVirtualRows * PackedCols(k);
}

uint16_t Hi16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}
float FromHi16(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

void PackGemmActivations(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* packed) {
  const int64_t kp = PackedCols(k);
  for (int64_t b0 = 0; b0 < m; b0 += kBlockTokens) {
    uint16_t* blk = packed + b0 / kBlockTokens * kVirtualRows * kp;
    memset(blk, 0, static_cast<size_t>(kVirtualRows * kp) * 2);
    const int64_t mb = m - b0 < kBlockTokens ? m - b0 : kBlockTokens;
    for (int64_t t = 0; t < mb; ++t) {
      const float* row = x + (b0 + t) * ldx;
      bool finite = true;
      for (int64_t c = 0; c < kp; ++c) finite = finite && isfinite(row[c]);
      for (int64_t part = 0; part < 3; ++part) {
        const int64_t v = 3 * t + part;
        uint16_t* dst = blk + (v / 2) * 8 * (kp / 4) + (v % 2) * 4;
        for (int64_t c = 0; c < kp; ++c) {
          uint16_t h = 0;
          const float f = row[c];
          if (!finite) {
            if (part == 0) h = isfinite(f) ? Hi16(f) : Hi16(f) | (isnan(f) ? 0x40 : 0);
          } else {
            const uint16_t hi = Hi16(f);
            const float r1 = f - FromHi16(hi);
            const uint16_t mid = Hi16(r1);
            h = part == 0 ? hi : part == 1 ? mid : Hi16(r1 - FromHi16(mid));
          }
          dst[(c / 4) * 8 + c % 4] = h;
        }
      }
    }
  }
}

#pragma GCC push_options
#pragma GCC target("arch=armv8.6-a+bf16+i8mm+dotprod")

// Weight rows r and r2 (r2 == r for a lone last row), columns c..c+3, as
// BFMMLA's second operand.
inline bfloat16x8_t WeightPair(const uint16_t* r, const uint16_t* r2, int64_t c) {
  return vreinterpretq_bf16_u16(vcombine_u16(vld1_u16(r + c), vld1_u16(r2 + c)));
}

void GemmPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                float out_scale) {
  const int64_t k = w.cols, kp = PackedCols(k);
  const int64_t quads = kp / 4;
  // Per block of 16 rows: the 48 virtual rows' sums for 2 weight rows at a time.
  for (int64_t b0 = 0; b0 < m; b0 += kBlockTokens) {
    const uint16_t* blk = packed + b0 / kBlockTokens * kVirtualRows * kp;
    const int64_t mb = m - b0 < kBlockTokens ? m - b0 : kBlockTokens;
    const int64_t pairs = (3 * mb + 1) / 2;
    for (int64_t r = row0; r < row1; r += 2) {
      const uint16_t* wr =
          reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) + r * w.row_stride);
      const uint16_t* wr2 = r + 1 < row1
                                ? reinterpret_cast<const uint16_t*>(
                                      static_cast<const uint8_t*>(w.data) + (r + 1) * w.row_stride)
                                : wr;
      float sums[kVirtualRows][2];
      for (int64_t p0 = 0; p0 < pairs; p0 += 4) {
        const int np = pairs - p0 < 4 ? static_cast<int>(pairs - p0) : 4;
        float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                              vdupq_n_f32(0.0f)};
        const uint16_t* a = blk + p0 * 8 * quads;
        for (int64_t q = 0; q < quads; ++q) {
          const bfloat16x8_t wv = WeightPair(wr, wr2, 4 * q);
          for (int j = 0; j < np; ++j) {
            acc[j] = vbfmmlaq_f32(acc[j],
                                  vreinterpretq_bf16_u16(vld1q_u16(a + j * 8 * quads + 8 * q)), wv);
          }
        }
        for (int j = 0; j < np; ++j) {  // [v0.w0, v0.w1, v1.w0, v1.w1]
          float t[4];
          vst1q_f32(t, acc[j]);
          sums[2 * (p0 + j)][0] = t[0];
          sums[2 * (p0 + j)][1] = t[1];
          sums[2 * (p0 + j) + 1][0] = t[2];
          sums[2 * (p0 + j) + 1][1] = t[3];
        }
      }
      for (int64_t t = 0; t < mb; ++t) {
        const float* xr = x + (b0 + t) * ldx;
        for (int h = 0; h < 2 && r + h < row1; ++h) {
          const uint16_t* wrow = h == 0 ? wr : wr2;
          float s = sums[3 * t][h] + sums[3 * t + 1][h] + sums[3 * t + 2][h];
          for (int64_t c = kp; c < k; ++c) s += xr[c] * FromHi16(wrow[c]);
          s *= out_scale;
          float* o = y + (b0 + t) * ldy + (r + h - row0);
          *o = accumulate ? *o + s : s;
        }
      }
    }
  }
}

#pragma GCC pop_options

void GemvPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* packed,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate) {
  GemmPacked(w, row0, row1, packed, x, m, ldx, y, ldy, accumulate, 1.0f);
}

// Rows [row0, row0 + nrows) of an NVFP4 w as BF16 products of code and block
// scale (exact: at most 2 x 4 significant bits), nrows x w.cols; the global
// scale stays out (gemm_packed's out_scale).
//
// A block's 16 codes at once (baseline NEON): the nibbles zipped into code
// order, TBL looks up each code's E2M1 value as BF16 (exact) from a 32-byte
// table, the values widen to float, take the scale in one multiply, and
// their top halves narrow back. The scalar loop it replaced made the decode
// about a third of a mixture-of-experts prefill's matmul time on x86 (each
// expert's weights decoded once per call for the ~32 tokens routed to it).
void DecodeNvfp4Bf16(const WeightMatrix& w, int64_t row0, int64_t nrows, uint16_t* out) {
  const float* e4m3 = E4m3Table();
  uint16_t values[16];
  for (int i = 0; i < 16; ++i) values[i] = Hi16(kE2m1Values[i]);
  uint8x16x2_t table;
  table.val[0] = vreinterpretq_u8_u16(vld1q_u16(values));
  table.val[1] = vreinterpretq_u8_u16(vld1q_u16(values + 8));
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* codes = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    const uint8_t* scales = w.scales + (row0 + r) * w.scale_row_stride;
    uint16_t* o = out + r * w.cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8x8_t packed = vld1_u8(codes + b * 8);
      // Codes 0-7 and 8-15 (low nibble first within a byte).
      const uint8x8x2_t code = vzip_u8(vand_u8(packed, vdup_n_u8(0x0f)), vshr_n_u8(packed, 4));
      const float s = e4m3[scales[b]];
      for (int h = 0; h < 2; ++h) {
        // Code c's BF16 value is table bytes 2c and 2c + 1.
        const uint8x8_t lo = vshl_n_u8(code.val[h], 1);
        const uint8x8x2_t byte = vzip_u8(lo, vadd_u8(lo, vdup_n_u8(1)));
        const uint16x8_t v =
            vreinterpretq_u16_u8(vqtbl2q_u8(table, vcombine_u8(byte.val[0], byte.val[1])));
        const float32x4_t f0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16));
        const float32x4_t f1 = vreinterpretq_f32_u32(vshll_high_n_u16(v, 16));
        const uint16x4_t p0 = vshrn_n_u32(vreinterpretq_u32_f32(vmulq_n_f32(f0, s)), 16);
        const uint16x4_t p1 = vshrn_n_u32(vreinterpretq_u32_f32(vmulq_n_f32(f1, s)), 16);
        vst1q_u16(o + b * kNvfp4BlockSize + 8 * h, vcombine_u16(p0, p1));
      }
    }
    for (int64_t c = blocks * kNvfp4BlockSize; c < w.cols; ++c) {  // a partial last block
      const uint8_t byte = codes[c / 2];
      o[c] = Hi16(kE2m1Values[c % 2 ? byte >> 4 : byte & 0x0f] * e4m3[scales[blocks]]);
    }
  }
}

}  // namespace

const IsaKernels& NeonDotprodKernels() {
  static const IsaKernels k = [] {
    IsaKernels t = NeonKernels();
    t.name = "neon-dotprod";
    t.nvfp4_tiles_packed_size = Nvfp4TilesPackedSize;
    t.pack_nvfp4_tiles_activation = PackNvfp4TilesActivation;
    t.gemv_nvfp4_tiles = GemvNvfp4Tiles;
    return t;
  }();
  return k;
}

const IsaKernels& NeonBf16Kernels() {
  static const IsaKernels k = [] {
    IsaKernels t = NeonDotprodKernels();
    t.name = "neon-bf16";
    t.gemv_packed_size = GemmPackedSize;
    t.pack_gemv_activations = PackGemmActivations;
    t.gemv_packed = GemvPacked;
    t.gemm_packed_size = GemmPackedSize;
    t.pack_gemm_activations = PackGemmActivations;
    t.gemm_packed = GemmPacked;
    t.decode_nvfp4_bf16 = DecodeNvfp4Bf16;
    return t;
  }();
  return k;
}

}  // namespace octet::kernels::cpu
