// dlopen of the first library of a list that loads (internal to octet_collectives).
//
// NCCL and rdma-core's libibverbs are loaded at run time, not linked, so that
// `octet`, `octet-agent` and `octet-workbench` start on machines without them
// (a package built with them installs everywhere) and say which they found.
#pragma once

#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::collectives {

struct SharedLibrary {
  void* handle = nullptr;  // never closed: the symbols stay in use for the process
  std::string name;        // the name that loaded
};

// Opens (RTLD_NOW | RTLD_LOCAL) the first of `names` that loads; otherwise
// Unavailable: "<what> not found (tried a, b: <dlerror of the last>)".
Result<SharedLibrary> OpenSharedLibrary(const std::vector<std::string>& names,
                                        const std::string& what);

// Resolves `name` into *out; appends it to *missing when absent.
void* FindSymbol(const SharedLibrary& lib, const char* name, std::string* missing);

template <typename F>
void BindSymbol(const SharedLibrary& lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(FindSymbol(lib, name, missing));
}

}  // namespace octet::collectives
