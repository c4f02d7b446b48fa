// A rendezvous for rank processes that this process starts on this host,
// bound before any of them starts.
//
// Picking a port that is free now and letting rank 0 bind it later races:
// in between another process (a rank's own outgoing connection, another job)
// can take it, and the job fails to start. Instead the spawner binds
// 127.0.0.1:0 here and rank 0 inherits the listening socket:
//
//   auto rv = LocalRendezvous::Open();          // before any rank starts
//   SpawnOptions o0;  o0.argv = {..., "--rendezvous", rv->address(), "--rank", "0"};
//   o0.env.push_back(LocalRendezvous::EnvFor({&*rv}));
//   Subprocess::Spawn(o0);                       // rank 0 first
//   rv->Close();                                 // then the others
//
// Rank 0's Communicator::Create for that address (same port) takes the
// inherited socket instead of binding; the other ranks just connect to the
// address. A rank 0 started without the variable binds the port itself, as
// before (a job joined by hand over --rendezvous is unchanged).
#pragma once

#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::collectives {

class LocalRendezvous {
 public:
  // A listening socket on `host` (an IPv4 address of this machine) at a port
  // the kernel chose. The socket is inheritable (no close-on-exec) until
  // Close(): start rank 0 next, then Close() before starting anything else.
  static Result<LocalRendezvous> Open(const std::string& host = "127.0.0.1");
  LocalRendezvous(LocalRendezvous&& o) noexcept;
  LocalRendezvous& operator=(LocalRendezvous&& o) noexcept;
  LocalRendezvous(const LocalRendezvous&) = delete;
  LocalRendezvous& operator=(const LocalRendezvous&) = delete;
  ~LocalRendezvous();

  // "HOST:PORT": what every rank passes as its rendezvous.
  std::string address() const;
  int port() const { return port_; }
  // Closes this process's copy (rank 0 keeps its own).
  void Close();
  // For a spawner that is rank 0 itself (`octet serve --tp`): hands the
  // socket to this process's own Communicator::Create for this port (taken at
  // most once, as an inherited one) and makes it close-on-exec, so the ranks
  // started next do not hold it. This object no longer owns it.
  void KeepForThisProcess();

  // The environment entry ("KEY=VALUE") that hands these sockets to rank 0:
  // one process may hold several communicators, each with its own.
  static std::string EnvFor(const std::vector<const LocalRendezvous*>& rendezvous);

 private:
  LocalRendezvous(int fd, int port, std::string host)
      : fd_(fd), port_(port), host_(std::move(host)) {}
  int fd_ = -1;
  int port_ = 0;
  std::string host_;
};

// Rank 0's side (used by Communicator::Create): the socket KeepForThisProcess
// left for `port`, else the inherited listening socket for `port` named in the
// environment, taken at most once per process and checked to be a listening
// socket bound to that port; -1 when there is none. The caller owns the
// returned descriptor (close-on-exec from now on).
int TakeInheritedRendezvous(int port);

}  // namespace octet::collectives
