// Helpers of the CUDA kernel tests: host data to and from the device, random
// weights in the layouts a decode kernel meets, comparisons with tolerances.
#pragma once

#include <QtTest>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/kernels/cuda/cuda_device.h"
#include "octet/kernels/weight.h"

namespace octet::kernels::cuda::test {

// Fails the current test function with the status's message.
#define CUDA_VERIFY(expr)                                                       \
  do {                                                                          \
    const ::octet::Status cuda_verify_status_ = (expr);                         \
    QVERIFY2(cuda_verify_status_.ok(), cuda_verify_status_.ToString().c_str()); \
  } while (0)

template <typename T>
Result<DeviceBuffer> Upload(const std::vector<T>& v, const CudaStream& stream) {
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(v.size() * sizeof(T)));
  OCTET_RETURN_IF_ERROR(b.CopyFromHost(v.data(), v.size() * sizeof(T), stream));
  return b;
}

// `var` = a device copy of the vector `vec` (the test function fails otherwise).
#define UPLOAD(var, vec)                                                \
  auto var##_or_ = ::octet::kernels::cuda::test::Upload(vec, *stream_); \
  QVERIFY2(var##_or_.ok(), var##_or_.status().ToString().c_str());      \
  ::octet::kernels::cuda::DeviceBuffer var = std::move(*var##_or_)

template <typename T>
Status Download(const DeviceBuffer& b, std::vector<T>* out, const CudaStream& stream) {
  return b.CopyToHost(out->data(), out->size() * sizeof(T), stream);
}

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline int64_t CeilDivI(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How a weight matrix lies in memory.
enum class Layout {
  kTight,   // rows back to back (NVFP4: ceil(k/2) code bytes, ceil(k/16) scales)
  kPadded,  // row strides rounded up to 16 bytes plus 16 (scales plus 3), padding poisoned
  kSlice,   // a column slice of a wider matrix starting off a 16-byte boundary
};

// A matrix with its own storage. Bytes outside the matrix are poisoned: BF16
// NaN (0xffff), NVFP4 code 0xf and NaN scales (0x7f), so a kernel that reads
// past k shows it.
struct HostWeight {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  WeightMatrix view;  // into data / scales

  // The same view over device copies of data and scales.
  WeightMatrix OnDevice(const DeviceBuffer& d, const DeviceBuffer& s) const {
    WeightMatrix w = view;
    w.data = d.as<uint8_t>() + (static_cast<const uint8_t*>(view.data) - data.data());
    if (view.scales) w.scales = s.as<uint8_t>() + (view.scales - scales.data());
    return w;
  }
};

// Random values: BF16 normal(0, 1); NVFP4 every code, scale codes 1..0x60
// (subnormals included, never NaN), global scale 0.0173.
inline HostWeight RandomWeight(WeightFormat f, int64_t n, int64_t k, Layout layout,
                               std::mt19937& rng) {
  const bool fp4 = f == WeightFormat::kNvfp4;
  // Slices start at column 3 (BF16: 6 bytes in) or 16 (NVFP4: 8 bytes and one
  // scale in, the nearest a slice can start); NVFP4 slices need not end on a
  // block boundary here (k is anything), ColSlice's own check is stricter.
  const int64_t first = layout == Layout::kSlice ? (fp4 ? 16 : 3) : 0;
  const int64_t cols = k + first + (layout == Layout::kSlice ? 5 : 0);
  int64_t row_bytes = fp4 ? (cols + 1) / 2 : cols * 2;
  int64_t scale_row = CeilDivI(cols, kNvfp4BlockSize);
  if (layout == Layout::kPadded) {
    row_bytes = CeilDivI(row_bytes, 16) * 16 + 16;
    scale_row += 3;
  }
  HostWeight h;
  h.data.assign(n * row_bytes, 0xff);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* row = h.data.data() + r * row_bytes;
    for (int64_t c = 0; c < cols; ++c) {
      if (fp4) {
        const uint8_t code = static_cast<uint8_t>(rng() & 0xf);
        row[c / 2] = (c & 1) ? static_cast<uint8_t>((row[c / 2] & 0x0f) | code << 4)
                             : static_cast<uint8_t>((row[c / 2] & 0xf0) | code);
      } else {
        const uint16_t b = F32ToBf16(nd(rng));
        std::memcpy(row + 2 * c, &b, 2);
      }
    }
  }
  WeightMatrix& w = h.view;
  w.format = f;
  w.rows = n;
  w.cols = k;
  w.row_stride = row_bytes;
  w.data = h.data.data() + (fp4 ? first / 2 : first * 2);
  if (fp4) {
    h.scales.assign(n * scale_row, 0x7f);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t b = 0; b < CeilDivI(cols, kNvfp4BlockSize); ++b) {
        h.scales[r * scale_row + b] = static_cast<uint8_t>(1 + rng() % 0x60);
      }
    }
    w.scales = h.scales.data() + first / kNvfp4BlockSize;
    w.scale_row_stride = scale_row;
    w.global_scale = 0.0173f;
  }
  return h;
}

inline bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Empty when |got[i] - want[i]| <= tol[i] for every i (NaN only matching
// NaN), else the first element that is off.
inline std::string FirstMismatch(const std::vector<float>& got, const std::vector<float>& want,
                                 const std::vector<float>& tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool nan = std::isnan(want[i]) || std::isnan(got[i]);
    const bool ok = nan ? (std::isnan(want[i]) && std::isnan(got[i]))
                        : std::fabs(double(got[i]) - want[i]) <= tol[i];
    if (!ok) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "element %zu: got %.9g want %.9g (tolerance %.3g)", i, got[i],
                    want[i], tol[i]);
      return buf;
    }
  }
  return {};
}

}  // namespace octet::kernels::cuda::test
