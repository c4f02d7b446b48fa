// A raw HTTP/1.1 client for the serving tests: bytes on a loopback socket as a
// test wants them (pipelined, slow, malformed), responses parsed by hand
// (Content-Length or chunked), every wait with a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "child_process.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"
#include "octet/base/subprocess.h"

namespace octet::test {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class RawConn {
 public:
  RawConn() = default;
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  ~RawConn() { Close(); }

  bool Connect(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads one response; false on timeout, close or a malformed head.
  bool Read(RawResponse* r, int timeout_ms) {
    const Deadline d = Deadline::AfterMs(timeout_ms);
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(d)) return false;
    }
    const std::string head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    *r = RawResponse();
    if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) return false;
    r->status = std::atoi(head.c_str() + 9);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos + 2 < head.size()) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        r->headers[name] = line.substr(v);
      }
      pos = next;
    }
    if (r->headers.count("content-length")) {
      const size_t n = std::stoul(r->headers["content-length"]);
      while (buf_.size() < n) {
        if (!Fill(d)) return false;
      }
      r->body = buf_.substr(0, n);
      buf_.erase(0, n);
      return true;
    }
    if (r->headers["transfer-encoding"] == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!Fill(d)) return false;
        }
        const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
        while (buf_.size() < eol + 2 + size + 2) {
          if (!Fill(d)) return false;
        }
        r->body += buf_.substr(eol + 2, size);
        buf_.erase(0, eol + 2 + size + 2);
        if (size == 0) return true;
      }
    }
    // Until the connection closes.
    while (Fill(d)) {
    }
    r->body = buf_;
    buf_.clear();
    return true;
  }
  // True when the server closed the connection within timeout_ms.
  bool ClosedWithin(int timeout_ms) {
    const Deadline d = Deadline::AfterMs(timeout_ms);
    while (!d.expired()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char c[4096];
        const ssize_t n = ::recv(fd_, c, sizeof c, 0);
        if (n <= 0) return true;
      }
    }
    return false;
  }
  int fd() const { return fd_; }

 private:
  bool Fill(const Deadline& d) {
    while (!d.expired()) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);
      if (r < 0) return false;
      if (r == 0) continue;
      char chunk[16384];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    return false;
  }
  int fd_ = -1;
  std::string buf_;
};

inline std::string Request(const std::string& method, const std::string& path,
                           const std::string& body = "", const std::string& extra_headers = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers;
  if (!body.empty() || method == "POST") {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

// One request on a fresh connection.
inline RawResponse Exchange(int port, const std::string& request, int timeout_ms = 30'000) {
  RawConn c;
  RawResponse r;
  if (c.Connect(port) && c.Send(request)) c.Read(&r, timeout_ms);
  return r;
}

}  // namespace octet::test

namespace octet::test {

// A program (octet route, octet serve) whose listening port is read from the
// first "on http://HOST:PORT" of its output.
class UrlProcess {
 public:
  ~UrlProcess() { Stop(); }
  Status Start(std::vector<std::string> argv, int timeout_ms = 60'000) {
    OCTET_RETURN_IF_ERROR(proc_.Start(std::move(argv)));
    const std::regex re("on http://[0-9.]+:([0-9]+)");
    const Deadline d = Deadline::AfterMs(timeout_ms);
    while (!d.expired()) {
      std::smatch m;
      const std::string text = output();
      if (std::regex_search(text, m, re)) {
        port_ = std::stoi(m[1]);
        return Status::Ok();
      }
      if (proc_.proc()->Poll()) return UnavailableError("exited: " + text);
      ::usleep(20'000);
    }
    return DeadlineExceededError("did not start: " + output());
  }
  int port() const { return port_; }
  std::string output() const { return proc_.output(); }
  void Stop() { proc_.Stop(std::chrono::milliseconds(5000)); }

 private:
  CapturedProcess proc_;
  int port_ = 0;
};

}  // namespace octet::test
