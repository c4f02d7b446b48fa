// NumPy .npy files (format 1.0/2.0, little-endian, C order): the layout of the
// reference logits in the fixtures and of `octet generate --logits-out`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet {

struct NpyArray {
  std::string dtype;            // NumPy descr without byte order: "f4", "f8", "i4", "i8", "u1"
  std::vector<int64_t> shape;   // empty for a scalar
  std::vector<uint8_t> data;    // raw little-endian elements, C order

  int64_t numel() const;
  // Copies the elements out as float / int64 (converting from any supported dtype).
  std::vector<float> AsFloat() const;
  std::vector<int64_t> AsInt64() const;
};

// Reads an .npy file; errors name the path and what is wrong (bad magic,
// Fortran order, big-endian, unsupported dtype, data shorter than the shape).
Result<NpyArray> ReadNpy(const std::string& path);
Result<NpyArray> ParseNpy(const std::string& bytes, const std::string& what);

// Serialises float32 / int32 data of the given shape.
std::string NpyBytesF32(const std::vector<int64_t>& shape, const float* data);
std::string NpyBytesI32(const std::vector<int64_t>& shape, const int32_t* data);
// Writes atomically (see WriteFileAtomic).
Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace octet
