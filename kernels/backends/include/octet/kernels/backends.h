// Every kernel backend of this build, by name: the CPU backends of
// octet_kernels (backend.h: "scalar", "avx2", "avx512", "avx512-amx", "avx512-rows", "neon", ...)
// and, in a build with CUDA, "cuda" (octet/kernels/cuda/cuda_backend.h).
// Programs make their backend here; kernels::CreateBackend knows the CPU
// backends only (octet_kernels cannot depend on the CUDA library above it).
//
// "auto" is "cuda" when this build has it and device 0 is usable, else the
// fastest CPU backend; in a CUDA build that falls back to the CPU, the reason
// is logged once per process (one line). Thread-safe.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"

namespace octet::kernels {

// The CPU backends of ProbeBackends() and, in a CUDA build, "cuda": available
// when device 0 is usable, its description then the device ("NVIDIA H200,
// sm_90, ...") or the probe's one-line reason it is not (no driver, no device,
// unsupported architecture).
std::vector<BackendInfo> ProbeAllBackends();

// A backend by name: a CPU backend, "cuda", or "auto". "cuda" where it cannot
// run: Unavailable with the probe's one line ("kernel backend 'cuda' is not
// available here: the CUDA driver sees no device ..."); in a build without
// CUDA: Unavailable saying so. Unknown names: InvalidArgument listing the
// backends.
Result<std::unique_ptr<KernelBackend>> CreateAnyBackend(std::string_view name,
                                                        const BackendOptions& options = {});

// The names CreateAnyBackend takes, for --help texts: "auto, cuda, avx2, ...".
std::string BackendNamesForHelp();

}  // namespace octet::kernels
