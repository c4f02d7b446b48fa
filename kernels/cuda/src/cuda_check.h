// CUDA runtime errors as Status (internal to octet_kernels_cuda).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet::kernels::cuda {

// "<call>: <cudaErrorName>: <description>", with a code that says what a
// caller can do about it: no driver, no device or no kernel image is
// Unavailable, out of memory ResourceExhausted, a bad value InvalidArgument,
// anything else Internal. Clears the runtime's last error (cudaGetLastError),
// so that no later check reports this one again.
Status CudaError(cudaError_t error, std::string_view call);

inline Status CudaCheck(cudaError_t error, std::string_view call) {
  return error == cudaSuccess ? Status::Ok() : CudaError(error, call);
}

// After a <<<...>>> launch: the launch's own error (bad configuration, no
// kernel image for this device), which the runtime reports only here.
inline Status CheckLaunch(const char* kernel) {
  return CudaCheck(cudaGetLastError(), std::string("launch of ") + kernel);
}

// Whether this build's kernels load on the current device (internal: the
// probe calls it; defined in elementwise.cu, where a kernel is at hand).
cudaError_t CheckKernelImage();

// Argument checks shared by the launchers.
inline bool FitsInt(int64_t v) { return v >= 0 && v <= INT32_MAX; }
inline bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace octet::kernels::cuda
