// The OpenAI request body as `octet serve` reads it: the body of a POST to
// /v1/chat/completions (chat) or /v1/completions, checked field by field into
// a CompletionRequest. The server's handlers use the same field readers
// (namespace openai below, openai_request.cpp); ParseOpenAiRequestBody exists
// so that the body parser can be driven on its own (the fuzz target
// tests/fuzz/fuzz_openai_request.cpp). Fields read in the handler after these
// (response_format, tools) are not covered.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/json.h"
#include "octet/base/status.h"
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

namespace openai {

using nlohmann::json;

// An error reply: OpenAI's {"error": {message, type, param, code}}.
struct HttpError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

json ErrorBody(const HttpError& e);
// A Status from the engine as an HTTP error.
HttpError FromStatus(const Status& s);

// Each reads its fields of `j` into `r`, or says which one is wrong.
// The fields every generation request shares.
std::optional<HttpError> ParseCommon(const json& j, CompletionRequest* r, bool* stream,
                                     bool* include_usage, bool* return_ids);
// Chat: `logprobs` (boolean) and `top_logprobs` (0..20, needs logprobs);
// completions: `logprobs` (an integer 0..20: alternatives per token).
std::optional<HttpError> ParseLogprobs(const json& j, bool chat, CompletionRequest* r);
// `repetition_penalty` (a vLLM extension), and the model's generation_config.json defaults for
// every sampling field the request leaves out.
std::optional<HttpError> ApplyGenerationDefaults(const json& j, const GenerationDefaults& d,
                                                 CompletionRequest* r);
std::optional<HttpError> ParseMessages(const json& j, CompletionRequest* r);  // chat
std::optional<HttpError> ParsePrompt(const json& j, CompletionRequest* r);    // completions

// Chat's choices[].logprobs.content entries for `lps`.
json ChatLogprobs(const Tokenizer* tok, const std::vector<TokenLogprob>& lps);
// Completions' choices[].logprobs; text offsets count from `*offset`
// (advanced past these tokens).
json CompletionLogprobs(const Tokenizer* tok, const std::vector<TokenLogprob>& lps,
                        int64_t* offset);
// The prompt counts once (n > 1 shares it); the completions of every choice add up.
json Usage(const std::vector<CompletionDelta>& finals);
json Timings(const CompletionDelta& d);
// "stop" or "length": a cancelled request never reaches a client.
std::string FinishReason(const std::string& r);

}  // namespace openai

}  // namespace octet::engine
