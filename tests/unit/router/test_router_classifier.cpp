// Request features and the difficulty classifier: what the features see in a
// request, the weights file round trip and its checks, deterministic training,
// and the shipped classifier on the held-out part of the shipped labelled set.
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/router/classifier.h"
#include "octet/router/request_features.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::router;
using nlohmann::json;

namespace {

json Chat(std::initializer_list<std::pair<const char*, const char*>> msgs) {
  json m = json::array();
  for (const auto& [role, content] : msgs) m.push_back({{"role", role}, {"content", content}});
  return json{{"model", "m"}, {"messages", m}};
}

json ToolCall(const char* name) {
  return json{{"role", "assistant"},
              {"content", nullptr},
              {"tool_calls", json::array({{{"id", "c"},
                                           {"type", "function"},
                                           {"function", {{"name", name}, {"arguments", "{}"}}}}})}};
}

}  // namespace

class TestRouterClassifier : public QObject {
  Q_OBJECT
 private slots:
  void featuresOfAChat() {
    json r = Chat({{"system", "You are terse."},
                   {"user", "hi"},
                   {"assistant", "hello"},
                   {"user", "Write a Python function that sorts a list, and fix this bug"}});
    r["max_tokens"] = 256;
    r["stream"] = true;
    const RequestFeatures f = ExtractFeatures(r);
    QCOMPARE(f.turns, 2);
    QCOMPARE(f.messages, 4);
    QCOMPARE(f.max_tokens, 256);
    QVERIFY(f.stream);
    QVERIFY(f.has_code);
    QVERIFY(!f.has_math);
    QCOMPARE(f.script, std::string("latin"));
    QCOMPARE(f.system_bytes, int64_t(14));
    QCOMPARE(f.last_user_text,
             std::string("write a python function that sorts a list, and fix this bug"));
    QCOMPARE(f.prompt_tokens, (f.prompt_bytes + 3) / 4);
  }

  void toolsAndToolCallDepth() {
    json r = Chat({{"user", "first question"}});
    r["messages"].push_back(ToolCall("a"));
    r["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "x"}});
    r["messages"].push_back({{"role", "user"}, {"content", "now do the real work"}});
    r["messages"].push_back(ToolCall("a"));
    r["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "1"}});
    r["messages"].push_back(ToolCall("b"));
    r["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "2"}});
    r["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "a"}}}},
                              {{"type", "function"}, {"function", {{"name", "b"}}}}});
    const RequestFeatures f = ExtractFeatures(r);
    QCOMPARE(f.tools, 2);
    QCOMPARE(f.tool_call_depth, 2);  // rounds since the last user message only
    QCOMPARE(f.tool_results, 3);
    QCOMPARE(f.turns, 2);
    QCOMPARE(f.tool_names, (std::vector<std::string>{"a", "b"}));
  }

  void mathScriptsAndContentParts() {
    QVERIFY(ExtractFeatures(Chat({{"user", "Prove that the integral of x^2 is x^3/3"}})).has_math);
    QCOMPARE(ExtractFeatures(Chat({{"user", "请详细分析中国古代科举制度"}})).script,
             std::string("cjk"));
    QCOMPARE(ExtractFeatures(Chat({{"user", "Как сказать спасибо"}})).script,
             std::string("cyrillic"));
    QCOMPARE(ExtractFeatures(Chat({{"user", "1234 !!"}})).script, std::string("none"));
    json parts = {
        {"messages", json::array({{{"role", "user"},
                                   {"content", json::array({{{"type", "text"}, {"text", "Hello"}},
                                                            {{"type", "image_url"}}})}}})}};
    const RequestFeatures f = ExtractFeatures(parts);
    QCOMPARE(f.last_user_text, std::string("hello"));
    QCOMPARE(f.turns, 1);
    // /v1/completions prompts.
    const RequestFeatures c = ExtractFeatures(json{{"prompt", "Once upon a time"}});
    QCOMPARE(c.turns, 1);
    QCOMPARE(c.last_user_text, std::string("once upon a time"));
    // Garbage never crashes and yields empty features.
    QCOMPARE(ExtractFeatures(json::array({1, 2})).turns, 0);
    QCOMPARE(ExtractFeatures(json{{"messages", 5}}).turns, 0);
  }

  void prefixHashFollowsAConversation() {
    json t1 = Chat({{"system", "S"}, {"user", "plan my trip"}});
    json t2 = Chat(
        {{"system", "S"}, {"user", "plan my trip"}, {"assistant", "where to?"}, {"user", "Japan"}});
    json other = Chat({{"system", "S"}, {"user", "plan my wedding"}});
    QVERIFY(ConversationPrefixHash(t1) != 0);
    QCOMPARE(ConversationPrefixHash(t1), ConversationPrefixHash(t2));
    QVERIFY(ConversationPrefixHash(t1) != ConversationPrefixHash(other));
    QCOMPARE(ConversationPrefixHash(json{{"messages", json::array()}}), uint64_t(0));
    // The FNV-1a test vector: a fixed function, the same on every platform.
    QCOMPARE(Fnv1a64("a"), uint64_t(0xaf63dc4c8601ec8cull));
  }

  void weightsRoundTripAndChecks() {
    std::vector<LabelledRequest> data = {
        {"1", true, Chat({{"user", "prove the theorem about primes"}})},
        {"2", false, Chat({{"user", "hello there"}})},
        {"3", true, Chat({{"user", "implement a lock free queue in c++"}})},
        {"4", false, Chat({{"user", "what time is it"}})}};
    TrainOptions o;
    o.hash_bits = 12;
    o.iterations = 200;
    HashedLogisticModel a = TrainClassifier(data, o);
    HashedLogisticModel b = TrainClassifier(data, o);
    QVERIFY(a.dense_weights() == b.dense_weights());  // deterministic
    QVERIFY(a.hashed_weights() == b.hashed_weights());
    const ClassifierMetrics m = EvaluateClassifier(a, data);
    QCOMPARE(m.accuracy(), 1.0);  // it can fit four examples

    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/w.json";
    QVERIFY(a.Save(path).ok());
    auto loaded = HashedLogisticModel::Load(path);
    QVERIFY2(loaded.ok(), loaded.status().ToString().c_str());
    for (const auto& ex : data) {
      const RequestFeatures f = ExtractFeatures(ex.request);
      QVERIFY(std::abs(loaded->Score(ex.request, f) - a.Score(ex.request, f)) < 1e-6);
    }

    json doc = a.ToJson();
    doc["hashed"].push_back(json::array({1u << 12, 0.5}));
    auto oob = HashedLogisticModel::FromJson(doc, "w.json");
    QVERIFY(!oob.ok());
    QVERIFY(oob.status().message().find("out of range") != std::string::npos);
    json bad_dense = a.ToJson();
    bad_dense["dense"][0] = "x";
    QVERIFY(!HashedLogisticModel::FromJson(bad_dense, "w.json").ok());
    QVERIFY(WriteFileAtomic(path, "{not json").ok());
    auto garbage = HashedLogisticModel::Load(path);
    QVERIFY(!garbage.ok());
    QVERIFY(garbage.status().message().find(path) != std::string::npos);
  }

  void labelledJsonlErrorsNameTheLine() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/l.jsonl";
    QVERIFY(WriteFileAtomic(path,
                            "{\"id\":\"a\",\"label\":\"easy\",\"request\":{}}\n"
                            "{\"id\":\"b\",\"label\":\"medium\",\"request\":{}}\n")
                .ok());
    auto r = ReadLabelledRequests(path);
    QVERIFY(!r.ok());
    QVERIFY2(r.status().message().find(path + ":2:") != std::string::npos,
             r.status().ToString().c_str());
  }

  // The shipped weights were trained on the shipped set without its held-out
  // split; on that split they must separate hard from easy requests well.
  void shippedClassifierOnHeldOutSplit() {
    const std::string dir = test::SourceDir() + "/resources/routing/";
    auto model = HashedLogisticModel::Load(dir + "difficulty.weights.json");
    QVERIFY2(model.ok(), model.status().ToString().c_str());
    auto data = ReadLabelledRequests(dir + "labelled-requests.jsonl");
    QVERIFY2(data.ok(), data.status().ToString().c_str());
    QVERIFY(data->size() >= 300);
    const double holdout = model->training_info().value("holdout_fraction", 0.2);
    std::vector<LabelledRequest> held;
    int hard = 0;
    for (const auto& ex : *data)
      if (IsHeldOut(ex.id, holdout)) {
        held.push_back(ex);
        hard += ex.hard ? 1 : 0;
      }
    QVERIFY(held.size() >= 50);
    QVERIFY(hard >= 15 && hard <= static_cast<int>(held.size()) - 15);  // both classes present
    const ClassifierMetrics m = EvaluateClassifier(*model, held);
    qInfo("held-out: %d requests, accuracy %.3f, precision(hard) %.3f, recall(hard) %.3f",
          m.examples, m.accuracy(), m.precision_hard(), m.recall_hard());
    QVERIFY(m.accuracy() >= 0.85);
    QVERIFY(m.precision_hard() >= 0.85);
    QVERIFY(m.recall_hard() >= 0.85);
    // The figures recorded in the weights file are the ones measured here.
    QCOMPARE(model->training_info()["heldout_metrics"]["examples"].get<int>(), m.examples);
    QVERIFY(std::abs(model->training_info()["heldout_metrics"]["accuracy"].get<double>() -
                     m.accuracy()) < 1e-9);
  }
};

QTEST_APPLESS_MAIN(TestRouterClassifier)
#include "test_router_classifier.moc"
