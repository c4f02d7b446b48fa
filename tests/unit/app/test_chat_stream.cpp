// The chat client's reading of a streamed reply: the same reply whether the
// server frames its events with LF or CRLF (servers behind some proxies do),
// however the bytes are chunked. Before the shared SSE reader, CRLF-framed
// events were never split and the chat showed nothing.
#include <QtTest>
#include <nlohmann/json.hpp>
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
  // Sampling fields left unset are not sent (the server's defaults apply);
  // set ones are, an explicit 0 included.
  void unsetSamplingFieldsAreNotSent() {
    ChatRequest r;
    r.messages = {{"user", "hi"}};
    nlohmann::json j = nlohmann::json::parse(ChatRequestBody(r));
    for (const char* key : {"temperature", "top_p", "top_k", "repetition_penalty", "max_tokens"}) {
      QVERIFY2(!j.contains(key), key);
    }
    r.temperature = 0.0;
    r.top_k = 0;
    r.max_tokens = 7;
    j = nlohmann::json::parse(ChatRequestBody(r));
    QCOMPARE(j["temperature"].get<double>(), 0.0);
    QCOMPARE(j["top_k"].get<int>(), 0);
    QCOMPARE(j["max_tokens"].get<int>(), 7);
    QVERIFY(!j.contains("top_p"));
  }

  // What `octet serve` puts in /v1/models (GenerationDefaultsJson) reads back
  // as each setting's value and source; the built-in values are the engine's
  // SamplingParams defaults, written here by hand.
  void serverDefaultsSayWhereEachCameFrom() {
    octet::engine::GenerationDefaults d;
    d.path = "/m/generation_config.json";
    d.temperature = 0.6f;
    d.max_new_tokens = 64;
    const std::string body =
        nlohmann::json{
            {"object", "list"},
            {"data",
             {{{"id", "m"},
               {"generation_defaults", nlohmann::json::parse(GenerationDefaultsJson(d))}}}}}
            .dump();
    const auto got = ParseServerDefaults(body, "m");
    QCOMPARE(got.size(), size_t(5));
    auto find = [&](const char* name) {
      for (const auto& s : got) {
        if (s.name == name) return s;
      }
      return ServerDefault{};
    };
    QCOMPARE(find("temperature").source, std::string("generation_config.json"));
    QCOMPARE(*find("temperature").value, double(0.6f));
    QCOMPARE(find("max_tokens").source, std::string("generation_config.json"));
    QCOMPARE(*find("max_tokens").value, 64.0);
    QCOMPARE(find("top_p").source, std::string("built-in"));
    QCOMPARE(*find("top_p").value, 1.0);
    QCOMPARE(*find("top_k").value, 0.0);
    QCOMPARE(*find("repetition_penalty").value, 1.0);
    // Without a config: max_tokens has no value (to the end of the context).
    const std::string plain =
        nlohmann::json{
            {"data",
             {{{"id", "m"},
               {"generation_defaults", nlohmann::json::parse(GenerationDefaultsJson({}))}}}}}
            .dump();
    const auto builtin = ParseServerDefaults(plain, "");
    QCOMPARE(builtin.size(), size_t(5));
    for (const auto& s : builtin) QCOMPARE(s.source, std::string("built-in"));
    QVERIFY(!builtin.back().value.has_value());
    // Another server (no generation_defaults) says nothing.
    QVERIFY(ParseServerDefaults(R"({"data":[{"id":"m"}]})", "m").empty());
    QVERIFY(ParseServerDefaults("not json", "").empty());
  }
};

QTEST_GUILESS_MAIN(TestChatStream)
#include "test_chat_stream.moc"
