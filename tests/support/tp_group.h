// A tensor-parallel group for tests: `tp` TpRuntime ranks as threads of the
// test process, each loading its shard of a checkpoint on the backend named,
// joined through a real communicator over a rendezvous on 127.0.0.1. Rank 0
// runs `lead` on its runtime and shuts the group down; the others follow.
// Used by tests/unit/engine/test_tensor_parallel (CPU backends) and
// tests/gpu/test_cuda_tp (the CUDA backend, every rank on one device).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/status.h"
#include "octet/collectives/types.h"
#include "octet/engine/tp_runtime.h"

namespace octet::test {

// A loopback port that was free a moment ago (a clash shows as a failed
// rendezvous, never as a wrong result).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

struct TpGroupOptions {
  int tp = 2;
  collectives::TransportKind transport = collectives::TransportKind::kShm;
  collectives::AlgorithmKind algorithm = collectives::AlgorithmKind::kAuto;
  std::string backend = "auto";  // LoadOptions::backend of every rank
  bool load_mtp = false;         // the MTP head on every rank
};

// The first error of any rank (with its rank), or OK.
inline Status RunTpGroup(const std::string& dir, const TpGroupOptions& g,
                         const std::function<Status(engine::TpRuntime&)>& lead) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  std::vector<Status> status(g.tp);
  auto rank_main = [&](int r) {
    engine::TpRuntimeOptions o;
    o.rendezvous = rendezvous;
    o.world_size = g.tp;
    o.rank = r;
    o.comm.transport = g.transport;
    o.comm.algorithm = g.algorithm;
    o.comm.connect_timeout_ms = 20000;
    o.load.threads = 1;
    o.load.backend = g.backend;
    o.load.load_mtp = g.load_mtp;
    auto rt = engine::TpRuntime::Create(dir, o);
    if (!rt.ok()) {
      status[r] = rt.status();
      return;
    }
    if (r == 0) {
      status[r] = lead(**rt);
      Status down = (*rt)->Shutdown();
      if (status[r].ok()) status[r] = down;
    } else {
      status[r] = (*rt)->Follow(nullptr);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < g.tp; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < g.tp; ++r) {
    if (!status[r].ok()) return status[r].WithContext("rank " + std::to_string(r));
  }
  return Status::Ok();
}

}  // namespace octet::test
