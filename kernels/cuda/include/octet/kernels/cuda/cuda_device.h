// The CUDA device layer of the kernels: what the machine has (CudaProbe),
// device memory (DeviceBuffer), streams and events. Every CUDA runtime call is
// checked and its error returned as a Status naming the call and the error
// ("cudaMalloc(1073741824 bytes): cudaErrorMemoryAllocation: out of memory");
// nothing here aborts or throws.
//
// The CUDA runtime is linked statically (CUDA::cudart_static), so a program
// built with this library starts on a machine without libcudart.so and even
// without a driver: CudaProbe then says why there is no usable device. Using
// this header needs no CUDA header: streams and events are the runtime's
// opaque CUstream_st* / CUevent_st* (cudaStream_t / cudaEvent_t).
//
// Thread-safety: the free functions may be called from any thread. A
// DeviceBuffer, CudaStream or CudaEvent is one caller's at a time. Everything
// uses the calling thread's current device (device 0 unless the caller chose
// another with the runtime).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"

struct CUstream_st;
struct CUevent_st;

namespace octet::kernels::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H200", "NVIDIA GB10"
  int major = 0;     // compute capability: 9.0 (H100/H200), 12.1 (GB10)
  int minor = 0;
  int sm_count = 0;
  int64_t total_memory_bytes = 0;
  int64_t free_memory_bytes = 0;
  int memory_clock_khz = 0;       // 0 where the device does not report it
  int memory_bus_width_bits = 0;  // likewise
  int64_t l2_cache_bytes = 0;
  bool integrated = false;              // shares the host's memory (GB10: unified memory)
  bool pageable_memory_access = false;  // reads pageable host memory coherently
  bool has_code = false;                // this build holds code (SASS or PTX) that runs on it

  // Peak DRAM bandwidth from the memory clock and bus width (two transfers per
  // clock), GB/s; 0 when either is unknown.
  double PeakBandwidthGBs() const;
  // "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB (139.1 GiB free), 4.8 TB/s peak"
  std::string Describe() const;
};

struct CudaProbeResult {
  // Device 0 (the one the ops run on unless the caller picks another) exists
  // and this build's kernels load on it.
  bool usable = false;
  // One line. Usable: device 0 described. Not usable: why, telling apart a
  // missing or too old driver, a driver without devices, and a device whose
  // architecture this build holds no code for.
  std::string why;
  int device_count = 0;
  std::vector<CudaDeviceInfo> devices;
};

// Looks at the driver and every device (creating each device's primary
// context, so the first call may take a fraction of a second per device).
// Leaves the calling thread's current device as it found it.
CudaProbeResult CudaProbe();

// The CUDA architectures this build holds code for, as configured
// (CMAKE_CUDA_ARCHITECTURES): "90;121". Needs no driver.
std::string CudaCompiledArchitectures();

// A stream on the current device that does not synchronise with the legacy
// default stream. Move-only; destroys the stream when it goes.
class CudaStream {
 public:
  static Result<CudaStream> Create();

  CudaStream() = default;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  CUstream_st* get() const { return stream_; }
  // Waits for everything queued so far; returns the first asynchronous error
  // (a kernel fault surfaces here).
  Status Synchronize() const;

 private:
  CUstream_st* stream_ = nullptr;
};

// cudaMalloc'd device memory (not managed), freed when the buffer goes.
// Copies are ordered on the given stream and wait for it to finish, so the
// host data may be reused as soon as they return.
class DeviceBuffer {
 public:
  // Contents undefined. Zero bytes gives an empty buffer (data() null).
  static Result<DeviceBuffer> Allocate(size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

  // [offset, offset + bytes) must lie inside the buffer (else InvalidArgument).
  Status CopyFromHost(const void* src, size_t bytes, const CudaStream& stream, size_t offset = 0);
  Status CopyToHost(void* dst, size_t bytes, const CudaStream& stream, size_t offset = 0) const;
  // Every byte set to `byte` (0xff makes every float a NaN), waiting for it.
  Status Fill(uint8_t byte, const CudaStream& stream);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Device-to-device copy queued on `stream` (not waited for).
Status CopyDeviceToDeviceAsync(void* dst, const void* src, size_t bytes, const CudaStream& stream);

// An event for timing work on a stream. Move-only.
class CudaEvent {
 public:
  static Result<CudaEvent> Create();

  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  Status Record(const CudaStream& stream);
  Status Synchronize() const;
  // Milliseconds between two recorded events (waits for `end`).
  static Result<float> ElapsedMs(const CudaEvent& start, const CudaEvent& end);

 private:
  CUevent_st* event_ = nullptr;
};

}  // namespace octet::kernels::cuda
