// OpenAI tool calls: the JSON schema that forces a call (tool_choice
// "required" or a named function, decoded under structured_output.h), and the
// model's tool-call text parsed back into calls.
//
//   Hermes / Qwen:  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                   (one block per call, text around them is the content)
//   Llama-3 JSON:   {"name": "f", "parameters": {...}}  (the whole reply; also
//                   "arguments"), optionally after <|python_tag|>
//   forced call:    {"name": "f", "arguments": {...}}   (the whole reply, as the
//                   schema of ToolCallSchema makes it)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ParsedToolCalls {
  std::string content;          // the text outside the calls (trimmed); all of it when no call
  std::vector<ToolCall> calls;  // in order
};

// Calls written in any of the forms above. A block or reply that is not a
// well-formed call ({"name": string, "arguments"/"parameters": object}) stays
// in the content.
ParsedToolCalls ParseToolCalls(std::string_view text);

// The JSON schema (text) of one call: {"name": <const>, "arguments": <the
// function's parameters>} for `only_name`, or anyOf over every tool when it is
// empty. `tools_json` is the request's "tools" array. InvalidArgument names
// the tool ("tools[1].function.name ...") or an unknown `only_name`.
Result<std::string> ToolCallSchema(std::string_view tools_json, std::string_view only_name);

// Where a tool-call block may begin in streamed text: the offset of
// "<tool_call>" in `text`, or of a suffix of `text` that could begin it
// (text.size() when neither: everything before it can be sent).
size_t ToolCallHoldBack(std::string_view text);

}  // namespace octet::engine
