// The OpenAI server's structured-output and tool-call fields (internal to
// openai_server.cpp): response_format, tools, tool_choice and the messages'
// tool_calls read into a CompletionRequest, and the reply's tool-call text
// turned back into OpenAI "tool_calls" (whole, or streamed).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/json.h"
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
                                                     const CompletionService& service,
                                                     CompletionRequest* r, ToolMode* mode);

// OpenAI's message.tool_calls for `calls`, with fresh "call_..." ids.
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

// A chat choice whose message text holds calls: message.tool_calls, the
// content outside them (null when none) and finish_reason "tool_calls".
void ApplyToolCalls(const std::string& text, nlohmann::json* choice);

// One streamed choice's text, turned into the deltas OpenAI streams: content
// passes through until a call may begin; a call's head (index, id, type,
// name, empty arguments) goes out as soon as its name is read, then its
// arguments as they come, fragment by fragment. Calls are Hermes/Qwen
// `<tool_call>{...}</tool_call>` blocks anywhere in the reply, or the
// Llama-3 JSON form (the whole reply one `{"name": ..., "parameters"|
// "arguments": {...}}`, optionally after <|python_tag|>; a forced call is
// this form). A call written otherwise (keys in another order, arguments as
// a JSON string) is held to its end and sent whole; text that turns out not
// to be a call goes out as content, as the non-streamed reply has it.
class ToolCallStreamFilter {
 public:
  explicit ToolCallStreamFilter(ToolMode mode) : mode_(mode) {}
  // The deltas for the next piece of text, in order: {"content": ...} and
  // {"tool_calls": [...]}.
  std::vector<nlohmann::json> Push(std::string_view text);
  // At the end: the deltas still held. `*called`: whether the reply made a
  // complete call (finish_reason "tool_calls").
  std::vector<nlohmann::json> Finish(bool* called);

 private:
  enum class Phase : uint8_t { kStart, kText, kCall };
  void Step(std::vector<nlohmann::json>* out);
  // kCall: reads call_ further; true when the call (and for a block, its
  // closing tag) is over.
  bool CallStep(std::vector<nlohmann::json>* out);
  void Head(const std::string& name, std::vector<nlohmann::json>* out);
  void Fragment(std::string_view args, std::vector<nlohmann::json>* out);
  // A held call's text parsed whole: its deltas, or false.
  bool WholeCall(std::string_view body, std::vector<nlohmann::json>* out);

  ToolMode mode_;
  Phase phase_ = Phase::kStart;
  std::string held_;    // kStart/kText: text not sent yet
  std::string raw_;     // the Llama-3 form: the reply so far (content if it is no call)
  bool whole_ = false;  // kCall: the Llama-3 form (else a <tool_call> block)
  std::string call_;    // kCall: the call's text after its opening
  int state_ = 0;       // kCall: 0 reading the head, 1 arguments, 2 after them, -1 held
  size_t scan_ = 0;     // kCall, arguments: how far call_ is scanned and sent
  int depth_ = 0;       // ... the arguments' nesting depth there
  bool in_string_ = false, escape_ = false;
  int calls_ = 0;            // calls begun
  int complete_ = 0;         // calls complete
  bool after_call_ = false;  // kText: whitespace right after a call is dropped
};

}  // namespace octet::engine
