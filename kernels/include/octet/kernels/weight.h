// Weight matrices as the kernels see them: a row-major [rows, cols] matrix in
// its stored format (F32, BF16, F16 or NVIDIA ModelOpt NVFP4), never expanded
// to float in memory. Matmul kernels dequantize inside their inner loops.
//
// A WeightMatrix is a non-owning view (pointers into a memory-mapped file or a
// buffer the caller keeps alive). Row and column slices are views too, so a
// tensor-parallel rank can take its shard of a tensor without copying it:
// rows = output features (column-parallel layers such as q/k/v, gate/up),
// cols = input features (row-parallel layers such as o_proj, down_proj).
//
// Scalar conversions between the stored number formats and float live here as
// well; they are the reference the vector kernels are tested against.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace octet::kernels {

enum class WeightFormat : uint8_t {
  kF32,
  kBF16,
  kF16,
  // ModelOpt NVFP4: `data` holds two E2M1 codes per byte (low nibble = even
  // column), `scales` one float8 E4M3 per 16 columns, `global_scale` a float.
  // Value = E2M1[code] * e4m3(scale) * global_scale.
  kNvfp4,
};

std::string_view WeightFormatName(WeightFormat f);

inline constexpr int64_t kNvfp4BlockSize = 16;

struct WeightMatrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;            // output features (n)
  int64_t cols = 0;            // input features (k)
  const void* data = nullptr;  // first element of row 0
  int64_t row_stride = 0;      // bytes between rows of `data`
  // NVFP4 only.
  const uint8_t* scales = nullptr;  // e4m3 codes, [rows, cols / 16] with `scale_row_stride`
  int64_t scale_row_stride = 0;     // bytes between rows of `scales`
  float global_scale = 1.0f;        // weight_scale_2
  // NVFP4 only, optional: the same weights again in the tile order of the
  // integer decode kernel (TileNvfp4 below), `tile_group_stride` bytes
  // per 16 rows. Null when the matrix has no such copy or a slice cannot keep
  // it; every kernel can ignore it.
  const uint8_t* tiles = nullptr;
  int64_t tile_group_stride = 0;

  // Bytes one full pass over the matrix reads (data + scales), for roofline figures.
  int64_t BytesRead() const;

  // Rows [begin, begin+count): a view of part of the output features.
  WeightMatrix RowSlice(int64_t begin, int64_t count) const;
  // Columns [begin, begin+count): a strided view of part of the input features.
  // For NVFP4, `begin` and `count` must be multiples of 16 (whole scale blocks).
  WeightMatrix ColSlice(int64_t begin, int64_t count) const;
  // True when the slice arguments would be valid for ColSlice.
  bool CanSliceCols(int64_t begin, int64_t count) const;

  // Dense view helpers.
  static WeightMatrix Dense(WeightFormat format, const void* data, int64_t rows, int64_t cols);
  static WeightMatrix Nvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale,
                            int64_t rows, int64_t cols);
};

// ---- scalar conversions (the reference) ------------------------------------

inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even, overflow to inf

// float8 e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no inf,
// 0x7f/0xff are NaN, max 448, subnormals below 2^-6).
float E4m3ToF32(uint8_t code);
// Round to nearest even, saturating at +-448 (ModelOpt clamps before casting).
uint8_t F32ToE4m3(float f);
// E4m3ToF32 of every code, for table lookups in kernels (256 entries).
const float* E4m3Table();

// E2M1 (FP4) code -> value; bit 3 is the sign.
inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
// Nearest code, ties to the even code; saturates at +-6.
uint8_t F32ToE2m1(float f);

// Element (r, c) of any format, as float (slow; tests and references).
float WeightAt(const WeightMatrix& w, int64_t r, int64_t c);

// ---- NVFP4 tiles: the layout of the VNNI single-row decode kernel ------------
//
// The same codes and scales (the same bytes in all, rows * cols * 9 / 16),
// reordered so a GEMV reads each 16-row group as one sequential stream and
// expands 64 bytes at a time into the VNNI layout (16 rows x 4 columns, the
// lanes of VPDPBUSD and a tile row of AMX). Per 16-row group, per 64-column
// chunk, kNvfp4TileChunkBytes:
//   * 8 x 64 bytes of codes: byte i of part z holds, for row i / 4 of the
//     group, the code of column 8z + i % 4 in its low nibble and of column
//     8z + 4 + i % 4 in its high nibble (so the low nibbles of part z are
//     columns 8z..8z+3 of all 16 rows in VNNI order, the high nibbles
//     columns 8z+4..8z+7);
//   * 4 x 16 bytes of scales: block b of the chunk, row j of the group, as an
//     unsigned E5M3 float, 2^(e - 10) * (1 + m / 8) for the byte e << 3 | m
//     (e >= 1; every positive E4M3 value, subnormals included, exactly).
// Blocks whose E4M3 scale is zero are stored with zero codes and the smallest
// scale byte (the product is zero either way).
inline constexpr int64_t kNvfp4TileRows = 16;
inline constexpr int64_t kNvfp4TileCols = 64;
inline constexpr int64_t kNvfp4TileChunkBytes = 8 * 64 + 4 * 16;

// Whether w (NVFP4) can be tiled: rows a multiple of 16, cols of 64, and no
// scale negative or NaN (ModelOpt writes none; such matrices keep the
// row-major kernels).
bool CanTileNvfp4(const WeightMatrix& w);
int64_t Nvfp4TilesBytes(const WeightMatrix& w);
// Writes w's tiles (Nvfp4TilesBytes(w) bytes) to `out` and returns w with
// `tiles` pointing there; w unchanged when !CanTileNvfp4(w). With a pool, the
// 16-row groups are written by its threads (the same bytes).
class ThreadPool;
WeightMatrix TileNvfp4(const WeightMatrix& w, uint8_t* out, ThreadPool* pool = nullptr);

}  // namespace octet::kernels
