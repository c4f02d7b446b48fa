// Chat templates without a Jinja engine: each family's format written out by
// hand from the template text it replaces (see chat_template.h). Where the
// templates use Python string methods, the helpers below do what Python does
// (str.strip() strips str.isspace() characters; strip('\n') only newlines).
#include "octet/engine/chat_template.h"

#include <cmath>
#include <ctime>

#include "octet/base/json.h"
#include "octet/base/log.h"
#include "text/utf8.h"

namespace octet::engine {
namespace {

// Python's str.isspace(): Unicode White_Space plus U+001C..U+001F.
bool PyIsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's str.strip() (Jinja's `trim`). Invalid UTF-8 bytes are not space.
std::string PyStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    uint32_t cp;
    const int len = text::DecodeUtf8Char(s.substr(begin), &cp);
    if (len == 0 || !PyIsSpace(cp)) break;
    begin += static_cast<size_t>(len);
  }
  size_t end = s.size();
  while (end > begin) {
    size_t b = end - 1;
    while (b > begin && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    uint32_t cp;
    const int len = text::DecodeUtf8Char(s.substr(b, end - b), &cp);
    if (len == 0 || static_cast<size_t>(len) != end - b || !PyIsSpace(cp)) break;
    end = b;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool Contains(std::string_view s, std::string_view p) {
  return s.find(p) != std::string_view::npos;
}

// Llama 3.1+: how a call is to be written, in both places the tools go.
constexpr std::string_view kLlamaCallFormat =
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
    "and its value}.";

// A JSON string literal as Python's json.dumps(ensure_ascii=False) writes it
// (transformers' `tojson`).
std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Python's json.dumps(value, ensure_ascii=False) with the keys in their given
// order: transformers' `tojson`. Without an indent the separators are ", " and
// ": "; with one (`tojson(indent=4)`) each member goes on its own line, ","
// ending it, and an empty object or array stays "{}" / "[]".
void PyDumps(const nlohmann::ordered_json& v, std::string* out, int indent = -1, int level = 0) {
  const auto newline = [&](int depth) {
    *out += '\n';
    out->append(static_cast<size_t>(indent * depth), ' ');
  };
  const auto open_member = [&](bool first) {
    if (indent < 0) {
      if (!first) *out += ", ";
    } else {
      if (!first) *out += ',';
      newline(level + 1);
    }
  };
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      *out += "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        open_member(first);
        first = false;
        *out += JsonQuote(it.key());
        *out += ": ";
        PyDumps(it.value(), out, indent, level + 1);
      }
      if (indent >= 0 && !v.empty()) newline(level);
      *out += "}";
      break;
    }
    case nlohmann::ordered_json::value_t::array: {
      *out += "[";
      for (size_t i = 0; i < v.size(); ++i) {
        open_member(i == 0);
        PyDumps(v[i], out, indent, level + 1);
      }
      if (indent >= 0 && !v.empty()) newline(level);
      *out += "]";
      break;
    }
    case nlohmann::ordered_json::value_t::string:
      *out += JsonQuote(v.get_ref<const std::string&>());
      break;
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += v.dump();  // shortest round trip, with ".0" on integral values, as repr()
      }
      break;
    }
    default:
      *out += v.dump();  // null, true, false, integers
      break;
  }
}

std::string PyDumps(const nlohmann::ordered_json& v) {
  std::string out;
  PyDumps(v, &out);
  return out;
}

// A JSON array from text (empty text: an empty array).
Result<nlohmann::ordered_json> JsonArray(std::string_view text, const std::string& what) {
  if (text.empty()) return nlohmann::ordered_json::array();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return InvalidArgumentError("chat template: " + what + " must be a JSON array");
  }
  return j;
}

// The literal system prompt a ChatML template writes when the conversation has
// none: the text of a Jinja string literal '<|im_start|>system\n...<|im_end|>'
// (Qwen2: "You are a helpful assistant.", Qwen2.5: "You are Qwen, created by
// Alibaba Cloud. ..."). Empty when the template has no such literal.
std::string FindDefaultSystemPrompt(std::string_view tmpl) {
  for (std::string_view open :
       {std::string_view("<|im_start|>system\\n"), std::string_view("<|im_start|>system\n")}) {
    size_t at = 0;
    while ((at = tmpl.find(open, at)) != std::string_view::npos) {
      at += open.size();
      const size_t end = tmpl.find("<|im_end|>", at);
      if (end == std::string_view::npos) break;
      std::string_view body = tmpl.substr(at, end - at);
      // Only a plain literal: no quote (string end), no Jinja expression.
      if (body.empty() || body.find_first_of("'\"{}+") != std::string_view::npos) continue;
      std::string out;
      for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] == '\\' && i + 1 < body.size()) {
          const char e = body[++i];
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          out += body[i];
        }
      }
      return out;
    }
  }
  return "";
}

std::string TodayDateString() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return buf;
}

}  // namespace

std::string_view ChatFamilyName(ChatFamily family) {
  switch (family) {
    case ChatFamily::kQwen3:
      return "qwen3";
    case ChatFamily::kChatML:
      return "chatml";
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kPlain:
      return "plain";
  }
  return "plain";
}

std::string_view ChatTemplate::family_name() const { return ChatFamilyName(family_); }

ChatTemplate ChatTemplate::ForFamily(ChatFamily family, std::string_view bos_token) {
  ChatTemplate t;
  t.family_ = family;
  t.bos_token_ = std::string(bos_token);
  t.tool_response_ = family == ChatFamily::kQwen3;
  return t;
}

ChatTemplate ChatTemplate::Detect(std::string_view tmpl, std::string_view bos_token) {
  ChatTemplate t;
  t.bos_token_ = std::string(bos_token);
  if (tmpl.empty()) {
    t.warning_ = "the model has no chat template; using a plain 'role: content' format";
    return t;
  }
  if (Contains(tmpl, "<|im_start|>") && Contains(tmpl, "<|im_end|>")) {
    const bool thinking = Contains(tmpl, "enable_thinking") || Contains(tmpl, "</think>");
    t.family_ = thinking ? ChatFamily::kQwen3 : ChatFamily::kChatML;
    t.tool_response_ = Contains(tmpl, "<tool_response>");
    if (!thinking) t.default_system_ = FindDefaultSystemPrompt(tmpl);
    return t;
  }
  if (Contains(tmpl, "<|start_header_id|>") && Contains(tmpl, "<|end_header_id|>") &&
      Contains(tmpl, "<|eot_id|>")) {
    t.family_ = ChatFamily::kLlama3;
    t.llama31_ = Contains(tmpl, "Cutting Knowledge Date");
    t.llama_date_now_ = Contains(tmpl, "strftime_now");
    t.llama_tools_ = t.llama31_ && Contains(tmpl, "tools_in_user_message");
    return t;
  }
  t.warning_ =
      "the model's chat template is not one Octet knows (ChatML/Qwen, Llama-3); using a plain "
      "'role: content' format, which the model may not follow";
  return t;
}

std::vector<std::string> ChatTemplate::StopTokens() const {
  switch (family_) {
    case ChatFamily::kQwen3:
    case ChatFamily::kChatML:
      return {"<|im_end|>", "<|endoftext|>"};
    case ChatFamily::kLlama3:
      return {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
    case ChatFamily::kPlain:
      return {};
  }
  return {};
}

Result<std::string> ChatTemplate::Apply(std::span<const ChatMessage> messages,
                                        const ChatOptions& options) const {
  if (messages.empty()) return InvalidArgumentError("chat template: no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty()) {
      return InvalidArgumentError("chat template: message " + std::to_string(i) + " has no role");
    }
    OCTET_RETURN_IF_ERROR(
        JsonArray(messages[i].tool_calls_json, "messages[" + std::to_string(i) + "].tool_calls")
            .status());
  }
  OCTET_RETURN_IF_ERROR(JsonArray(options.tools_json, "tools").status());
  switch (family_) {
    case ChatFamily::kQwen3:
    case ChatFamily::kChatML:
      return ApplyChatML(messages, options);
    case ChatFamily::kLlama3:
      return ApplyLlama3(messages, options);
    case ChatFamily::kPlain:
      break;
  }
  // Plain: BOS (when the tokenizer has one), "role: content" paragraphs, then
  // "assistant:" to answer.
  std::string out = bos_token_;
  for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n\n";
  if (options.add_generation_prompt) out += "assistant:";
  return out;
}

std::string ChatTemplate::ApplyChatML(std::span<const ChatMessage> messages,
                                      const ChatOptions& options) const {
  const bool qwen3 = family_ == ChatFamily::kQwen3;
  const size_t n = messages.size();
  std::string out;
  auto turn = [&](std::string_view role, std::string_view content) {
    out += "<|im_start|>";
    out += role;
    out += "\n";
    out += content;
    out += "<|im_end|>\n";
  };
  const nlohmann::ordered_json tools =
      qwen3 ? JsonArray(options.tools_json, "tools").value_or(nlohmann::ordered_json::array())
            : nlohmann::ordered_json::array();
  if (!tools.empty()) {
    // Qwen3's "# Tools" system turn (after the system message's own content).
    out += "<|im_start|>system\n";
    if (messages[0].role == "system") out += messages[0].content + "\n\n";
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& tool : tools) {
      out += "\n";
      out += PyDumps(tool);
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (messages[0].role == "system") {
    turn("system", messages[0].content);
  } else if (!default_system_.empty()) {
    turn("system", default_system_);
  }
  // Qwen3: the last user turn that is not a tool result; assistant turns after
  // it keep their thinking, earlier ones lose it.
  size_t last_query = n - 1;
  if (qwen3) {
    for (size_t k = n; k-- > 0;) {
      const ChatMessage& m = messages[k];
      if (m.role == "user" &&
          !(StartsWith(m.content, "<tool_response>") && EndsWith(m.content, "</tool_response>"))) {
        last_query = k;
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == n;
    if (m.role == "system") {
      if (i > 0) turn("system", m.content);
    } else if (m.role == "user") {
      turn("user", m.content);
    } else if (m.role == "assistant") {
      if (!qwen3) {
        turn("assistant", m.content);
        continue;
      }
      std::string_view content = m.content;
      std::string_view reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string_view::npos) {
        // Python: content.split('</think>')[-1].lstrip('\n') and
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n').
        const size_t last_close = content.rfind("</think>");
        std::string_view before = RStripNewlines(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        if (open != std::string_view::npos) before = before.substr(open + 7);
        reasoning = LStripNewlines(before);
        content = LStripNewlines(content.substr(last_close + 8));
      }
      out += "<|im_start|>assistant\n";
      if (i > last_query && (last || !reasoning.empty())) {
        // reasoning_content.strip('\n')
        out += "<think>\n";
        out += RStripNewlines(LStripNewlines(reasoning));
        out += "\n</think>\n\n";
        out += LStripNewlines(content);
      } else {
        out += content;
      }
      // The template's tool_calls loop: "\n" between calls (and after content),
      // arguments written as given when a string, else through tojson.
      const nlohmann::ordered_json calls =
          JsonArray(m.tool_calls_json, "tool_calls").value_or(nlohmann::ordered_json::array());
      for (size_t k = 0; k < calls.size(); ++k) {
        if (k > 0 || !content.empty()) out += "\n";
        const nlohmann::ordered_json& call =
            calls[k].is_object() && calls[k].contains("function") && !calls[k]["function"].is_null()
                ? calls[k]["function"]
                : calls[k];
        out += "<tool_call>\n{\"name\": \"";
        if (call.is_object() && call.contains("name")) {
          const auto& name = call["name"];
          out += name.is_string() ? name.get<std::string>() : PyDumps(name);
        }
        out += "\", \"arguments\": ";
        if (call.is_object() && call.contains("arguments")) {
          const auto& args = call["arguments"];
          out += args.is_string() ? args.get<std::string>() : PyDumps(args);
        }
        out += "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool" && (qwen3 || tool_response_)) {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
      if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (!qwen3 && !tool_response_) {
      turn(m.role, m.content);  // plain ChatML writes any role
    }
    // Qwen templates write nothing for other roles.
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (qwen3 && options.enable_thinking.has_value() && !*options.enable_thinking) {
      out += "<think>\n\n</think>\n\n";
    }
  }
  return out;
}

Result<std::string> ChatTemplate::ApplyLlama3(std::span<const ChatMessage> messages,
                                              const ChatOptions& options) const {
  std::string out = bos_token_;
  auto turn = [&](std::string_view role, std::string_view content) {
    out += "<|start_header_id|>";
    out += role;
    out += "<|end_header_id|>\n\n";
    out += content;
    out += "<|eot_id|>";
  };
  if (!llama31_) {
    // Meta-Llama-3-Instruct: every message as a header block, content trimmed;
    // the assistant header is always appended (the template ignores
    // add_generation_prompt).
    // `message['content'] | trim` of a None content is "None"; tool_calls are
    // not read.
    for (const ChatMessage& m : messages) {
      turn(m.role, m.content_null ? "None" : PyStrip(m.content));
    }
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  // Llama 3.1+: a system block always comes first, with the dates.
  // Templates with a tools section (Llama 3.1, 3.2, 3.3 Instruct) announce the
  // ipython environment there and write the tool definitions, each through
  // `tojson(indent=4)`, either into the first user turn (the default,
  // tools_in_user_message) or into the system block. `tools` present but empty
  // is still "not none" to the template.
  const bool tools = llama_tools_ && !options.tools_json.empty();
  const bool tools_in_user = options.tools_in_user_message.value_or(true);
  std::string tool_text;
  if (tools) {
    tool_text = std::string(kLlamaCallFormat) + "Do not use variables.\n\n";
    for (const auto& t :
         JsonArray(options.tools_json, "tools").value_or(nlohmann::ordered_json{})) {
      PyDumps(t, &tool_text, 4);
      tool_text += "\n\n";
    }
  }
  // `content | trim` of a null content is "None".
  const auto trimmed = [](const ChatMessage& m) {
    return m.content_null ? std::string("None") : PyStrip(m.content);
  };
  size_t first = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = trimmed(messages[0]);
    first = 1;
  }
  std::string date = options.date_string;
  if (date.empty()) date = llama_date_now_ ? TodayDateString() : "26 Jul 2024";
  std::string head = tools ? "Environment: ipython\n" : "";
  head += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n";
  if (tools && !tools_in_user) {
    head +=
        "You have access to the following functions. To call a function, please respond with "
        "JSON for a function call.";
    head += tool_text;
  }
  turn("system", head + system);
  if (tools && tools_in_user) {
    // The first message after the system one, whatever its role, becomes
    // the user turn that carries the tools.
    if (first == messages.size()) {
      return InvalidArgumentError(
          "chat template: the tools go into the first user message, and there is none");
    }
    turn("user",
         "Given the following functions, please respond with a JSON for a function call with its "
         "proper arguments that best answers the given prompt.\n\n" +
             tool_text + trimmed(messages[first]));
    ++first;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!m.tool_calls_json.empty()) {
      // A template without the tools section skips the turn.
      if (!llama_tools_) continue;
      // One call, as {"name": "f", "parameters": <arguments through tojson>}:
      // arguments sent as a JSON string stay a (quoted) string.
      OCTET_ASSIGN_OR_RETURN(const nlohmann::ordered_json calls,
                             JsonArray(m.tool_calls_json, "tool_calls"));
      if (calls.size() != 1) {
        return InvalidArgumentError("chat template: message " + std::to_string(i) + " has " +
                                    std::to_string(calls.size()) +
                                    " tool calls; this model's template takes one per turn");
      }
      const nlohmann::ordered_json& c = calls[0];
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string() ||
          !c["function"].contains("arguments")) {
        return InvalidArgumentError("chat template: message " + std::to_string(i) +
                                    ": a tool call needs a function name and arguments");
      }
      const nlohmann::ordered_json& call = c["function"];
      std::string text = "{\"name\": \"" + call["name"].get<std::string>() + "\", \"parameters\": ";
      PyDumps(call["arguments"], &text);
      turn("assistant", text + "}");
    } else if (m.role == "tool" || m.role == "ipython") {
      // The template writes string content through `tojson` (a string is
      // "iterable" in Jinja), i.e. as a quoted JSON string; None as "None".
      turn("ipython", m.content_null ? std::string("None") : JsonQuote(m.content));
    } else {
      turn(m.role, trimmed(m));
    }
  }
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace octet::engine
