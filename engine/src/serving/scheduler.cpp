#include "octet/engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "octet/base/log.h"
#include "octet/engine/draft_length.h"

namespace octet::engine {

namespace {
constexpr int64_t kWindowNs = 5'000'000'000;       // figures over the last 5 s
constexpr int64_t kIdleSampleNs = 250'000'000;     // an idle scheduler samples this often

// A sequence's grammar constraint as the sampler's filter (its stop ids bound).
class ConstraintFilter final : public TokenFilter {
 public:
  ConstraintFilter(TokenConstraint& c, std::span<const int32_t> stop) : c_(c), stop_(stop) {}
  bool Allows(int32_t id) override { return c_.Allows(id, stop_); }
  void Mask(float* logits, int64_t vocab) override { c_.Mask(logits, vocab, stop_); }

 private:
  TokenConstraint& c_;
  std::span<const int32_t> stop_;
};
}  // namespace

// ---- log-probabilities -------------------------------------------------------------

TokenLogprob ComputeLogprobs(const float* logits, int64_t vocab, int32_t id, int top) {
  TokenLogprob r;
  r.id = id;
  float mx = logits[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, logits[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v] - mx));
  const float log_sum = static_cast<float>(std::log(sum));
  auto lp = [&](int64_t v) { return (logits[v] - mx) - log_sum; };
  r.logprob = id >= 0 && id < vocab ? lp(id) : -INFINITY;
  const int64_t k = std::min<int64_t>(std::max(top, 0), vocab);
  if (k > 0) {
    // The k largest by a bounded min-heap (vocabularies are ~150k, k <= 20).
    auto worse = [&](int32_t a, int32_t b) {  // a ranks after b
      return logits[a] < logits[b] || (logits[a] == logits[b] && a > b);
    };
    auto heap_cmp = [&](int32_t a, int32_t b) { return worse(b, a); };  // min-heap on rank
    std::vector<int32_t> heap;
    heap.reserve(static_cast<size_t>(k) + 1);
    for (int64_t v = 0; v < vocab; ++v) {
      const int32_t c = static_cast<int32_t>(v);
      if (static_cast<int64_t>(heap.size()) < k) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), heap_cmp);
      } else if (worse(heap.front(), c)) {
        std::pop_heap(heap.begin(), heap.end(), heap_cmp);
        heap.back() = c;
        std::push_heap(heap.begin(), heap.end(), heap_cmp);
      }
    }
    std::sort(heap.begin(), heap.end(), [&](int32_t a, int32_t b) { return worse(b, a); });
    for (int32_t c : heap) r.top.emplace_back(c, lp(c));
  }
  return r;
}

// ---- RequestTiming ----------------------------------------------------------------

double RequestTiming::queue_ms() const {
  return admitted_ns > 0 ? (admitted_ns - submitted_ns) * 1e-6 : 0.0;
}
double RequestTiming::ttft_ms() const {
  return first_token_ns > 0 ? (first_token_ns - submitted_ns) * 1e-6 : 0.0;
}
double RequestTiming::prefill_tps(int64_t prompt_tokens) const {
  const int64_t dt = first_token_ns - admitted_ns;
  return first_token_ns > 0 && dt > 0 ? prompt_tokens / (dt * 1e-9) : 0.0;
}
double RequestTiming::decode_tps(int64_t completion_tokens) const {
  const int64_t dt = last_token_ns - first_token_ns;
  return completion_tokens > 1 && dt > 0 ? (completion_tokens - 1) / (dt * 1e-9) : 0.0;
}
double RequestTiming::acceptance_rate() const {
  return drafted_tokens > 0 ? double(accepted_tokens) / double(drafted_tokens) : 0.0;
}

// ---- RequestStream ----------------------------------------------------------------

RequestStream::RequestStream(uint64_t id, int64_t prompt_tokens, int64_t submitted_ns,
                             bool speculative)
    : id_(id), prompt_tokens_(prompt_tokens) {
  timing_.submitted_ns = submitted_ns;
  timing_.speculative = speculative;
}

void RequestStream::MarkAdmitted(int64_t now_ns) {
  MutexLock lock(mu_);
  timing_.admitted_ns = now_ns;
}

double RequestStream::ttft_ms() const {
  MutexLock lock(mu_);
  return timing_.ttft_ms();
}

bool RequestStream::Next(Deadline deadline, RequestUpdate* u) {
  MutexLock lock(mu_);
  auto ready = [&]() REQUIRES(mu_) { return !pending_.empty() || done_; };
  if (!ready()) {
    if (deadline.is_never()) {
      lock.Wait(cv_, ready);
    } else if (!lock.WaitUntil(cv_, deadline.at(), ready)) {
      return false;
    }
  }
  u->ids.clear();
  u->ids.swap(pending_);
  u->logprobs.clear();
  u->logprobs.swap(pending_logprobs_);
  u->done = done_;
  u->finish_reason = finish_reason_;
  u->error = error_;
  u->prompt_tokens = prompt_tokens_;
  u->completion_tokens = completion_tokens_;
  u->timing = timing_;
  return true;
}

void RequestStream::SetNotify(std::function<void()> notify) {
  std::function<void()> fire;  // called outside the lock, as Push does
  {
    MutexLock lock(mu_);
    notify_ = std::move(notify);
    if (!pending_.empty() || done_) fire = notify_;
  }
  if (fire) fire();
}

void RequestStream::Push(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs,
                         int64_t drafted, int64_t accepted, int64_t now_ns) {
  std::function<void()> notify;
  {
    MutexLock lock(mu_);
    pending_.insert(pending_.end(), ids.begin(), ids.end());
    if (logprobs) {
      for (TokenLogprob& t : *logprobs) pending_logprobs_.push_back(std::move(t));
    }
    completion_tokens_ += static_cast<int64_t>(ids.size());
    timing_.drafted_tokens += drafted;
    timing_.accepted_tokens += accepted;
    if (timing_.first_token_ns == 0) timing_.first_token_ns = now_ns;
    timing_.last_token_ns = now_ns;
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

void RequestStream::Finish(std::string reason, Status error) {
  std::function<void()> notify;
  {
    MutexLock lock(mu_);
    if (done_) return;
    done_ = true;
    finish_reason_ = std::move(reason);
    error_ = std::move(error);
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

// ---- Scheduler --------------------------------------------------------------------

struct Scheduler::Active {
  std::shared_ptr<RequestStream> stream;
  GenerationParams params;
  std::vector<int32_t> stop;
  Sampler sampler;
  int slot = -1;
  int64_t prefilled = 0;  // prompt tokens in the cache
  int64_t cached = 0;     // positions in the cache
  int32_t last = -1;      // the newest id (not yet in the cache)
  int64_t generated = 0;
  bool done = false;       // finished this step; leaves the running set
  // n > 1: the sequences of one SubmitN share `group`; a follower waits for
  // its `leader`'s prefill and takes a copy of its KV cache (null: prefills
  // for itself).
  uint64_t group = 0;
  Active* leader = nullptr;
  // Speculative decoding: the drafter (null when off), the prompt and every
  // id since (what it drafts from, filled once decoding starts), and the
  // drafts of the step being formed.
  std::unique_ptr<Drafter> drafter;
  std::vector<int32_t> history;
  std::vector<int32_t> drafts;
  int draft_kind = 0;              // the drafter's kind() for `drafts`
  DraftLengthPolicy draft_length;  // how many to verify (SpeculativeOptions::adaptive)
  // Structured output: this sequence's constraint.
  std::unique_ptr<TokenConstraint> constraint;

  Active(std::shared_ptr<RequestStream> s, GenerationParams p, const ModelConfig& c,
         uint64_t group_id = 0)
      : stream(std::move(s)), params(std::move(p)), sampler(params.sampling), group(group_id) {
    stop = params.stop_ids.empty() ? c.eos_token_ids : params.stop_ids;
    sampler.SetPrompt(params.prompt);
    if (params.constraint) constraint = params.constraint->Clone();
  }
  bool decoding() const { return prefilled == static_cast<int64_t>(params.prompt.size()); }
};

Scheduler::Scheduler(ModelRunner& runner, SchedulerOptions options)
    : runner_(runner), options_(options), clock_(options.clock ? *options.clock : Clock::Real()) {}

Scheduler::~Scheduler() { Stop(CancelledError("the server is shutting down")); }

Status Scheduler::Start() {
  if (options_.num_slots < 1) return InvalidArgumentError("the scheduler needs at least one slot");
  if (options_.context < 2) return InvalidArgumentError("the context must be at least 2 tokens");
  if (options_.max_batch_tokens <= options_.num_slots) {
    return InvalidArgumentError("the step token budget (" +
                                std::to_string(options_.max_batch_tokens) +
                                ") must exceed the number of slots (" +
                                std::to_string(options_.num_slots) + ") so that prompts make progress");
  }
  OCTET_RETURN_IF_ERROR(ValidateSpeculative(options_.speculative));
  {
    // The method is refused now, not at the first request.
    OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> probe,
                           MakeDrafter(options_.speculative, runner_));
  }
  OCTET_RETURN_IF_ERROR(runner_.ResetCache(options_.num_slots, options_.context, options_.kv_dtype));
  {
    MutexLock lock(mu_);
    metrics_.num_slots = options_.num_slots;
    metrics_.context = options_.context;
    metrics_.kv_cache_bytes = runner_.cache_bytes();
    started_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Result<std::shared_ptr<RequestStream>> Scheduler::Submit(GenerationParams p) {
  OCTET_ASSIGN_OR_RETURN(auto streams, SubmitN(std::move(p), 1));
  return streams.front();
}

Result<std::vector<std::shared_ptr<RequestStream>>> Scheduler::SubmitN(GenerationParams p, int n) {
  const ModelConfig& c = runner_.config();
  const int max_n = std::min(kMaxSequencesPerRequest, options_.num_slots);
  if (n < 1 || n > max_n) {
    return InvalidArgumentError("n must be between 1 and " + std::to_string(max_n) + " (got " +
                                std::to_string(n) + "; at most " +
                                std::to_string(kMaxSequencesPerRequest) +
                                " sequences per request, and no more than the server's " +
                                std::to_string(options_.num_slots) + " slots)");
  }
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs) {
    return InvalidArgumentError("top logprobs must be between 0 and " +
                                std::to_string(kMaxTopLogprobs) + " (got " +
                                std::to_string(p.logprobs) + ")");
  }
  if (p.prompt.empty()) return InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] < 0 || p.prompt[i] >= c.vocab_size) {
      return InvalidArgumentError("prompt token " + std::to_string(p.prompt[i]) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(c.vocab_size));
    }
  }
  if (p.max_tokens < 1) return InvalidArgumentError("max_tokens must be at least 1");
  OCTET_RETURN_IF_ERROR(ValidateSampling(p.sampling));
  const int64_t need = static_cast<int64_t>(p.prompt.size()) + p.max_tokens;
  if (need > options_.context) {
    return OutOfRangeError("the prompt (" + std::to_string(p.prompt.size()) +
                           " tokens) plus max_tokens (" + std::to_string(p.max_tokens) +
                           ") is " + std::to_string(need) + " tokens, more than the context of " +
                           std::to_string(options_.context));
  }
  MutexLock lock(mu_);
  if (!health_.ok()) return UnavailableError("the model instance failed: " + health_.message());
  if (stop_ || !started_) return UnavailableError("the server is not accepting requests");
  if (incoming_.size() + static_cast<size_t>(metrics_.queued) + static_cast<size_t>(n) >
      options_.max_queue) {
    return ResourceExhaustedError("the request queue is full (" +
                                  std::to_string(options_.max_queue) + " waiting)");
  }
  const uint64_t group = n > 1 ? next_group_++ : 0;
  const int64_t now = clock_.NowNs();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    auto stream =
        std::make_shared<RequestStream>(next_id_++, static_cast<int64_t>(p.prompt.size()), now,
                                        options_.speculative.method != SpeculativeMethod::kOff);
    GenerationParams q = i + 1 < n ? p : std::move(p);
    q.sampling.seed += static_cast<uint64_t>(i);
    incoming_.push_back({stream, std::move(q), group});
    streams.push_back(std::move(stream));
  }
  metrics_.requests_total += static_cast<uint64_t>(n);
  cv_.notify_all();
  return streams;
}

void Scheduler::Stop(const Status& reason) {
  {
    MutexLock lock(mu_);
    if (!stop_) {
      stop_ = true;
      stop_reason_ = reason.ok() ? CancelledError("the server is shutting down") : reason;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests submitted but never picked up.
  std::deque<Incoming> left;
  Status why;
  {
    MutexLock lock(mu_);
    left.swap(incoming_);
    why = health_.ok() ? stop_reason_ : health_;
  }
  for (auto& in : left) in.stream->Finish("error", why);
}

Status Scheduler::health() const {
  MutexLock lock(mu_);
  return health_;
}

SchedulerMetrics Scheduler::Metrics() const {
  MutexLock lock(mu_);
  SchedulerMetrics m = metrics_;
  m.queued += static_cast<int>(incoming_.size());
  if (window_.size() >= 2) {
    const Sample& a = window_.front();
    const Sample& b = window_.back();
    const double dt = (b.t_ns - a.t_ns) * 1e-9;
    if (dt > 0) {
      m.prefill_tps = (b.prompt_tokens - a.prompt_tokens) / dt;
      m.decode_tps = (b.generated_tokens - a.generated_tokens) / dt;
    }
    if (b.drafted_tokens > a.drafted_tokens) {
      m.spec_acceptance_rate = double(b.accepted_tokens - a.accepted_tokens) /
                               double(b.drafted_tokens - a.drafted_tokens);
    }
    const int64_t step_ns = b.step_ns - a.step_ns;
    if (step_ns > 0) {
      m.allreduce_share = double(b.allreduce_ns - a.allreduce_ns) / double(step_ns);
      m.comm_share = double(b.comm_ns - a.comm_ns) / double(step_ns);
    }
  }
  return m;
}

// ---- the scheduler thread ----------------------------------------------------------

struct Scheduler::LoopState {
  std::deque<std::unique_ptr<Active>> waiting;
  std::vector<std::unique_ptr<Active>> running;  // admission order
  std::vector<int> free_slots;
  // The step being formed: its chunks and the sequence each belongs to.
  std::vector<SequenceChunk> batch;
  std::vector<Active*> owners;
  ForwardOutput out;
  StepCosts step_costs;  // decode-only steps' times by rows (DraftLengthPolicy)
  // Each sequence's share of a step's drafting time by the drafts it asked
  // for (DraftLengthPolicy::Plan: the MTP head's chained forwards), and the
  // decoding rows of the step just run.
  StepCosts draft_costs;
  int64_t decode_rows = 0;
  // The step's drafters' AfterStep calls, made together once every sequence
  // took its tokens (AfterSteps: the MTP head batched), and which of them
  // chose their drafts by Plan.
  std::vector<AfterStepCall> after_step;
  std::vector<bool> planned;
  // Every sequence's drafts' acceptance (only its Learn is used): where a new
  // sequence's DraftLengthPolicy starts.
  DraftLengthPolicy all_drafts;
  int64_t last_sample_ns = 0;
  int64_t prev_step_end_ns = 0;  // when the previous Step returned; 0 after idling
  RunnerStats base;              // the runner's counters when the loop started
  std::deque<std::pair<int64_t, uint64_t>> step_counts;  // (t, runner steps) over the window
};

struct Scheduler::StepCounts {
  uint64_t prompt_tokens = 0, generated = 0, ttft_count = 0;
  double ttft_seconds = 0;
  uint64_t drafted = 0, accepted = 0, verifications = 0;
};

void Scheduler::Loop() {
  LoopState st;
  for (int s = options_.num_slots - 1; s >= 0; --s) st.free_slots.push_back(s);
  st.base = runner_.stats();

  Status fatal;
  while (TakeIncoming(st)) {
    DropCancelled(st);
    Admit(st);
    PublishGauges(st);  // gauges follow cancellations and admissions at once
    if (st.running.empty()) {
      if (fatal = WaitIdle(st); !fatal.ok()) break;
      continue;
    }
    StepCounts sc;
    const size_t decode_rows = FormBatch(st, &sc);
    st.decode_rows = static_cast<int64_t>(decode_rows);
    const int64_t step_start_ns = clock_.NowNs();
    if (fatal = runner_.Step(st.batch, &st.out); !fatal.ok()) break;
    const int64_t now = clock_.NowNs();
    if (sc.prompt_tokens == 0 && options_.speculative.adaptive &&
        options_.speculative.method != SpeculativeMethod::kOff) {
      int64_t rows = 0;
      for (const SequenceChunk& c : st.batch) rows += static_cast<int64_t>(c.tokens.size());
      st.step_costs.Record(rows, (now - step_start_ns) * 1e-9);
    }
    // A failure here is a drafter's (the MTP head on the model's state).
    if (fatal = DistributeStep(st, now, &sc); !fatal.ok()) break;
    ReapFinished(st);
    const int64_t period_ns = st.prev_step_end_ns > 0 ? now - st.prev_step_end_ns : 0;
    if (sc.prompt_tokens == 0 && period_ns > 0) {
      MutexLock lock(mu_);
      metrics_.decode_only_steps_total += 1;
      metrics_.decode_only_tokens_total += sc.generated;
      metrics_.decode_only_seconds_total += period_ns * 1e-9;
    }
    OCTET_LOG(DEBUG) << "step: " << st.batch.size() << " sequences (" << decode_rows
                     << " decoding, " << sc.prompt_tokens << " prompt tokens, " << sc.drafted
                     << " drafted, " << sc.accepted << " accepted), forward "
                     << (now - step_start_ns) * 1e-6 << " ms, since the previous step "
                     << period_ns * 1e-6 << " ms";
    st.prev_step_end_ns = now;
    Record(st, sc, now);
  }
  FailAll(st, fatal);
}

bool Scheduler::TakeIncoming(LoopState& st) {
  MutexLock lock(mu_);
  if (stop_) return false;
  while (!incoming_.empty()) {
    Incoming& in = incoming_.front();
    st.waiting.push_back(
        std::make_unique<Active>(in.stream, std::move(in.params), runner_.config(), in.group));
    incoming_.pop_front();
    // Start checked that the method is available, so this cannot fail.
    if (auto d = MakeDrafter(options_.speculative, runner_); d.ok()) {
      st.waiting.back()->drafter = std::move(*d);
      // A new sequence starts from the rates its predecessors' drafts had.
      st.waiting.back()->draft_length = st.all_drafts;
    }
  }
  return true;
}

void Scheduler::DropCancelled(LoopState& st) {
  for (auto it = st.waiting.begin(); it != st.waiting.end();) {
    if ((*it)->stream->cancelled()) {
      Finish(**it, "cancelled", Status::Ok());
      it = st.waiting.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = st.running.begin(); it != st.running.end();) {
    if ((*it)->stream->cancelled()) {
      Finish(**it, "cancelled", Status::Ok());
      (*it)->done = true;
      ++it;
    } else {
      ++it;
    }
  }
  ReapFinished(st);
}

// First come, first served, while slots are free; the sequences of one group
// together (the first one prefills for all).
void Scheduler::Admit(LoopState& st) {
  while (!st.free_slots.empty() && !st.waiting.empty()) {
    size_t k = 1;
    if (st.waiting.front()->group != 0) {
      while (k < st.waiting.size() && st.waiting[k]->group == st.waiting.front()->group) ++k;
    }
    if (k > st.free_slots.size()) break;
    Active* leader = nullptr;
    for (size_t j = 0; j < k; ++j) {
      std::unique_ptr<Active> a = std::move(st.waiting.front());
      st.waiting.pop_front();
      a->slot = st.free_slots.back();
      st.free_slots.pop_back();
      a->stream->MarkAdmitted(clock_.NowNs());
      if (j == 0) {
        leader = a.get();
      } else {
        a->leader = leader;
      }
      st.running.push_back(std::move(a));
    }
  }
}

void Scheduler::PublishGauges(const LoopState& st) {
  MutexLock lock(mu_);
  metrics_.running = static_cast<int>(st.running.size());
  metrics_.queued = static_cast<int>(st.waiting.size());
  int64_t cached = 0;
  for (const auto& a : st.running) cached += a->cached;
  metrics_.kv_used_fraction =
      double(cached) / double(std::max<int64_t>(1, options_.num_slots * options_.context));
}

Status Scheduler::WaitIdle(LoopState& st) {
  st.prev_step_end_ns = 0;  // the next step's period would include the idle wait
  OCTET_RETURN_IF_ERROR(runner_.Idle());
  const int64_t now = clock_.NowNs();
  // Rates fall back to zero while idle.
  if (now - st.last_sample_ns >= kIdleSampleNs) Record(st, StepCounts{}, now);
  MutexLock lock(mu_);
  clock_.WaitForMs(lock, cv_, options_.idle_poll_ms,
                   [&]() REQUIRES(mu_) { return stop_ || !incoming_.empty(); });
  return Status::Ok();
}

// A token for every decoding request (with its drafts, if any), then prompt chunks.
size_t Scheduler::FormBatch(LoopState& st, StepCounts* sc) {
  st.batch.clear();
  st.owners.clear();
  size_t decode_rows = 0;
  bool prompt_waiting = false;
  for (const auto& a : st.running) {
    if (a->decoding()) {
      ++decode_rows;
    } else if (a->leader == nullptr) {
      prompt_waiting = true;
    }
  }
  // Drafts share what the decoding rows leave of the budget, and leave a
  // token for a waiting prompt so that it always makes progress.
  int64_t draft_budget =
      options_.max_batch_tokens - static_cast<int64_t>(decode_rows) - (prompt_waiting ? 1 : 0);
  int64_t budget = options_.max_batch_tokens;
  // The step's decoding rows and their expected tokens, as drafts join it.
  StepSoFar so_far{static_cast<int64_t>(decode_rows), static_cast<double>(decode_rows)};
  for (const auto& a : st.running) {
    if (!a->decoding()) continue;
    SequenceChunk c;
    c.slot = a->slot;
    c.start_pos = a->cached;
    c.tokens.assign(1, a->last);
    a->drafts.clear();
    if (a->drafter && draft_budget > 0 && !a->constraint) {
      // No more drafts than tokens still wanted after this step's own one
      // (which also keeps [last, drafts] inside the slot's context).
      const int64_t room =
          std::min(a->params.max_tokens - a->generated - 1, options_.context - a->cached - 1);
      const int64_t k = std::min<int64_t>({options_.speculative.draft_tokens, room, draft_budget});
      if (k > 0) {
        a->drafts = a->drafter->Draft(a->history, static_cast<int>(k));
        if (static_cast<int64_t>(a->drafts.size()) > k) a->drafts.resize(static_cast<size_t>(k));
        a->draft_kind = a->drafter->kind();
        if (options_.speculative.adaptive && !a->drafts.empty()) {
          a->drafts.resize(static_cast<size_t>(a->draft_length.Choose(
              a->draft_kind, static_cast<int64_t>(a->drafts.size()), st.step_costs, &so_far)));
        }
      }
      draft_budget -= static_cast<int64_t>(a->drafts.size());
      c.tokens.insert(c.tokens.end(), a->drafts.begin(), a->drafts.end());
      c.all_logits = !a->drafts.empty();  // row j verifies draft j+1
      c.verify = !a->drafts.empty();
    }
    budget -= static_cast<int64_t>(c.tokens.size());
    st.batch.push_back(std::move(c));
    st.owners.push_back(a.get());
  }
  for (const auto& a : st.running) {
    if (a->decoding() || a->leader != nullptr || budget <= 0) continue;
    const int64_t left = static_cast<int64_t>(a->params.prompt.size()) - a->prefilled;
    const int64_t n = std::min(left, budget);
    SequenceChunk c;
    c.slot = a->slot;
    c.start_pos = a->prefilled;
    c.tokens.assign(a->params.prompt.begin() + a->prefilled,
                    a->params.prompt.begin() + a->prefilled + n);
    st.batch.push_back(std::move(c));
    st.owners.push_back(a.get());
    budget -= n;
    sc->prompt_tokens += static_cast<uint64_t>(n);
  }
  return decode_rows;
}

Status Scheduler::DistributeStep(LoopState& st, int64_t now, StepCounts* sc) {
  st.after_step.clear();
  st.planned.clear();
  for (size_t i = 0; i < st.batch.size(); ++i) {
    Active& a = *st.owners[i];
    const int64_t n = static_cast<int64_t>(st.batch[i].tokens.size());
    const bool was_decoding = a.decoding();
    if (!was_decoding) {
      a.prefilled += n;
      a.cached = a.prefilled;
      if (!a.decoding()) {  // more prompt to go
        // A drafter on the model's state (MTP) takes every prompt chunk's
        // rows; its drafts are not verified (more prompt comes first).
        if (a.drafter) {
          st.after_step.push_back(AfterStepCall{a.drafter.get(), i, a.slot, st.batch[i].start_pos,
                                                n, &a.params.prompt, 1});
          st.planned.push_back(false);
        }
        continue;
      }
      if (a.drafter) a.history = a.params.prompt;
      // The group's other sequences take a copy of the prompt's cache and
      // their first token from the same logits.
      for (auto& f : st.running) {
        if (f->leader != &a) continue;
        f->leader = nullptr;
        Status cs = runner_.CopySlot(a.slot, f->slot, a.prefilled);
        if (cs.code() == StatusCode::kUnimplemented) continue;  // f prefills for itself
        OCTET_RETURN_IF_ERROR(cs);
        f->prefilled = a.prefilled;
        f->cached = a.prefilled;
        if (f->drafter) f->history = f->params.prompt;
        OCTET_RETURN_IF_ERROR(Emit(st, *f, i, false, n, now, sc));
      }
    }
    OCTET_RETURN_IF_ERROR(Emit(st, a, i, was_decoding, n, now, sc));
  }
  if (st.after_step.empty()) return Status::Ok();
  const int64_t start = clock_.NowNs();
  OCTET_RETURN_IF_ERROR(AfterSteps(st.after_step));
  // The drafting time (DraftLengthPolicy::Plan's) when every call chose by
  // Plan (no prompt rows): each sequence's share, in proportion to the drafts
  // it asked for (those beyond its first are the chained forwards it adds).
  if (std::find(st.planned.begin(), st.planned.end(), false) == st.planned.end()) {
    const double seconds = (clock_.NowNs() - start) * 1e-9;
    int64_t asked = 0;
    for (const AfterStepCall& c : st.after_step) asked += c.want;
    for (const AfterStepCall& c : st.after_step) {
      st.draft_costs.Record(c.want, seconds * c.want / static_cast<double>(asked));
    }
  }
  return Status::Ok();
}

// The ids chunk `i` of the step (n rows) gives sequence `a`: row j verifies
// draft j+1 and is kept while the drafts are; the row after the last kept
// draft (or the only row) gives the model's own token.
Status Scheduler::Emit(LoopState& st, Active& a, size_t i, bool was_decoding, int64_t n,
                       int64_t now, StepCounts* sc) {
  const ForwardOutput& out = st.out;
  const std::vector<int32_t> no_drafts;
  const std::vector<int32_t>& drafts = was_decoding ? a.drafts : no_drafts;
  std::vector<int32_t> kept;
  std::vector<TokenLogprob> logprobs;
  int64_t accepted = 0;
  std::string reason;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const float* row = drafts.empty() ? out.Last(i) : out.Row(out.row_begin[i] + int64_t(j));
    bool hit = false;
    int32_t id;
    if (a.constraint) {  // only tokens the grammar allows (no drafts: see FormBatch)
      ConstraintFilter filter(*a.constraint, a.stop);
      id = a.sampler.Sample(row, out.vocab, runner_.backend(), filter);
    } else if (j < drafts.size()) {
      id = a.sampler.Verify(row, out.vocab, runner_.backend(), drafts[j], &hit);
    } else {
      id = a.sampler.Sample(row, out.vocab, runner_.backend());
    }
    if (a.constraint) a.constraint->Accept(id);
    kept.push_back(id);
    if (a.params.logprobs >= 0) {
      logprobs.push_back(ComputeLogprobs(row, out.vocab, id, a.params.logprobs));
    }
    a.generated += 1;
    if (hit) ++accepted;
    const bool is_stop = std::find(a.stop.begin(), a.stop.end(), id) != a.stop.end();
    if (!a.params.ignore_eos && is_stop && a.generated >= a.params.min_tokens) {
      reason = "stop";
    } else if (a.generated >= a.params.max_tokens) {
      reason = "length";
    }
    if (!reason.empty() || !hit) break;
  }
  // Row j checked draft j; rows past a rejection or a stop were not looked at.
  if (!drafts.empty() && options_.speculative.adaptive) {
    const auto checked = static_cast<int64_t>(std::min(kept.size(), drafts.size()));
    a.draft_length.Learn(a.draft_kind, checked, accepted);
    st.all_drafts.Learn(a.draft_kind, checked, accepted);
  }
  // [last, kept drafts] are in the cache now; the newest id is not.
  if (was_decoding) a.cached += static_cast<int64_t>(kept.size());
  a.last = kept.back();
  if (a.drafter) {
    a.history.insert(a.history.end(), kept.begin(), kept.end());
    // The rows this step keeps: the prompt chunk's, or [last, accepted drafts].
    const int64_t rows = was_decoding ? static_cast<int64_t>(kept.size()) : n;
    if (reason.empty()) {
      // A drafter that drafts here (the MTP head) makes what the next step
      // may verify (DraftLengthPolicy::Plan; the step taken to hold this
      // one's decoding rows again) and what the sequence still has room for.
      const int64_t room =
          std::min(a.params.max_tokens - a.generated - 1, options_.context - a.cached - 1);
      int64_t want = std::clamp<int64_t>(room, 1, options_.speculative.draft_tokens);
      const bool planned =
          was_decoding && options_.speculative.adaptive && a.drafter->drafts_after_step();
      if (planned) {
        want = a.draft_length.Plan(a.drafter->kind(), want, st.step_costs, st.draft_costs,
                                   StepSoFar{st.decode_rows, static_cast<double>(st.decode_rows)});
      }
      // Chunk i's rows, into this sequence's own slot (a forked sequence's
      // chunk is its leader's).
      st.after_step.push_back(AfterStepCall{a.drafter.get(), i, a.slot, st.batch[i].start_pos, rows,
                                            &a.history, static_cast<int>(want)});
      st.planned.push_back(planned);
    }
  }
  const bool first = a.generated == static_cast<int64_t>(kept.size());
  a.stream->Push(kept, a.params.logprobs >= 0 ? &logprobs : nullptr,
                 static_cast<int64_t>(drafts.size()), accepted, now);
  sc->generated += kept.size();
  sc->drafted += drafts.size();
  sc->accepted += static_cast<uint64_t>(accepted);
  if (!drafts.empty()) sc->verifications += 1;
  if (first) {
    sc->ttft_seconds += a.stream->ttft_ms() * 1e-3;
    sc->ttft_count += 1;
  }
  if (!reason.empty()) {
    Finish(a, reason, Status::Ok());
    a.done = true;
  }
  return Status::Ok();
}

// Finished sequences leave the running set and free their slots; followers
// still waiting for a finished leader's prefill prefill for themselves.
void Scheduler::ReapFinished(LoopState& st) {
  for (auto it = st.running.begin(); it != st.running.end();) {
    if (!(*it)->done) {
      ++it;
      continue;
    }
    st.free_slots.push_back((*it)->slot);
    for (auto& f : st.running) {
      if (f->leader == it->get()) f->leader = nullptr;
    }
    it = st.running.erase(it);
  }
}

// Counters and the sliding window of the figures (after every step, and
// every kIdleSampleNs while idle).
void Scheduler::Record(LoopState& st, const StepCounts& sc, int64_t now) {
  const RunnerStats rs = runner_.stats();
  st.step_counts.emplace_back(now, rs.steps);
  while (st.step_counts.size() > 2 && now - st.step_counts.front().first > kWindowNs) {
    st.step_counts.pop_front();
  }
  {
    MutexLock lock(mu_);
    metrics_.prompt_tokens_total += sc.prompt_tokens;
    metrics_.generation_tokens_total += sc.generated;
    metrics_.ttft_seconds_sum += sc.ttft_seconds;
    metrics_.ttft_count += sc.ttft_count;
    metrics_.spec_drafted_tokens_total += sc.drafted;
    metrics_.spec_accepted_tokens_total += sc.accepted;
    metrics_.spec_verifications_total += sc.verifications;
    metrics_.steps_total = rs.steps - st.base.steps;
    metrics_.step_seconds_total = (rs.step_ns - st.base.step_ns) * 1e-9;
    metrics_.allreduce_seconds_total = (rs.allreduce_ns - st.base.allreduce_ns) * 1e-9;
    window_.push_back({now, metrics_.prompt_tokens_total, metrics_.generation_tokens_total,
                       metrics_.spec_drafted_tokens_total, metrics_.spec_accepted_tokens_total,
                       rs.step_ns, rs.allreduce_ns, rs.comm_ns});
    while (window_.size() > 2 && now - window_.front().t_ns > kWindowNs) window_.pop_front();
    const uint64_t steps = st.step_counts.back().second - st.step_counts.front().second;
    const int64_t step_ns = window_.back().step_ns - window_.front().step_ns;
    metrics_.step_ms = steps > 0 ? step_ns * 1e-6 / double(steps) : 0.0;
  }
  PublishGauges(st);
  st.last_sample_ns = now;
}

// Counts first, so that a consumer who sees its request end sees it counted.
void Scheduler::Finish(Active& a, const std::string& reason, Status error) {
  {
    MutexLock lock(mu_);
    if (reason == "cancelled") {
      metrics_.requests_cancelled += 1;
    } else if (reason == "error") {
      metrics_.requests_failed += 1;
    } else {
      metrics_.requests_finished += 1;
    }
  }
  a.stream->Finish(reason, std::move(error));
}

// A fatal runner error or Stop: every request ends.
void Scheduler::FailAll(LoopState& st, const Status& fatal) {
  Status why;
  {
    MutexLock lock(mu_);
    if (!fatal.ok()) {
      health_ = fatal;
      OCTET_LOG(ERROR) << "model instance failed: " << fatal.message();
    }
    why = fatal.ok() ? stop_reason_ : fatal;
    while (!incoming_.empty()) {
      st.waiting.push_back(std::make_unique<Active>(
          incoming_.front().stream, std::move(incoming_.front().params), runner_.config()));
      incoming_.pop_front();
    }
    metrics_.running = 0;
    metrics_.queued = 0;
  }
  for (auto& a : st.waiting) Finish(*a, "error", why);
  for (auto& a : st.running) Finish(*a, "error", why);
}

}  // namespace octet::engine
