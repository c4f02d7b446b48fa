// cuBLAS, loaded at run time (internal to octet_kernels_cuda).
//
// Why dlopen rather than linking: this toolkit ships cuBLAS as shared
// libraries only (no libcublas_static.a), and a binary linked against
// libcublas.so.N does not start on a machine without it — every program of
// the project (the CLI, the agent, the tests) must start on a GPU-less
// machine and say "no usable CUDA device" instead. Loading it when a
// CudaBackend is made keeps that, and a missing cuBLAS becomes one error
// line naming the library. cuBLAS carries its own CUDA runtime, which shares
// the driver's primary context (and so our streams and allocations) with the
// statically linked runtime of this library.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "octet/base/status.h"

namespace octet::kernels::cuda {

// The entry points CudaBackend uses. Loaded once per process; thread-safe.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const float*, const float*, int, const float*, int, const float*, float*,
                          int);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  cublasStatus_t (*sgemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const float*, const float*, int, long long,
                                          const float*, int, long long, const float*, float*, int,
                                          long long, int);
  const char* (*status_string)(cublasStatus_t);
  std::string library;  // the file that was loaded
};

// The loaded API, or Unavailable naming the libraries tried and dlerror().
Result<const CublasApi*> LoadCublas();

// "<call>: CUBLAS_STATUS_...": Internal (ResourceExhausted for ALLOC_FAILED).
Status CublasError(const CublasApi& api, cublasStatus_t status, const char* call);

}  // namespace octet::kernels::cuda
