// Why the CUDA runtime found no usable device, in words a user can act on
// (no driver, a driver too old for this build, the toolkit's stub library, no
// device, a driver/module mismatch), from cudaGetDeviceCount's error. One
// wording for every probe: the kernel backend's and the NCCL transport's.
// Header-only: included only by code built with the CUDA toolkit.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace octet {

inline std::string DriverProblem(cudaError_t e) {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  const std::string name = cudaGetErrorName(e);
  switch (e) {
    case cudaErrorInsufficientDriver:
      if (driver == 0) {
        return "no CUDA driver (libcuda.so.1 not found; the NVIDIA driver is not installed) (" +
               name + ")";
      }
      // Versions are 1000 * major + 10 * minor.
      return "CUDA driver too old: it supports CUDA " + std::to_string(driver / 1000) + "." +
             std::to_string(driver % 1000 / 10) + ", this build's runtime needs " +
             std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + " (" +
             name + ")";
    case cudaErrorStubLibrary:
      return "no CUDA driver: libcuda.so is the toolkit's stub library (" + name + ")";
    case cudaErrorNoDevice:
      return "the CUDA driver sees no device (" + name +
             "; check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    case cudaErrorSystemDriverMismatch:
      return "the CUDA driver and the kernel module differ in version (" + name + ")";
    default:
      return std::string("cudaGetDeviceCount failed: ") + name + ": " + cudaGetErrorString(e);
  }
}

}  // namespace octet
