// The OpenAI request body parser of `octet serve` (engine/src/serving): any
// bytes, read as a chat or a completions body (the first byte picks), give a
// request or a 4xx error with a message — never an exception (the server
// would answer 500) or a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const octet::engine::OpenAiRequestParse p = octet::engine::ParseOpenAiRequestBody(body, chat);
  if (p.ok) {
    const octet::engine::CompletionRequest& r = p.request;
    if (chat && (!r.chat || r.messages.empty())) std::abort();
    if (!chat && !r.has_prompt_ids && !r.prompt_ids.empty()) std::abort();
    if (r.max_tokens && *r.max_tokens < 1) std::abort();
    if (r.stop.size() > 16) std::abort();
    for (int32_t id : r.prompt_ids) {
      if (id < 0) std::abort();
    }
  } else if (p.status < 400 || p.status > 499 || p.message.empty()) {
    std::abort();
  }
  return 0;
}
