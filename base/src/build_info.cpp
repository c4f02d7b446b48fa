#include "octet/base/build_info.h"

namespace octet {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info = [] {
    BuildInfo b;
    b.version = OCTET_VERSION;
#ifdef OCTET_GIT_COMMIT
    b.commit = OCTET_GIT_COMMIT;
#else
    b.commit = "unknown";
#endif
#if defined(__clang__)
    b.compiler = "Clang " __clang_version__;
#elif defined(__GNUC__)
    b.compiler = "GCC " __VERSION__;
#else
    b.compiler = "unknown";
#endif
#if defined(__aarch64__)
    b.arch = "aarch64";
#elif defined(__x86_64__)
    b.arch = "x86_64";
#else
    b.arch = "unknown";
#endif
    b.cuda = OCTET_HAVE_CUDA;
    b.nccl = OCTET_HAVE_NCCL;
    b.verbs = OCTET_HAVE_VERBS;
    return b;
  }();
  return info;
}

std::string BuildInfo::ToString() const {
  auto yn = [](bool v) { return v ? "yes" : "no"; };
  return "octet " + version + " (" + arch + ", " + compiler + "; cuda " + yn(cuda) + ", nccl " +
         yn(nccl) + ", verbs " + yn(verbs) + ")";
}

}  // namespace octet
