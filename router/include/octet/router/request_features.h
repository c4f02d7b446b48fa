// Features of one OpenAI request that routing rules and the classifier look at.
// Extraction is cheap (one pass over the message text, no allocation per
// character) so that classify + pick replica stays in the tens of microseconds.
//
// Accepted bodies: /v1/chat/completions ("messages", optional "tools") and
// /v1/completions ("prompt" as a string or a list of strings). Message content
// may be a string or a list of parts ({"type": "text", "text": ...}); non-text
// parts (images) count as one part each but contribute no text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/json.h"

namespace octet::router {

struct RequestFeatures {
  std::string model;          // the request's "model" field
  int64_t prompt_bytes = 0;   // UTF-8 bytes of all message text (and tool schemas)
  int64_t prompt_tokens = 0;  // approximate: (prompt_bytes + 3) / 4
  int64_t last_user_bytes = 0;
  int64_t system_bytes = 0;
  int turns = 0;  // user messages
  int messages = 0;
  int tools = 0;            // tools offered ("tools" or legacy "functions")
  int tool_call_depth = 0;  // assistant tool-call rounds since the last user message
  int tool_results = 0;     // "tool"/"function" role messages in the whole request
  int max_tokens = 0;       // requested max_tokens / max_completion_tokens (0 = absent)
  bool has_code = false;    // fenced code, code-like lines, or programming vocabulary
  bool has_math = false;    // LaTeX, equations, or math vocabulary
  bool stream = false;
  std::string script;  // dominant script: latin, cjk, cyrillic, arabic, ... "none"
  // The last user message (or the prompt) lower-cased, for keywords and n-grams.
  std::string last_user_text;
  // Names of the tools offered, in request order.
  std::vector<std::string> tool_names;
};

// Extracts the features of a chat or completions request body.
RequestFeatures ExtractFeatures(const nlohmann::json& request);

// Stable 64-bit FNV-1a hash (the same on every platform and build).
uint64_t Fnv1a64(std::string_view data, uint64_t seed = 0xcbf29ce484222325ull);

// The session key a conversation gets without a session header: a hash of its
// opening (every message up to and including the first user message, role and
// text). Later turns of the same conversation share it. 0 when there is no user message.
uint64_t ConversationPrefixHash(const nlohmann::json& request);

}  // namespace octet::router
