// Sampling and the single-request generation loop (prefill the prompt, then
// decode one token at a time through the KV cache), as `octet generate` uses
// it. A serving scheduler drives Model::Forward itself with many sequences and
// uses Sampler per request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/draft_length.h"
#include "octet/engine/model.h"
#include "octet/engine/model_runner.h"
#include "octet/kernels/backend.h"

namespace octet::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;
  // > 0; 1: none. Transformers' rule: the logit of every id already in the
  // prompt or the output is divided by it when positive, multiplied when not.
  float repetition_penalty = 1.0f;
};

// Validates ranges (temperature >= 0, top_k >= 0, 0 < top_p <= 1, repetition_penalty > 0).
Status ValidateSampling(const SamplingParams& p);

// Which ids may come next (structured output's grammar): Sample(..., filter)
// draws from the logits with every refused id at -infinity.
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  // Whether `id` may come next: one id, cheap. Must agree with Mask for every
  // id, except that it may refuse all of them (then Mask decides).
  virtual bool Allows(int32_t id) = 0;
  // Sets the logit of every refused id to -infinity: the whole vocabulary,
  // dearer.
  virtual void Mask(float* logits, int64_t vocab) = 0;
};

// Draws token ids from logits. Deterministic for a given seed and logits.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `logits` in host memory; `backend` the model's (its Argmax/TopK are used
  // when its ops read host memory).
  int32_t Sample(const float* logits, int64_t vocab, kernels::KernelBackend& backend);
  // The same draw from the logits `filter` masks, asking for the whole mask
  // only when the cheap checks cannot decide (the distribution is exactly the
  // masked one either way):
  //   greedy         the argmax, when allowed (it is then the masked argmax);
  //   top-k          the first k allowed ids of the full ranking (a few times
  //                  k looked at) are the masked top-k, in the same order: the
  //                  same draw as from the masked logits, bit for bit;
  //   temperature    (no top-k/top-p) a draw from the unmasked distribution p
  //                  is kept when allowed, else one from the masked: P(t) =
  //                  p(t) + (1 - p(V)) p(t)/p(V) = p(t)/p(V) for t in V;
  //   top-p alone    the allowed ids among the best of the full ranking,
  //                  while the allowed mass not yet looked at cannot move the
  //                  nucleus's cut: the masked draw, bit for bit; else the
  //                  masked logits.
  int32_t Sample(const float* logits, int64_t vocab, kernels::KernelBackend& backend,
                 TokenFilter& filter);

  // Speculative decoding's verification of one drafted token against these
  // logits. The draft is a single token proposed with certainty (n-gram
  // lookup, a greedy draft head), so the standard accept/reject rule becomes:
  // accept it with probability p(draft) under the distribution Sample draws
  // from (temperature, top-k, top-p applied); otherwise draw from that
  // distribution with the draft removed. One draw from p, accepted when it is
  // the draft, does exactly that, and it is the draw Sample would make: so
  // Verify is Sample and a comparison. A verified row then takes from the
  // random stream what a sampled row takes, and sampled speculative decoding
  // gives the tokens plain sampled decoding gives with the same seed,
  // whatever was drafted and verified (with the same logits, which verify
  // rows have on the CPU: SequenceChunk::verify). Greedy (temperature 0):
  // accepted iff it is the argmax. `*accepted` says whether the result is the
  // draft.
  int32_t Verify(const float* logits, int64_t vocab, kernels::KernelBackend& backend, int32_t draft,
                 bool* accepted);

  // The prompt, for the repetition penalty (ids Sample and Verify return are
  // added as they are chosen). Nothing to do without a penalty.
  void SetPrompt(const std::vector<int32_t>& prompt);

 private:
  // `logits` with the repetition penalty applied (a copy), or `logits` itself.
  const float* Penalised(const float* logits, int64_t vocab);
  void Seen(int32_t id);
  kernels::KernelBackend& Ops(kernels::KernelBackend& backend);
  // The candidates Sample draws from: idx_[0..n) with weights w_ (unnormalised), n returned.
  int64_t Distribution(const float* logits, int64_t vocab, kernels::KernelBackend& ops);
  // ... for temperature alone: every id, in id order (no ranking needed).
  int64_t WholeVocabulary(const float* logits, int64_t vocab);
  // ... for top-p alone: the best ids, fetched in growing batches up to the cut.
  int64_t Nucleus(const float* logits, int64_t vocab, kernels::KernelBackend& ops);
  // A candidate's unnormalised weight at this temperature, max logit mx.
  double Weight(float logit, double mx) const;
  // Sets w_[0..) from val_[0..n) (descending) and returns the length of the
  // first prefix holding top_p of z; 0 when the n do not reach it.
  int64_t Cut(int64_t n, double z);
  // Sample with a filter, top-p alone: the masked draw without the whole mask
  // where the allowed ids near the top decide it; -1 where they cannot.
  int32_t AllowedNucleus(const float* logits, int64_t vocab, kernels::KernelBackend& ops,
                         TokenFilter& filter);
  // idx_/val_ = every id, in TopK's order.
  void RankAll(const float* logits, int64_t vocab);
  // The weights w_ of the k candidates idx_/val_ (descending) and how many top-p keeps.
  int64_t Weigh(int64_t k);
  // One draw among the first `keep` candidates.
  int32_t Draw(int64_t keep);
  // Sample's choice without recording it (Seen).
  int32_t Pick(const float* logits, int64_t vocab, kernels::KernelBackend& ops);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> idx_;
  std::vector<float> val_;
  std::vector<double> w_;
  std::vector<int32_t> seen_;       // ids for the repetition penalty (unique)
  std::vector<uint8_t> seen_mask_;  // by id
  std::vector<float> penalised_;
  std::vector<float> masked_;    // Sample with a filter: the masked logits
  std::vector<int32_t> ranked_;  // ... the full ranking's first ids (top-k, top-p)
  std::vector<float> ranked_val_;
  std::shared_ptr<kernels::KernelBackend> host_ops_;  // for a device backend's logits
};

// Speculative decoding: cheap guesses of the next K tokens, checked by the
// model in one batched forward pass (the guesses' rows verify them; a rejected
// guess is replaced by the model's own choice, and all guesses accepted give
// one token more).
//   ngram  prompt lookup: the tokens that followed the latest earlier
//          occurrence of the sequence's last n tokens (n from ngram_max down to
//          ngram_min); any model, and strong where the answer copies the
//          prompt (code edits, summaries, retrieval)
//   mtp    the checkpoint's multi-token-prediction layer (GLM-4.5 style),
//          applied K times in a chain (K from 1 to 3)
// Greedy output equals plain greedy decoding and sampled output plain
// sampling's for the seed (Sampler::Verify), bit for bit on the CPU backends
// (verify rows run batch-invariant: SequenceChunk::verify); on the CUDA
// backend a batched row's float rounding can still part them at a near-tie.
enum class SpeculativeMethod { kOff, kNgram, kMtp };
// "off", "ngram", "mtp"; anything else is an error naming the choices.
Result<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name);
std::string_view SpeculativeMethodName(SpeculativeMethod method);

// K when the caller names none. n-gram: 4. A drafted row costs little next
// to the step (nothing measurable where a step reads its weights from memory,
// a tenth of a step on nanochat-demo, whose weights stay in cache), and a
// longer draft only adds tokens where the copy goes on. bench_speculative on
// nanochat-demo's KJV prompt, quiet machines, K = 4 against K = 2: 1.60-1.70x
// against 1.49-1.53x plain decoding on an AMX-less Xeon, 1.53-1.58x against
// 1.56-1.58x on an AMX one (vLLM's n-gram example drafts 5). On an AVX2-only
// CPU (AMD Zen 3) that model's extra rows cost their FMAs: with fixed lengths
// K = 2 did better (medians of ten runs 1.40x against 1.27x); with the
// lengths that pay (SpeculativeOptions::adaptive) K = 4 does as well as K = 2
// there (1.29-1.32x against 1.28-1.33x in six runs of a slow phase), and
// where the weights come from memory (any real model) a row costs little and
// the longer draft wins.
// MTP: 2 (each draft is a forward of the head, and its acceptance falls with
// the chain's depth).
constexpr int kDefaultNgramDraftTokens = 4;
constexpr int kDefaultMtpDraftTokens = 2;
constexpr int DefaultDraftTokens(SpeculativeMethod method) {
  return method == SpeculativeMethod::kMtp ? kDefaultMtpDraftTokens : kDefaultNgramDraftTokens;
}
// The most K takes (ValidateSpeculative): n-gram 8, MTP 3 (the head chained).
constexpr int MaxDraftTokens(SpeculativeMethod method) {
  return method == SpeculativeMethod::kMtp ? 3 : 8;
}

struct SpeculativeOptions {
  SpeculativeMethod method = SpeculativeMethod::kOff;
  int draft_tokens = 2;  // K: 1..8 (1..3 for mtp); the CLI's default is DefaultDraftTokens
  int ngram_max = 3;
  // 1: a match of the last token alone drafts too. A drafted row costs a
  // fraction of a step (a tenth on nanochat-demo, whose weights stay in cache
  // at 1 thread; far less where a step reads its weights from memory), and
  // single-token matches are often right where the answer copies: with 2 the
  // bench's KJV prompt took 47 steps for 72 tokens at K = 2, with 1, 41.
  int ngram_min = 1;
  // Verify only as many of a step's drafts as pay for their rows on this
  // machine (DraftLengthPolicy: measured step times, this sequence's
  // acceptance by kind of draft); false: all of them, every step. The output
  // is the same either way.
  bool adaptive = true;
};
// Checks K's range for the method.
Status ValidateSpeculative(const SpeculativeOptions& options);

// Prompt-lookup drafting over `history` (the prompt and every token since):
// for n from max_n down to min_n, the latest earlier position where the last n
// tokens occurred, and up to `k` tokens that followed it there. Empty when no
// n-gram recurs. `matched` (when given) receives n (0 for none).
std::vector<int32_t> NgramDraft(const std::vector<int32_t>& history, int k, int max_n, int min_n,
                                int* matched = nullptr);

// A source of drafted tokens for one sequence (one Drafter per sequence, so
// that it may keep state about it). Generate and the serving scheduler ask it
// for up to k tokens before each verification step. A draft is only a guess
// (verification keeps the output exact), so a drafter may return fewer tokens
// than asked, or none (the step then decodes one token as usual).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to `k` (>= 1) tokens guessed to follow `history`: the prompt and every
  // token chosen since, the newest last (that one not yet in the KV cache).
  virtual std::vector<int32_t> Draft(const std::vector<int32_t>& history, int k) = 0;
  // The kind of the latest draft, 0 to DraftLengthPolicy::kKinds - 1: drafts
  // of one kind are accepted at one rate (prompt lookup: the length of the
  // matched n-gram). One kind unless a drafter tells them apart.
  virtual int kind() const { return 0; }
  // Called after every forward step that fed this sequence, before the next
  // step: it was chunk `chunk` of that step's batch, in KV slot `slot`, fed
  // from position `start_pos`, and its first `rows` rows are kept (the prompt
  // chunk's rows, or the last token and its accepted drafts). `sequence` holds
  // the sequence up to at least position start_pos + rows (the token each kept
  // row was followed by). A drafter that runs on the model's state (the MTP
  // head) drafts here, at most `want` (>= 1) tokens for the next step;
  // prompt lookup needs only the history.
  virtual Status AfterStep(size_t chunk, int slot, int64_t start_pos, int64_t rows,
                           const std::vector<int32_t>& sequence, int want) {
    return Status::Ok();
  }
  // True when AfterStep makes the drafts, each at a cost (the MTP head's
  // forward), so that the caller chooses `want` (DraftLengthPolicy::Plan)
  // rather than have drafts made that the next step will not verify.
  virtual bool drafts_after_step() const { return false; }
};

// One sequence's Drafter::AfterStep, for AfterSteps.
struct AfterStepCall {
  Drafter* drafter = nullptr;
  size_t chunk = 0;
  int slot = 0;
  int64_t start_pos = 0;
  int64_t rows = 0;
  const std::vector<int32_t>* sequence = nullptr;
  int want = 1;
};

// Drafter::AfterStep for the sequences of one step (in distinct slots). The
// MTP heads among them (drafters of one runner) draft in one call
// (ModelRunner::MtpDraftBatch): a forward of the head over all their kept
// rows, then each chained draft over one row of every sequence still
// drafting, instead of those forwards once per sequence. Other drafters get
// their AfterStep.
Status AfterSteps(const std::vector<AfterStepCall>& calls);

// Prompt lookup: NgramDraft's drafts, without its scan of the whole history
// at every step (which costs O(history) per n: 0.9 ms a sequence and step at
// 32k tokens, 3.2 ms at 128k on a Zen 3 core where no n-gram recurs;
// bench_ngram). The
// drafter keeps, for each token, the positions where it occurred, adding
// the new ones at each call; an occurrence of the last n tokens ends at an
// earlier position of the last token, so the latest one is found among those
// positions, newest first. The history must grow by appending between calls
// (as Generate's and the scheduler's do); a shorter one starts the index over.
class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int max_n, int min_n) : max_n_(max_n), min_n_(min_n) {}
  std::vector<int32_t> Draft(const std::vector<int32_t>& history, int k) override;
  int kind() const override { return matched_; }

 private:
  int max_n_, min_n_;
  int matched_ = 0;
  std::unordered_map<int32_t, std::vector<int64_t>> positions_;  // token -> ascending positions
  int64_t indexed_ = 0;  // positions [0, indexed_) of the history are in positions_
};

// The drafter `options` ask for, for a sequence that `runner` runs: null for
// kOff; for kMtp the checkpoint's multi-token-prediction head, which needs the
// runner's model (on every rank of a TP group) loaded with LoadOptions::load_mtp.
// Options are assumed valid (ValidateSpeculative).
Result<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeOptions& options,
                                             ModelRunner& runner);

struct GenerateOptions {
  int64_t max_tokens = 16;  // tokens to generate (>= 1)
  SamplingParams sampling;
  bool stop_at_eos = true;        // stop after emitting an id in stop_ids
  std::vector<int32_t> stop_ids;  // empty: the model's eos_token_ids
  // Keep the logits of every position of prompt + generated[:-1] (row t
  // predicts token t+1): the layout of `--logits-out` and the fixtures.
  bool collect_logits = false;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // KV cache element type
  // Called with each new id as soon as it is chosen; return false to stop.
  std::function<bool(int32_t id)> on_token;
  SpeculativeOptions speculative;
  // With speculative.adaptive: where the steps' times, the drafts'
  // acceptance rates and the drafter's own drafting times (the MTP head's,
  // by drafts made) are learned. A caller that generates again with the same
  // model (chat's turns) passes its own so that the next call starts from
  // what this one measured; null: learned afresh in the call.
  StepCosts* step_costs = nullptr;
  DraftLengthPolicy* draft_length = nullptr;
  StepCosts* draft_costs = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> ids;   // generated ids
  std::vector<float> logits;  // [logits_rows, vocab] when collect_logits
  int64_t logits_rows = 0;
  int64_t vocab = 0;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // prompt forward + first sample
  double decode_seconds = 0;   // the remaining steps
  int64_t decode_steps = 0;    // forward passes after the prefill
  std::string stop_reason;     // "length", "eos", "callback"
  // Speculative decoding: tokens drafted, and how many of them the model kept.
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;

  double prefill_tps() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  // Tokens after the first per second of decoding (with speculation a step
  // may give several).
  double decode_tps() const {
    return decode_seconds > 0 && !ids.empty() ? (ids.size() - 1) / decode_seconds : 0;
  }
  double acceptance_rate() const {
    return drafted_tokens > 0 ? double(accepted_tokens) / double(drafted_tokens) : 0;
  }
  double ttft_ms() const { return prefill_seconds * 1e3; }
};

Result<GenerateResult> Generate(Model& model, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options);
// The same over any runner (a tensor-parallel group's rank 0): its KV cache is
// reset to one slot of prompt + max_tokens positions.
Result<GenerateResult> Generate(ModelRunner& runner, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options);

}  // namespace octet::engine
