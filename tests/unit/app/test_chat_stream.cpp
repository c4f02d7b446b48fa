// The chat client's reading of a streamed reply: the same reply whether the
// server frames its events with LF or CRLF (servers behind some proxies do),
// however the bytes are chunked. Before the shared SSE reader, CRLF-framed
// events were never split and the chat showed nothing.
#include <QtTest>
#include <string>

#include "octet/app/chat_client.h"

using namespace octet::app;

namespace {

std::string Stream(const std::string& eol) {
  const char* events[] = {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
                          R"({"choices":[{"index":0,"delta":{"content":"Hello"}}]})",
                          R"({"choices":[{"index":0,"delta":{"content":", world"}}]})",
                          R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
                          R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}})",
                          "[DONE]"};
  std::string s = ": ping" + eol + eol;
  for (const char* e : events) s += std::string("data: ") + e + eol + eol;
  return s;
}

}  // namespace

class TestChatStream : public QObject {
  Q_OBJECT
 private slots:
  void lfAndCrlfFramingGiveTheSameReply() {
    for (const std::string eol : {"\n", "\r\n"}) {
      const std::string bytes = Stream(eol);
      for (size_t chunk : {bytes.size(), size_t{7}, size_t{1}}) {
        ChatStreamParser p;
        std::string deltas;
        for (size_t i = 0; i < bytes.size(); i += chunk) {
          QVERIFY(p.Feed(std::string_view(bytes).substr(i, chunk),
                         [&](const std::string& d) { deltas += d; }));
        }
        const QByteArray where = QByteArray("eol ") + (eol.size() == 2 ? "CRLF" : "LF") +
                                 ", chunk " + QByteArray::number(qulonglong(chunk));
        QVERIFY2(p.done(), where);
        QVERIFY2(p.reply().text == "Hello, world", where);
        QVERIFY2(deltas == "Hello, world", where);
        QVERIFY2(p.reply().finish_reason == "stop", where);
        QVERIFY2(p.reply().prompt_tokens == 12 && p.reply().completion_tokens == 3, where);
      }
    }
  }

  void aStreamWithoutBlankLinesIsRefusedNotHoarded() {
    ChatStreamParser p;
    const std::string line(1 << 20, 'x');
    bool ok = true;
    for (size_t sent = 0; sent <= ChatStreamParser::kMaxEventBytes; sent += line.size()) {
      ok = p.Feed("data: " + line, nullptr);
      if (!ok) break;
    }
    QVERIFY(!ok);
  }
};

QTEST_GUILESS_MAIN(TestChatStream)
#include "test_chat_stream.moc"
