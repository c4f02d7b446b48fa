#include "shared_library.h"

#include <dlfcn.h>

namespace octet::collectives {

Result<SharedLibrary> OpenSharedLibrary(const std::vector<std::string>& names,
                                        const std::string& what) {
  std::string tried, last_error;
  for (const std::string& n : names) {
    if (n.empty()) continue;
    if (void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return SharedLibrary{h, n};
    tried += (tried.empty() ? "" : ", ") + n;
    const char* e = ::dlerror();
    last_error = e ? e : "?";
  }
  return UnavailableError(what + " not found (tried " + tried + ": " + last_error + ")");
}

void* FindSymbol(const SharedLibrary& lib, const char* name, std::string* missing) {
  void* p = ::dlsym(lib.handle, name);
  if (!p) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return p;
}

}  // namespace octet::collectives
