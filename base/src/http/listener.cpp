#include "octet/base/http/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace octet::http {

Result<ListenSocket> Listen(const std::string& who, const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  if (port < 0 || port > 65535) return InvalidArgumentError(who + ": port out of range: " + where);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &found);
      rc != 0 || !found)
    return UnavailableError(who + ": cannot resolve " + where + ": " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR lets a restarted server bind while old connections sit in
    // TIME_WAIT; on Linux it does not let two sockets listen on one port
    // (that is SO_REUSEPORT, which is never set).
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ListenSocket out;
    out.fd = fd;
    out.port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    ::freeaddrinfo(found);
    return out;
  }
  ::freeaddrinfo(found);
  return UnavailableError(who + ": cannot bind " + where + " (" + last_error +
                          "; in use, or not an address here)");
}

}  // namespace octet::http
