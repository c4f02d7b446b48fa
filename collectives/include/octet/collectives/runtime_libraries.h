// Which optional run-time libraries this process finds: the CUDA driver,
// NCCL and RDMA verbs. None is linked (readelf -d shows no NEEDED entry for
// libcudart, libnccl or libibverbs): each is loaded with dlopen when used, so
// one package runs on machines with and without them.
#pragma once

#include <string>

namespace octet::collectives {

// One line for `--version`, e.g.
//   "run time: CUDA driver libcuda.so.1; NCCL not found (tried libnccl.so.2: ...);
//    RDMA verbs libibverbs.so.1"
// A library the build left out says "not compiled in".
std::string RuntimeLibrariesLine();

}  // namespace octet::collectives
