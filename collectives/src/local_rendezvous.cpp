#include "octet/collectives/local_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "octet/base/thread_annotations.h"

namespace octet::collectives {

namespace {

// "PORT:FD,PORT:FD": which inherited descriptor listens on which port.
constexpr const char* kEnvKey = "OCTET_RENDEZVOUS_FDS";

int BoundPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return -1;
}

}  // namespace

Result<LocalRendezvous> LocalRendezvous::Open(const std::string& host) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return InvalidArgumentError("rendezvous host '" + host + "' is not an IPv4 address");
  }
  // No SOCK_CLOEXEC: rank 0 inherits it. Non-blocking like every listener
  // of the bootstrap (it accepts with poll and a deadline).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return UnavailableError(std::string("rendezvous socket: ") + std::strerror(errno));
  // As the bootstrap's own listeners: the connections rank 0 accepts inherit
  // it, so a later communicator's rank 0 can bind the same port again while
  // they are open (a job that creates several communicators on one address).
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Backlog as the bootstrap's own listener: every rank may knock early.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0) {
    const int err = errno;
    ::close(fd);
    return UnavailableError("cannot listen on " + host + ": " + std::strerror(err));
  }
  const int port = BoundPort(fd);
  if (port <= 0) {
    ::close(fd);
    return UnavailableError("rendezvous socket: no port");
  }
  return LocalRendezvous(fd, port, host);
}

LocalRendezvous::LocalRendezvous(LocalRendezvous&& o) noexcept
    : fd_(o.fd_), port_(o.port_), host_(std::move(o.host_)) {
  o.fd_ = -1;
}

LocalRendezvous& LocalRendezvous::operator=(LocalRendezvous&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    port_ = o.port_;
    host_ = std::move(o.host_);
    o.fd_ = -1;
  }
  return *this;
}

LocalRendezvous::~LocalRendezvous() { Close(); }

std::string LocalRendezvous::address() const { return host_ + ":" + std::to_string(port_); }

void LocalRendezvous::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string LocalRendezvous::EnvFor(const std::vector<const LocalRendezvous*>& rendezvous) {
  std::string v;
  for (const LocalRendezvous* r : rendezvous) {
    if (!r || r->fd_ < 0) continue;
    if (!v.empty()) v += ",";
    v += std::to_string(r->port_) + ":" + std::to_string(r->fd_);
  }
  return std::string(kEnvKey) + "=" + v;
}

namespace {

Mutex g_kept_mu;
std::map<int, int> g_kept GUARDED_BY(g_kept_mu);  // port -> descriptor left by KeepForThisProcess

}  // namespace

void LocalRendezvous::KeepForThisProcess() {
  if (fd_ < 0) return;
  ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  MutexLock l(g_kept_mu);
  auto [it, fresh] = g_kept.emplace(port_, fd_);
  if (!fresh) {  // one left for this port before and never taken: the newer wins
    ::close(it->second);
    it->second = fd_;
  }
  fd_ = -1;
}

int TakeInheritedRendezvous(int port) {
  {
    MutexLock l(g_kept_mu);
    auto it = g_kept.find(port);
    if (it != g_kept.end()) {
      const int fd = it->second;
      g_kept.erase(it);
      return fd;
    }
  }
  static Mutex mu;
  // (port, descriptor) pairs already handed out in this process.
  static std::set<std::pair<int, int>> taken GUARDED_BY(mu);
  const char* env = std::getenv(kEnvKey);
  if (!env || port <= 0) return -1;
  std::istringstream entries(env);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) continue;
    char* end = nullptr;
    const long p = std::strtol(entry.c_str(), &end, 10);
    if (end != entry.c_str() + colon || p != port) continue;
    const long fd = std::strtol(entry.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || fd < 0 || fd > 1 << 20) continue;
    MutexLock l(mu);
    if (taken.count({port, static_cast<int>(fd)})) return -1;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        !listening || BoundPort(static_cast<int>(fd)) != port) {
      return -1;
    }
    taken.insert({port, static_cast<int>(fd)});
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    const int flags = ::fcntl(static_cast<int>(fd), F_GETFL, 0);
    if (flags >= 0) ::fcntl(static_cast<int>(fd), F_SETFL, flags | O_NONBLOCK);
    return static_cast<int>(fd);
  }
  return -1;
}

}  // namespace octet::collectives
