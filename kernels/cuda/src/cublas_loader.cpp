// LoadCublas: dlopen of libcublas.so.<major> (see cublas_loader.h for why).
#include "cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

namespace octet::kernels::cuda {
namespace {

#ifndef OCTET_CUDA_LIBRARY_DIR
#define OCTET_CUDA_LIBRARY_DIR ""
#endif

struct Loaded {
  CublasApi api{};
  Status status = Status::Ok();
};

template <typename F>
bool Bind(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

Loaded Load() {
  Loaded l;
  const std::string versioned = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> names = {versioned};
  const std::string dir = OCTET_CUDA_LIBRARY_DIR;
  if (!dir.empty()) names.push_back(dir + "/" + versioned);
  std::string tried, last_error;
  void* lib = nullptr;
  for (const std::string& n : names) {
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      l.api.library = n;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + n;
    const char* e = dlerror();
    last_error = e ? e : "?";
  }
  if (!lib) {
    l.status = UnavailableError("cuBLAS not found (tried " + tried + "; " + last_error + ")");
    return l;
  }
  std::string missing;
  Bind(lib, "cublasCreate_v2", &l.api.create, &missing);
  Bind(lib, "cublasDestroy_v2", &l.api.destroy, &missing);
  Bind(lib, "cublasSetStream_v2", &l.api.set_stream, &missing);
  Bind(lib, "cublasSgemm_v2", &l.api.sgemm, &missing);
  Bind(lib, "cublasGemmEx", &l.api.gemm_ex, &missing);
  Bind(lib, "cublasSgemmStridedBatched", &l.api.sgemm_strided_batched, &missing);
  Bind(lib, "cublasGetStatusString", &l.api.status_string, &missing);
  if (!missing.empty()) {
    l.status = UnavailableError(l.api.library + " lacks " + missing);
  }
  // The library stays loaded for the life of the process.
  return l;
}

}  // namespace

Result<const CublasApi*> LoadCublas() {
  static const Loaded* loaded = new Loaded(Load());
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->api;
}

Status CublasError(const CublasApi& api, cublasStatus_t status, const char* call) {
  std::string msg = std::string(call) + ": " +
                    (api.status_string ? api.status_string(status) : "cuBLAS error") + " (" +
                    std::to_string(static_cast<int>(status)) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhaustedError(std::move(msg));
  return InternalError(std::move(msg));
}

}  // namespace octet::kernels::cuda
