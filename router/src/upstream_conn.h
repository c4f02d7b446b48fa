// A plain-HTTP/1.1 connection to an upstream replica, non-blocking, driven
// by the gateway's event loop: the loop polls fd() and calls the *Now
// methods when it is ready, so one upstream read costs one recv(2).
//
// Only "http://" replicas (httplib::Client serves https). Bodies framed by
// Content-Length, chunked transfer coding, or the connection's end. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::router {

class UpstreamConn {
 public:
  // Starts connecting to host:port; the socket is non-blocking. When
  // connecting() the caller waits for fd() to be writable, then FinishConnect().
  // Errors: Unavailable (cannot resolve, refused at once).
  static Result<std::unique_ptr<UpstreamConn>> StartConnect(const std::string& host, int port);
  ~UpstreamConn();
  UpstreamConn(const UpstreamConn&) = delete;
  UpstreamConn& operator=(const UpstreamConn&) = delete;

  bool connecting() const { return connecting_; }
  // Unavailable when the connection was refused (or failed otherwise).
  Status FinishConnect();

  int fd() const { return fd_; }
  // True when an idle keep-alive connection looks usable: the peer has not
  // closed it and sent nothing unasked (one non-blocking peek).
  bool IdleAndOpen() const;

  // Sends what the socket takes now from data[*sent...], advancing *sent.
  Status SendNow(std::string_view data, size_t* sent);

  // Reads what has arrived and parses the head when it is complete: Ok with
  // *complete true (status() etc. are set), Ok with *complete false (wait for
  // fd() to be readable), or the error (Unavailable: closed; DataLoss: not HTTP).
  Status ReadHeadNow(bool* complete);
  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }

  enum class ReadResult {
    kData,      // *out holds new body bytes (possibly several chunks' worth)
    kDone,      // the body is complete (*out may hold its last bytes)
    kWouldBlock,  // nothing is available now; the connection is still good
    kError,     // the connection dropped or the framing is broken; see error()
  };
  // Appends the body bytes that are available now to *out, decoded (no chunk framing).
  ReadResult ReadBodyNow(std::string* out);
  const std::string& error() const { return error_; }
  // The response ended cleanly and the server keeps the connection open.
  bool reusable() const { return body_done_ && keep_alive_ && !broken_; }

 private:
  explicit UpstreamConn(int fd) : fd_(fd) {}
  // One non-blocking recv(2) into buf_ (after the unread bytes). 1: data;
  // 0: nothing available; -1: closed or error.
  int Fill();
  // Parses a complete head from buf_: Ok with *complete false when it is not all there yet.
  Status ParseHead(bool* complete);
  // Moves the body bytes in buf_ to *out and advances the framing state.
  bool Decode(std::string* out);

  int fd_ = -1;
  bool connecting_ = false;
  std::string where_;  // host:port, for messages
  std::vector<char> buf_;     // received, not yet consumed: [begin_, end_)
  size_t begin_ = 0, end_ = 0;

  int status_ = 0;
  std::string content_type_;
  bool keep_alive_ = true;
  enum class Framing { kLength, kChunked, kUntilClose } framing_ = Framing::kUntilClose;
  uint64_t remaining_ = 0;  // kLength: body bytes left; kChunked: bytes left in this chunk
  enum class ChunkState { kSize, kData, kDataEnd, kTrailer } chunk_state_ = ChunkState::kSize;
  bool body_done_ = false;
  bool broken_ = false;
  bool eof_ = false;  // the peer closed the connection (a clean end for kUntilClose)
  std::string error_;
};

}  // namespace octet::router
