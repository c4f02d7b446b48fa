// The OpenAI server's structured-output and tool-call fields (internal to
// openai_server.cpp): response_format, tools, tool_choice and the messages'
// tool_calls read into a CompletionRequest, and the reply's tool-call text
// turned back into OpenAI "tool_calls" (whole, or streamed).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "octet/engine/completion.h"
#include "octet/engine/tool_calls.h"

namespace octet::engine {

struct ToolMode {
  bool parse = false;   // tools were rendered: look for calls in the reply
  bool forced = false;  // tool_choice required/named: the reply is one call's JSON
};

struct StructuredError {
  std::string param;
  std::string message;
};

// Reads the fields from the raw request body (parsed again, keys in their
// order, as the chat template's tojson writes them). `r` already holds the
// parsed messages (in the body's order).
std::optional<StructuredError> ParseStructuredFields(std::string_view body, bool chat,
                                                     const Tokenizer* tokenizer,
                                                     CompletionRequest* r, ToolMode* mode);

// OpenAI's message.tool_calls for `calls`, with fresh "call_..." ids.
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

// A chat choice whose message text holds calls: message.tool_calls, the
// content outside them (null when none) and finish_reason "tool_calls".
void ApplyToolCalls(const std::string& text, nlohmann::json* choice);

// The streamed deltas of `calls` as OpenAI sends them: per call one with its
// index, id, type and name (empty arguments), then one with the arguments.
std::vector<nlohmann::json> ToolCallDeltas(const std::vector<ToolCall>& calls);

// One streamed choice: content is passed through until a tool-call block may
// begin, then held until the end.
class ToolCallStreamFilter {
 public:
  explicit ToolCallStreamFilter(ToolMode mode) : mode_(mode) {}
  // The text that can be sent as content now.
  std::string Push(std::string_view text);
  // At the end: the content still held and the calls in it.
  ParsedToolCalls Finish();

 private:
  ToolMode mode_;
  std::string held_;
  bool in_call_ = false;
};

}  // namespace octet::engine
