// Tools in chat templates: the C++ rendering of tool definitions, assistant
// tool calls and tool results against Jinja2 rendering the fixtures' real
// templates (Qwen3, Llama-3) the way transformers.apply_chat_template does,
// live (data/render_tool_chats.py; skipped only when python3 cannot import
// jinja2). The fixtures' Llama-3 template is the original
// Meta-Llama-3-Instruct one, which has no tools section: its cases check
// what it does with tools, tool calls, `tool`/`ipython` turns and a null
// content (tools and calls ignored, roles as headers, "None").
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;
using nlohmann::ordered_json;

namespace {

// Conversations with tool definitions (nested parameters, an enum, non-ASCII
// text, numbers of both kinds), tool calls with string and object arguments,
// consecutive tool results, thinking before a call.
ordered_json Cases() {
  auto text =
      ReadFileToString(test::SourceDir() + "/tests/unit/engine_text/data/tool_chat_cases.json");
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  return ordered_json::parse(*text);
}

}  // namespace

class TestChatTools : public QObject {
  Q_OBJECT

 private slots:
  void matchesJinja() {
    OCTET_REQUIRE_FIXTURES();
    const ordered_json doc = Cases();
    ordered_json cases = doc["cases"];
    const ordered_json& tools = doc["tools"];
    for (auto& c : cases) {
      if (c["with_tools"].get<bool>()) c["tools"] = tools;
    }
    const std::string dir = QDir::tempPath().toStdString() + "/octet_chat_tools_" +
                            std::to_string(QCoreApplication::applicationPid());
    QDir().mkpath(QString::fromStdString(dir));
    const std::string path = dir + "/cases.json";
    QVERIFY(WriteFileAtomic(path, cases.dump()).ok());
    auto r =
        test::RunProgram({"/usr/bin/env", "python3",
                          test::SourceDir() + "/tests/unit/engine_text/data/render_tool_chats.py",
                          test::FixturesDir(), path},
                         60'000);
    QDir(QString::fromStdString(dir)).removeRecursively();
    if (r.exit_code == test::kSkipExitCode) OCTET_SKIP_PREMISE("python3 cannot import jinja2");
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const ordered_json expected = ordered_json::parse(r.output);
    QCOMPARE(expected.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const ordered_json& c = cases[i];
      const std::string name = c["tokenizer"];
      auto tok = Tokenizer::Load(test::FixturesDir() + "/tokenizers/" + name);
      QVERIFY2(tok.ok(), tok.status().ToString().c_str());
      std::vector<ChatMessage> messages;
      for (const ordered_json& m : c["messages"]) {
        ChatMessage msg{m["role"], "", ""};
        if (m.contains("content") && m["content"].is_string()) msg.content = m["content"];
        msg.content_null = m.contains("content") && m["content"].is_null();
        if (m.contains("tool_calls")) msg.tool_calls_json = m["tool_calls"].dump();
        messages.push_back(std::move(msg));
      }
      ChatOptions o;
      o.add_generation_prompt = c["add_generation_prompt"];
      if (c.contains("template_kwargs"))
        o.enable_thinking = c["template_kwargs"]["enable_thinking"].get<bool>();
      if (c.contains("tools")) o.tools_json = c["tools"].dump();
      auto text = tok->chat_template().Apply(messages, o);
      QVERIFY2(text.ok(), text.status().ToString().c_str());
      const std::string want = expected[i];
      if (*text != want) {
        QFAIL(("case " + std::to_string(i) + " (" + name + ")\n--- C++:\n" + *text +
               "\n--- jinja2:\n" + want)
                  .c_str());
      }
    }
  }

  void rendersToolsOnlyWhereTheTemplateHasThem() {
    OCTET_REQUIRE_FIXTURES();
    auto qwen = Tokenizer::Load(test::FixturesDir() + "/tokenizers/qwen3");
    auto llama = Tokenizer::Load(test::FixturesDir() + "/tokenizers/llama3");
    QVERIFY(qwen.ok() && llama.ok());
    QVERIFY(qwen->chat_template().RendersTools());
    QVERIFY(!llama->chat_template().RendersTools());
    ChatOptions o;
    o.tools_json = "{not an array";
    const std::vector<ChatMessage> m = {{"user", "hi", ""}};
    auto bad = qwen->chat_template().Apply(m, o);
    QVERIFY(!bad.ok());
    QVERIFY2(bad.status().message().find("tools") != std::string::npos,
             bad.status().message().c_str());
  }
};

QTEST_GUILESS_MAIN(TestChatTools)
#include "test_chat_tools.moc"
