#include "openai_structured.h"

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "octet/base/thread_annotations.h"
#include "octet/engine/structured_output.h"
#include "octet/engine/tokenizer.h"

namespace octet::engine {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Compiled grammars by schema text (the same schema comes with every request
// of a client), bounded.
Result<std::shared_ptr<const JsonGrammar>> GrammarFor(const std::string& schema) {
  struct Grammars {
    Mutex mu;
    std::map<std::string, std::shared_ptr<const JsonGrammar>> by_schema GUARDED_BY(mu);
  };
  static Grammars grammars;
  {
    MutexLock lock(grammars.mu);
    if (auto it = grammars.by_schema.find(schema); it != grammars.by_schema.end())
      return it->second;
  }
  OCTET_ASSIGN_OR_RETURN(auto g, CompileJsonSchema(schema));
  MutexLock lock(grammars.mu);
  if (grammars.by_schema.size() >= 64) grammars.by_schema.clear();
  grammars.by_schema[schema] = g;
  return g;
}

}  // namespace

std::optional<StructuredError> ParseStructuredFields(std::string_view body, bool chat,
                                                     const CompletionService& service,
                                                     CompletionRequest* r, ToolMode* mode) {
  *mode = ToolMode{};
  const ordered_json j = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;  // reported by the caller
  auto bad = [](std::string param, std::string message) {
    return StructuredError{std::move(param), std::move(message)};
  };
  std::shared_ptr<const JsonGrammar> grammar;

  // ---- response_format (and vLLM's guided_json) ----
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
      return bad("response_format", "response_format must be an object with a string 'type'");
    }
    const std::string type = (*it)["type"];
    if (type == "json_object") {
      grammar = AnyJsonObjectGrammar();
    } else if (type == "json_schema") {
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object() || !js->contains("schema")) {
        return bad("response_format",
                   "response_format.json_schema must be an object with a 'schema'");
      }
      auto g = GrammarFor((*js)["schema"].dump());
      if (!g.ok()) {
        return bad("response_format",
                   "response_format.json_schema.schema is not supported or invalid at " +
                       g.status().message());
      }
      grammar = *g;
    } else if (type != "text") {
      return bad("response_format",
                 "response_format.type must be 'text', 'json_object' or "
                 "'json_schema' (got '" +
                     type + "')");
    }
  }
  if (auto it = j.find("guided_json"); it != j.end() && !it->is_null()) {
    if (grammar) return bad("guided_json", "guided_json and response_format are exclusive");
    const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
    auto g = GrammarFor(text);
    if (!g.ok()) {
      return bad("guided_json",
                 "guided_json is not supported or invalid at " + g.status().message());
    }
    grammar = *g;
  }

  // ---- tools, tool_choice ----
  std::string tools_text;
  if (auto it = j.find("tools"); it != j.end() && !it->is_null()) {
    if (!chat) return bad("tools", "tools are for /v1/chat/completions");
    if (!it->is_array()) return bad("tools", "tools must be an array");
    if (!it->empty()) {
      tools_text = it->dump();
      if (auto s = ToolCallSchema(tools_text, ""); !s.ok())
        return bad("tools", s.status().message());
    }
  }
  std::string choice = tools_text.empty() ? "none" : "auto";
  std::string named;
  if (auto it = j.find("tool_choice"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      choice = it->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required") {
        return bad("tool_choice",
                   "tool_choice must be 'none', 'auto', 'required' or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
    } else if (it->is_object() && it->contains("function") && (*it)["function"].is_object() &&
               (*it)["function"].contains("name") && (*it)["function"]["name"].is_string()) {
      choice = "named";
      named = (*it)["function"]["name"];
    } else {
      return bad("tool_choice",
                 "tool_choice must be 'none', 'auto', 'required' or "
                 "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (choice != "none" && tools_text.empty()) {
      return bad("tool_choice", "tool_choice '" + (named.empty() ? choice : named) +
                                    "' needs a non-empty 'tools' array");
    }
  }
  if (choice != "none") {
    r->tools_json = tools_text;
    mode->parse = true;
    if (choice == "required" || choice == "named") {
      if (grammar)
        return bad("tool_choice", "a forced tool call and response_format are exclusive");
      auto schema = ToolCallSchema(tools_text, named);
      if (!schema.ok()) return bad("tool_choice", schema.status().message());
      auto g = GrammarFor(*schema);
      if (!g.ok()) {
        return bad("tools",
                   "a tool's parameters are not supported or invalid at " + g.status().message());
      }
      grammar = *g;
      mode->forced = true;
    }
  }

  // ---- the messages' tool calls ----
  if (chat) {
    if (auto m = j.find("messages"); m != j.end() && m->is_array()) {
      for (size_t i = 0; i < m->size() && i < r->messages.size(); ++i) {
        const ordered_json& msg = (*m)[i];
        if (!msg.is_object()) continue;
        auto tc = msg.find("tool_calls");
        if (tc == msg.end() || tc->is_null()) continue;
        if (!tc->is_array()) {
          return bad("messages", "messages[" + std::to_string(i) + "].tool_calls must be an array");
        }
        for (size_t k = 0; k < tc->size(); ++k) {
          const ordered_json& c = (*tc)[k];
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
              !c["function"].contains("name") || !c["function"]["name"].is_string()) {
            return bad("messages", "messages[" + std::to_string(i) + "].tool_calls[" +
                                       std::to_string(k) +
                                       "] must be {\"type\": \"function\", \"function\": "
                                       "{\"name\": ..., \"arguments\": ...}}");
          }
        }
        // OpenAI clients send the arguments as JSON text; chat templates
        // expect the object (Llama 3.1 writes a string through tojson, quoted;
        // Qwen3 writes it verbatim, spaced as the client spaced it), so the
        // text is parsed here, as vLLM does.
        ordered_json calls = *tc;
        for (size_t k = 0; k < calls.size(); ++k) {
          ordered_json& f = calls[k]["function"];
          auto a = f.find("arguments");
          if (a == f.end() || !a->is_string()) continue;
          ordered_json parsed = ordered_json::parse(a->get<std::string>(), nullptr, false);
          if (parsed.is_discarded()) {
            return bad("messages", "messages[" + std::to_string(i) + "].tool_calls[" +
                                       std::to_string(k) +
                                       "].function.arguments is not valid JSON");
          }
          *a = std::move(parsed);
        }
        if (!calls.empty()) r->messages[i].tool_calls_json = calls.dump();
      }
    }
  }

  if (grammar) {
    auto vocabulary = service.vocabulary();
    if (!vocabulary) {
      return bad("response_format", "structured output needs the model's tokenizer.json");
    }
    r->constraint = MakeGrammarConstraint(std::move(grammar), std::move(vocabulary));
  }
  return std::nullopt;
}

namespace {

std::string NewToolCallId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char id[40];
  std::snprintf(id, sizeof id, "call_%016llx",
                static_cast<unsigned long long>((salt * 0x9E3779B97F4A7C15ull) ^ ++counter));
  return id;
}

}  // namespace

json ToolCallsJson(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", NewToolCallId()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

void ApplyToolCalls(const std::string& text, json* choice) {
  ParsedToolCalls p = ParseToolCalls(text);
  if (p.calls.empty()) return;
  json& m = (*choice)["message"];
  m["content"] = p.content.empty() ? json(nullptr) : json(p.content);
  m["tool_calls"] = ToolCallsJson(p.calls);
  (*choice)["finish_reason"] = "tool_calls";
}

// ---- streamed tool calls ----

namespace {

constexpr std::string_view kOpenTag = "<tool_call>";
constexpr std::string_view kCloseTag = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsJsonWs(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Whether `t` (a call's text so far) begins {"name": "...", "arguments" or
// "parameters": { — 1 (the name, *args the offset of that last '{'), 0 (it may
// still: more text needed) or -1 (it cannot).
int MatchCallHead(std::string_view t, std::string* name, size_t* args) {
  size_t i = 0;
  auto ws = [&] {
    while (i < t.size() && IsJsonWs(t[i])) ++i;
  };
  auto lit = [&](std::string_view l) {
    for (char c : l) {
      if (i >= t.size()) return 0;
      if (t[i] != c) return -1;
      ++i;
    }
    return 1;
  };
  ws();
  if (int r = lit("{"); r != 1) return r;
  ws();
  if (int r = lit("\"name\""); r != 1) return r;
  ws();
  if (int r = lit(":"); r != 1) return r;
  ws();
  if (i >= t.size()) return 0;
  if (t[i] != '"') return -1;
  const size_t begin = i++;
  for (bool escape = false;; ++i) {
    if (i >= t.size()) return 0;
    if (escape) {
      escape = false;
    } else if (t[i] == '\\') {
      escape = true;
    } else if (t[i] == '"') {
      break;
    }
  }
  ++i;
  const json parsed = json::parse(t.substr(begin, i - begin), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_string()) return -1;
  ws();
  if (int r = lit(","); r != 1) return r;
  ws();
  const std::string_view rest = t.substr(i);
  size_t key = 0;
  bool may = false;
  for (std::string_view k :
       {std::string_view("\"arguments\""), std::string_view("\"parameters\"")}) {
    if (rest.size() >= k.size() && rest.substr(0, k.size()) == k) key = k.size();
    if (rest.size() < k.size() && k.substr(0, rest.size()) == rest) may = true;
  }
  if (key == 0) return may ? 0 : -1;
  i += key;
  ws();
  if (int r = lit(":"); r != 1) return r;
  ws();
  if (i >= t.size()) return 0;
  if (t[i] != '{') return -1;
  *name = parsed.get<std::string>();
  *args = i;
  return 1;
}

}  // namespace

std::vector<json> ToolCallStreamFilter::Push(std::string_view text) {
  std::vector<json> out;
  if (phase_ == Phase::kStart || (phase_ == Phase::kCall && whole_)) raw_ += text;
  if (phase_ == Phase::kCall) {
    call_ += text;
  } else {
    held_ += text;
  }
  Step(&out);
  return out;
}

void ToolCallStreamFilter::Step(std::vector<json>* out) {
  for (;;) {
    switch (phase_) {
      case Phase::kStart: {
        // The Llama-3 form is the whole reply: decided by its first bytes.
        const size_t b = held_.find_first_not_of(" \t\r\n");
        if (b == std::string::npos) return;
        const std::string_view t = std::string_view(held_).substr(b);
        if (t.size() < kPythonTag.size() && kPythonTag.substr(0, t.size()) == t) return;
        size_t body = b;
        if (t.substr(0, kPythonTag.size()) == kPythonTag) body = b + kPythonTag.size();
        if (body != b || held_[b] == '{') {
          phase_ = Phase::kCall;
          whole_ = true;
          call_ = held_.substr(body);
          held_.clear();
          state_ = 0;
          continue;
        }
        phase_ = Phase::kText;
        raw_.clear();
        continue;
      }
      case Phase::kText: {
        if (after_call_) {  // the newline between blocks, as the whole reply's content trims it
          const size_t b = held_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) return;
          held_.erase(0, b);
          after_call_ = false;
        }
        const size_t k = ToolCallHoldBack(held_);
        if (k > 0) out->push_back({{"content", held_.substr(0, k)}});
        held_.erase(0, k);
        if (held_.compare(0, kOpenTag.size(), kOpenTag) != 0) return;
        phase_ = Phase::kCall;
        whole_ = false;
        call_ = held_.substr(kOpenTag.size());
        held_.clear();
        state_ = 0;
        continue;
      }
      case Phase::kCall:
        if (!CallStep(out)) return;
        held_ = std::move(call_);
        call_.clear();
        phase_ = Phase::kText;
        after_call_ = true;
        continue;
    }
  }
}

bool ToolCallStreamFilter::CallStep(std::vector<json>* out) {
  if (state_ == 0) {
    std::string name;
    size_t args = 0;
    const int m = MatchCallHead(call_, &name, &args);
    if (m == 0) return false;
    if (m < 0) {
      state_ = -1;  // held to its end, then sent whole (or as content)
    } else {
      Head(name, out);
      state_ = 1;
      scan_ = args;
      depth_ = 0;
      in_string_ = escape_ = false;
    }
  }
  if (state_ == -1) {
    if (whole_) return false;  // until Finish
    const size_t close = call_.find(kCloseTag);
    if (close == std::string::npos) return false;
    if (!WholeCall(std::string_view(call_).substr(0, close), out)) {
      out->push_back(
          {{"content", std::string(kOpenTag) + call_.substr(0, close + kCloseTag.size())}});
      after_call_ = false;
    }
    call_.erase(0, close + kCloseTag.size());
    return true;
  }
  if (state_ == 1) {
    const size_t from = scan_;
    while (scan_ < call_.size() && state_ == 1) {
      const char c = call_[scan_++];
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        state_ = 2;
        ++complete_;
      }
    }
    if (scan_ > from) Fragment(std::string_view(call_).substr(from, scan_ - from), out);
    if (state_ == 1) return false;
  }
  // After the arguments: the call's closing brace (and for a block its tag).
  if (whole_) return false;
  const size_t close = call_.find(kCloseTag, scan_);
  if (close == std::string::npos) return false;
  call_.erase(0, close + kCloseTag.size());
  return true;
}

void ToolCallStreamFilter::Head(const std::string& name, std::vector<json>* out) {
  const int index = calls_++;
  out->push_back(
      {{"tool_calls", json::array({{{"index", index},
                                    {"id", NewToolCallId()},
                                    {"type", "function"},
                                    {"function", {{"name", name}, {"arguments", ""}}}}})}});
}

void ToolCallStreamFilter::Fragment(std::string_view args, std::vector<json>* out) {
  out->push_back(
      {{"tool_calls",
        json::array({{{"index", calls_ - 1}, {"function", {{"arguments", std::string(args)}}}}})}});
}

bool ToolCallStreamFilter::WholeCall(std::string_view body, std::vector<json>* out) {
  const ParsedToolCalls p = ParseToolCalls(body);
  if (p.calls.size() != 1 || !p.content.empty()) return false;
  Head(p.calls[0].name, out);
  Fragment(p.calls[0].arguments, out);
  ++complete_;
  return true;
}

std::vector<json> ToolCallStreamFilter::Finish(bool* called) {
  std::vector<json> out;
  switch (phase_) {
    case Phase::kStart:
      if (!held_.empty()) out.push_back({{"content", held_}});
      break;
    case Phase::kText:
      if (!held_.empty() && !after_call_) out.push_back({{"content", held_}});
      break;
    case Phase::kCall:
      if (state_ <= 0) {  // a call never streamed: parsed whole, as the non-streamed reply
        if (whole_) {
          if (!WholeCall(raw_, &out)) out.push_back({{"content", raw_}});
        } else if (!WholeCall(call_, &out)) {
          out.push_back({{"content", std::string(kOpenTag) + call_}});
        }
      }
      // Cut off in the arguments: they went out as far as they came.
      break;
  }
  held_.clear();
  call_.clear();
  *called = complete_ > 0;
  return out;
}

}  // namespace octet::engine
