// UpstreamConn (router/src): the gateway's non-blocking HTTP/1.1 upstream
// client (driven here by poll(2), as the event loop drives it), against a
// scripted server on loopback that sends its response in pieces, so bodies
// arrive split at awkward places (inside a chunk-size line, inside data,
// between a chunk and its CRLF).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "sse_token_counter.h"
#include "upstream_conn.h"

using octet::Status;
using octet::router::UpstreamConn;
using ReadResult = UpstreamConn::ReadResult;

namespace {

// Accepts one connection, reads one request (head + Content-Length body),
// then sends `pieces` `gap_ms` apart; then closes at once (`close_after`) or
// when the client does.
class ScriptedServer {
 public:
  ScriptedServer(std::vector<std::string> pieces, int gap_ms, bool close_after)
      : pieces_(std::move(pieces)), gap_ms_(gap_ms), close_after_(close_after) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(listen_fd_, 4);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  std::string request() const { return request_; }

 private:
  void Serve() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string in;
    char buf[4096];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      const size_t head_end = in.find("\r\n\r\n");
      if (need == std::string::npos && head_end != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        const size_t body = cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16));
        need = head_end + 4 + body;
      }
    }
    request_ = in;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (i && gap_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms_));
      ::send(fd, pieces_[i].data(), pieces_[i].size(), MSG_NOSIGNAL);
    }
    if (!close_after_)
      while (::recv(fd, buf, sizeof buf, 0) > 0) {
      }
    ::close(fd);
  }
  std::vector<std::string> pieces_;
  int gap_ms_;
  bool close_after_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

// Waits until fd is readable (POLLIN) or writable (POLLOUT); false after `ms`.
bool WaitFor(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms) > 0;
}

// Connects (non-blocking connect, then FinishConnect), as the gateway does.
octet::Result<std::unique_ptr<UpstreamConn>> Connect(int port) {
  auto c = UpstreamConn::StartConnect("127.0.0.1", port);
  if (!c.ok()) return c.status();
  if ((*c)->connecting()) {
    if (!WaitFor((*c)->fd(), POLLOUT, 2000)) return octet::DeadlineExceededError("connect");
    OCTET_RETURN_IF_ERROR((*c)->FinishConnect());
  }
  return std::move(*c);
}

std::unique_ptr<UpstreamConn> ConnectAndAsk(const ScriptedServer& s) {
  auto c = Connect(s.port());
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
  size_t sent = 0;
  while (sent < req.size()) {
    if (!(*c)->SendNow(req, &sent).ok()) qFatal("send failed");
    if (sent < req.size()) WaitFor((*c)->fd(), POLLOUT, 2000);
  }
  return std::move(*c);
}

// The head, waiting at most `ms` between arrivals.
Status ReadHead(UpstreamConn& c, int ms) {
  while (true) {
    bool complete = false;
    OCTET_RETURN_IF_ERROR(c.ReadHeadNow(&complete));
    if (complete) return Status::Ok();
    if (!WaitFor(c.fd(), POLLIN, ms)) return octet::DeadlineExceededError("no head");
  }
}

// ReadBodyNow after waiting at most `ms` for bytes: kWouldBlock when none came.
ReadResult ReadBody(UpstreamConn& c, int ms, std::string* out) {
  while (true) {
    const ReadResult r = c.ReadBodyNow(out);
    if (r != ReadResult::kWouldBlock) return r;
    if (!WaitFor(c.fd(), POLLIN, ms)) return r;
  }
}

// Reads the whole body; the last ReadResult in *last.
std::string ReadAll(UpstreamConn& c, ReadResult* last, int* pieces = nullptr) {
  std::string body;
  ReadResult r;
  int n = 0;
  do {
    r = ReadBody(c, 2000, &body);
    ++n;
  } while (r == ReadResult::kData);
  *last = r;
  if (pieces) *pieces = n;
  return body;
}

}  // namespace

class TestUpstreamConn : public QObject {
  Q_OBJECT
 private slots:
  // The gateway's token count of a relayed SSE body: the upstream's
  // usage.completion_tokens where it is an integer; a float there (1e70 was
  // cast to an integer: undefined behaviour) or a string is no count, and
  // the content events are counted instead.
  void sseTokenCountTakesOnlyIntegerUsage() {
    const std::string content =
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
    for (const char* odd : {"1e70", "2.5", "\"7\"", "-3"}) {
      octet::router::SseTokenCounter c;
      c.Feed(content + "data: {\"usage\":{\"completion_tokens\":" + odd + "}}\n\ndata: [DONE]\n\n");
      QCOMPARE(c.tokens(), uint64_t{2});
    }
    octet::router::SseTokenCounter c;
    c.Feed(content + "data: {\"usage\":{\"completion_tokens\":7}}\n\n");
    QCOMPARE(c.tokens(), uint64_t{7});
  }

  void chunkedBodySplitAnywhere() {
    ScriptedServer s({"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Enc",
                      "oding: chunked\r\n\r\n0", "d\r\ndata: ab", "cdefg\r", "\n7\r\ndata: x\r\n",
                      "0\r\nX-Trailer: 1\r\n", "\r\n"},
                     5, false);
    auto c = ConnectAndAsk(s);
    QVERIFY(ReadHead(*c, 2000).ok());
    QCOMPARE(c->status(), 200);
    QCOMPARE(c->content_type(), std::string("text/event-stream"));
    ReadResult last;
    int pieces = 0;
    QCOMPARE(ReadAll(*c, &last, &pieces), std::string("data: abcdefgdata: x"));
    QCOMPARE(last, ReadResult::kDone);
    QVERIFY(pieces >= 2);  // handed over as it arrived, not at the end
    QVERIFY(c->reusable());
    QVERIFY(s.request().find("\r\n\r\n{}") != std::string::npos);
  }

  void contentLengthBody() {
    ScriptedServer s(
        {"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 11\r\n\r\nhello", " world"}, 5, false);
    auto c = ConnectAndAsk(s);
    QVERIFY(ReadHead(*c, 2000).ok());
    QCOMPARE(c->status(), 429);
    QVERIFY(c->content_type().empty());
    ReadResult last;
    QCOMPARE(ReadAll(*c, &last), std::string("hello world"));
    QCOMPARE(last, ReadResult::kDone);
    QVERIFY(c->reusable());
  }

  void bodyUntilCloseAndConnectionClose() {
    {
      ScriptedServer s({"HTTP/1.0 200 OK\r\n\r\nall of it", " until the end"}, 5, true);
      auto c = ConnectAndAsk(s);
      QVERIFY(ReadHead(*c, 2000).ok());
      ReadResult last;
      QCOMPARE(ReadAll(*c, &last), std::string("all of it until the end"));
      QCOMPARE(last, ReadResult::kDone);
      QVERIFY(!c->reusable());
    }
    {
      ScriptedServer s({"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: "
                        "chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"},
                       0, false);
      auto c = ConnectAndAsk(s);
      QVERIFY(ReadHead(*c, 2000).ok());
      ReadResult last;
      QCOMPARE(ReadAll(*c, &last), std::string("ok"));
      QCOMPARE(last, ReadResult::kDone);
      QVERIFY(!c->reusable());  // the server said it closes
    }
  }

  void truncatedOrBrokenBodiesAreErrors() {
    {
      ScriptedServer s({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly half"}, 0,
                       true);
      auto c = ConnectAndAsk(s);
      QVERIFY(ReadHead(*c, 2000).ok());
      ReadResult last;
      QCOMPARE(ReadAll(*c, &last), std::string("only half"));
      QCOMPARE(last, ReadResult::kError);
      QVERIFY2(c->error().find("before the response ended") != std::string::npos,
               c->error().c_str());
      QVERIFY(!c->reusable());
    }
    {
      ScriptedServer s({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, 0, false);
      auto c = ConnectAndAsk(s);
      QVERIFY(ReadHead(*c, 2000).ok());
      ReadResult last;
      ReadAll(*c, &last);
      QCOMPARE(last, ReadResult::kError);
      QVERIFY2(c->error().find("chunk size") != std::string::npos, c->error().c_str());
    }
    {
      ScriptedServer s({"SSH-2.0-OpenSSH\r\n\r\n"}, 0, false);
      auto c = ConnectAndAsk(s);
      const auto st = ReadHead(*c, 2000);
      QVERIFY(!st.ok());
      QVERIFY2(st.message().find("not an HTTP response") != std::string::npos,
               st.message().c_str());
    }
  }

  void nothingYetLeavesTheConnectionUsable() {
    ScriptedServer s({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r\nabc\r\n"}, 300,
                     false);
    auto c = ConnectAndAsk(s);
    QVERIFY(ReadHead(*c, 2000).ok());
    std::string body;
    QCOMPARE(ReadBody(*c, 30, &body), ReadResult::kWouldBlock);  // the connection stays usable
    QCOMPARE(ReadBody(*c, 2000, &body), ReadResult::kData);
    QCOMPARE(body, std::string("abc"));
  }

  void connectFailures() {
    int port;
    {
      ScriptedServer s({}, 0, true);
      port = s.port();
      auto c = Connect(port);  // lets the server finish
      QVERIFY(c.ok());
    }
    auto refused = Connect(port);
    QVERIFY(!refused.ok());
    QVERIFY2(
        refused.status().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos,
        refused.status().message().c_str());
  }
};

QTEST_APPLESS_MAIN(TestUpstreamConn)
#include "test_router_upstream_conn.moc"
