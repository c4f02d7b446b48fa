#include "octet/collectives/runtime_libraries.h"

#include "nccl_loader.h"
#include "octet/collectives/verbs_api.h"
#include "shared_library.h"

namespace octet::collectives {

std::string RuntimeLibrariesLine() {
  std::string line = "run time: CUDA driver ";
#if OCTET_HAVE_CUDA
  // The CUDA runtime is linked statically; it needs only the driver.
  static const auto driver = OpenSharedLibrary({"libcuda.so.1"}, "libcuda");
  line += driver.ok() ? driver->name : driver.status().message();
#else
  line += "not compiled in";
#endif
  line += "; NCCL ";
#if OCTET_HAVE_NCCL
  auto nccl = LoadNccl();
  line += nccl.ok() ? (*nccl)->library : nccl.status().message();
#else
  line += "not compiled in";
#endif
  line += "; RDMA verbs ";
#if OCTET_HAVE_VERBS
  auto verbs = LoadVerbs();
  line += verbs.ok() ? (*verbs)->library : verbs.status().message();
#else
  line += "not compiled in";
#endif
  return line;
}

}  // namespace octet::collectives
