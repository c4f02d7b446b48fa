#include "octet/engine/tool_calls.h"

#include "octet/base/json.h"

namespace octet::engine {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// {"name": "...", "arguments" | "parameters": {...} or a JSON string of one}.
bool CallFromJson(std::string_view text, ToolCall* call) {
  ordered_json j = ordered_json::parse(Trim(text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) return false;
  if (args->is_string()) {
    ordered_json inner =
        ordered_json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (inner.is_discarded() || !inner.is_object()) return false;
    call->arguments = inner.dump();
  } else if (args->is_object()) {
    call->arguments = args->dump();
  } else {
    return false;
  }
  call->name = name->get<std::string>();
  return true;
}

}  // namespace

ParsedToolCalls ParseToolCalls(std::string_view text) {
  ParsedToolCalls out;
  if (text.find(kOpen) != std::string_view::npos) {
    std::string content;
    size_t pos = 0;
    for (;;) {
      const size_t open = text.find(kOpen, pos);
      if (open == std::string_view::npos) {
        content += text.substr(pos);
        break;
      }
      const size_t body = open + kOpen.size();
      size_t close = text.find(kClose, body);
      const bool closed = close != std::string_view::npos;
      if (!closed) close = text.size();  // cut off by max_tokens or a stop: try anyway
      ToolCall call;
      if (CallFromJson(text.substr(body, close - body), &call)) {
        content += text.substr(pos, open - pos);
        out.calls.push_back(std::move(call));
      } else {
        content += text.substr(pos, (closed ? close + kClose.size() : close) - pos);
      }
      pos = closed ? close + kClose.size() : text.size();
    }
    out.content = std::string(Trim(content));
    if (out.calls.empty()) out.content = std::string(text);
    return out;
  }
  // Llama-3 / a forced call: the whole reply is one call.
  std::string_view body = Trim(text);
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = Trim(body.substr(kPythonTag.size()));
  ToolCall call;
  if (!body.empty() && body.front() == '{' && CallFromJson(body, &call)) {
    out.calls.push_back(std::move(call));
    return out;
  }
  out.content = std::string(text);
  return out;
}

Result<std::string> ToolCallSchema(std::string_view tools_json, std::string_view only_name) {
  ordered_json tools = ordered_json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (tools.is_discarded() || !tools.is_array() || tools.empty()) {
    return InvalidArgumentError("tools must be a non-empty array");
  }
  ordered_json alts = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const ordered_json& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object()) {
      return InvalidArgumentError(where + " must be {\"type\": \"function\", \"function\": {...}}");
    }
    const ordered_json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      return InvalidArgumentError(where + ".function.name must be a non-empty string");
    }
    const std::string name = f["name"].get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    ordered_json params = {{"type", "object"}};
    if (auto p = f.find("parameters"); p != f.end() && !p->is_null()) {
      if (!p->is_object()) {
        return InvalidArgumentError(where + ".function.parameters must be a JSON schema object");
      }
      params = *p;
      if (!params.contains("type") && !params.contains("anyOf") && !params.contains("$ref")) {
        params["type"] = "object";
      }
    }
    ordered_json call = {{"type", "object"},
                         {"properties", {{"name", {{"const", name}}}, {"arguments", params}}},
                         {"required", {"name", "arguments"}},
                         {"additionalProperties", false}};
    // $defs of the parameters stay reachable from the root as "#/$defs/...".
    alts.push_back(call);
  }
  if (alts.empty()) {
    return InvalidArgumentError("tool_choice names the function '" + std::string(only_name) +
                                "', which is not among the tools");
  }
  ordered_json schema = alts.size() == 1 ? alts[0] : ordered_json{{"anyOf", alts}};
  // Parameters that use $defs: hoist them to the root where the references point.
  for (const ordered_json& t : tools) {
    const ordered_json& p = t["function"].value("parameters", ordered_json::object());
    for (const char* key : {"$defs", "definitions"}) {
      if (p.is_object() && p.contains(key) && p[key].is_object()) {
        for (auto it = p[key].begin(); it != p[key].end(); ++it) schema[key][it.key()] = it.value();
      }
    }
  }
  return schema.dump();
}

size_t ToolCallHoldBack(std::string_view text) {
  const size_t at = text.find(kOpen);
  if (at != std::string_view::npos) return at;
  for (size_t k = std::min(text.size(), kOpen.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == kOpen.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

}  // namespace octet::engine
