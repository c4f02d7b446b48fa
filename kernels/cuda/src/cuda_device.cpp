// CudaProbe, DeviceBuffer, CudaStream, CudaEvent: the CUDA runtime behind
// Status. Host code only (compiled by the C++ compiler).
#include "octet/kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "cuda_check.h"
#include "octet/base/cuda_driver_problem.h"

namespace octet::kernels::cuda {

Status CudaError(cudaError_t error, std::string_view call) {
  // The error is this Status now: clear it from the runtime, or the next
  // launch's CheckLaunch (cudaGetLastError) reports it as its own, e.g. a
  // failed scratch cudaMalloc failing the next request's first kernel. A
  // sticky error (the context is lost) stays whatever is done here.
  (void)cudaGetLastError();
  std::string msg(call);
  msg += ": ";
  msg += cudaGetErrorName(error);
  msg += ": ";
  msg += cudaGetErrorString(error);
  switch (error) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
      return UnavailableError(std::move(msg));
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(std::move(msg));
    case cudaErrorInvalidValue:
      return InvalidArgumentError(std::move(msg));
    default:
      return InternalError(std::move(msg));
  }
}

// ---- probe ------------------------------------------------------------------

namespace {

std::string Format(const char* fmt, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

// What CMAKE_CUDA_ARCHITECTURES says about a device of compute capability cc
// (major * 10 + minor).
enum class ListSays { kRuns, kDoesNotRun, kUnknown };

// One entry: "90", "90-real", "90-virtual", "121a", "100f-real". Plain
// entries embed SASS and PTX. SASS for sm_XY runs on X.Z for Z >= Y ("a"
// SASS only on X.Y); plain PTX is compiled by the driver for any later
// architecture. Entries that are not a number ("native", "all") say nothing.
ListSays EntrySays(const std::string& entry, int cc) {
  size_t i = 0;
  int number = 0;
  while (i < entry.size() && entry[i] >= '0' && entry[i] <= '9') {
    number = number * 10 + (entry[i++] - '0');
  }
  if (i == 0) return ListSays::kUnknown;
  char suffix = 0;
  if (i < entry.size() && (entry[i] == 'a' || entry[i] == 'f')) suffix = entry[i++];
  const std::string kind = entry.substr(i);
  const bool real = kind.empty() || kind == "-real";
  const bool virt = kind.empty() || kind == "-virtual";
  const int major = cc / 10, minor = cc % 10;
  if (real && number / 10 == major &&
      (suffix == 'a' ? number % 10 == minor : number % 10 <= minor)) {
    return ListSays::kRuns;
  }
  return virt && suffix == 0 && cc >= number ? ListSays::kRuns : ListSays::kDoesNotRun;
}

ListSays ListSaysFor(const std::string& list, int cc) {
  ListSays says = ListSays::kDoesNotRun;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(';', start), list.size());
    const ListSays e = EntrySays(list.substr(start, end - start), cc);
    if (e == ListSays::kRuns) return e;
    if (e == ListSays::kUnknown) says = e;
    start = end + 1;
  }
  return says;
}

}  // namespace

double CudaDeviceInfo::PeakBandwidthGBs() const {
  if (memory_clock_khz <= 0 || memory_bus_width_bits <= 0) return 0.0;
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0) / 1e9;
}

std::string CudaDeviceInfo::Describe() const {
  std::string s = name + ", sm_" + std::to_string(major) + std::to_string(minor) + ", " +
                  std::to_string(sm_count) + " SMs, " +
                  Format("%.1f GiB (%.1f GiB free)", total_memory_bytes / 1073741824.0,
                         free_memory_bytes / 1073741824.0);
  if (PeakBandwidthGBs() > 0) s += Format(", %.0f GB/s peak", PeakBandwidthGBs());
  if (integrated) s += ", integrated (unified memory)";
  return s;
}

CudaProbeResult CudaProbe() {
  CudaProbeResult r;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    r.why = DriverProblem(e);
    cudaGetLastError();  // clear it: the probe's failure is not the caller's next error
    return r;
  }
  r.device_count = count;
  if (count == 0) {
    r.why = "the CUDA driver sees no device (cudaGetDeviceCount: 0)";
    return r;
  }
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = 0;
  const std::string archs = CudaCompiledArchitectures();
  std::string device0_problem;
  for (int i = 0; i < count; ++i) {
    CudaDeviceInfo d;
    d.index = i;
    cudaDeviceProp prop{};
    if (cudaError_t pe = cudaGetDeviceProperties(&prop, i); pe != cudaSuccess) {
      if (i == 0) device0_problem = CudaError(pe, "cudaGetDeviceProperties(0)").message();
      cudaGetLastError();
      r.devices.push_back(d);
      continue;
    }
    d.name = prop.name;
    d.major = prop.major;
    d.minor = prop.minor;
    d.sm_count = prop.multiProcessorCount;
    d.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.l2_cache_bytes = prop.l2CacheSize;
    d.integrated = prop.integrated != 0;
    d.pageable_memory_access = prop.pageableMemoryAccess != 0;
    d.memory_bus_width_bits = prop.memoryBusWidth;
    // The clock left cudaDeviceProp in CUDA 13; the attribute stays.
    if (cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, i) != cudaSuccess) {
      d.memory_clock_khz = 0;
      cudaGetLastError();
    }
    // Free memory and the kernel-image check need the device's context. The
    // architecture list decides first (without loading anything); where it
    // says nothing ("native") or yes, loading a kernel confirms it.
    const int cc = d.major * 10 + d.minor;
    const bool listed = ListSaysFor(archs, cc) != ListSays::kDoesNotRun;
    cudaError_t ce = cudaSetDevice(i);
    if (ce == cudaSuccess) {
      size_t free_bytes = 0, total_bytes = 0;
      ce = cudaMemGetInfo(&free_bytes, &total_bytes);
      d.free_memory_bytes = static_cast<int64_t>(free_bytes);
    }
    if (ce == cudaSuccess) ce = listed ? CheckKernelImage() : cudaErrorNoKernelImageForDevice;
    d.has_code = ce == cudaSuccess;
    if (i == 0 && !d.has_code) {
      if (ce == cudaErrorNoKernelImageForDevice || ce == cudaErrorInvalidDeviceFunction) {
        device0_problem = "device 0 (" + d.name + ") is sm_" + std::to_string(cc) +
                          "; this build holds code for " + archs +
                          " only (configure with -DOCTET_CUDA_ARCHITECTURES=" + std::to_string(cc) +
                          ") (" + cudaGetErrorName(ce) + ")";
      } else {
        device0_problem = "device 0 (" + d.name + ") cannot be used: " + cudaGetErrorName(ce) +
                          ": " + cudaGetErrorString(ce);
      }
    }
    cudaGetLastError();
    r.devices.push_back(d);
  }
  cudaSetDevice(previous);
  cudaGetLastError();
  r.usable = r.devices[0].has_code;
  if (r.usable) {
    r.why = "device 0: " + r.devices[0].Describe();
    if (count > 1) r.why += " (+" + std::to_string(count - 1) + " more)";
  } else {
    r.why = device0_problem;
  }
  return r;
}

// ---- stream -----------------------------------------------------------------

Result<CudaStream> CudaStream::Create() {
  cudaStream_t s = nullptr;
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  CudaStream stream;
  stream.stream_ = s;
  return stream;
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() {
  // A destructor has no one to report to; a failure here means the context
  // is already broken, which the next checked call reports.
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaStream::Synchronize() const {
  return CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// ---- device memory ----------------------------------------------------------

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
  b.data_ = p;
  b.size_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // see ~CudaStream
}

namespace {
Status CheckRange(size_t offset, size_t bytes, size_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    return InvalidArgumentError(std::string(what) + ": bytes [" + std::to_string(offset) + ", " +
                                std::to_string(offset + bytes) + ") outside a buffer of " +
                                std::to_string(size));
  }
  return Status::Ok();
}
}  // namespace

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, const CudaStream& stream,
                                  size_t offset) {
  OCTET_RETURN_IF_ERROR(CheckRange(offset, bytes, size_, "DeviceBuffer::CopyFromHost"));
  if (bytes == 0) return Status::Ok();
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(static_cast<char*>(data_) + offset, src, bytes,
                                                  cudaMemcpyHostToDevice, stream.get()),
                                  "cudaMemcpyAsync(host to device)"));
  return stream.Synchronize();
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, const CudaStream& stream,
                                size_t offset) const {
  OCTET_RETURN_IF_ERROR(CheckRange(offset, bytes, size_, "DeviceBuffer::CopyToHost"));
  if (bytes == 0) return Status::Ok();
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(dst, static_cast<const char*>(data_) + offset,
                                                  bytes, cudaMemcpyDeviceToHost, stream.get()),
                                  "cudaMemcpyAsync(device to host)"));
  return stream.Synchronize();
}

Status DeviceBuffer::Fill(uint8_t byte, const CudaStream& stream) {
  if (size_ == 0) return Status::Ok();
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaMemsetAsync(data_, byte, size_, stream.get()), "cudaMemsetAsync"));
  return stream.Synchronize();
}

Status CopyDeviceToDeviceAsync(void* dst, const void* src, size_t bytes, const CudaStream& stream) {
  if (bytes == 0) return Status::Ok();
  return CudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream.get()),
                   "cudaMemcpyAsync(device to device)");
}

// ---- events -----------------------------------------------------------------

Result<CudaEvent> CudaEvent::Create() {
  cudaEvent_t e = nullptr;
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaEventCreate(&e), "cudaEventCreate"));
  CudaEvent event;
  event.event_ = e;
  return event;
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

Status CudaEvent::Record(const CudaStream& stream) {
  return CudaCheck(cudaEventRecord(event_, stream.get()), "cudaEventRecord");
}

Status CudaEvent::Synchronize() const {
  return CudaCheck(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

Result<float> CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
  OCTET_RETURN_IF_ERROR(end.Synchronize());
  float ms = 0.0f;
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaEventElapsedTime(&ms, start.event_, end.event_), "cudaEventElapsedTime"));
  return ms;
}

}  // namespace octet::kernels::cuda
