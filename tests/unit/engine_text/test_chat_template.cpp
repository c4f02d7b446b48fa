// Chat templates against Jinja2 renderings (data/chat_template_references.json,
// made by data/render_chat_references.py the way transformers renders them):
// the fixtures' Qwen3 and Llama-3 templates on conversations their fixture
// cases do not cover (thinking stripped from earlier turns, tool turns, a
// second system message, unknown roles), and Qwen2-, Qwen2.5- and
// Llama-3.1-style templates for the default system prompt and the dated
// system block. Plus the fallback for unknown templates and the errors.
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/chat_template.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;
using json = nlohmann::json;

namespace {

json References() {
  auto text = ReadFileToString(test::SourceDir() +
                               "/tests/unit/engine_text/data/chat_template_references.json");
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  return json::parse(*text);
}

std::vector<ChatMessage> Messages(const json& list) {
  std::vector<ChatMessage> out;
  for (const json& m : list) out.push_back({m["role"], m["content"]});
  return out;
}

ChatOptions Options(const json& c) {
  ChatOptions o;
  o.add_generation_prompt = c["add_generation_prompt"];
  const json& kw = c["template_kwargs"];
  if (kw.contains("enable_thinking")) o.enable_thinking = kw["enable_thinking"].get<bool>();
  if (kw.contains("date_string")) o.date_string = kw["date_string"];
  return o;
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT
 private slots:
  void fixtureTemplatesMatchJinja() {
    OCTET_REQUIRE_FIXTURES();
    const json refs = References();
    QVERIFY(refs["fixture_templates"].size() >= 8);
    for (const json& c : refs["fixture_templates"]) {
      const std::string dir =
          test::FixturesDir() + "/tokenizers/" + c["tokenizer"].get<std::string>();
      const json config = json::parse(*ReadFileToString(dir + "/tokenizer_config.json"));
      const std::string bos =
          config["bos_token"].is_string() ? config["bos_token"].get<std::string>() : "";
      const ChatTemplate tmpl =
          ChatTemplate::Detect(config["chat_template"].get<std::string>(), bos);
      QVERIFY(tmpl.warning().empty());
      auto text = tmpl.Apply(Messages(c["messages"]), Options(c));
      QVERIFY(text.ok());
      const std::string label =
          c["tokenizer"].get<std::string>() + "/" + c["name"].get<std::string>();
      QVERIFY2(*text == c["text"].get<std::string>(),
               (label + ":\n got  " + json(*text).dump() + "\n want " + c["text"].dump()).c_str());
    }
  }

  void otherTemplatesMatchJinja() {
    const json refs = References();
    for (const json& c : refs["other_templates"]) {
      const ChatTemplate tmpl =
          ChatTemplate::Detect(c["template"].get<std::string>(), c["bos_token"].get<std::string>());
      const std::string label =
          c["template_name"].get<std::string>() + "/" + c["name"].get<std::string>();
      QVERIFY2(tmpl.warning().empty(), label.c_str());
      auto text = tmpl.Apply(Messages(c["messages"]), Options(c));
      QVERIFY(text.ok());
      QVERIFY2(*text == c["text"].get<std::string>(),
               (label + ":\n got  " + json(*text).dump() + "\n want " + c["text"].dump()).c_str());
    }
  }

  void familiesAreRecognised() {
    const json refs = References();
    for (const json& c : refs["other_templates"]) {
      const ChatTemplate t = ChatTemplate::Detect(c["template"].get<std::string>());
      const std::string name = c["template_name"];
      if (name.rfind("llama", 0) == 0) {
        QCOMPARE(t.family(), ChatFamily::kLlama3);
      } else {
        QCOMPARE(t.family(), ChatFamily::kChatML);
      }
      if (name == "qwen2.5-style") {
        QCOMPARE(
            t.default_system_prompt(),
            std::string("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
      }
      if (name == "qwen2-style") {
        QCOMPARE(t.default_system_prompt(), std::string("You are a helpful assistant."));
      }
    }
  }

  void llama32TemplateUsesTodaysDate() {
    // A template that calls strftime_now gets today's date in "%d %b %Y" form.
    const ChatTemplate t = ChatTemplate::Detect(
        "{{- bos_token }}{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d "
        "%b %Y\") %}{%- endif %}<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: "
        "December 2023<|eot_id|>",
        "<|begin_of_text|>");
    QCOMPARE(t.family(), ChatFamily::kLlama3);
    const std::vector<ChatMessage> m = {{"user", "hi"}};
    const std::string text = *t.Apply(m);
    const QRegularExpression today(
        "Today Date: \\d\\d [A-Z][a-z][a-z] \\d\\d\\d\\d\n\n<\\|eot_id\\|>");
    QVERIFY2(today.match(QString::fromStdString(text)).hasMatch(), text.c_str());
  }

  void unknownTemplateFallsBackWithWarning() {
    const ChatTemplate t =
        ChatTemplate::Detect("{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}");
    QCOMPARE(t.family(), ChatFamily::kPlain);
    QVERIFY(!t.warning().empty());
    QVERIFY(t.StopTokens().empty());
    const std::vector<ChatMessage> m = {{"system", "Be kind."}, {"user", "Hello"}};
    QCOMPARE(*t.Apply(m), std::string("system: Be kind.\n\nuser: Hello\n\nassistant:"));
    // A tokenizer with a BOS token (a base model such as nanochat's) starts
    // the plain text with it, as every training document did.
    const ChatTemplate with_bos = ChatTemplate::Detect("", "<|bos|>");
    QCOMPARE(*with_bos.Apply(m),
             std::string("<|bos|>system: Be kind.\n\nuser: Hello\n\nassistant:"));
    ChatOptions no_prompt;
    no_prompt.add_generation_prompt = false;
    QCOMPARE(*t.Apply(m, no_prompt), std::string("system: Be kind.\n\nuser: Hello\n\n"));
    // No template at all also warns.
    QVERIFY(!ChatTemplate::Detect("").warning().empty());
  }

  void stopTokensPerFamily() {
    QCOMPARE(ChatTemplate::ForFamily(ChatFamily::kQwen3).StopTokens(),
             (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
    QCOMPARE(ChatTemplate::ForFamily(ChatFamily::kLlama3).StopTokens(),
             (std::vector<std::string>{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}));
    QCOMPARE(ChatTemplate::ForFamily(ChatFamily::kQwen3).family_name(), std::string_view("qwen3"));
  }

  void badConversationsAreErrors() {
    const ChatTemplate t = ChatTemplate::ForFamily(ChatFamily::kQwen3);
    QVERIFY(!t.Apply({}).ok());
    const std::vector<ChatMessage> no_role = {{"user", "a"}, {"", "b"}};
    auto r = t.Apply(no_role);
    QVERIFY(!r.ok());
    QVERIFY(r.status().message().find("message 1") != std::string::npos);
  }

  void qwen3ThinkingSwitch() {
    const ChatTemplate t = ChatTemplate::ForFamily(ChatFamily::kQwen3);
    const std::vector<ChatMessage> m = {{"user", "hi"}};
    ChatOptions off;
    off.enable_thinking = false;
    QCOMPARE(*t.Apply(m, off),
             std::string(
                 "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    ChatOptions on;
    on.enable_thinking = true;
    QCOMPARE(*t.Apply(m, on),
             std::string("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
  }
};

QTEST_APPLESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
