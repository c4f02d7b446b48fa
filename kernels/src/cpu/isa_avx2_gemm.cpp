// Prefill GEMM of BF16 and F32 weights (NVFP4 through decode_nvfp4_bf16) in
// AVX2 FMAs, blocked and packed, for x86 CPUs with AVX2 but neither AVX-512
// nor AMX (most desk-side AMD and Intel machines; on an AVX-512 machine
// `--backend avx2` runs it). The AVX2 sibling of isa_avx512_gemm.cpp.
// Compiled with -mavx2 -mfma -mf16c; see isa.h for why nothing here may
// instantiate std:: templates.
//
// Not for batched decode (up to 8 rows): there the weights stream from
// memory once, and packing them before multiplying serialises the wait for
// memory and the FMAs, which the register-decoding gemv kernels overlap.
// Measured with 8 rows, BF16, 2 threads, CPU time: 52-54 ms against 40-42 ms
// for two 4-row gemv passes over a 65536 x 1024 matrix; NVFP4 (packed
// element by element) 2.4-3.5x slower in bench_gemv, 2 threads.
//
// Exact like the other kernels: activations stay f32 (no BF16 rounding), BF16
// weights widen exactly (NVFP4 ones arrive as exact BF16 products of code and
// block scale, the global scale going on the sums), products accumulate in
// f32 FMAs; only the summation order differs from the reference.
//
// Layout: each task packs its weight rows, 16 at a time, into per-thread
// panels of floats [k][16] (two vectors per depth step), all of the task's
// panels before any multiply. BF16 rows are transposed 8 x 8 in registers
// (rows r and r + 4 share a 256-bit register, so one set of in-lane unpacks
// transposes two 4 x 8 blocks, and the last unpack against zero is the
// widening to f32). Then for each depth block of kDepth columns every
// activation row goes by in tiles of 6 and, per tile, every panel: 12
// accumulators, each depth step two panel loads and six broadcast FMA pairs,
// which keeps the two FMA ports busy (loads: 8 per 12 FMAs) with 15 of the
// 16 vector registers. The k tail needs nothing special: a panel holds every
// column and the micro-tile walks them one by one.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

constexpr int64_t kPanelCols = 16;  // weight rows per panel (two vectors of 8)
constexpr int kMaxTileRows = 6;     // activation rows per micro-tile
// Columns per depth block: whole rows up to this many, so a tile stores its
// sums once and each activation row is one stream the prefetcher follows
// (the AVX-512 kernel measured 4096 best). A panel part is then up to 256 KiB
// and a 6-row activation tile 96 KiB, both in L2.
constexpr int64_t kDepth = 4096;

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

// Sixteen zero bytes: the source of the rows past a panel's last one.
alignas(16) const uint8_t kZeroRow[16] = {};

// Rows [r0, r0 + n) (n <= 8) of a BF16 w into out[c * 16 + j] = W[r0 + j][c]
// for j < 8 (zero past n rows), c < k.
void PackEightBf16(const WeightMatrix& w, int64_t r0, int64_t n, float* out) {
  const int64_t k = w.cols;
  // Row j's bytes at column c: rows[j] + c * step[j]; rows past n read zeros.
  const uint8_t* rows[8];
  int64_t step[8];
  for (int64_t j = 0; j < 8; ++j) {
    const bool valid = j < n;
    rows[j] = valid ? static_cast<const uint8_t*>(w.data) + (r0 + j) * w.row_stride : kZeroRow;
    step[j] = valid ? 2 : 0;
  }
  const __m256i zero = _mm256_setzero_si256();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    // y[i]: row i (columns c..c+7) in the low lane, row i + 4 in the high one.
    __m256i y[4];
    for (int i = 0; i < 4; ++i) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + c * step[i]));
      const __m128i hi =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + 4] + c * step[i + 4]));
      y[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    }
    // Per lane: pairs of rows, then quads (rows 0-3 | 4-7 of two columns per 64 bits).
    const __m256i t0 = _mm256_unpacklo_epi16(y[0], y[1]), t1 = _mm256_unpackhi_epi16(y[0], y[1]);
    const __m256i t2 = _mm256_unpacklo_epi16(y[2], y[3]), t3 = _mm256_unpackhi_epi16(y[2], y[3]);
    const __m256i q[4] = {_mm256_unpacklo_epi32(t0, t2), _mm256_unpackhi_epi32(t0, t2),
                          _mm256_unpacklo_epi32(t1, t3), _mm256_unpackhi_epi32(t1, t3)};
    float* o = out + c * kPanelCols;
    for (int i = 0; i < 4; ++i) {
      // A BF16 value in the high half of a zero 32-bit lane is its float.
      _mm256_store_ps(o + (2 * i) * kPanelCols,
                      _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, q[i])));
      _mm256_store_ps(o + (2 * i + 1) * kPanelCols,
                      _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, q[i])));
    }
  }
  for (; c < k; ++c) {  // the last k % 8 columns
    for (int64_t j = 0; j < 8; ++j) {
      uint16_t h;
      std::memcpy(&h, rows[j] + c * step[j], 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(out + c * kPanelCols + j, &bits, 4);
    }
  }
}

// Weight rows [r0, r0 + n) (n <= 16) of w (BF16 or F32) into
// panel[c * 16 + j] = W[r0 + j][c], zero past n rows.
void PackPanel(const WeightMatrix& w, int64_t r0, int64_t n, float* panel) {
  const int64_t k = w.cols;
  if (w.format == WeightFormat::kBF16) {
    PackEightBf16(w, r0, n < 8 ? n : 8, panel);
    PackEightBf16(w, r0 + 8, n > 8 ? n - 8 : 0, panel + 8);
    return;
  }
  if (n < kPanelCols) {
    for (int64_t c = 0; c < k; ++c)
      std::memset(panel + c * kPanelCols + n, 0, (kPanelCols - n) * 4);
  }
  for (int64_t j = 0; j < n; ++j) {  // F32
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (r0 + j) * w.row_stride;
    for (int64_t c = 0; c < k; ++c) std::memcpy(panel + c * kPanelCols + j, row + c * 4, 4);
  }
}

// Lanes [0, n) of a mask for _mm256_maskload_ps / _mm256_maskstore_ps.
__m256i LaneMask(int n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
}

// c[i * ldc + j] (+)= scale * sum_{d < kc} a[i * lda + d] * panel[d * 16 + j]
// for i < MR, j < ncols; `add` adds to what c holds.
template <int MR>
void MicroTile(const float* a, int64_t lda, const float* panel, int64_t kc, float* c, int64_t ldc,
               int ncols, bool add, float scale) {
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  const float* b = panel;
  for (int64_t d = 0; d < kc; ++d, b += kPanelCols) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + d);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
  }
  const __m256 s = _mm256_set1_ps(scale);
  if (ncols == kPanelCols) {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      __m256 v0 = _mm256_mul_ps(acc0[i], s), v1 = _mm256_mul_ps(acc1[i], s);
      if (add) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, v0);
      _mm256_storeu_ps(ci + 8, v1);
    }
    return;
  }
  // A part-filled panel (the last rows of w): masked, so nothing past
  // ncols is read or written.
  const __m256i m0 = LaneMask(ncols < 8 ? ncols : 8);
  const __m256i m1 = LaneMask(ncols > 8 ? ncols - 8 : 0);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    __m256 v0 = _mm256_mul_ps(acc0[i], s), v1 = _mm256_mul_ps(acc1[i], s);
    if (add) {
      v0 = _mm256_add_ps(v0, _mm256_maskload_ps(ci, m0));
      v1 = _mm256_add_ps(v1, _mm256_maskload_ps(ci + 8, m1));
    }
    _mm256_maskstore_ps(ci, m0, v0);
    _mm256_maskstore_ps(ci + 8, m1, v1);
  }
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int, bool,
                         float);
constexpr MicroFn kMicro[kMaxTileRows + 1] = {
    nullptr, MicroTile<1>, MicroTile<2>, MicroTile<3>, MicroTile<4>, MicroTile<5>, MicroTile<6>};

// Activations are read where they are: nothing to pack.
int64_t GemmPackedSize(int64_t, int64_t) { return 0; }
void PackGemmActivations(const float*, int64_t, int64_t, int64_t, uint16_t*) {}

// y[i * ldy + r - row0] (+)= out_scale * x_i . W[r, :] for i < m, r in
// [row0, row1) (isa.h's gemm_packed; `packed` unused). All of the task's
// panels are packed first (CpuBackend sends up to 64 rows: 768 KiB of
// panels at k = 3072, in L2), then each activation tile goes through all of
// them, so its rows come from memory once per depth block.
void GemmPacked(const WeightMatrix& w, int64_t row0, int64_t row1, const uint16_t* /*packed*/,
                const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                float out_scale) {
  const int64_t k = w.cols;
  const int64_t n_panels = (row1 - row0 + kPanelCols - 1) / kPanelCols;
  float* panel = tls_panel.Get(n_panels * k * kPanelCols);
  if (!panel) std::abort();  // no memory for the task's rows of weights
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t n0 = row0 + p * kPanelCols;
    PackPanel(w, n0, row1 - n0 < kPanelCols ? row1 - n0 : kPanelCols, panel + p * k * kPanelCols);
  }
  for (int64_t d0 = 0; d0 < k; d0 += kDepth) {
    const int64_t kc = k - d0 < kDepth ? k - d0 : kDepth;
    const bool add = accumulate || d0 > 0;
    for (int64_t i = 0; i < m; i += kMaxTileRows) {
      const int mr = static_cast<int>(m - i < kMaxTileRows ? m - i : kMaxTileRows);
      for (int64_t p = 0; p < n_panels; ++p) {
        const int64_t n0 = row0 + p * kPanelCols;
        const int ncols = static_cast<int>(row1 - n0 < kPanelCols ? row1 - n0 : kPanelCols);
        kMicro[mr](x + i * ldx + d0, ldx, panel + p * k * kPanelCols + d0 * kPanelCols, kc,
                   y + i * ldy + p * kPanelCols, ldy, ncols, add, out_scale);
      }
    }
  }
}

// Rows [row0, row0 + nrows) of an NVFP4 w as BF16 E2M1 x E4M3 products
// (exact: at most 6 significant bits), nrows x w.cols, for gemm_packed with
// the global scale as out_scale (isa.h).
//
// A block's 16 codes in two vectors of 8: each code's byte widened to a lane
// (every byte twice) and shifted by 0 or 4, VPERMPS looks up its magnitude
// (the low 3 bits) and bit 3 becomes the sign; one multiply by the scale and
// the top halves narrowed. The scalar loop it replaced took about a third of
// a mixture-of-experts prefill's matmul time (each expert's weights decoded
// once per call for the ~32 tokens routed to it).
void DecodeNvfp4Bf16(const WeightMatrix& w, int64_t row0, int64_t nrows, uint16_t* out) {
  const float* e4m3 = E4m3Table();
  const __m256 magnitude = _mm256_loadu_ps(kE2m1Values);  // codes 0-7: +0 .. 6
  const __m256i shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (row0 + r) * w.row_stride;
    const uint8_t* sc = w.scales + (row0 + r) * w.scale_row_stride;
    uint16_t* o = out + r * w.cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + b * 8));
      const __m128i twice = _mm_unpacklo_epi8(bytes, bytes);  // b0 b0 b1 b1 ... b7 b7
      const __m256 s = _mm256_set1_ps(e4m3[sc[b]]);
      __m256i half[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i codes = _mm256_srlv_epi32(
            _mm256_cvtepu8_epi32(h == 0 ? twice : _mm_srli_si128(twice, 8)), shift);
        const __m256i sign =
            _mm256_and_si256(_mm256_slli_epi32(codes, 28), _mm256_set1_epi32(INT32_MIN));
        const __m256 v =
            _mm256_xor_ps(_mm256_permutevar8x32_ps(magnitude, codes), _mm256_castsi256_ps(sign));
        half[h] = _mm256_srli_epi32(_mm256_castps_si256(_mm256_mul_ps(v, s)), 16);
      }
      // packus interleaves the 128-bit halves: put codes 0-7 before 8-15.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(half[0], half[1]), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + b * 16), packed);
    }
    for (int64_t c = blocks * kNvfp4BlockSize; c < w.cols; ++c) {  // a partial last block
      const uint8_t byte = row[c / 2];
      const float v = kE2m1Values[c % 2 ? byte >> 4 : byte & 0xf] * e4m3[sc[blocks]];
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      o[c] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

}  // namespace

void AddAvx2GemmKernels(IsaKernels* t) {
  t->gemm_packed_size = GemmPackedSize;
  t->pack_gemm_activations = PackGemmActivations;
  t->gemm_packed = GemmPacked;
  t->decode_nvfp4_bf16 = DecodeNvfp4Bf16;
}

}  // namespace octet::kernels::cpu
