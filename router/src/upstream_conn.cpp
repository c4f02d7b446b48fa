#include "upstream_conn.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "octet/base/http/request.h"

namespace octet::router {
namespace {

constexpr size_t kReadSize = 16 * 1024;      // one recv(2) at most
constexpr size_t kMaxHeadBytes = 64 * 1024;  // status line + headers
constexpr size_t kMaxChunkLine = 4096;       // chunk-size line or trailer line

// `needle` is lower case.
bool IContains(std::string_view haystack, std::string_view needle) {
  if (needle.empty()) return true;
  for (size_t i = 0; i + needle.size() <= haystack.size(); ++i) {
    if (http::AsciiLower(haystack[i]) != needle[0]) continue;
    if (http::AsciiIEquals(haystack.substr(i, needle.size()), needle)) return true;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

UpstreamConn::~UpstreamConn() {
  if (fd_ >= 0) ::close(fd_);
}

bool UpstreamConn::IdleAndOpen() const {
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

int UpstreamConn::Fill() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0 && buf_.size() - end_ < kReadSize) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buf_.size() - end_ < kReadSize) buf_.resize(end_ + kReadSize);
  while (true) {
    const ssize_t n = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (n > 0) {
      end_ += static_cast<size_t>(n);
      return 1;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    broken_ = true;
    eof_ = n == 0;
    error_ = n == 0 ? "the upstream closed the connection" : std::strerror(errno);
    return -1;
  }
}

Status UpstreamConn::ReadHeadNow(bool* complete) {
  *complete = false;
  while (true) {
    OCTET_RETURN_IF_ERROR(ParseHead(complete));
    if (*complete) return Status::Ok();
    const int r = Fill();
    if (r == 0) return Status::Ok();  // wait for more
    if (r < 0) return UnavailableError(error_ + " before the response headers");
  }
}

Status UpstreamConn::ParseHead(bool* complete) {
  *complete = false;
  while (true) {
    std::string_view have(buf_.data() + begin_, end_ - begin_);
    const size_t end_of_head = have.find("\r\n\r\n");
    if (end_of_head == std::string_view::npos) {
      if (have.size() > kMaxHeadBytes) {
        broken_ = true;
        return DataLossError("the upstream's response headers exceed 64 KiB");
      }
      return Status::Ok();
    }
    const std::string_view head = have.substr(0, end_of_head);
    begin_ += end_of_head + 4;
    // Status line: HTTP/1.x SSS reason
    const size_t eol = head.find("\r\n");
    const std::string_view status_line = head.substr(0, eol);
    if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") {
      broken_ = true;
      return DataLossError("not an HTTP response: '" + std::string(status_line.substr(0, 64)) +
                           "'");
    }
    const bool http10 = status_line.substr(5, 3) == "1.0";
    status_ = std::atoi(std::string(status_line.substr(9, 3)).c_str());
    if (status_ < 100 || status_ > 999) {
      broken_ = true;
      return DataLossError("bad status line '" + std::string(status_line.substr(0, 64)) + "'");
    }
    if (status_ < 200) continue;  // 1xx: the real head follows
    keep_alive_ = !http10;
    content_type_.clear();
    bool chunked = false, has_length = false;
    uint64_t length = 0;
    size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
    while (pos < head.size()) {
      size_t next = head.find("\r\n", pos);
      if (next == std::string_view::npos) next = head.size();
      const std::string_view line = head.substr(pos, next - pos);
      pos = next + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view name = Trim(line.substr(0, colon));
      const std::string_view value = Trim(line.substr(colon + 1));
      if (http::AsciiIEquals(name, "Content-Type")) {
        content_type_ = std::string(value);
      } else if (http::AsciiIEquals(name, "Transfer-Encoding")) {
        chunked = IContains(value, "chunked");
      } else if (http::AsciiIEquals(name, "Content-Length")) {
        has_length = true;
        length = std::strtoull(std::string(value).c_str(), nullptr, 10);
      } else if (http::AsciiIEquals(name, "Connection")) {
        if (IContains(value, "close")) keep_alive_ = false;
        if (IContains(value, "keep-alive")) keep_alive_ = true;
      }
    }
    body_done_ = false;
    chunk_state_ = ChunkState::kSize;
    if (status_ == 204 || status_ == 304) {
      framing_ = Framing::kLength;
      remaining_ = 0;
      body_done_ = true;
    } else if (chunked) {
      framing_ = Framing::kChunked;
    } else if (has_length) {
      framing_ = Framing::kLength;
      remaining_ = length;
      body_done_ = length == 0;
    } else {
      framing_ = Framing::kUntilClose;
      keep_alive_ = false;
    }
    *complete = true;
    return Status::Ok();
  }
}

Result<std::unique_ptr<UpstreamConn>> UpstreamConn::StartConnect(const std::string& host,
                                                                 int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0 || !found)
    return UnavailableError("cannot resolve " + where + ": " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    ::freeaddrinfo(found);
    std::unique_ptr<UpstreamConn> c(new UpstreamConn(fd));
    c->connecting_ = rc != 0;
    c->where_ = where;
    return c;
  }
  ::freeaddrinfo(found);
  return UnavailableError("cannot connect to " + where + ": " + last_error);
}

Status UpstreamConn::FinishConnect() {
  connecting_ = false;
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    broken_ = true;
    return UnavailableError("cannot connect to " + where_ + ": " + std::strerror(err));
  }
  return Status::Ok();
}

Status UpstreamConn::SendNow(std::string_view data, size_t* sent) {
  while (*sent < data.size()) {
    const ssize_t n =
        ::send(fd_, data.data() + *sent, data.size() - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
    broken_ = true;
    return UnavailableError(std::string("sending the request failed: ") +
                            (n < 0 ? std::strerror(errno) : "connection closed"));
  }
  return Status::Ok();
}

bool UpstreamConn::Decode(std::string* out) {
  while (!body_done_ && begin_ < end_) {
    const char* p = buf_.data() + begin_;
    const size_t avail = end_ - begin_;
    switch (framing_) {
      case Framing::kUntilClose:
        out->append(p, avail);
        begin_ = end_;
        return true;
      case Framing::kLength: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, avail));
        out->append(p, n);
        begin_ += n;
        remaining_ -= n;
        if (remaining_ == 0) body_done_ = true;
        break;
      }
      case Framing::kChunked:
        if (chunk_state_ == ChunkState::kData) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, avail));
          out->append(p, n);
          begin_ += n;
          remaining_ -= n;
          if (remaining_ == 0) chunk_state_ = ChunkState::kDataEnd;
          break;
        }
        if (chunk_state_ == ChunkState::kDataEnd) {
          if (avail < 2) return true;
          if (p[0] != '\r' || p[1] != '\n') {
            error_ = "bad chunk framing from the upstream";
            broken_ = true;
            return false;
          }
          begin_ += 2;
          chunk_state_ = ChunkState::kSize;
          break;
        }
        {
          // A chunk-size line or a trailer line.
          const void* nl = std::memchr(p, '\n', avail);
          if (!nl) {
            if (avail > kMaxChunkLine) {
              error_ = "chunk-size line too long from the upstream";
              broken_ = true;
              return false;
            }
            return true;  // need more
          }
          const size_t line_len = static_cast<size_t>(static_cast<const char*>(nl) - p);
          std::string_view line(p, line_len);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          begin_ += line_len + 1;
          if (chunk_state_ == ChunkState::kTrailer) {
            if (line.empty()) body_done_ = true;
            break;
          }
          uint64_t size = 0;
          size_t digits = 0;
          for (char c : line) {
            int v;
            if (c >= '0' && c <= '9')
              v = c - '0';
            else if (c >= 'a' && c <= 'f')
              v = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F')
              v = c - 'A' + 10;
            else
              break;
            if (++digits > 15) break;
            size = size * 16 + static_cast<uint64_t>(v);
          }
          if (digits == 0 || digits > 15) {
            error_ = "bad chunk size from the upstream";
            broken_ = true;
            return false;
          }
          if (size == 0) {
            chunk_state_ = ChunkState::kTrailer;
          } else {
            remaining_ = size;
            chunk_state_ = ChunkState::kData;
          }
        }
        break;
    }
  }
  // Bytes after the end of the body: the server is not speaking plain HTTP/1.1.
  if (body_done_ && begin_ < end_) keep_alive_ = false;
  return true;
}

UpstreamConn::ReadResult UpstreamConn::ReadBodyNow(std::string* out) {
  const size_t before = out->size();
  while (true) {
    if (!Decode(out)) return ReadResult::kError;
    if (body_done_) return ReadResult::kDone;
    if (out->size() > before) return ReadResult::kData;
    const int r = Fill();
    if (r == 0) return ReadResult::kWouldBlock;
    if (r < 0) {
      if (framing_ == Framing::kUntilClose && eof_) {
        body_done_ = true;
        keep_alive_ = false;
        return ReadResult::kDone;
      }
      error_ += " before the response ended";
      return ReadResult::kError;
    }
  }
}

}  // namespace octet::router
