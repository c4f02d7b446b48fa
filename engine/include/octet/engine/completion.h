// Text in, text out on top of the Scheduler: what the OpenAI HTTP server and
// the gRPC InferenceService (app/) share. A request is a chat (the model's
// chat template is applied), a plain text prompt, or token ids; the reply
// streams as ids plus the text they complete (partial UTF-8 held back), with
// OpenAI `stop` strings cut out of the text.
//
//   CompletionService svc(scheduler, &tokenizer, "qwen3-8b");
//   CompletionRequest r;  r.chat = true;  r.messages = {{"user", "Hi"}};
//   OCTET_ASSIGN_OR_RETURN(auto stream, svc.Start(r));
//   CompletionDelta d;
//   while (stream->Next(Deadline::AfterMs(500), &d)) { print(d.text); if (d.done) break; }
//
// Thread-safety: CompletionService is thread-safe (the tokenizer is
// immutable); a CompletionStream belongs to one consumer thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/status.h"
#include "octet/base/thread_annotations.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/generation_defaults.h"
#include "octet/engine/scheduler.h"
#include "octet/engine/structured_output.h"
#include "octet/engine/tokenizer.h"

namespace octet::engine {

struct CompletionRequest {
  bool chat = false;                  // messages + chat template
  std::vector<ChatMessage> messages;  // chat
  // chat_template_kwargs the chat templates read: Qwen3's enable_thinking,
  // Llama 3.1+'s tools_in_user_message.
  std::optional<bool> enable_thinking;
  std::optional<bool> tools_in_user_message;
  bool has_prompt_ids = false;        // prompt_ids instead of prompt text
  std::string prompt;                 // plain text (tokenized, special tokens added)
  std::vector<int32_t> prompt_ids;
  std::optional<int64_t> max_tokens;  // absent: up to the end of the context
  SamplingParams sampling;
  std::vector<std::string> stop;      // stop strings (text; need a tokenizer)
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  int logprobs = -1;  // -1: none; 0..kMaxTopLogprobs: each token's and that many alternatives
  int n = 1;          // sequences (StartN; Start takes 1)
  // Chat: the OpenAI "tools" array (JSON text) for the template to render;
  // empty: none. A template without a tools section refuses it.
  std::string tools_json;
  // Grammar-constrained decoding (structured_output.h): response_format, forced tool calls.
  std::shared_ptr<const TokenConstraint> constraint;
};

struct CompletionDelta {
  std::vector<int32_t> ids;  // new ids
  std::vector<TokenLogprob> logprobs;  // one per id when the request asked for logprobs
  std::string text;          // new text (complete UTF-8), stop strings removed
  bool done = false;
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  Status error;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  RequestTiming timing;
};

class CompletionStream {
 public:
  ~CompletionStream();
  // Waits for new ids/text or the end (true), or `deadline` with nothing new (false).
  bool Next(Deadline deadline, CompletionDelta* delta);
  void Cancel() { request_->Cancel(); }
  // See RequestStream::SetNotify (called on the scheduler thread).
  void SetNotify(std::function<void()> notify) { request_->SetNotify(std::move(notify)); }
  int64_t prompt_tokens() const { return prompt_tokens_; }

 private:
  friend class CompletionService;
  CompletionStream() = default;
  std::string TakeText(bool final);

  std::shared_ptr<RequestStream> request_;
  const Tokenizer* tokenizer_ = nullptr;
  std::unique_ptr<StreamDecoder> decoder_;
  std::vector<std::string> stop_;
  size_t hold_back_ = 0;  // bytes that might begin a stop string
  std::string pending_;   // decoded, not yet returned
  bool stopped_ = false;  // a stop string matched: the request was cancelled by us
  bool finished_ = false;
  int64_t prompt_tokens_ = 0;
};

class CompletionService {
 public:
  // `tokenizer` may be null (token-id requests only); `model_name` is what
  // clients must send as "model" (empty: any name is accepted).
  CompletionService(Scheduler& scheduler, const Tokenizer* tokenizer, std::string model_name);

  const std::string& model_name() const { return model_name_; }
  // The model's generation_config.json defaults: the server fills a request's
  // absent sampling fields from them, and a request without max_tokens gets
  // max_new_tokens (never past the end of the context).
  void set_defaults(GenerationDefaults defaults) { defaults_ = std::move(defaults); }
  const GenerationDefaults& defaults() const { return defaults_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // The tokenizer's vocabulary as a trie for structured output's token masks,
  // built on first use (a second or two for a 150k vocabulary) and kept for
  // the service's life; null without a tokenizer.
  std::shared_ptr<const TokenTrie> vocabulary() const;
  Scheduler& scheduler() { return scheduler_; }

  // The prompt ids a request stands for (template applied, tokenized).
  Result<std::vector<int32_t>> PromptIds(const CompletionRequest& request) const;
  // Starts generation. Errors as Scheduler::Submit, plus InvalidArgument for
  // text without a tokenizer or a malformed conversation.
  Result<std::unique_ptr<CompletionStream>> Start(const CompletionRequest& request);
  // request.n streams of one prompt (Scheduler::SubmitN: one prefill, stream
  // i sampling with seed + i), in index order.
  Result<std::vector<std::unique_ptr<CompletionStream>>> StartN(const CompletionRequest& request);

 private:
  Scheduler& scheduler_;
  const Tokenizer* tokenizer_;
  std::string model_name_;
  GenerationDefaults defaults_;
  mutable Mutex vocabulary_mu_;
  mutable std::shared_ptr<const TokenTrie> vocabulary_ GUARDED_BY(vocabulary_mu_);
};

}  // namespace octet::engine
