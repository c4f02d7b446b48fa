// Runs n ranks of a communicator as threads of this process, each over the
// real rendezvous on 127.0.0.1 (the multi-process tests live in
// tests/integration/collectives).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "octet/collectives/communicator.h"

namespace octet::collectives::test {

// A TCP port that was free a moment ago.
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::string LoopbackRendezvous() { return "127.0.0.1:" + std::to_string(FreePort()); }

// Creates the communicator on each of n threads and runs body(comm) there.
// Returns each rank's result (a failed Create is that rank's result).
inline std::vector<Status> RunRanks(int n, const CommunicatorOptions& options,
                                    const std::function<Status(Communicator&)>& body,
                                    std::string rendezvous = {}) {
  if (rendezvous.empty()) rendezvous = LoopbackRendezvous();
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(rendezvous, n, r, options);
      if (!comm.ok()) {
        results[r] = comm.status();
        return;
      }
      results[r] = body(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

inline std::string Join(const std::vector<Status>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += "[" + std::to_string(i) + "] " + v[i].ToString() + "\n";
  return s;
}

inline bool AllOk(const std::vector<Status>& v) {
  for (const Status& s : v) {
    if (!s.ok()) return false;
  }
  return true;
}

}  // namespace octet::collectives::test
