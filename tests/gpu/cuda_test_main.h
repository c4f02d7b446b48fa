// The start of a GPU test program's main(): without a usable CUDA device it
// prints one line, "no usable CUDA device: <why>", and the program exits 77
// (skipped, SKIP_RETURN_CODE) before Qt runs any test function.
//
//   int main(int argc, char** argv) {
//     octet::kernels::cuda::CudaProbeResult probe;
//     if (!octet::test::CudaDeviceOrSkip(&probe)) return 77;
//     ...
#pragma once

#include <cstdio>

#include "octet/kernels/cuda/cuda_device.h"

namespace octet::test {

// True when there is a usable device (its description printed); `probe`, if
// given, receives the probe's result either way.
inline bool CudaDeviceOrSkip(kernels::cuda::CudaProbeResult* probe = nullptr) {
  const kernels::cuda::CudaProbeResult p = kernels::cuda::CudaProbe();
  if (probe) *probe = p;
  std::printf(p.usable ? "%s\n" : "no usable CUDA device: %s\n", p.why.c_str());
  std::fflush(stdout);
  return p.usable;
}

}  // namespace octet::test
