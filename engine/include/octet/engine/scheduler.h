// Continuous batching over a ModelRunner (one model instance, local or a
// tensor-parallel group's rank 0).
//
//   Scheduler sched(runner, {.num_slots = 8, .context = 4096});
//   OCTET_RETURN_IF_ERROR(sched.Start());
//   OCTET_ASSIGN_OR_RETURN(auto req, sched.Submit({.prompt = ids, .max_tokens = 128}));
//   RequestUpdate u;
//   while (req->Next(Deadline::AfterMs(1000), &u) && !u.done) { ...u.ids... }
//
// One thread (the scheduler's) owns the runner. Between two forward steps
// requests join and leave: every running request that is decoding adds one
// token to the next step, and prompts of newly admitted requests fill the rest
// of the step's token budget in chunks (chunked prefill), so a long prompt
// never stalls the others for more than one step.
//
// KV cache: a fixed arena of `num_slots` sequences of `context` positions each,
// allocated once (Start). A request is admitted when a slot is free and waits
// in the queue otherwise (first come, first served); a request that could never
// fit (prompt + max_tokens > context) is refused at Submit, and a full queue
// refuses new requests (ResourceExhausted) rather than growing without bound.
//
// Speculative decoding (options.speculative, method not kOff): every decoding
// sequence may bring drafted tokens to a step (its own Drafter, one per
// request; its own draft length, 0 when the drafter finds nothing, never past
// its max_tokens or the slot's context, and within the step's token budget,
// where drafts come after one token for each decoding sequence and leave at
// least one token for a waiting prompt). All sequences of a step share one
// batched forward; each verifies its drafts with its own Sampler (greedy:
// exact; sampling: Sampler::Verify's accept/reject rule) and streams every
// token it keeps, in order. EOS, min/max tokens and stop ids are checked after
// each kept token, so a request can end in the middle of its draft. Rejected
// drafts' KV positions are written over by the next step (attention never
// reads past a query's position).
//
// n > 1 (SubmitN): n sequences of one prompt, each with its own Sampler
// (seed + index). They are admitted together (n free slots); the first one
// prefills the prompt and, on the step that completes it, its KV cache is
// copied to the others' slots (ModelRunner::CopySlot) and every sequence
// samples its first token from that step's logits (the MTP head's cache of
// the prompt is copied with it, and each sequence's head is fed the last
// prompt chunk's rows with its own first token). Where the runner cannot copy
// slots (its CopySlot returns Unimplemented), each sequence prefills for itself.
//
// Log-probabilities (GenerationParams::logprobs >= 0): for every generated
// token, log-softmax of the model's raw logits row it was sampled from (before
// temperature, top-k and top-p, as vLLM reports by default), in float with the
// sum of exponentials in double, and the `logprobs` most likely alternatives.
//
// Cancellation: RequestStream::Cancel (the client went away) drops the request
// at the next step boundary and frees its slot.
//
// Failure: a runner error (a dead TP peer) is fatal: every queued and running
// request ends with that error, health() returns it, and Submit refuses.
//
// Time: every timestamp, figure window and idle poll reads options.clock
// (tests pass a ManualClock; RequestStream::Next's deadline stays real time).
//
// Thread-safety: Submit, Metrics, health and Stop may be called from any
// thread; a RequestStream is used by one consumer thread. Shared state is
// annotated for Clang's thread-safety analysis (GUARDED_BY(mu_)).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"
#include "octet/base/thread_annotations.h"
#include "octet/engine/generate.h"
#include "octet/engine/model_runner.h"
#include "octet/engine/structured_output.h"

namespace octet::engine {

struct SchedulerOptions {
  int num_slots = 8;                 // sequences in flight (KV cache slots)
  int64_t context = 4096;         // positions per slot: prompt + generated tokens
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // KV cache element type
  int64_t max_batch_tokens = 256; // tokens per step: decode rows first, then prompt chunks
  size_t max_queue = 1024;        // waiting requests beyond this are refused
  int idle_poll_ms = 100;         // how often an idle scheduler wakes (and heartbeats the runner)
  SpeculativeOptions speculative;  // drafting for every request (kOff: none)
  Clock* clock = nullptr;          // timestamps, windows, idle polls; null: Clock::Real()
};

// At most this many alternatives per token (OpenAI's top_logprobs bound).
inline constexpr int kMaxTopLogprobs = 20;
// At most this many sequences per request (n), and never more than the slots.
inline constexpr int kMaxSequencesPerRequest = 16;

// One generated token's log-probability and the most likely alternatives.
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

// log_softmax(logits)[id] and the `top` highest entries (ties: lower id
// first), computed as the scheduler does: max subtracted, exponentials summed
// in double, results in float.
TokenLogprob ComputeLogprobs(const float* logits, int64_t vocab, int32_t id, int top);

struct GenerationParams {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;        // >= 1; prompt + max_tokens must fit the context
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // empty: the model's eos ids
  bool ignore_eos = false;        // generate exactly max_tokens (benchmarks)
  int64_t min_tokens = 0;         // a stop id before this many tokens does not stop
  int logprobs = -1;  // -1: none; 0..kMaxTopLogprobs: each token's and that many alternatives
  // Grammar-constrained decoding (structured_output.h): every sequence
  // samples under a Clone() of it; such a sequence does not draft.
  std::shared_ptr<const TokenConstraint> constraint;
};

// Per-request timestamps (SchedulerOptions::clock, nanoseconds) and the figures derived from them.
struct RequestTiming {
  int64_t submitted_ns = 0;
  int64_t admitted_ns = 0;     // got a KV slot
  int64_t first_token_ns = 0;  // first generated id chosen
  int64_t last_token_ns = 0;
  // Speculative decoding (when the scheduler drafts): tokens drafted for this
  // request, and how many of them it kept.
  bool speculative = false;
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  double queue_ms() const;     // submitted -> admitted
  double ttft_ms() const;      // submitted -> first token
  // prompt tokens / (first token - admitted); generated-1 / (last - first).
  double prefill_tps(int64_t prompt_tokens) const;
  double decode_tps(int64_t completion_tokens) const;
  double acceptance_rate() const;  // accepted / drafted, 0 before any draft
};

struct RequestUpdate {
  std::vector<int32_t> ids;  // ids generated since the previous Next (in order)
  std::vector<TokenLogprob> logprobs;  // one per id when the request asked for logprobs
  bool done = false;
  std::string finish_reason;  // when done: "stop", "length", "cancelled", "error"
  Status error;               // finish_reason "error": why
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // all generated so far
  RequestTiming timing;
};

// One request's stream: the consumer reads it (Next, Cancel); the scheduler,
// on its own thread, feeds it (the producer side below). Thread-safe.
class RequestStream {
 public:
  // `speculative`: the scheduler drafts for it (RequestTiming::speculative).
  RequestStream(uint64_t id, int64_t prompt_tokens, int64_t submitted_ns, bool speculative);

  // ---- the consumer's side
  uint64_t id() const { return id_; }
  // Waits until new ids arrived or the request ended (true), or `deadline`
  // passed with nothing new (false). After done, every call returns the final
  // update with no ids.
  bool Next(Deadline deadline, RequestUpdate* update) EXCLUDES(mu_);
  // Asks the scheduler to drop the request (finish reason "cancelled").
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Called on the scheduler thread whenever there is something new for Next
  // (must not block). Set it before the first update can arrive, i.e. right
  // after Submit; it may fire once for updates that arrived before.
  void SetNotify(std::function<void()> notify) EXCLUDES(mu_);

  // ---- the producer's side (the scheduler thread)
  void MarkAdmitted(int64_t now_ns) EXCLUDES(mu_);  // the request got a KV slot
  // New ids (in order) and the drafts that step verified for them.
  void Push(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs, int64_t drafted,
            int64_t accepted, int64_t now_ns) EXCLUDES(mu_);
  // Ends the request (the first call wins).
  void Finish(std::string reason, Status error) EXCLUDES(mu_);
  double ttft_ms() const EXCLUDES(mu_);  // submitted -> first token; 0 before it

 private:
  const uint64_t id_;
  const int64_t prompt_tokens_;
  std::atomic<bool> cancelled_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;  // new ids or the end (Next waits on it)
  std::vector<int32_t> pending_ GUARDED_BY(mu_);
  std::vector<TokenLogprob> pending_logprobs_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  std::string finish_reason_ GUARDED_BY(mu_);
  Status error_ GUARDED_BY(mu_);
  int64_t completion_tokens_ GUARDED_BY(mu_) = 0;
  RequestTiming timing_ GUARDED_BY(mu_);
  std::function<void()> notify_ GUARDED_BY(mu_);
};

struct SchedulerMetrics {
  // Now.
  int running = 0;
  int queued = 0;
  int num_slots = 0;
  int64_t context = 0;
  double kv_used_fraction = 0;  // cached positions / (num_slots * context)
  int64_t kv_cache_bytes = 0;   // this rank's KV arena
  // Over the last few seconds.
  double prefill_tps = 0;       // prompt tokens processed per second
  double decode_tps = 0;        // tokens generated per second (all requests together)
  double step_ms = 0;           // mean forward step
  double allreduce_share = 0;   // all-reduce time / step time (0 on one rank)
  double comm_share = 0;        // every collective (plans, logits gather too) / step time
  double spec_acceptance_rate = 0;  // drafted tokens kept / drafted (0 with no drafts)
  // Since start.
  uint64_t requests_total = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t steps_total = 0;
  double step_seconds_total = 0;
  double ttft_seconds_sum = 0;
  uint64_t ttft_count = 0;
  double allreduce_seconds_total = 0;
  // Speculative decoding: tokens drafted, drafts kept, and decode rows that
  // carried a draft (a verification of one sequence).
  uint64_t spec_drafted_tokens_total = 0;
  uint64_t spec_accepted_tokens_total = 0;
  uint64_t spec_verifications_total = 0;
  // Decode-only steps (no prompt token in the batch): how many, the tokens they
  // generated, and their wall time, each measured from the end of the step
  // before it to its own end, so that it includes the scheduler's work between
  // steps (sampling, streaming, batch forming) as well as the forward pass.
  // tokens / seconds is the aggregate decode rate with prefill left out;
  // tokens / steps is the mean number of sequences each decode step carried.
  uint64_t decode_only_steps_total = 0;
  uint64_t decode_only_tokens_total = 0;
  double decode_only_seconds_total = 0;
};

class Scheduler {
 public:
  Scheduler(ModelRunner& runner, SchedulerOptions options);
  ~Scheduler();  // Stop(Cancelled)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Allocates the KV cache on every rank and starts the scheduler thread.
  Status Start() EXCLUDES(mu_);
  // Queues a request. InvalidArgument: empty prompt, an id outside the vocab,
  // max_tokens < 1, bad sampling; OutOfRange: prompt + max_tokens exceeds the
  // context; ResourceExhausted: the queue is full; Unavailable: stopped/failed.
  Result<std::shared_ptr<RequestStream>> Submit(GenerationParams params) EXCLUDES(mu_);
  // n sequences of one prompt (see above), stream i sampling with seed + i.
  // InvalidArgument as Submit, and when n is outside 1..min(16, slots).
  Result<std::vector<std::shared_ptr<RequestStream>>> SubmitN(GenerationParams params, int n)
      EXCLUDES(mu_);
  // Ends every request with `reason` ("error") and joins the thread. Idempotent.
  void Stop(const Status& reason) EXCLUDES(mu_);

  // OK while serving; the runner's error once it failed.
  Status health() const EXCLUDES(mu_);
  SchedulerMetrics Metrics() const EXCLUDES(mu_);
  const SchedulerOptions& options() const { return options_; }
  const ModelConfig& config() const { return runner_.config(); }

 private:
  struct Active;
  struct LoopState;   // what the scheduler thread alone touches
  struct StepCounts;  // one step's contribution to the figures

  // The scheduler thread: each pass takes new requests, drops cancelled
  // ones, admits waiting ones into free slots, then either waits idle or runs
  // one forward step over a batch and hands every sequence its ids.
  void Loop();
  bool TakeIncoming(LoopState& st) EXCLUDES(mu_);  // false: Stop was called
  void DropCancelled(LoopState& st);
  void Admit(LoopState& st);
  void PublishGauges(const LoopState& st) EXCLUDES(mu_);
  Status WaitIdle(LoopState& st) EXCLUDES(mu_);
  // Forms st.batch: one row per decoding sequence (plus its drafts), then
  // prompt chunks within the token budget. Returns the decoding rows.
  size_t FormBatch(LoopState& st, StepCounts* sc);
  // Samples (and verifies drafts) from the step's logits for every chunk.
  Status DistributeStep(LoopState& st, int64_t now_ns, StepCounts* sc);
  Status Emit(LoopState& st, Active& a, size_t chunk, bool was_decoding, int64_t rows,
              int64_t now_ns, StepCounts* sc);
  void ReapFinished(LoopState& st);
  void Record(LoopState& st, const StepCounts& sc, int64_t now_ns) EXCLUDES(mu_);
  void Finish(Active& a, const std::string& reason, Status error) EXCLUDES(mu_);
  void FailAll(LoopState& st, const Status& fatal) EXCLUDES(mu_);

  ModelRunner& runner_;
  SchedulerOptions options_;
  Clock& clock_;
  std::thread thread_;

  mutable Mutex mu_;
  std::condition_variable cv_;  // incoming_ grew or stop_ was set
  struct Incoming {
    std::shared_ptr<RequestStream> stream;
    GenerationParams params;
    uint64_t group = 0;  // SubmitN's sequences share one (nonzero when n > 1)
  };
  std::deque<Incoming> incoming_ GUARDED_BY(mu_);
  uint64_t next_group_ GUARDED_BY(mu_) = 1;
  bool stop_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;
  Status stop_reason_ GUARDED_BY(mu_);
  Status health_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  SchedulerMetrics metrics_ GUARDED_BY(mu_);
  struct Sample {
    int64_t t_ns;
    uint64_t prompt_tokens, generated_tokens, drafted_tokens, accepted_tokens;
    int64_t step_ns, allreduce_ns, comm_ns;
  };
  std::deque<Sample> window_ GUARDED_BY(mu_);
};

}  // namespace octet::engine
