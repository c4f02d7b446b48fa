// The event-stream reader: every framing a server may use (LF, CRLF, CR), split
// anywhere across chunks, gives the same events; what is not an event is not
// delivered; an oversized event is dropped without losing the stream.
#include <QtTest>
#include <string>
#include <vector>

#include "octet/base/sse.h"

using namespace octet;

namespace {

struct Seen {
  std::vector<std::string> data;
  std::vector<std::string> types;
};

// Feeds `chunks` to one reader; `ok` gets the AND of Feed's results.
Seen Read(const std::vector<std::string>& chunks, size_t max = size_t{16} << 20,
          bool* ok = nullptr) {
  SseReader r(max);
  Seen s;
  bool all = true;
  for (const std::string& c : chunks) {
    all &= r.Feed(c, [&](const SseReader::Event& e) {
      s.data.push_back(e.data);
      s.types.push_back(e.type);
    });
  }
  if (ok) *ok = all;
  return s;
}

std::string WithLineEnds(const std::string& lf_text, const std::string& eol) {
  std::string out;
  for (char c : lf_text) {
    if (c == '\n') {
      out += eol;
    } else {
      out += c;
    }
  }
  return out;
}

const char* kStream =
    ": keep-alive\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n"
    "\n"
    "event: usage\n"
    "data:{\"a\":1,\n"
    "data: \"b\":2}\n"
    "id: 7\n"
    "\n"
    "retry: 100\n"
    "\n"
    "data\n"
    "\n"
    "data: [DONE]\n"
    "\n"
    "data: never terminated";

}  // namespace

class TestSse : public QObject {
  Q_OBJECT
 private slots:
  void everyFramingGivesTheSameEvents() {
    const std::vector<std::string> want = {"{\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}",
                                           "{\"a\":1,\n\"b\":2}", "", "[DONE]"};
    for (const char* eol : {"\n", "\r\n", "\r"}) {
      const std::string text = WithLineEnds(kStream, eol);
      const Seen whole = Read({text});
      QCOMPARE(whole.data, want);
      QCOMPARE(whole.types, (std::vector<std::string>{"", "usage", "", ""}));
      // Split at every point (a CRLF split between chunks included), and byte by byte.
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        const Seen two = Read({text.substr(0, cut), text.substr(cut)});
        QVERIFY2(two.data == want,
                 qPrintable(QString("eol %1, cut at %2").arg(int(eol[0])).arg(cut)));
      }
      std::vector<std::string> bytes;
      for (char c : text) bytes.emplace_back(1, c);
      QCOMPARE(Read(bytes).data, want);
    }
  }

  void anEventWithoutDataIsNotDelivered() {
    QVERIFY(Read({"event: ping\n\n: comment\n\n"}).data.empty());
  }

  void linesThatAreNotSseAreIgnored() {
    // A JSON error body where a stream was expected is no event.
    QVERIFY(Read({"{\"error\":{\"message\":\"model not found\"}}\n\n"}).data.empty());
  }

  void anOversizedEventIsDroppedAndTheStreamGoesOn() {
    const std::string big(200, 'x');
    bool ok = true;
    Seen s = Read(
        {"data: a\n\n", "data: " + big.substr(0, 50), big + "\n", "data: more\n\n", "data: b\n\n"},
        64, &ok);
    QVERIFY(!ok);
    QCOMPARE(s.data, (std::vector<std::string>{"a", "b"}));
    // A reader fed within its limit reports no loss.
    s = Read({"data: a\n\n"}, 64, &ok);
    QVERIFY(ok);
  }
};

QTEST_APPLESS_MAIN(TestSse)
#include "test_sse.moc"
