// Tools in chat templates: the C++ rendering of tool definitions, assistant
// tool calls and tool results against Jinja2 rendering the fixtures' real
// templates (Qwen3, Llama-3) the way transformers.apply_chat_template does,
// live (data/render_tool_chats.py; skipped only when python3 cannot import
// jinja2). The fixtures' Llama-3 template is the original
// Meta-Llama-3-Instruct one, which has no tools section: its cases check
// what it does with tools, tool calls, `tool`/`ipython` turns and a null
// content (tools and calls ignored, roles as headers, "None"). The tools
// section of Llama 3.1 and later is checked through data/llama3.1-tools.jinja,
// written after the published Llama-3.1-Instruct template (tools in the
// first user turn or in the system block, one call per turn, tool results
// through tojson).
#include <QtTest>
#include <map>

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
      if (c["with_tools"].get<bool>() && !c.contains("tools")) c["tools"] = tools;
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
    // Each fixture tokenizer's template, loaded once (a tokenizer load is
    // most of this test's time under ASan).
    std::map<std::string, ChatTemplate> templates;
    for (size_t i = 0; i < cases.size(); ++i) {
      const ordered_json& c = cases[i];
      const std::string name = c["tokenizer"];
      if (!templates.contains(name)) {
        auto tok = Tokenizer::Load(test::FixturesDir() + "/tokenizers/" + name);
        QVERIFY2(tok.ok(), tok.status().ToString().c_str());
        templates.emplace(name, tok->chat_template());
      }
      ChatTemplate tmpl = templates.at(name);
      if (c.contains("template_file")) {
        auto text = ReadFileToString(test::SourceDir() + "/tests/unit/engine_text/data/" +
                                     c["template_file"].get<std::string>());
        QVERIFY2(text.ok(), text.status().ToString().c_str());
        tmpl = ChatTemplate::Detect(*text, c["bos_token"].get<std::string>());
        QVERIFY(tmpl.RendersTools());
      }
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
      if (c.contains("template_kwargs")) {
        const ordered_json& k = c["template_kwargs"];
        if (k.contains("enable_thinking")) o.enable_thinking = k["enable_thinking"].get<bool>();
        if (k.contains("tools_in_user_message"))
          o.tools_in_user_message = k["tools_in_user_message"].get<bool>();
        if (k.contains("date_string")) o.date_string = k["date_string"];
      }
      if (c.contains("tools")) o.tools_json = c["tools"].dump();
      auto text = tmpl.Apply(messages, o);
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

  // What the Llama-3.1 template refuses with raise_exception is an error
  // that says why, not a prompt the model never saw in training.
  void llama31RefusesWhatItsTemplateRefuses() {
    auto text =
        ReadFileToString(test::SourceDir() + "/tests/unit/engine_text/data/llama3.1-tools.jinja");
    QVERIFY2(text.ok(), text.status().ToString().c_str());
    const ChatTemplate t = ChatTemplate::Detect(*text, "<|begin_of_text|>");
    QCOMPARE(t.family(), ChatFamily::kLlama3);
    QVERIFY(t.RendersTools());
    ChatOptions o;
    o.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
    // Tools go into the first user message: a conversation of only a system one has none.
    auto none = t.Apply(std::vector<ChatMessage>{{"system", "s", ""}}, o);
    QVERIFY(!none.ok());
    QVERIFY2(none.status().message().find("first user message") != std::string::npos,
             none.status().message().c_str());
    o.tools_in_user_message = false;
    QVERIFY(t.Apply(std::vector<ChatMessage>{{"system", "s", ""}}, o).ok());
    // One call per assistant turn.
    const std::string two = R"([{"function": {"name": "f", "arguments": {}}},
                                {"function": {"name": "f", "arguments": {}}}])";
    auto many = t.Apply(std::vector<ChatMessage>{{"user", "u", ""}, {"assistant", "", two}}, o);
    QVERIFY(!many.ok());
    QVERIFY2(many.status().message().find("2 tool calls") != std::string::npos,
             many.status().message().c_str());
    // A call without its name.
    auto nameless = t.Apply(
        std::vector<ChatMessage>{{"user", "u", ""}, {"assistant", "", R"([{"function": {}}])"}}, o);
    QVERIFY(!nameless.ok());
  }
};

QTEST_GUILESS_MAIN(TestChatTools)
#include "test_chat_tools.moc"
