// A plain-HTTP/1.1 connection to an upstream replica, driven entirely by the
// thread that calls it: the gateway's streaming path sends the request and
// reads the response head from its HTTP worker thread (before our own headers
// go out), then reads the body on the same thread inside the content provider
// and writes each piece straight to the client. No second thread, no hand-off,
// and no poll(2) before each read: the socket is blocking with SO_RCVTIMEO set
// to the caller's wait, so a token costs one recv(2).
//
// Only "http://" replicas (httplib::Client keeps serving https). Bodies framed
// by Content-Length, chunked transfer coding, or the connection's end. Not
// thread-safe, except Abort(), which any thread may call to wake a blocked
// read (shutdown(2)).
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
  // Connects to host:port within connect_ms (non-blocking connect + poll).
  // Errors: Unavailable (refused, unreachable), DeadlineExceeded (timeout).
  static Result<std::unique_ptr<UpstreamConn>> Connect(const std::string& host, int port,
                                                       int64_t connect_ms);
  ~UpstreamConn();
  UpstreamConn(const UpstreamConn&) = delete;
  UpstreamConn& operator=(const UpstreamConn&) = delete;

  int fd() const { return fd_; }
  // True when an idle keep-alive connection looks usable: the peer has not
  // closed it and sent nothing unasked (one non-blocking peek).
  bool IdleAndOpen() const;

  // Sends the whole of `data` (the request) within timeout_ms.
  Status Send(std::string_view data, int64_t timeout_ms);

  // Reads the response's status line and headers, waiting at most timeout_ms
  // without progress. On success the body framing is known.
  Status ReadHead(int64_t timeout_ms);
  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }

  enum class ReadResult {
    kData,      // *out holds new body bytes (possibly several chunks' worth)
    kDone,      // the body is complete (*out may hold its last bytes)
    kTimedOut,  // nothing arrived within timeout_ms; the connection is still good
    kError,     // the connection dropped or the framing is broken; see error()
  };
  // Appends the body bytes that are available (waiting at most timeout_ms for
  // the first of them) to *out, decoded (no chunk framing).
  ReadResult ReadBody(int64_t timeout_ms, std::string* out);
  const std::string& error() const { return error_; }
  // The response ended cleanly and the server keeps the connection open.
  bool reusable() const { return body_done_ && keep_alive_ && !broken_; }

  // Wakes a blocked read or send from another thread; the connection is dead after it.
  void Abort();

  // ---- Non-blocking use (the gateway's event loop polls fd()) ----
  // Starts connecting to host:port; the socket stays non-blocking. When
  // connecting() the caller waits for fd() to be writable, then FinishConnect().
  static Result<std::unique_ptr<UpstreamConn>> StartConnect(const std::string& host, int port);
  bool connecting() const { return connecting_; }
  Status FinishConnect();
  // Sends what the socket takes now from data[*sent...], advancing *sent.
  Status SendNow(std::string_view data, size_t* sent);
  // Reads what has arrived and parses the head when it is complete: Ok with
  // *complete true (status() etc. are set), Ok with *complete false (wait for
  // more), or the error (Unavailable: closed; DataLoss: not HTTP).
  Status ReadHeadNow(bool* complete);
  // ReadBody without waiting: kTimedOut means nothing is available now.
  ReadResult ReadBodyNow(std::string* out) { return ReadBody(-1, out); }

 private:
  explicit UpstreamConn(int fd) : fd_(fd) {}
  // One recv(2) into buf_ (after the unread bytes), waiting at most timeout_ms
  // (< 0: not at all). 1: data; 0: timed out; -1: closed or error.
  int Fill(int64_t timeout_ms);
  // Parses a complete head from buf_: Ok with *complete false when it is not all there yet.
  Status ParseHead(bool* complete);
  // Moves the body bytes in buf_ to *out and advances the framing state.
  bool Decode(std::string* out);

  int fd_ = -1;
  bool connecting_ = false;
  std::string where_;  // host:port, for messages
  int64_t rcvtimeo_ms_ = -1;  // SO_RCVTIMEO in force
  int64_t sndtimeo_ms_ = -1;  // SO_SNDTIMEO in force
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
