// GPU facts through the CUDA driver API, loaded at run time.
//
// The agent never links libcuda: a build with CUDA must still start on a node
// without a driver (and here, where nvcc exists but no GPU does). dlopen either
// finds libcuda.so.1 and cuInit succeeds, or the probe returns an empty list
// with the reason. On GB10 (DGX Spark) the GPU is integrated and shares system
// memory; nvidia-smi reports its memory as N/A, so the figures come from
// cuDeviceTotalMem / cuMemGetInfo here.
#include <dlfcn.h>

#include <string>

#include "octet/agent/node_facts.h"

#if OCTET_HAVE_CUDA
#include <cuda.h>
#endif

namespace octet::agent {

#if OCTET_HAVE_CUDA
namespace {

struct CudaDriver {
  void* handle = nullptr;
  CUresult (*Init)(unsigned int) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*DeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*PrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*CtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*CtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*MemGetInfo)(size_t*, size_t*) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;

  ~CudaDriver() {
    if (handle) ::dlclose(handle);
  }
  template <typename F>
  bool Load(F* fn, const char* name) {
    *fn = reinterpret_cast<F>(::dlsym(handle, name));
    return *fn != nullptr;
  }
  std::string Error(CUresult r) const {
    const char* s = nullptr;
    if (GetErrorString && GetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA error " + std::to_string(static_cast<int>(r));
  }
};

}  // namespace

GpuProbe ProbeGpus() {
  GpuProbe probe;
  CudaDriver cu;
  cu.handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.handle) {
    probe.note = "no CUDA driver (libcuda.so.1 not found)";
    return probe;
  }
  const bool loaded =
      cu.Load(&cu.Init, "cuInit") && cu.Load(&cu.DeviceGetCount, "cuDeviceGetCount") &&
      cu.Load(&cu.DeviceGet, "cuDeviceGet") && cu.Load(&cu.DeviceGetName, "cuDeviceGetName") &&
      cu.Load(&cu.DeviceGetAttribute, "cuDeviceGetAttribute") &&
      cu.Load(&cu.DeviceTotalMem, "cuDeviceTotalMem_v2") &&
      cu.Load(&cu.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
      cu.Load(&cu.PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
      cu.Load(&cu.CtxPushCurrent, "cuCtxPushCurrent_v2") &&
      cu.Load(&cu.CtxPopCurrent, "cuCtxPopCurrent_v2") &&
      cu.Load(&cu.MemGetInfo, "cuMemGetInfo_v2");
  cu.Load(&cu.GetErrorString, "cuGetErrorString");
  if (!loaded) {
    probe.note = "CUDA driver too old (missing entry points in libcuda.so.1)";
    return probe;
  }
  if (CUresult r = cu.Init(0); r != CUDA_SUCCESS) {
    probe.note = "CUDA driver present but cuInit failed: " + cu.Error(r);
    return probe;
  }
  int count = 0;
  if (CUresult r = cu.DeviceGetCount(&count); r != CUDA_SUCCESS || count == 0) {
    probe.note = r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + cu.Error(r) : "no CUDA devices";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (cu.DeviceGet(&dev, i) != CUDA_SUCCESS) continue;
    GpuFacts g;
    char name[256] = {};
    if (cu.DeviceGetName(name, sizeof name - 1, dev) == CUDA_SUCCESS) g.name = name;
    int v = 0;
    if (cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ==
        CUDA_SUCCESS)
      g.cc_major = static_cast<uint32_t>(v);
    if (cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ==
        CUDA_SUCCESS)
      g.cc_minor = static_cast<uint32_t>(v);
    if (cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_INTEGRATED, dev) == CUDA_SUCCESS)
      g.unified_memory = v != 0;
    size_t total = 0;
    if (cu.DeviceTotalMem(&total, dev) == CUDA_SUCCESS) g.memory_bytes = total;
    // Free memory needs a context; the primary one is shared with any other
    // user in this process and released again at once.
    CUcontext ctx = nullptr;
    if (cu.PrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS) {
      if (cu.CtxPushCurrent(ctx) == CUDA_SUCCESS) {
        size_t free_bytes = 0, total_bytes = 0;
        if (cu.MemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) g.free_bytes = free_bytes;
        CUcontext popped = nullptr;
        cu.CtxPopCurrent(&popped);
      }
      cu.PrimaryCtxRelease(dev);
    }
    probe.gpus.push_back(std::move(g));
  }
  return probe;
}

#else

GpuProbe ProbeGpus() {
  GpuProbe probe;
  probe.note = "not built with CUDA";
  return probe;
}

#endif

}  // namespace octet::agent
