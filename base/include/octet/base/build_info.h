// What this build of Octet is and what it was built with.
#pragma once

#include <string>

namespace octet {

struct BuildInfo {
  std::string version;   // "0.1.0"
  std::string commit;    // git commit the build was configured at ("unknown" outside git)
  std::string compiler;  // "GCC 12.2.0"
  std::string arch;      // "x86_64", "aarch64"
  bool cuda = false;     // CUDA kernels compiled in
  bool nccl = false;     // NCCL backend compiled in
  bool verbs = false;    // RDMA verbs transport compiled in
  std::string ToString() const;  // one line, for --version and logs
};

const BuildInfo& GetBuildInfo();

}  // namespace octet
