// rdma-core's libibverbs, loaded at run time (see src/shared_library.h for why).
//
// Only builds with the verbs headers (OCTET_HAVE_VERBS) have this API; the
// inline data-path calls of <infiniband/verbs.h> (ibv_post_send, ibv_post_recv,
// ibv_poll_cq) go through the device's ops table and need no symbol.
#pragma once

#if OCTET_HAVE_VERBS
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "octet/base/status.h"

namespace octet::collectives {

struct VerbsApi {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  // Absent before rdma-core 32 (then null: callers use query_gid).
  int (*query_gid_ex)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*destroy_qp)(ibv_qp*);
  const char* (*wc_status_str)(ibv_wc_status);
  std::string library;  // the file that was loaded
};

// Loaded once per process (thread-safe): the API, or Unavailable naming the
// library tried and dlerror() ("libibverbs not found (tried libibverbs.so.1: ...)").
Result<const VerbsApi*> LoadVerbs();

}  // namespace octet::collectives

#endif  // OCTET_HAVE_VERBS
