#include "octet/engine/completion.h"

#include <algorithm>

namespace octet::engine {

CompletionService::CompletionService(Scheduler& scheduler, const Tokenizer* tokenizer,
                                     std::string model_name)
    : scheduler_(scheduler), tokenizer_(tokenizer), model_name_(std::move(model_name)) {}

std::shared_ptr<const TokenTrie> CompletionService::vocabulary() const {
  if (!tokenizer_) return nullptr;
  MutexLock lock(vocabulary_mu_);
  if (!vocabulary_) vocabulary_ = TokenTrie::Build(*tokenizer_);
  return vocabulary_;
}

Result<std::vector<int32_t>> CompletionService::PromptIds(const CompletionRequest& r) const {
  if (r.has_prompt_ids) return r.prompt_ids;
  if (!tokenizer_) {
    return InvalidArgumentError(
        "this model has no tokenizer.json: send the prompt as token ids (\"prompt\": [1, 2, 3] "
        "on /v1/completions)");
  }
  if (r.chat) {
    if (r.messages.empty()) return InvalidArgumentError("'messages' must not be empty");
    ChatOptions opts;
    opts.add_generation_prompt = true;
    opts.enable_thinking = r.enable_thinking;
    opts.tools_in_user_message = r.tools_in_user_message;
    opts.tools_json = r.tools_json;
    if (!r.tools_json.empty() && !tokenizer_->chat_template().RendersTools()) {
      return InvalidArgumentError("'tools': this model's chat template (" +
                                  std::string(tokenizer_->chat_template().family_name()) +
                                  ") has no tools section");
    }
    OCTET_ASSIGN_OR_RETURN(std::string text, tokenizer_->chat_template().Apply(r.messages, opts));
    EncodeOptions eo;
    eo.add_special_tokens = false;  // the template writes BOS itself where the family has one
    return tokenizer_->Encode(text, eo);
  }
  EncodeOptions eo;
  eo.add_special_tokens = true;  // as the tokenizer's post-processor says (Llama-3: BOS)
  return tokenizer_->Encode(r.prompt, eo);
}

Result<std::unique_ptr<CompletionStream>> CompletionService::Start(const CompletionRequest& r) {
  if (r.n != 1) return InvalidArgumentError("Start takes n = 1 (StartN serves n > 1)");
  OCTET_ASSIGN_OR_RETURN(auto streams, StartN(r));
  return std::move(streams.front());
}

Result<std::vector<std::unique_ptr<CompletionStream>>> CompletionService::StartN(
    const CompletionRequest& r) {
  if (!r.stop.empty() && !tokenizer_) {
    return InvalidArgumentError("'stop' strings need a tokenizer; this model has none");
  }
  for (const std::string& s : r.stop) {
    if (s.empty()) return InvalidArgumentError("'stop' strings must not be empty");
  }
  OCTET_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptIds(r));
  if (prompt.empty()) return InvalidArgumentError("the prompt encodes to no tokens");
  GenerationParams p;
  p.max_tokens = r.max_tokens ? *r.max_tokens
                              : scheduler_.options().context - static_cast<int64_t>(prompt.size());
  if (!r.max_tokens && defaults_.max_new_tokens) {
    p.max_tokens = std::min(p.max_tokens, *defaults_.max_new_tokens);
  }
  if (!r.max_tokens && p.max_tokens < 1) {
    return OutOfRangeError("the prompt (" + std::to_string(prompt.size()) +
                           " tokens) leaves no room in the context of " +
                           std::to_string(scheduler_.options().context));
  }
  p.prompt = std::move(prompt);
  p.sampling = r.sampling;
  p.ignore_eos = r.ignore_eos;
  p.min_tokens = r.min_tokens;
  p.logprobs = r.logprobs;
  p.constraint = r.constraint;
  if (tokenizer_) p.stop_ids = tokenizer_->StopIds();
  if (p.stop_ids.empty()) p.stop_ids = scheduler_.config().eos_token_ids;
  const int64_t prompt_tokens = static_cast<int64_t>(p.prompt.size());
  OCTET_ASSIGN_OR_RETURN(auto requests, scheduler_.SubmitN(std::move(p), r.n));
  std::vector<std::unique_ptr<CompletionStream>> out;
  for (auto& request : requests) {
    std::unique_ptr<CompletionStream> s(new CompletionStream());
    s->request_ = std::move(request);
    s->tokenizer_ = tokenizer_;
    s->prompt_tokens_ = prompt_tokens;
    if (tokenizer_) {
      DecodeOptions d;
      d.skip_special_tokens = true;
      d.skip_unknown_ids = true;  // padded embedding rows the tokenizer lacks
      s->decoder_ = std::make_unique<StreamDecoder>(*tokenizer_, d);
    }
    s->stop_ = r.stop;
    for (const std::string& st : r.stop) s->hold_back_ = std::max(s->hold_back_, st.size() - 1);
    out.push_back(std::move(s));
  }
  return out;
}

CompletionStream::~CompletionStream() {
  if (request_ && !finished_) request_->Cancel();
}

// Text that can be returned now: everything when final, otherwise all but the
// last hold_back_ bytes (they may begin a stop string), cut at a character
// boundary.
std::string CompletionStream::TakeText(bool final) {
  size_t n = pending_.size();
  if (!final) {
    n = n > hold_back_ ? n - hold_back_ : 0;
    while (n > 0 && n < pending_.size() && (static_cast<uint8_t>(pending_[n]) & 0xC0) == 0x80) --n;
  }
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

bool CompletionStream::Next(Deadline deadline, CompletionDelta* d) {
  RequestUpdate u;
  if (finished_) {
    *d = CompletionDelta();
    d->done = true;
    return true;
  }
  if (!request_->Next(deadline, &u)) return false;
  d->ids.clear();
  d->logprobs.clear();
  d->text.clear();
  d->prompt_tokens = u.prompt_tokens;
  d->completion_tokens = u.completion_tokens;
  d->timing = u.timing;
  d->done = u.done;
  d->finish_reason = u.finish_reason;
  d->error = u.error;
  for (int32_t id : u.ids) {
    if (stopped_) break;
    if (d->ids.size() < u.logprobs.size())
      d->logprobs.push_back(std::move(u.logprobs[d->ids.size()]));
    d->ids.push_back(id);
    if (!decoder_) continue;
    auto piece = decoder_->Push(id);
    if (piece.ok()) pending_ += *piece;
    if (stop_.empty()) continue;
    size_t cut = std::string::npos;
    for (const std::string& st : stop_) cut = std::min(cut, pending_.find(st));
    if (cut != std::string::npos) {
      pending_.resize(cut);
      stopped_ = true;
      request_->Cancel();
    }
  }
  if (stopped_) {
    // The stop string ended it: report "stop" now, whatever the scheduler does next.
    d->completion_tokens = u.completion_tokens - static_cast<int64_t>(u.ids.size()) +
                           static_cast<int64_t>(d->ids.size());
    d->text = TakeText(true);
    d->done = true;
    d->finish_reason = "stop";
    d->error = Status::Ok();
    finished_ = true;
    return true;
  }
  if (u.done && decoder_) pending_ += decoder_->Finish();
  d->text = TakeText(u.done);
  if (u.done) finished_ = true;
  return true;
}

}  // namespace octet::engine
