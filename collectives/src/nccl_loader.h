// NCCL, loaded at run time (internal to octet_collectives; see shared_library.h).
//
// NCCL carries its own CUDA runtime; the buffers and streams it is given come
// from this library's statically linked runtime, and both share the driver's
// primary context.
#pragma once

#if OCTET_HAVE_NCCL
#include <nccl.h>

#include <string>

#include "octet/base/status.h"

namespace octet::collectives {

struct NcclApi {
  const char* (*get_error_string)(ncclResult_t);
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*comm_finalize)(ncclComm_t);
  ncclResult_t (*comm_abort)(ncclComm_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                 ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  std::string library;  // the file that was loaded
};

// The loaded API (once per process; thread-safe), or Unavailable naming the
// libraries tried and dlerror().
Result<const NcclApi*> LoadNccl();

}  // namespace octet::collectives

#endif  // OCTET_HAVE_NCCL
