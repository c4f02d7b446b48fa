// `octet serve --speculative ngram` over real HTTP (curl) at TP 2: concurrent
// requests under continuous batching get exactly what plain decoding gives —
// the fixture's reference ids (an independent implementation) for qwen3-tiny,
// and the ids of a plain TP 1 server for the trained demo model, whose copied
// sentences make the drafts accepted (a stop string ends one reply in the
// middle of a run of drafts). Each reply's timings carry the drafted and
// accepted counts, /metrics the totals, /v1/models the method. The servers
// verify every draft (--draft-length fixed): with automatic lengths whether a
// draft is verified at all depends on this machine's step times. Bad
// --speculative/--draft-tokens/--draft-length values are usage errors (exit 2)
// for serve and chat; mtp on a model without the layer is refused with
// generate's message.
// `--speculative mtp` at TP 2: the MTP head sharded over the ranks drafts for
// concurrent requests and their replies are the fixture's greedy ids.
#include <QtTest>
#include <thread>

#include "octet/base/json.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

double MetricValue(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  const size_t sp = text.find("} ", p);
  return std::atof(text.c_str() + sp + 2);
}

// Sends every body to `url` at once (one curl each) and returns the parsed replies.
std::vector<json> PostAll(const std::string& url, const std::vector<json>& bodies) {
  std::vector<CurlResult> results(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = PostJson(url, bodies[i].dump(), 120'000); });
  }
  for (auto& t : threads) t.join();
  std::vector<json> out;
  for (const auto& r : results) {
    json j = json::parse(r.body, nullptr, false);
    if (r.http_status != 200 || !j.is_object()) {
      qWarning("HTTP %d: %s", r.http_status, r.body.c_str());
      return {};
    }
    out.push_back(j);
  }
  return out;
}

std::vector<int> Ids(const json& reply) {
  return reply["choices"][0]["token_ids"].get<std::vector<int>>();
}

json IdsRequest(const std::vector<int>& prompt, int max_tokens) {
  return {{"prompt", prompt},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"return_token_ids", true}};
}

std::string DemoModel() { return SourceDir() + "/resources/models/nanochat-demo"; }

}  // namespace

class TestServeSpeculative : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  // qwen3-tiny at TP 2 with K = 3: the reference prompt, the same prompt
  // repeated (every step drafts), and sampled requests beside them.
  void tp2MatchesTheReference() {
    const std::string dir = FixturesDir() + "/qwen3-tiny";
    auto ref = json::parse(*ReadFileToString(dir + "/reference.json"));
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto gen = ref["generated_ids"].get<std::vector<int>>();
    ServerProcess server;
    Status s = server.Start({"--model", dir, "--tp", "2", "--threads", "1", "--slots", "4",
                             "--grpc-port", "off", "--speculative", "ngram", "--draft-tokens", "3",
                             "--draft-length", "fixed"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    std::vector<int> repeated;
    for (int i = 0; i < 3; ++i) repeated.insert(repeated.end(), prompt.begin(), prompt.end());
    std::vector<json> bodies = {IdsRequest(prompt, int(gen.size())), IdsRequest(repeated, 12),
                                IdsRequest(prompt, int(gen.size())), IdsRequest(repeated, 12)};
    for (int i = 0; i < 2; ++i) {
      json b = IdsRequest(i ? repeated : prompt, 10);
      b["temperature"] = 0.8;
      b["seed"] = 5 + i;
      bodies.push_back(b);
    }
    auto replies = PostAll(server.url("/v1/completions"), bodies);
    QCOMPARE(replies.size(), bodies.size());
    QCOMPARE(Ids(replies[0]), gen);
    QCOMPARE(Ids(replies[2]), gen);
    QCOMPARE(Ids(replies[3]), Ids(replies[1]));
    for (const json& r : replies) {
      const json& t = r["timings"];
      QVERIFY2(t.contains("drafted_tokens") && t.contains("accepted_tokens") &&
                   t.contains("acceptance_rate"),
               r.dump().c_str());
      QVERIFY(t["accepted_tokens"].get<int>() <= t["drafted_tokens"].get<int>());
    }
    QVERIFY(replies[1]["timings"]["drafted_tokens"].get<int>() > 0);
    // The same repeated prompt alone through `octet generate` (TP 1, no speculation).
    std::string csv;
    for (int id : repeated) csv += (csv.empty() ? "" : ",") + std::to_string(id);
    auto g = RunProgram({BinDir() + "/octet", "generate", "--model", dir, "--prompt-ids", csv,
                         "--max-tokens", "12", "--ignore-eos", "--threads", "1", "--json"});
    QVERIFY2(g.exit_code == 0, g.output.c_str());
    QCOMPARE(
        Ids(replies[1]),
        json::parse(g.output.substr(g.output.rfind("\n{") + 1))["ids"].get<std::vector<int>>());
    const std::string metrics = Curl({server.url("/metrics")}).body;
    QVERIFY2(MetricValue(metrics, "octet_spec_drafted_tokens_total") > 0, metrics.c_str());
    QVERIFY2(MetricValue(metrics, "octet_spec_accepted_tokens_total") >= 0, metrics.c_str());
    QVERIFY2(MetricValue(metrics, "octet_spec_acceptance_rate") >= 0, metrics.c_str());
    auto models = json::parse(Curl({server.url("/v1/models")}).body);
    QCOMPARE(models["data"][0]["speculative"].get<std::string>(), std::string("ngram"));
    QCOMPARE(models["data"][0]["draft_tokens"].get<int>(), 3);
    QCOMPARE(models["data"][0]["draft_length"].get<std::string>(), std::string("fixed"));
  }

  // glm4-moe-tiny (one MTP layer) at TP 2 with K = 2: the reference prompt
  // twice and a shorter prompt beside them, under continuous batching (each
  // sequence its own drafts from the sharded head); greedy replies equal the
  // fixture's ids and a plain `octet generate` at TP 1.
  void tp2MtpMatchesTheReference() {
    const std::string dir = FixturesDir() + "/glm4-moe-tiny";
    auto ref = json::parse(*ReadFileToString(dir + "/reference.json"));
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto gen = ref["generated_ids"].get<std::vector<int>>();
    ServerProcess server;
    Status s = server.Start({"--model", dir, "--tp", "2", "--threads", "1", "--slots", "3",
                             "--grpc-port", "off", "--speculative", "mtp", "--draft-tokens", "2",
                             "--draft-length", "fixed"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::vector<int> shorter(prompt.begin(), prompt.begin() + prompt.size() / 2);
    std::vector<json> bodies = {IdsRequest(prompt, int(gen.size())), IdsRequest(shorter, 9),
                                IdsRequest(prompt, int(gen.size()))};
    auto replies = PostAll(server.url("/v1/completions"), bodies);
    QCOMPARE(replies.size(), bodies.size());
    QCOMPARE(Ids(replies[0]), gen);
    QCOMPARE(Ids(replies[2]), gen);
    std::string csv;
    for (int id : shorter) csv += (csv.empty() ? "" : ",") + std::to_string(id);
    auto g = RunProgram({BinDir() + "/octet", "generate", "--model", dir, "--prompt-ids", csv,
                         "--max-tokens", "9", "--ignore-eos", "--threads", "1", "--json"});
    QVERIFY2(g.exit_code == 0, g.output.c_str());
    QCOMPARE(
        Ids(replies[1]),
        json::parse(g.output.substr(g.output.rfind("\n{") + 1))["ids"].get<std::vector<int>>());
    for (const json& r : replies) {
      QVERIFY2(r["timings"]["drafted_tokens"].get<int>() > 0, r.dump().c_str());
    }
    auto models = json::parse(Curl({server.url("/v1/models")}).body);
    QCOMPARE(models["data"][0]["speculative"].get<std::string>(), std::string("mtp"));
  }

  // The demo model copies its prompt: drafts are accepted at TP 2, and the
  // replies equal a plain TP 1 server's, streamed or not, a stop string
  // cutting one short in the middle of a copied sentence.
  void tp2AcceptsDraftsAndMatchesPlainServing() {
    ServerProcess fast, plain;
    Status s = fast.Start({"--model", DemoModel(), "--tp", "2", "--threads", "1", "--slots", "3",
                           "--grpc-port", "off", "--speculative", "ngram", "--draft-tokens", "4",
                           "--draft-length", "fixed"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    s = plain.Start(
        {"--model", DemoModel(), "--threads", "1", "--slots", "3", "--grpc-port", "off"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::string fox = "The quick brown fox jumps over the lazy dog. ";
    const std::string kjv = "In the beginning God created the heaven and the earth. ";
    auto text = [](const std::string& prompt, int max_tokens) {
      return json{{"prompt", prompt},
                  {"max_tokens", max_tokens},
                  {"temperature", 0},
                  {"ignore_eos", true},
                  {"return_token_ids", true}};
    };
    const std::string moses =
        "And the LORD said unto Moses, Speak unto the children of Israel, and say unto them. ";
    std::vector<json> bodies = {text(moses + moses + "And the LORD said unto Moses,", 40),
                                text(kjv + kjv + "In", 30), text(fox + fox + "The", 9),
                                text(fox + fox + fox, 25)};
    auto a = PostAll(fast.url("/v1/completions"), bodies);
    auto b = PostAll(plain.url("/v1/completions"), bodies);
    QCOMPARE(a.size(), bodies.size());
    QCOMPARE(b.size(), bodies.size());
    for (size_t i = 0; i < bodies.size(); ++i) {
      QCOMPARE(Ids(a[i]), Ids(b[i]));
      QCOMPARE(a[i]["choices"][0]["text"], b[i]["choices"][0]["text"]);
    }
    // A stop string from the middle of the first reply (which copies its
    // prompt, so the cut falls inside a run of accepted drafts).
    const std::string full = b[0]["choices"][0]["text"].get<std::string>();
    const std::string needle = full.substr(full.size() / 2, 5);
    json stop = bodies[0];
    stop["stop"] = {needle};
    auto sa = PostAll(fast.url("/v1/completions"), {stop, bodies[1]});
    QCOMPARE(sa.size(), size_t(2));
    QCOMPARE(sa[0]["choices"][0]["text"].get<std::string>(), full.substr(0, full.find(needle)));
    QCOMPARE(sa[0]["choices"][0]["finish_reason"].get<std::string>(), std::string("stop"));
    QCOMPARE(Ids(sa[1]), Ids(b[1]));
    const json& t = a[0]["timings"];
    QVERIFY2(t["accepted_tokens"].get<int>() > 0 && t["acceptance_rate"].get<double>() > 0.3,
             t.dump().c_str());
    QVERIFY(!b[0]["timings"].contains("drafted_tokens"));
    // Streamed: the same text, and the last chunk's timings carry the counts.
    json sb = bodies[0];
    sb["stream"] = true;
    auto sse = PostJson(fast.url("/v1/completions"), sb.dump(), 60'000);
    QCOMPARE(sse.http_status, 200);
    std::string streamed;
    json last;
    for (size_t pos = 0; (pos = sse.body.find("data: ", pos)) != std::string::npos;) {
      const size_t end = sse.body.find("\n\n", pos);
      const std::string payload = sse.body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (payload == "[DONE]") break;
      json c = json::parse(payload);
      if (!c["choices"].empty()) streamed += c["choices"][0]["text"].get<std::string>();
      if (c.contains("timings")) last = c;
    }
    QCOMPARE(streamed, a[0]["choices"][0]["text"].get<std::string>());
    QVERIFY2(last["timings"]["accepted_tokens"].get<int>() > 0, sse.body.c_str());
    const std::string metrics = Curl({fast.url("/metrics")}).body;
    QVERIFY2(MetricValue(metrics, "octet_spec_accepted_tokens_total") > 0, metrics.c_str());
    QVERIFY(MetricValue(metrics, "octet_spec_accepted_tokens_total") <=
            MetricValue(metrics, "octet_spec_drafted_tokens_total"));
    QCOMPARE(MetricValue(Curl({plain.url("/metrics")}).body, "octet_spec_drafted_tokens_total"),
             0.0);
  }

  void badFlagsAreUsageErrors_data() {
    QTest::addColumn<QString>("command");
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<QString>("message");
    QTest::newRow("serve, K 0") << "serve"
                                << QStringList{"--speculative", "ngram", "--draft-tokens", "0"}
                                << "--draft-tokens must be from 1 to 8";
    QTest::newRow("serve, K 9") << "serve"
                                << QStringList{"--speculative", "ngram", "--draft-tokens", "9"}
                                << "--draft-tokens must be from 1 to 8";
    QTest::newRow("serve, K not a number")
        << "serve" << QStringList{"--speculative", "ngram", "--draft-tokens", "x"}
        << "draft-tokens";
    QTest::newRow("serve, mtp K 4")
        << "serve" << QStringList{"--speculative", "mtp", "--draft-tokens", "4"}
        << "--draft-tokens must be from 1 to 3";
    QTest::newRow("serve, draft length")
        << "serve" << QStringList{"--speculative", "ngram", "--draft-length", "short"}
        << "--draft-length must be auto or fixed";
    QTest::newRow("serve, unknown method")
        << "serve" << QStringList{"--speculative", "eagle"} << "choose off, ngram or mtp";
    QTest::newRow("chat, K 9") << "chat"
                               << QStringList{"--speculative", "ngram", "--draft-tokens", "9"}
                               << "--draft-tokens must be from 1 to 8";
  }
  void badFlagsAreUsageErrors() {
    QFETCH(QString, command);
    QFETCH(QStringList, flags);
    QFETCH(QString, message);
    std::vector<std::string> argv = {BinDir() + "/octet", command.toStdString(), "--model",
                                     DemoModel()};
    for (const auto& f : flags) argv.push_back(f.toStdString());
    auto r = RunProgram(argv, 60'000);
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find(message.toStdString()) != std::string::npos, r.output.c_str());
  }

  // mtp on a model without a multi-token-prediction layer (the demo model) is
  // refused by every command, naming the reason, before serving.
  void mtpNeedsAnMtpLayer() {
    for (const char* command : {"serve", "chat", "generate"}) {
      std::vector<std::string> argv = {BinDir() + "/octet", command,         "--model",
                                       DemoModel(),         "--speculative", "mtp"};
      if (std::string(command) == "generate") argv.insert(argv.end(), {"--prompt-ids", "1,2"});
      if (std::string(command) == "serve") argv.insert(argv.end(), {"--port", "0"});
      auto r = RunProgram(argv, 60'000);
      QVERIFY2(r.exit_code == 1, r.output.c_str());
      QVERIFY2(r.output.find("no multi-token-prediction layer") != std::string::npos &&
                   r.output.find("--speculative ngram") != std::string::npos,
               r.output.c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestServeSpeculative)
#include "test_serve_speculative.moc"
