// The OpenAI request body as `octet serve` reads it: the body of a POST to
// /v1/chat/completions (chat) or /v1/completions, checked field by field into
// a CompletionRequest. The server's handlers use the same field readers; this
// entry point exists so that the body parser can be driven on its own (the
// fuzz target tests/fuzz/fuzz_openai_request.cpp). Fields read in the
// handler after these (response_format, tools) are not covered.
#pragma once

#include <string>
#include <string_view>

#include "octet/engine/completion.h"

namespace octet::engine {

struct OpenAiRequestParse {
  bool ok = false;
  int status = 0;       // the HTTP status of the error reply when !ok
  std::string message;  // the error's message when !ok
  std::string param;    // the field it names ("" when none)
  CompletionRequest request;
  bool stream = false;
  bool include_usage = false;
  bool return_ids = false;
};

OpenAiRequestParse ParseOpenAiRequestBody(std::string_view body, bool chat);

}  // namespace octet::engine
