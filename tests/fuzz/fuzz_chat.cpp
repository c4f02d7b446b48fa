// The chat path's text that comes from outside: a model's chat template
// (tokenizer_config.json, recognised by ChatTemplate::Detect, which also digs
// a default system prompt out of it), a client's messages, tools and past
// tool calls (rendered by Apply), and the model's own reply parsed back into
// tool calls (ParseToolCalls; a prompt can steer it). Any bytes give rendered
// text or an error with a message, and well-formed calls — never a crash.
//
// Input: four parts separated by NUL bytes — template, messages, tools JSON,
// model reply. Messages are separated by 0x01; in each, 0x02 separates role,
// content and the tool_calls JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/json.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/tool_calls.h"

namespace {

std::vector<std::string_view> Split(std::string_view s, char sep, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = s.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + 1);
  }
  parts.push_back(s);
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet::engine;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> part = Split(in, '\0', 4);
  part.resize(4);

  const ChatTemplate t = ChatTemplate::Detect(part[0], "<s>");
  if (t.family() == ChatFamily::kPlain && t.warning().empty()) std::abort();
  if (t.family() != ChatFamily::kPlain && !t.warning().empty()) std::abort();

  std::vector<ChatMessage> messages;
  for (std::string_view m : Split(part[1], '\x01', 64)) {
    const std::vector<std::string_view> f = Split(m, '\x02', 3);
    ChatMessage msg;
    msg.role = std::string(f[0]);
    if (f.size() > 1) msg.content = std::string(f[1]);
    if (f.size() > 2) msg.tool_calls_json = std::string(f[2]);
    msg.content_null = msg.content.empty() && !msg.tool_calls_json.empty();
    messages.push_back(std::move(msg));
  }
  ChatOptions options;
  options.tools_json = std::string(part[2]);
  options.add_generation_prompt = size % 2 == 0;
  if (size % 3 == 0) options.enable_thinking = size % 5 == 0;
  options.date_string = "26 Jul 2024";  // not today's: a reproducible input
  const octet::Result<std::string> text = t.Apply(messages, options);
  if (!text.ok() && text.status().message().empty()) std::abort();

  const ParsedToolCalls parsed = ParseToolCalls(part[3]);
  for (const ToolCall& c : parsed.calls) {
    if (c.name.empty()) std::abort();
    const auto args = nlohmann::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) std::abort();
  }
  if (ToolCallHoldBack(part[3]) > part[3].size()) std::abort();

  // A schema for a forced call from the same tools: valid JSON when accepted.
  const octet::Result<std::string> schema = ToolCallSchema(part[2], "");
  if (schema.ok()) {
    if (nlohmann::json::parse(*schema, nullptr, false).is_discarded()) std::abort();
  } else if (schema.status().message().empty()) {
    std::abort();
  }
  return 0;
}
