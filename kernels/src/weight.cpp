#include "octet/kernels/weight.h"

#include <cassert>
#include <cmath>

#include "octet/kernels/thread_pool.h"

namespace octet::kernels {

std::string_view WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return "F32";
    case WeightFormat::kBF16:
      return "BF16";
    case WeightFormat::kF16:
      return "F16";
    case WeightFormat::kNvfp4:
      return "NVFP4";
  }
  return "?";
}

namespace {
int64_t ElementBits(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return 32;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      return 16;
    case WeightFormat::kNvfp4:
      return 4;
  }
  return 0;
}
}  // namespace

int64_t WeightMatrix::BytesRead() const {
  int64_t bytes = rows * cols * ElementBits(format) / 8;
  if (format == WeightFormat::kNvfp4) bytes += rows * (cols / kNvfp4BlockSize);
  return bytes;
}

WeightMatrix WeightMatrix::RowSlice(int64_t begin, int64_t count) const {
  assert(begin >= 0 && count >= 0 && begin + count <= rows);
  WeightMatrix s = *this;
  s.rows = count;
  s.data = static_cast<const uint8_t*>(data) + begin * row_stride;
  if (scales) s.scales = scales + begin * scale_row_stride;
  if (tiles) {  // whole groups keep their tiles
    const bool whole = begin % kNvfp4TileRows == 0 && count % kNvfp4TileRows == 0;
    s.tiles = whole ? tiles + begin / kNvfp4TileRows * tile_group_stride : nullptr;
  }
  return s;
}

bool WeightMatrix::CanSliceCols(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin + count > cols) return false;
  if (format == WeightFormat::kNvfp4) {
    return begin % kNvfp4BlockSize == 0 && count % kNvfp4BlockSize == 0;
  }
  return true;
}

WeightMatrix WeightMatrix::ColSlice(int64_t begin, int64_t count) const {
  assert(CanSliceCols(begin, count));
  WeightMatrix s = *this;
  s.cols = count;
  s.data = static_cast<const uint8_t*>(data) + begin * ElementBits(format) / 8;
  if (scales) s.scales = scales + begin / kNvfp4BlockSize;
  if (tiles) {  // whole chunks keep their tiles (a group's chunks are in column order)
    const bool whole = begin % kNvfp4TileCols == 0 && count % kNvfp4TileCols == 0;
    s.tiles = whole ? tiles + begin / kNvfp4TileCols * kNvfp4TileChunkBytes : nullptr;
  }
  return s;
}

WeightMatrix WeightMatrix::Dense(WeightFormat format, const void* data, int64_t rows,
                                 int64_t cols) {
  WeightMatrix w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  w.row_stride = cols * ElementBits(format) / 8;
  return w;
}

WeightMatrix WeightMatrix::Nvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale,
                                 int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.format = WeightFormat::kNvfp4;
  w.rows = rows;
  w.cols = cols;
  w.data = packed;
  w.row_stride = cols / 2;
  w.scales = scales;
  w.scale_row_stride = cols / kNvfp4BlockSize;
  w.global_scale = global_scale;
  return w;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float v = static_cast<float>(mant) * 0x1p-24f;
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65536: inf
  if (abs < 0x38800000u) {                       // below 2^-14: subnormal or zero
    // value / 2^-24, rounded to nearest even, as an integer mantissa.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 0x1p24f;
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(r);
  }
  const uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  const uint32_t r = abs + rounding;
  return sign | static_cast<uint16_t>(((r >> 23) - 112) << 10 | ((r >> 13) & 0x3ffu));
}

float E4m3ToF32(uint8_t code) {
  const bool neg = code & 0x80;
  const int exp = (code >> 3) & 0xf;
  const int mant = code & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);  // mant/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return neg ? -v : v;
}

const float* E4m3Table() {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) v[i] = E4m3ToF32(static_cast<uint8_t>(i));
    }
  } table;
  return table.v;
}

uint8_t F32ToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate
  // Quantum: 2^-9 below 2^-6 (subnormals), else 2^(e-3) for a in [2^e, 2^(e+1)).
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a in [2^(e-1), 2^e)
  int exp_unbiased = e - 1;
  if (exp_unbiased < -6) exp_unbiased = -6;
  const float quantum = std::ldexp(1.0f, exp_unbiased - 3);
  const float q = std::nearbyint(a / quantum);  // exact division by a power of two
  float rounded = q * quantum;
  if (rounded >= 448.0f) return sign | 0x7e;
  if (rounded == 0.0f) return sign;
  int re;
  std::frexp(rounded, &re);
  int biased = re - 1 + 7;
  if (biased <= 0) {  // subnormal
    return sign | static_cast<uint8_t>(std::lround(rounded / 0x1p-9f));
  }
  const int mant = static_cast<int>(std::lround((std::ldexp(rounded, -(re - 1)) - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>(biased << 3 | mant);
}

uint8_t F32ToE2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fabs(f);
  // Midpoints between 0, .5, 1, 1.5, 2, 3, 4, 6; ties go to the even code.
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

float WeightAt(const WeightMatrix& w, int64_t r, int64_t c) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_stride;
  switch (w.format) {
    case WeightFormat::kF32: {
      float v;
      std::memcpy(&v, row + c * 4, 4);
      return v;
    }
    case WeightFormat::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + c * 2, 2);
      return Bf16ToF32(h);
    }
    case WeightFormat::kF16: {
      uint16_t h;
      std::memcpy(&h, row + c * 2, 2);
      return F16ToF32(h);
    }
    case WeightFormat::kNvfp4: {
      const uint8_t byte = row[c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xf);
      const float scale = E4m3ToF32(w.scales[r * w.scale_row_stride + c / kNvfp4BlockSize]);
      // The reference order: (E2M1 * scale) is exact, then * global scale.
      return kE2m1Values[code] * scale * w.global_scale;
    }
  }
  return 0.0f;
}

// ---- NVFP4 tiles ------------------------------------------------------------------

namespace {

// A positive finite E4M3 code as the E5M3 byte of the tile layout (exact: both
// have 3 mantissa bits, and E4M3's subnormals are normal numbers in E5M3).
uint8_t E4m3ToE5m3(uint8_t code) {
  const int e = (code >> 3) & 0xf, m = code & 7;
  if (e > 0) return static_cast<uint8_t>((e - 7 + 10) << 3 | m);
  // m * 2^-9: normalize the 3-bit integer m.
  int exp = -9, mant = m;
  while (mant < 8) {
    mant <<= 1;
    --exp;
  }
  // mant in [8, 16): value = mant / 8 * 2^(exp + 3).
  return static_cast<uint8_t>((exp + 3 + 10) << 3 | (mant - 8));
}

}  // namespace

bool CanTileNvfp4(const WeightMatrix& w) {
  if (w.format != WeightFormat::kNvfp4) return false;
  if (w.rows <= 0 || w.rows % kNvfp4TileRows != 0) return false;
  if (w.cols <= 0 || w.cols % kNvfp4TileCols != 0) return false;
  const int64_t blocks = w.cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* s = w.scales + r * w.scale_row_stride;
    for (int64_t b = 0; b < blocks; ++b) {
      if (s[b] & 0x80 || s[b] == 0x7f) return false;  // negative, or NaN
    }
  }
  return true;
}

int64_t Nvfp4TilesBytes(const WeightMatrix& w) {
  return w.rows / kNvfp4TileRows * (w.cols / kNvfp4TileCols) * kNvfp4TileChunkBytes;
}

WeightMatrix TileNvfp4(const WeightMatrix& w, uint8_t* out, ThreadPool* pool) {
  if (!CanTileNvfp4(w)) return w;
  const int64_t chunks = w.cols / kNvfp4TileCols;
  const int64_t group_stride = chunks * kNvfp4TileChunkBytes;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  auto group = [&](int64_t g) {
    for (int64_t ch = 0; ch < chunks; ++ch) {
      uint8_t* o = out + g * group_stride + ch * kNvfp4TileChunkBytes;
      const int64_t c0 = ch * kNvfp4TileCols;
      for (int64_t j = 0; j < kNvfp4TileRows; ++j) {
        const int64_t r = g * kNvfp4TileRows + j;
        const uint8_t* row = data + r * w.row_stride + c0 / 2;
        const uint8_t* scales = w.scales + r * w.scale_row_stride + c0 / kNvfp4BlockSize;
        for (int z = 0; z < 8; ++z) {
          // Columns 8z..8z+7 are bytes b0..b3 (low nibble first). Byte i%4 of
          // row j's four: columns 8z + i%4 (low nibble) and 8z + 4 + i%4 (high).
          const uint8_t* b = row + 4 * z;
          uint8_t* d = o + z * 64 + 4 * j;
          if (scales[z / 2] == 0) {  // a zero-scale block: zero codes
            d[0] = d[1] = d[2] = d[3] = 0;
            continue;
          }
          d[0] = static_cast<uint8_t>((b[0] & 0xf) | (b[2] & 0xf) << 4);
          d[1] = static_cast<uint8_t>((b[0] >> 4) | (b[2] & 0xf0));
          d[2] = static_cast<uint8_t>((b[1] & 0xf) | (b[3] & 0xf) << 4);
          d[3] = static_cast<uint8_t>((b[1] >> 4) | (b[3] & 0xf0));
        }
        for (int bl = 0; bl < 4; ++bl) {
          o[8 * 64 + bl * 16 + j] = scales[bl] == 0 ? uint8_t{1 << 3} : E4m3ToE5m3(scales[bl]);
        }
      }
    }
  };
  const int64_t groups = w.rows / kNvfp4TileRows;
  if (pool) {
    pool->ParallelFor(groups, [&](int64_t g, int) { group(g); });
  } else {
    for (int64_t g = 0; g < groups; ++g) group(g);
  }
  WeightMatrix t = w;
  t.tiles = out;
  t.tile_group_stride = group_stride;
  return t;
}

}  // namespace octet::kernels
