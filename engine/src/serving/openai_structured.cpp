#include "openai_structured.h"

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "octet/engine/structured_output.h"
#include "octet/engine/tokenizer.h"

namespace octet::engine {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// One trie per tokenizer for the server's life (tokenizers outlive requests).
std::shared_ptr<const TokenTrie> VocabFor(const Tokenizer* tok) {
  static std::mutex mu;
  static std::map<const Tokenizer*, std::shared_ptr<const TokenTrie>> tries;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = tries[tok];
  if (!t) t = TokenTrie::Build(*tok);
  return t;
}

// Compiled grammars by schema text (the same schema comes with every request
// of a client), bounded.
Result<std::shared_ptr<const JsonGrammar>> GrammarFor(const std::string& schema) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const JsonGrammar>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(schema); it != cache.end()) return it->second;
  }
  OCTET_ASSIGN_OR_RETURN(auto g, CompileJsonSchema(schema));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 64) cache.clear();
  cache[schema] = g;
  return g;
}

}  // namespace

std::optional<StructuredError> ParseStructuredFields(std::string_view body, bool chat,
                                                     const Tokenizer* tok, CompletionRequest* r,
                                                     ToolMode* mode) {
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
        if (!tc->empty()) r->messages[i].tool_calls_json = tc->dump();
      }
    }
  }

  if (grammar) {
    if (!tok) return bad("response_format", "structured output needs the model's tokenizer.json");
    r->constraint = MakeGrammarConstraint(std::move(grammar), VocabFor(tok));
  }
  return std::nullopt;
}

json ToolCallsJson(const std::vector<ToolCall>& calls) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  json out = json::array();
  for (const ToolCall& c : calls) {
    char id[40];
    std::snprintf(id, sizeof id, "call_%016llx",
                  static_cast<unsigned long long>((salt * 0x9E3779B97F4A7C15ull) ^ ++counter));
    out.push_back({{"id", id},
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

std::vector<json> ToolCallDeltas(const std::vector<ToolCall>& calls) {
  const json full = ToolCallsJson(calls);
  std::vector<json> out;
  for (size_t k = 0; k < full.size(); ++k) {
    json head = {{"index", k},
                 {"id", full[k]["id"]},
                 {"type", "function"},
                 {"function", {{"name", full[k]["function"]["name"]}, {"arguments", ""}}}};
    out.push_back({{"tool_calls", json::array({head})}});
    json args = {{"index", k}, {"function", {{"arguments", full[k]["function"]["arguments"]}}}};
    out.push_back({{"tool_calls", json::array({args})}});
  }
  return out;
}

std::string ToolCallStreamFilter::Push(std::string_view text) {
  held_ += text;
  if (mode_.forced || in_call_) return {};
  const size_t k = ToolCallHoldBack(held_);
  if (held_.compare(k, 11, "<tool_call>") == 0) in_call_ = true;
  std::string out = held_.substr(0, k);
  held_.erase(0, k);
  return out;
}

ParsedToolCalls ToolCallStreamFilter::Finish() {
  ParsedToolCalls p = ParseToolCalls(held_);
  held_.clear();
  return p;
}

}  // namespace octet::engine
