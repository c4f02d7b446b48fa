// LoadNccl: dlopen of libnccl.so.<major> (see nccl_loader.h).
#include "nccl_loader.h"

#if OCTET_HAVE_NCCL
#include "shared_library.h"

#ifndef OCTET_NCCL_LIBRARY_DIR
#define OCTET_NCCL_LIBRARY_DIR ""
#endif

namespace octet::collectives {
namespace {

struct Loaded {
  NcclApi api{};
  Status status = Status::Ok();
};

Loaded Load() {
  Loaded l;
  const std::string versioned = "libnccl.so." + std::to_string(NCCL_MAJOR);
  const std::string dir = OCTET_NCCL_LIBRARY_DIR;
  // The system's search path first; then where the build found NCCL.
  auto lib = OpenSharedLibrary({versioned, dir.empty() ? "" : dir + "/" + versioned}, "libnccl");
  if (!lib.ok()) {
    l.status = lib.status();
    return l;
  }
  l.api.library = lib->name;
  std::string missing;
  BindSymbol(*lib, "ncclGetErrorString", &l.api.get_error_string, &missing);
  BindSymbol(*lib, "ncclGetUniqueId", &l.api.get_unique_id, &missing);
  BindSymbol(*lib, "ncclCommInitRankConfig", &l.api.comm_init_rank_config, &missing);
  BindSymbol(*lib, "ncclCommGetAsyncError", &l.api.comm_get_async_error, &missing);
  BindSymbol(*lib, "ncclCommFinalize", &l.api.comm_finalize, &missing);
  BindSymbol(*lib, "ncclCommAbort", &l.api.comm_abort, &missing);
  BindSymbol(*lib, "ncclCommDestroy", &l.api.comm_destroy, &missing);
  BindSymbol(*lib, "ncclAllReduce", &l.api.all_reduce, &missing);
  BindSymbol(*lib, "ncclAllGather", &l.api.all_gather, &missing);
  BindSymbol(*lib, "ncclReduceScatter", &l.api.reduce_scatter, &missing);
  BindSymbol(*lib, "ncclBroadcast", &l.api.broadcast, &missing);
  BindSymbol(*lib, "ncclSend", &l.api.send, &missing);
  BindSymbol(*lib, "ncclRecv", &l.api.recv, &missing);
  BindSymbol(*lib, "ncclGroupStart", &l.api.group_start, &missing);
  BindSymbol(*lib, "ncclGroupEnd", &l.api.group_end, &missing);
  if (!missing.empty()) l.status = UnavailableError(l.api.library + " lacks " + missing);
  return l;
}

}  // namespace

Result<const NcclApi*> LoadNccl() {
  static const Loaded* loaded = new Loaded(Load());  // thread-safe static init
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->api;
}

}  // namespace octet::collectives
#endif  // OCTET_HAVE_NCCL
