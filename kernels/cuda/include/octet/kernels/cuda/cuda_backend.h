// The CUDA KernelBackend: every op of backend.h on device 0 of this machine,
// memory_kind() kDevice, ops queued on one stream in the order they are
// issued (see backend.h for the memory and ordering contract).
//
// What the ops read and write is device memory from Allocate / PrepareWeight,
// with three host-visible exceptions: Argmax returns its index to the host,
// and TopK's `indices` and `values` are, like every other pointer, device
// memory (x, indices, values all from Allocate). Ops return nothing, so an
// argument the op refuses or a launch that fails is kept and reported by the
// next Synchronize() (the first such error; later ones are counted, not kept).
//
// Numerics against the scalar CPU backend (tests/gpu/test_cuda_backend):
// matmuls with m <= 8 BF16/NVFP4 rows run the decode GEMV kernels (float
// FMAs, another summation order); larger m run cuBLAS BF16 tensor-core GEMMs
// on activations split into two BF16 halves (hi + lo, 16 significant bits)
// with float accumulation, NVFP4 weights dequantised exactly to BF16 panels
// (the global scale applied as alpha); F32 weights and Gemm are cuBLAS SGEMM
// (no TF32). OCTET_CUDA_MATMUL=bf16 drops the lo half (twice the GEMM rate,
// activations rounded to BF16: beyond the fixtures' 1e-3 logits tolerance).
//
// cuBLAS is loaded at run time (libcublas.so.<major>); without it the backend
// is not created and the error names the library.
#pragma once

#include <memory>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"

namespace octet::kernels::cuda {

// A CUDA backend on device 0. Unavailable (one line: no driver, no device,
// unsupported architecture, no cuBLAS) where this machine cannot run it.
Result<std::unique_ptr<KernelBackend>> CreateCudaBackend(const BackendOptions& options = {});

}  // namespace octet::kernels::cuda
