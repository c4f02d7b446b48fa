// CreateAnyBackend / ProbeAllBackends: the CPU backends of octet_kernels plus
// the CUDA backend where this build has it.
#include "octet/kernels/backends.h"

#include <mutex>
#include <string>

#include "octet/base/log.h"

#if OCTET_HAVE_CUDA
#include "octet/kernels/cuda/cuda_backend.h"
#include "octet/kernels/cuda/cuda_device.h"
#endif

namespace octet::kernels {
namespace {

#if OCTET_HAVE_CUDA
// The probe runs once per process: it creates a context per device, which
// takes a fraction of a second, and the answer does not change.
const cuda::CudaProbeResult& Probe() {
  static const cuda::CudaProbeResult* probe = new cuda::CudaProbeResult(cuda::CudaProbe());
  return *probe;
}
#endif

}  // namespace

std::vector<BackendInfo> ProbeAllBackends() {
  std::vector<BackendInfo> out;
#if OCTET_HAVE_CUDA
  const cuda::CudaProbeResult& p = Probe();
  out.push_back({"cuda", "CUDA (" + cuda::CudaCompiledArchitectures() + "): " + p.why, p.usable});
#endif
  for (BackendInfo& b : ProbeBackends()) out.push_back(std::move(b));
  return out;
}

std::string BackendNamesForHelp() {
  std::string names = "auto";
#if OCTET_HAVE_CUDA
  names += ", cuda";
#endif
  for (const BackendInfo& b : ProbeBackends()) names += ", " + b.name;
  return names;
}

Result<std::unique_ptr<KernelBackend>> CreateAnyBackend(std::string_view name,
                                                        const BackendOptions& options) {
  if (name == "cuda") {
#if OCTET_HAVE_CUDA
    const cuda::CudaProbeResult& p = Probe();
    if (!p.usable) {
      return UnavailableError("kernel backend 'cuda' is not available here: " + p.why);
    }
    auto b = cuda::CreateCudaBackend(options);
    if (!b.ok()) {
      return Status(b.status().code(), "kernel backend 'cuda': " + b.status().message());
    }
    return b;
#else
    return UnavailableError(
        "kernel backend 'cuda' is not in this build (configured without CUDA: no nvcc or "
        "OCTET_WITH_CUDA=OFF)");
#endif
  }
  if (name == "auto") {
#if OCTET_HAVE_CUDA
    const cuda::CudaProbeResult& p = Probe();
    std::string why = p.why;
    if (p.usable) {
      auto b = cuda::CreateCudaBackend(options);
      if (b.ok()) return b;
      why = b.status().message();
    }
    auto cpu = CreateBackend("auto", options);
    if (cpu.ok()) {
      static std::once_flag logged;
      std::call_once(logged, [&] {
        OCTET_LOG(INFO) << "backend auto: not using CUDA (" << why << "); using the CPU backend '"
                        << (*cpu)->name() << "'";
      });
    }
    return cpu;
#else
    return CreateBackend("auto", options);
#endif
  }
  auto b = CreateBackend(name, options);
  if (!b.ok() && b.status().code() == StatusCode::kInvalidArgument) {
    // CreateBackend's list names the CPU backends only.
    std::string known;
    for (const BackendInfo& i : ProbeAllBackends()) {
      if (!known.empty()) known += ", ";
      known += i.name + (i.available ? "" : " (not here)");
    }
    return InvalidArgumentError("kernel backend '" + std::string(name) +
                                "' is not available here (backends: " + known + ", auto)");
  }
  return b;
}

}  // namespace octet::kernels
