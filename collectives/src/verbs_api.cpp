// LoadVerbs: dlopen of libibverbs.so.1 (see octet/collectives/verbs_api.h).
#include "octet/collectives/verbs_api.h"

#if OCTET_HAVE_VERBS
#include <mutex>

#include "shared_library.h"

namespace octet::collectives {
namespace {

struct Loaded {
  VerbsApi api{};
  Status status = Status::Ok();
};

Loaded Load() {
  Loaded l;
  auto lib = OpenSharedLibrary({"libibverbs.so.1"}, "libibverbs");
  if (!lib.ok()) {
    l.status = lib.status();
    return l;
  }
  l.api.library = lib->name;
  std::string missing;
  BindSymbol(*lib, "ibv_get_device_list", &l.api.get_device_list, &missing);
  BindSymbol(*lib, "ibv_free_device_list", &l.api.free_device_list, &missing);
  BindSymbol(*lib, "ibv_get_device_name", &l.api.get_device_name, &missing);
  BindSymbol(*lib, "ibv_open_device", &l.api.open_device, &missing);
  BindSymbol(*lib, "ibv_close_device", &l.api.close_device, &missing);
  BindSymbol(*lib, "ibv_query_device", &l.api.query_device, &missing);
  BindSymbol(*lib, "ibv_query_port", &l.api.query_port, &missing);
  BindSymbol(*lib, "ibv_query_gid", &l.api.query_gid, &missing);
  BindSymbol(*lib, "ibv_alloc_pd", &l.api.alloc_pd, &missing);
  BindSymbol(*lib, "ibv_dealloc_pd", &l.api.dealloc_pd, &missing);
  BindSymbol(*lib, "ibv_create_cq", &l.api.create_cq, &missing);
  BindSymbol(*lib, "ibv_destroy_cq", &l.api.destroy_cq, &missing);
  BindSymbol(*lib, "ibv_reg_mr", &l.api.reg_mr, &missing);
  BindSymbol(*lib, "ibv_dereg_mr", &l.api.dereg_mr, &missing);
  BindSymbol(*lib, "ibv_create_qp", &l.api.create_qp, &missing);
  BindSymbol(*lib, "ibv_modify_qp", &l.api.modify_qp, &missing);
  BindSymbol(*lib, "ibv_destroy_qp", &l.api.destroy_qp, &missing);
  BindSymbol(*lib, "ibv_wc_status_str", &l.api.wc_status_str, &missing);
  if (!missing.empty()) {
    l.status = UnavailableError(l.api.library + " lacks " + missing);
    return l;
  }
  std::string optional;  // rdma-core >= 32 only
  BindSymbol(*lib, "_ibv_query_gid_ex", &l.api.query_gid_ex, &optional);
  return l;
}

}  // namespace

Result<const VerbsApi*> LoadVerbs() {
  static const Loaded* loaded = new Loaded(Load());  // thread-safe static init
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->api;
}

}  // namespace octet::collectives
#endif  // OCTET_HAVE_VERBS
