// Continuous batching: requests that join and leave between steps, chunked
// prefill, a KV arena smaller than the load (queueing), cancellation, refusal
// of requests that can never fit, and a runner failure that ends every
// request. The reference for each request's tokens is the same request run
// alone through Generate (greedy), never the scheduler itself.
#include <QtTest>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "forwarding_runner.h"
#include "octet/base/clock.h"
#include "octet/base/file_util.h"
#include "octet/engine/generate.h"
#include "octet/engine/scheduler.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::unique_ptr<Model> Load(const std::string& name, bool mtp = false) {
  LoadOptions lo;
  lo.threads = 1;
  lo.load_mtp = mtp;
  auto m = Model::Load(test::FixturesDir() + "/" + name, lo);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  return std::move(*m);
}

// Eight different prompts (lengths 3..24) over the model's vocabulary.
std::vector<std::vector<int32_t>> Prompts(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  uint32_t x = 7;
  for (int r = 0; r < 8; ++r) {
    std::vector<int32_t> p;
    const int n = 3 + r * 3;
    for (int i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      p.push_back(static_cast<int32_t>((x >> 9) % vocab));
    }
    out.push_back(p);
  }
  return out;
}

std::vector<int32_t> Collect(RequestStream& s, RequestUpdate* last) {
  std::vector<int32_t> ids;
  RequestUpdate u;
  const Deadline d = Deadline::AfterMs(30'000);
  while (!d.expired()) {
    if (!s.Next(Deadline::AfterMs(1000), &u)) continue;
    ids.insert(ids.end(), u.ids.begin(), u.ids.end());
    if (u.done) break;
  }
  *last = u;
  return ids;
}

// One request of a mixed load, and what serving it gave.
struct Req {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 8;
  SamplingParams sampling;        // temperature 0: greedy
  std::vector<int32_t> stop_ids;  // empty: run to max_tokens (ignore_eos)
};
struct Served {
  std::vector<std::vector<int32_t>> ids;
  std::vector<RequestUpdate> last;
  SchedulerMetrics metrics;  // once every request ended
};

// All of `reqs` submitted at once to a scheduler with `so` over `runner`;
// `submitted` (if any) runs once every request is in.
void ServeAll(ModelRunner& runner, const SchedulerOptions& so, const std::vector<Req>& reqs,
              Served* out, const std::function<void()>& submitted = {}) {
  Scheduler sched(runner, so);
  QVERIFY(sched.Start().ok());
  // `submitted` runs on every way out too (a failed Submit returns early), so
  // that a held runner's loop is let go before the scheduler joins it.
  bool opened = false;
  const auto open = [&] {
    if (!opened && submitted) submitted();
    opened = true;
  };
  struct OpenOnExit {
    const std::function<void()> open;
    ~OpenOnExit() { open(); }
  } open_on_exit{open};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) {
    GenerationParams p;
    p.prompt = r.prompt;
    p.max_tokens = r.max_tokens;
    p.sampling = r.sampling;
    p.stop_ids = r.stop_ids;
    p.ignore_eos = r.stop_ids.empty();
    auto s = sched.Submit(p);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    streams.push_back(*s);
  }
  open();
  for (auto& s : streams) {
    RequestUpdate last;
    out->ids.push_back(Collect(*s, &last));
    QVERIFY(last.done);
    out->last.push_back(last);
  }
  out->metrics = sched.Metrics();
  for (const Deadline d = Deadline::AfterMs(5000); out->metrics.running != 0 && !d.expired();) {
    QThread::msleep(5);
    out->metrics = sched.Metrics();
  }
}

// A local model whose start is held: the scheduler's thread reads the
// runner's stats() as its loop starts, before it takes any request, and the
// first such call waits for Open(). A test opens it once every request is
// submitted (ServeAll's `submitted`), so the first step takes them all,
// whatever the threads' timing: a request picked up a step late puts its
// sequence out of step with the others, and the steps' count and batches
// with it. A step before the hold was passed fails, so a scheduler that
// stops reading stats() first fails these tests instead of making them flaky.
class HeldRunner : public test::ForwardingRunner {
 public:
  explicit HeldRunner(Model& m) : ForwardingRunner(m) {}
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  RunnerStats stats() const override {
    {
      std::unique_lock lock(mu_);
      if (!held_) {
        held_ = true;
        cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
      }
    }
    return inner_.stats();
  }
  Status Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) override {
    {
      std::lock_guard lock(mu_);
      if (!held_ || !open_) {
        return FailedPreconditionError(
            "HeldRunner: a step before the scheduler's start was held and opened");
      }
    }
    return inner_.Step(batch, out);
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool held_ = false;
  bool open_ = false;
};

// A held local model whose steps take, on a manual clock, what `cost` says a
// step of that many rows takes: the scheduler's step times, and so its draft
// lengths, without the machine's noise. With SetMtpCosts its MTP head's
// drafting takes `first_ms` for the forward over the kept rows and
// `chain_ms` for each further draft (of any of the sequences drafting in the
// call: they chain together), and it records the drafts asked of each
// decode-time request (one fed at most `decode_rows` rows: prompts are
// longer) and the requests of each decode-time call.
class TimedRunner final : public HeldRunner {
 public:
  TimedRunner(Model& m, ManualClock& clock, std::function<double(int64_t rows)> cost_ms)
      : HeldRunner(m), clock_(clock), cost_ms_(std::move(cost_ms)) {}
  void SetMtpCosts(double first_ms, double chain_ms, size_t decode_rows) {
    first_ms_ = first_ms;
    chain_ms_ = chain_ms;
    decode_rows_ = decode_rows;
  }
  Status Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) override {
    int64_t rows = 0;
    for (const SequenceChunk& c : batch) rows += static_cast<int64_t>(c.tokens.size());
    clock_.AdvanceNs(static_cast<int64_t>(cost_ms_(rows) * 1e6));
    return HeldRunner::Step(batch, out);
  }
  Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits) override {
    int k = 1;
    int decoding = 0;
    for (const MtpDraftRequest& q : requests) {
      k = std::max(k, q.k);
      if (q.next.size() <= decode_rows_) {
        asked.push_back(q.k);
        ++decoding;
      }
    }
    if (decoding > 0) batched.push_back(decoding);
    clock_.AdvanceNs(static_cast<int64_t>((first_ms_ + (k - 1) * chain_ms_) * 1e6));
    return inner_.MtpDraftBatch(requests, drafts, logits);
  }
  // The scheduler thread's, read after it stopped.
  std::vector<int> asked;    // by decode-time request
  std::vector<int> batched;  // decode-time requests by call

 private:
  ManualClock& clock_;
  std::function<double(int64_t)> cost_ms_;
  double first_ms_ = 0, chain_ms_ = 0;
  size_t decode_rows_ = 0;
};

// The same request alone through Generate.
std::vector<int32_t> GenerateAlone(Model& m, const Req& r, const SpeculativeOptions& spec) {
  GenerateOptions g;
  g.max_tokens = r.max_tokens;
  g.sampling = r.sampling;
  g.stop_ids = r.stop_ids;
  g.stop_at_eos = !r.stop_ids.empty();
  g.speculative = spec;
  auto res = Generate(m, r.prompt, g);
  if (!res.ok()) qFatal("%s", res.status().ToString().c_str());
  return res->ids;
}

// A runner that fails on its n-th step, like a TP group whose peer died.
class FailingRunner final : public test::ForwardingRunner {
 public:
  FailingRunner(Model& m, int fail_at) : ForwardingRunner(m), fail_at_(fail_at) {}
  // No step runs before Open(): the test submits every request first, or the
  // scheduler could fail (and refuse new work) while it is still submitting.
  Status Step(const std::vector<SequenceChunk>& b, ForwardOutput* out) override {
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; })) {
        return DeadlineExceededError("FailingRunner: the test never opened the gate");
      }
    }
    if (++steps_ >= fail_at_) {
      return UnavailableError("rank 1 (pid 4242 at 10.0.0.2) died while this rank waited");
    }
    return inner_.Step(b, out);
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  int fail_at_;
  int steps_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

class TestScheduler : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  void concurrentRequestsMatchTheirSoloRuns_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("num_slots");
    QTest::addColumn<int>("budget");
    QTest::newRow("qwen3-tiny, 8 slots, budget 64") << "qwen3-tiny" << 8 << 64;
    // Fewer slots than requests (queueing) and a small budget (prompts in chunks).
    QTest::newRow("llama3-tiny, 3 slots, budget 8") << "llama3-tiny" << 3 << 8;
    QTest::newRow("qwen3-tiny-nvfp4, 5 slots, budget 12") << "qwen3-tiny-nvfp4" << 5 << 12;
  }
  // 8 greedy requests at once give each the ids it gets alone.
  void concurrentRequestsMatchTheirSoloRuns() {
    QFETCH(QString, model);
    QFETCH(int, num_slots);
    QFETCH(int, budget);
    auto m = Load(model.toStdString());
    const auto prompts = Prompts(m->config().vocab_size);
    std::vector<std::vector<int32_t>> solo;
    for (size_t r = 0; r < prompts.size(); ++r) {
      GenerateOptions g;
      g.max_tokens = 6 + static_cast<int64_t>(r);
      g.stop_at_eos = false;
      auto res = Generate(*m, prompts[r], g);
      QVERIFY2(res.ok(), res.status().ToString().c_str());
      solo.push_back(res->ids);
    }
    LocalRunner runner(*m);
    SchedulerOptions so;
    so.num_slots = num_slots;
    so.context = 64;
    so.max_batch_tokens = budget;
    Scheduler sched(runner, so);
    QVERIFY(sched.Start().ok());
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t r = 0; r < prompts.size(); ++r) {
      GenerationParams p;
      p.prompt = prompts[r];
      p.max_tokens = 6 + static_cast<int64_t>(r);
      p.ignore_eos = true;
      auto s = sched.Submit(p);
      QVERIFY2(s.ok(), s.status().ToString().c_str());
      streams.push_back(*s);
    }
    for (size_t r = 0; r < streams.size(); ++r) {
      RequestUpdate last;
      auto ids = Collect(*streams[r], &last);
      QVERIFY(last.done);
      QCOMPARE(last.finish_reason, std::string("length"));
      QCOMPARE(ids, solo[r]);
      QCOMPARE(last.completion_tokens, static_cast<int64_t>(solo[r].size()));
      QCOMPARE(last.prompt_tokens, static_cast<int64_t>(prompts[r].size()));
      QVERIFY(last.timing.first_token_ns >= last.timing.admitted_ns);
      QVERIFY(last.timing.admitted_ns >= last.timing.submitted_ns);
    }
    // Gauges and token counters are updated right after the step that ended the last request.
    SchedulerMetrics mt = sched.Metrics();
    for (const Deadline d = Deadline::AfterMs(5000); mt.running != 0 && !d.expired();) {
      QThread::msleep(5);
      mt = sched.Metrics();
    }
    QCOMPARE(mt.requests_total, uint64_t(8));
    QCOMPARE(mt.requests_finished, uint64_t(8));
    QCOMPARE(mt.running, 0);
    QCOMPARE(mt.ttft_count, uint64_t(8));
    uint64_t prompt_total = 0;
    for (const auto& p : prompts) prompt_total += p.size();
    QCOMPARE(mt.prompt_tokens_total, prompt_total);
    uint64_t generated_total = 0;
    for (const auto& ids : solo) generated_total += ids.size();
    QCOMPARE(mt.generation_tokens_total, generated_total);
    // Once the last prompt (submitted last, 13 tokens to generate) is in the
    // cache, its 12 remaining tokens come from steps without prompt tokens;
    // each such step carries at most one token per slot.
    QVERIFY(mt.decode_only_steps_total >= 12);
    QVERIFY(mt.decode_only_tokens_total >= mt.decode_only_steps_total);
    QVERIFY(mt.decode_only_tokens_total <= mt.decode_only_steps_total * num_slots);
    QVERIFY(mt.decode_only_tokens_total < generated_total);  // first tokens come from prefill
    QVERIFY(mt.decode_only_seconds_total > 0);
  }

  // Stop ids end a request unless ignore_eos; min_tokens defers them.
  void stopIdsEndARequest() {
    auto m = Load("qwen3-tiny");
    const auto prompt = Prompts(m->config().vocab_size)[2];
    GenerateOptions g;
    g.max_tokens = 6;
    g.stop_at_eos = false;
    auto solo = Generate(*m, prompt, g);
    QVERIFY(solo.ok());
    LocalRunner runner(*m);
    Scheduler sched(runner, {.num_slots = 2, .context = 64, .max_batch_tokens = 32});
    QVERIFY(sched.Start().ok());
    GenerationParams p;
    p.prompt = prompt;
    p.max_tokens = 6;
    p.stop_ids = {solo->ids[2]};  // the third generated id ends it
    auto s = sched.Submit(p);
    QVERIFY(s.ok());
    RequestUpdate last;
    auto ids = Collect(**s, &last);
    QCOMPARE(last.finish_reason, std::string("stop"));
    // Stops at the first occurrence of that id (which may come earlier).
    const auto first = std::find(solo->ids.begin(), solo->ids.end(), solo->ids[2]);
    QCOMPARE(ids, std::vector<int32_t>(solo->ids.begin(), first + 1));
    p.min_tokens = 5;  // the stop id counts only from the fifth token on
    auto s2 = sched.Submit(p);
    QVERIFY(s2.ok());
    ids = Collect(**s2, &last);
    const bool stops_at_5 = solo->ids[4] == solo->ids[2];
    const bool stops_at_6 = solo->ids[5] == solo->ids[2];
    QCOMPARE(last.finish_reason, std::string(stops_at_5 || stops_at_6 ? "stop" : "length"));
    QCOMPARE(ids, std::vector<int32_t>(solo->ids.begin(), solo->ids.begin() + (stops_at_5 ? 5 : 6)));
  }

  void refusesWhatCanNeverFit() {
    auto m = Load("qwen3-tiny");
    LocalRunner runner(*m);
    Scheduler sched(runner, {.num_slots = 1, .context = 16, .max_batch_tokens = 8, .max_queue = 2});
    QVERIFY(sched.Start().ok());
    GenerationParams p;
    p.prompt = std::vector<int32_t>(12, 5);
    p.max_tokens = 5;  // 17 > 16
    auto r = sched.Submit(p);
    QCOMPARE(r.status().code(), StatusCode::kOutOfRange);
    QVERIFY(r.status().message().find("context of 16") != std::string::npos);
    p.max_tokens = 0;
    QCOMPARE(sched.Submit(p).status().code(), StatusCode::kInvalidArgument);
    p.max_tokens = 2;
    p.prompt = {5, int32_t(m->config().vocab_size)};
    QCOMPARE(sched.Submit(p).status().code(), StatusCode::kInvalidArgument);
    p.prompt = {};
    QCOMPARE(sched.Submit(p).status().code(), StatusCode::kInvalidArgument);
  }

  // A cancelled request leaves at the next step and frees its slot for the queue.
  void cancellationFreesTheSlot() {
    auto m = Load("qwen3-tiny");
    LocalRunner runner(*m);
    Scheduler sched(runner, {.num_slots = 1, .context = 512, .max_batch_tokens = 16});
    QVERIFY(sched.Start().ok());
    GenerationParams longp;
    longp.prompt = {1, 2, 3};
    longp.max_tokens = 500;
    longp.ignore_eos = true;
    auto a = sched.Submit(longp);
    QVERIFY(a.ok());
    GenerationParams shortp;
    shortp.prompt = {4, 5, 6};
    shortp.max_tokens = 3;
    shortp.ignore_eos = true;
    auto b = sched.Submit(shortp);  // waits: the only slot is taken
    QVERIFY(b.ok());
    RequestUpdate u;
    QVERIFY((*a)->Next(Deadline::AfterMs(10'000), &u));  // running
    QVERIFY(!u.ids.empty());
    (*a)->Cancel();
    RequestUpdate last;
    Collect(**a, &last);
    QCOMPARE(last.finish_reason, std::string("cancelled"));
    QVERIFY(last.completion_tokens < 500);
    auto ids = Collect(**b, &last);
    QCOMPARE(last.finish_reason, std::string("length"));
    QCOMPARE(ids.size(), size_t(3));
    QCOMPARE(sched.Metrics().requests_cancelled, uint64_t(1));
  }

  void fullQueueRefuses() {
    auto m = Load("qwen3-tiny");
    LocalRunner runner(*m);
    Scheduler sched(runner, {.num_slots = 1, .context = 512, .max_batch_tokens = 16, .max_queue = 2});
    QVERIFY(sched.Start().ok());
    GenerationParams p;
    p.prompt = {1, 2, 3};
    p.max_tokens = 400;
    p.ignore_eos = true;
    std::vector<std::shared_ptr<RequestStream>> keep;
    Status refused;
    for (int i = 0; i < 6 && refused.ok(); ++i) {
      auto s = sched.Submit(p);
      if (s.ok()) {
        keep.push_back(*s);
      } else {
        refused = s.status();
      }
    }
    QCOMPARE(refused.code(), StatusCode::kResourceExhausted);
    for (auto& s : keep) s->Cancel();
  }

  // Speculative decoding under continuous batching, with random-weight
  // fixtures (drafts mostly rejected; every path of the verification runs):
  // greedy requests (different prompts, prompts that repeat so that every
  // step drafts, one that ends at a stop id) get what Generate gives them
  // alone and what the scheduler gives without speculation; sampled requests
  // get plain sampling's ids for their seed (Verify makes Sample's draw,
  // whatever was drafted), checked at the budget of 256.
  void speculativeMatchesPlainDecoding_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("num_slots");
    QTest::addColumn<int>("budget");
    QTest::addColumn<int>("k");
    QTest::addColumn<bool>("mtp");
    QTest::newRow("qwen3-tiny, 8 slots, K 3") << "qwen3-tiny" << 8 << 256 << 3 << false;
    QTest::newRow("llama3-tiny, 4 slots, K 1") << "llama3-tiny" << 4 << 256 << 1 << false;
    // Queueing and a budget that cuts drafts and prompts short.
    QTest::newRow("qwen3-tiny-nvfp4, 3 slots, budget 10, K 5")
        << "qwen3-tiny-nvfp4" << 3 << 10 << 5 << false;
    // The MTP head drafting for every sequence of a step, prompts in chunks.
    QTest::newRow("glm4-moe-tiny mtp, 4 slots, K 3") << "glm4-moe-tiny" << 4 << 256 << 3 << true;
    QTest::newRow("glm4-moe-tiny-nvfp4 mtp, 3 slots, budget 10, K 2")
        << "glm4-moe-tiny-nvfp4" << 3 << 10 << 2 << true;
  }
  void speculativeMatchesPlainDecoding() {
    QFETCH(QString, model);
    QFETCH(int, num_slots);
    QFETCH(int, budget);
    QFETCH(int, k);
    QFETCH(bool, mtp);
    auto m = Load(model.toStdString(), mtp);
    const int64_t vocab = m->config().vocab_size;
    const auto prompts = Prompts(vocab);
    std::vector<Req> reqs;
    for (int r = 0; r < 4; ++r) reqs.push_back({prompts[r], 6 + r});
    // Prompts that repeat a phrase: the lookup finds drafts at every step.
    for (int r = 0; r < 2; ++r) {
      Req q;
      for (int i = 0; i < 4; ++i)
        q.prompt.insert(q.prompt.end(), prompts[r].begin(), prompts[r].end());
      q.max_tokens = 16;
      reqs.push_back(q);
    }
    // Sampled: temperature, top-k, top-p; one with a repeated prompt.
    for (int r = 0; r < 2; ++r) {
      Req q = reqs[r == 0 ? 4 : 1];
      q.sampling = {.temperature = 0.9f, .top_k = 20, .top_p = 0.95f, .seed = uint64_t(11 + r)};
      q.max_tokens = 14;
      reqs.push_back(q);
    }
    // Ends at a stop id (the fourth token of its plain output).
    Req stop = reqs[5];
    stop.stop_ids = {GenerateAlone(*m, stop, {})[3]};
    reqs.push_back(stop);
    // A prompt holding every id: with one-token lookups every step drafts.
    Req every;
    for (int64_t i = 0; i < vocab; ++i) every.prompt.push_back(int32_t((i * 7919) % vocab));
    every.max_tokens = 12;
    reqs.push_back(every);

    SpeculativeOptions spec;
    spec.method = mtp ? SpeculativeMethod::kMtp : SpeculativeMethod::kNgram;
    spec.draft_tokens = k;
    spec.ngram_min = 1;  // draft as often as possible
    spec.adaptive = false;
    LocalRunner runner(*m);
    SchedulerOptions so;
    so.num_slots = num_slots;
    so.context = vocab + 64;
    so.max_batch_tokens = budget;
    Served plain, fast;
    ServeAll(runner, so, reqs, &plain);
    if (QTest::currentTestFailed()) return;
    so.speculative = spec;
    ServeAll(runner, so, reqs, &fast);
    if (QTest::currentTestFailed()) return;
    for (size_t r = 0; r < reqs.size(); ++r) {
      const bool greedy = reqs[r].sampling.temperature == 0.0f;
      const RequestUpdate& u = fast.last[r];
      if (greedy) {
        const auto ref = GenerateAlone(*m, reqs[r], {});
        QCOMPARE(plain.ids[r], ref);
        QCOMPARE(fast.ids[r], ref);
        QCOMPARE(u.finish_reason, std::string(reqs[r].stop_ids.empty() ? "length" : "stop"));
      } else {
        QCOMPARE(int64_t(fast.ids[r].size()), reqs[r].max_tokens);
        // Verify draws as Sample does: plain sampling's ids for the seed.
        if (budget >= 256) QCOMPARE(fast.ids[r], GenerateAlone(*m, reqs[r], {}));
      }
      QCOMPARE(u.completion_tokens, int64_t(fast.ids[r].size()));
      QVERIFY(u.timing.speculative);
      QVERIFY(u.timing.accepted_tokens <= u.timing.drafted_tokens);
      QVERIFY(!plain.last[r].timing.speculative);
      QCOMPARE(plain.last[r].timing.drafted_tokens, int64_t(0));
    }
    // The every-id prompt drafted; the counters add up the requests'.
    QVERIFY(fast.last.back().timing.drafted_tokens > 0);
    int64_t drafted = 0, accepted = 0;
    for (const auto& u : fast.last) {
      drafted += u.timing.drafted_tokens;
      accepted += u.timing.accepted_tokens;
    }
    QCOMPARE(fast.metrics.spec_drafted_tokens_total, uint64_t(drafted));
    QCOMPARE(fast.metrics.spec_accepted_tokens_total, uint64_t(accepted));
    QVERIFY(fast.metrics.spec_verifications_total > 0);
    QCOMPARE(plain.metrics.spec_drafted_tokens_total, uint64_t(0));
    QCOMPARE(fast.metrics.requests_finished, uint64_t(reqs.size()));
  }

  // The trained demo model copies a repeated sentence, so drafts are
  // accepted: greedy requests (some ending mid-draft at a stop id, some at
  // max_tokens inside a run of accepted drafts) still get exactly plain
  // decoding's ids, sampled ones plain sampling's with the same seed, and
  // the load takes fewer forward steps than without speculation.
  void acceptedDraftsUnderContinuousBatching() {
    const std::string dir = test::SourceDir() + "/resources/models/nanochat-demo";
    LoadOptions lo;
    lo.threads = 1;
    auto loaded = Model::Load(dir, lo);
    QVERIFY2(loaded.ok(), loaded.status().ToString().c_str());
    Model& m = **loaded;
    auto tok = Tokenizer::Load(dir + "/tokenizer.json");
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    const std::string fox = "The quick brown fox jumps over the lazy dog. ";
    const std::string kjv = "In the beginning God created the heaven and the earth. ";
    const std::string moses =
        "And the LORD said unto Moses, Speak unto the children of Israel, and say unto them. ";
    const auto p1 = tok->Encode(moses + moses + "And the LORD said unto Moses,", {});
    const auto p2 = tok->Encode(kjv + kjv + "In the", {});
    const auto p3 = tok->Encode(fox + fox + "The", {});
    std::vector<Req> reqs = {{p1, 40}, {p2, 30}, {p3, 11}, {p1, 7}};
    Req stop = {p1, 40};
    // A token of the reply where it copies the prompt: inside a run of drafts.
    const int32_t stop_id = GenerateAlone(m, stop, {})[12];
    stop.stop_ids = {stop_id};
    reqs.push_back(stop);
    for (uint64_t seed : {3, 4}) {
      Req q = {seed == 3 ? p1 : p2, 24};
      q.sampling = {.temperature = 0.7f, .top_k = 0, .top_p = 0.9f, .seed = seed};
      reqs.push_back(q);
    }
    SpeculativeOptions spec;
    spec.method = SpeculativeMethod::kNgram;
    spec.draft_tokens = 4;
    spec.adaptive = false;  // every draft verified (automatic lengths: below)
    SchedulerOptions so;
    so.num_slots = 4;  // the rest queue
    so.context = 128;
    so.max_batch_tokens = 64;
    Served plain, fast;
    {
      HeldRunner runner(m);
      ServeAll(runner, so, reqs, &plain, [&] { runner.Open(); });
    }
    if (QTest::currentTestFailed()) return;
    so.speculative = spec;
    {
      HeldRunner runner(m);
      ServeAll(runner, so, reqs, &fast, [&] { runner.Open(); });
    }
    if (QTest::currentTestFailed()) return;
    for (size_t r = 0; r < reqs.size(); ++r) {
      if (reqs[r].sampling.temperature == 0.0f) {
        const auto ref = GenerateAlone(m, reqs[r], {});
        QCOMPARE(plain.ids[r], ref);
        QCOMPARE(fast.ids[r], ref);
      } else {
        QCOMPARE(fast.ids[r], GenerateAlone(m, reqs[r], {}));
      }
    }
    // The stop request ended on its stop id, and drafts around it were kept.
    QCOMPARE(fast.last[4].finish_reason, std::string("stop"));
    QCOMPARE(fast.ids[4].back(), stop_id);
    QVERIFY(fast.last[4].timing.accepted_tokens > 0);
    // The copying request kept drafts.
    QVERIFY(fast.last[0].timing.accepted_tokens > 0);
    QVERIFY(fast.metrics.spec_accepted_tokens_total > 0);
    QVERIFY2(fast.metrics.steps_total < plain.metrics.steps_total,
             (QByteArray::number(qulonglong(fast.metrics.steps_total)) + " steps vs " +
              QByteArray::number(qulonglong(plain.metrics.steps_total)))
                 .constData());
    qInfo(
        "demo model, %zu requests: %llu steps plain, %llu speculative; %llu of %llu drafts "
        "accepted",
        reqs.size(), static_cast<unsigned long long>(plain.metrics.steps_total),
        static_cast<unsigned long long>(fast.metrics.steps_total),
        static_cast<unsigned long long>(fast.metrics.spec_accepted_tokens_total),
        static_cast<unsigned long long>(fast.metrics.spec_drafted_tokens_total));
  }

  // Bad options are refused when the scheduler starts; mtp on a model without
  // a multi-token-prediction head.
  void speculativeOptionsAreChecked() {
    auto m = Load("qwen3-tiny");
    LocalRunner runner(m.operator*());
    SchedulerOptions so;
    so.num_slots = 1;
    so.context = 16;
    so.max_batch_tokens = 8;
    so.speculative.method = SpeculativeMethod::kNgram;
    so.speculative.draft_tokens = 0;
    QCOMPARE(Scheduler(runner, so).Start().code(), StatusCode::kInvalidArgument);
    so.speculative.method = SpeculativeMethod::kMtp;
    so.speculative.draft_tokens = 2;
    Status s = Scheduler(runner, so).Start();
    QCOMPARE(s.code(), StatusCode::kFailedPrecondition);
    QVERIFY2(s.message().find("--speculative mtp") != std::string::npos &&
                 s.message().find("no multi-token-prediction layer") != std::string::npos,
             s.ToString().c_str());
  }

  // A failed step (a dead TP peer) ends every request with its message.
  void runnerFailureEndsEveryRequest() {
    auto m = Load("qwen3-tiny");
    FailingRunner runner(*m, 4);
    Scheduler sched(runner, {.num_slots = 2, .context = 64, .max_batch_tokens = 16});
    QVERIFY(sched.Start().ok());
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 4; ++i) {
      GenerationParams p;
      p.prompt = {1, 2, 3, int32_t(i)};
      p.max_tokens = 30;
      p.ignore_eos = true;
      auto s = sched.Submit(p);
      QVERIFY(s.ok());
      streams.push_back(*s);
    }
    runner.Open();
    for (auto& s : streams) {
      RequestUpdate last;
      Collect(*s, &last);
      QCOMPARE(last.finish_reason, std::string("error"));
      QVERIFY2(last.error.message().find("rank 1") != std::string::npos,
               last.error.ToString().c_str());
    }
    QVERIFY(!sched.health().ok());
    GenerationParams p;
    p.prompt = {1};
    p.max_tokens = 1;
    QCOMPARE(sched.Submit(p).status().code(), StatusCode::kUnavailable);
  }

  // Automatic draft lengths under continuous batching, on step times that a
  // manual clock makes exact. qwen3-tiny's random weights accept about a
  // third of the drafts of prompts holding every id (its replies repeat
  // themselves). Where a step of R rows takes R^2 ms, a draft costs more than
  // it brings and the scheduler soon stops verifying them (it tries again now
  // and then); where rows cost nothing it verifies nearly as many as fixed
  // lengths do (it tries shorter steps too). The ids are plain decoding's
  // every time.
  void draftLengthsFollowTheStepTimes() {
    auto m = Load("qwen3-tiny");
    const int64_t vocab = m->config().vocab_size;
    std::vector<Req> reqs;
    for (int r = 0; r < 3; ++r) {
      Req q;
      for (int64_t i = 0; i < vocab; ++i) q.prompt.push_back(int32_t((i * (7919 + 2 * r)) % vocab));
      q.max_tokens = 64;
      reqs.push_back(q);
    }
    SchedulerOptions so;
    so.num_slots = 3;
    so.context = vocab + 64;
    so.max_batch_tokens = 64;
    so.speculative.method = SpeculativeMethod::kNgram;
    so.speculative.draft_tokens = 4;
    so.speculative.ngram_min = 1;
    auto serve = [&](bool adaptive, std::function<double(int64_t)> cost_ms) {
      ManualClock clock;
      TimedRunner runner(*m, clock, std::move(cost_ms));
      SchedulerOptions o = so;
      o.clock = &clock;
      o.speculative.adaptive = adaptive;
      Served out;
      ServeAll(runner, o, reqs, &out, [&] { runner.Open(); });
      return out;
    };
    const auto per_row = [](int64_t rows) { return double(rows * rows); };
    const auto per_step = [](int64_t) { return 1.0; };
    const Served fixed = serve(false, per_row);
    const Served dear = serve(true, per_row);
    const Served free_rows = serve(true, per_step);
    const Served tenth = serve(true, [](int64_t rows) { return 10.0 + double(rows); });
    if (QTest::currentTestFailed()) return;
    for (size_t r = 0; r < reqs.size(); ++r) {
      const auto ref = GenerateAlone(*m, reqs[r], {});
      QCOMPARE(fixed.ids[r], ref);
      QCOMPARE(dear.ids[r], ref);
      QCOMPARE(free_rows.ids[r], ref);
      QCOMPARE(tenth.ids[r], ref);
    }
    const uint64_t all = fixed.metrics.spec_drafted_tokens_total;
    const uint64_t few = dear.metrics.spec_drafted_tokens_total;
    const uint64_t many = free_rows.metrics.spec_drafted_tokens_total;
    qInfo("drafts verified: fixed %llu, dear rows %llu, free rows %llu; steps %llu, %llu, %llu",
          static_cast<unsigned long long>(all), static_cast<unsigned long long>(few),
          static_cast<unsigned long long>(many),
          static_cast<unsigned long long>(fixed.metrics.steps_total),
          static_cast<unsigned long long>(dear.metrics.steps_total),
          static_cast<unsigned long long>(free_rows.metrics.steps_total));
    const uint64_t some = tenth.metrics.spec_drafted_tokens_total;
    qInfo("rows a tenth of a step (10 + R ms): %llu", static_cast<unsigned long long>(some));
    QVERIFY(all > 100);
    QVERIFY2(few * 2 < all, std::to_string(few).c_str());
    QVERIFY2(many * 10 >= all * 8, std::to_string(many).c_str());
    // In between, the sequences' acceptance decides: the first draft of a
    // kind accepted a third of the time pays, the third or fourth does not
    // (verified 129 of 204 here; 162 without learning the rates).
    QVERIFY2(some > few && some * 10 < all * 7, std::to_string(some).c_str());
  }

  // The MTP head makes only the drafts the next step may verify: each
  // further draft is a forward of the head, and drafts the step would not
  // verify were made for nothing. With fixed lengths every call makes K
  // (fewer only where the sequence has no room left); with dear rows and
  // dear chained drafts (these random weights' drafts are always rejected),
  // one, the forward the head's cache needs anyway; with free rows and free
  // drafts, K. The ids are plain decoding's in every case.
  void mtpDraftsOnlyWhatTheStepVerifies() {
    auto m = Load("glm4-moe-tiny", true);
    const int64_t vocab = m->config().vocab_size;
    const auto prompts = Prompts(vocab);
    std::vector<Req> reqs;
    for (int r = 2; r < 5; ++r) reqs.push_back({prompts[r], 20});  // prompts of 9 to 15
    SchedulerOptions so;
    so.num_slots = 3;
    so.context = 64;
    so.max_batch_tokens = 64;
    so.speculative.method = SpeculativeMethod::kMtp;
    so.speculative.draft_tokens = 3;
    struct Run {
      Served out;
      std::vector<int> asked, batched;
    };
    auto serve = [&](bool adaptive, std::function<double(int64_t)> cost_ms, double chain_ms) {
      ManualClock clock;
      TimedRunner runner(*m, clock, std::move(cost_ms));
      runner.SetMtpCosts(1.0, chain_ms, 4);
      SchedulerOptions o = so;
      o.clock = &clock;
      o.speculative.adaptive = adaptive;
      Run run;
      ServeAll(runner, o, reqs, &run.out, [&] { runner.Open(); });
      run.asked = runner.asked;
      run.batched = runner.batched;
      return run;
    };
    const Run fixed = serve(
        false, [](int64_t rows) { return double(rows * rows); }, 5.0);
    const Run dear = serve(
        true, [](int64_t rows) { return double(rows * rows); }, 5.0);
    const Run free = serve(
        true, [](int64_t) { return 1.0; }, 0.0);
    if (QTest::currentTestFailed()) return;
    for (size_t r = 0; r < reqs.size(); ++r) {
      const auto ref = GenerateAlone(*m, reqs[r], {});
      QCOMPARE(fixed.out.ids[r], ref);
      QCOMPARE(dear.out.ids[r], ref);
      QCOMPARE(free.out.ids[r], ref);
    }
    auto count = [](const std::vector<int>& v, int k) {
      return static_cast<int>(std::count(v.begin(), v.end(), k));
    };
    qInfo(
        "decode-time drafts asked (1 / 2 / 3): fixed %d / %d / %d, dear %d / %d / %d, free %d / "
        "%d / %d",
        count(fixed.asked, 1), count(fixed.asked, 2), count(fixed.asked, 3), count(dear.asked, 1),
        count(dear.asked, 2), count(dear.asked, 3), count(free.asked, 1), count(free.asked, 2),
        count(free.asked, 3));
    // Each sequence's last three calls have room for 2, 1 and no drafts
    // (asked for 2, 1 and 1: the head's cache still follows; no draft of
    // these weights is accepted, so each sequence makes 18 calls).
    const int n = static_cast<int>(fixed.asked.size());
    QCOMPARE(n, 3 * 18);
    QCOMPARE(count(fixed.asked, 3), n - 9);
    QCOMPARE(count(fixed.asked, 2), 3);
    // The three prefill in one step and decode in lockstep: the head drafts
    // for all three in one call a step, not one call each.
    QCOMPARE(fixed.batched, std::vector<int>(18, 3));
    QCOMPARE(dear.batched, std::vector<int>(18, 3));
    // Dear: K only before any step was measured (each sequence's first
    // call), and two drafts at most once a sequence (a step one row longer
    // than a measured one looks as cheap as it until it was run: StepCosts).
    QVERIFY2(count(dear.asked, 3) <= 3 && count(dear.asked, 2) <= 3 &&
                 count(dear.asked, 1) >= int(dear.asked.size()) - 6,
             std::to_string(count(dear.asked, 1)).c_str());
    // Free: K but where the room is short, and while the drafting times are
    // learned (one draft looks cheaper than it is until it was timed).
    QVERIFY2(count(free.asked, 3) * 10 >= int(free.asked.size()) * 6,
             std::to_string(count(free.asked, 3)).c_str());
  }

  // n sequences of one prompt with the MTP head: one prefill (in three
  // chunks), its KV cache and the head's copied to the others' slots, and
  // each sequence's head then fed the last chunk's rows with its own first
  // token. Their tokens and every draft the head makes for each slot are
  // those of the same sequences prefilled one by one (a runner that cannot
  // copy slots); a follower whose head's cache of the first two chunks was
  // not copied drafts from other attention, and so other drafts.
  void mtpSequencesOfOnePromptShareItsPrefill() {
    auto m = Load("glm4-moe-tiny", true);
    // Records each decode-time request's drafts by slot (those fed from past
    // the prompt; its chunks' are not verified).
    class Recording final : public test::ForwardingRunner {
     public:
      Recording(Model& model, bool copy, int64_t prompt)
          : ForwardingRunner(model), copy_(copy), prompt_(prompt) {}
      Status CopySlot(int src, int dst, int64_t positions) override {
        if (!copy_) return UnimplementedError("no slot copies");
        return inner_.CopySlot(src, dst, positions);
      }
      Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                           std::vector<std::vector<int32_t>>* drafts,
                           std::vector<float>* logits) override {
        OCTET_RETURN_IF_ERROR(inner_.MtpDraftBatch(requests, drafts, logits));
        for (size_t r = 0; r < requests.size(); ++r) {
          if (requests[r].start_pos < prompt_) continue;
          auto& d = by_slot[requests[r].slot];
          d.insert(d.end(), (*drafts)[r].begin(), (*drafts)[r].end());
        }
        return Status::Ok();
      }
      std::map<int, std::vector<int32_t>> by_slot;  // read after the scheduler stopped

     private:
      bool copy_;
      int64_t prompt_;
    };
    std::vector<int32_t> prompt = Prompts(m->config().vocab_size)[6];  // 21 tokens
    QCOMPARE(prompt.size(), size_t(21));
    SchedulerOptions so;
    so.num_slots = 3;
    so.context = 64;
    so.max_batch_tokens = 9;  // chunks of 9, 9 and 3
    so.speculative.method = SpeculativeMethod::kMtp;
    so.speculative.draft_tokens = 2;
    so.speculative.adaptive = false;
    GenerationParams p;
    p.prompt = prompt;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 5;
    struct Run {
      std::vector<std::vector<int32_t>> ids;
      std::map<int, std::vector<int32_t>> drafts;
      uint64_t prompt_tokens = 0;
      std::vector<RequestUpdate> last;
    };
    auto serve = [&](bool copy) {
      Recording runner(*m, copy, static_cast<int64_t>(prompt.size()));
      Run run;
      {
        Scheduler sched(runner, so);
        if (Status st = sched.Start(); !st.ok()) qFatal("%s", st.ToString().c_str());
        auto streams = sched.SubmitN(p, 3);
        if (!streams.ok()) qFatal("%s", streams.status().ToString().c_str());
        for (auto& st : *streams) {
          RequestUpdate last;
          run.ids.push_back(Collect(*st, &last));
          run.last.push_back(last);
        }
        run.prompt_tokens = sched.Metrics().prompt_tokens_total;
      }  // the scheduler thread has stopped
      run.drafts = runner.by_slot;
      return run;
    };
    const Run shared = serve(true);
    const Run separate = serve(false);
    for (const Run* run : {&shared, &separate}) {
      for (const RequestUpdate& u : run->last) {
        QVERIFY2(u.done && u.finish_reason == "length", u.error.ToString().c_str());
      }
    }
    QCOMPARE(shared.prompt_tokens, uint64_t(21));  // one prefill
    QCOMPARE(separate.prompt_tokens, uint64_t(3 * 21));
    QCOMPARE(shared.ids.size(), size_t(3));
    for (int i = 0; i < 3; ++i) QCOMPARE(shared.ids[i].size(), size_t(12));
    QVERIFY(shared.ids[0] != shared.ids[1] || shared.ids[1] != shared.ids[2]);  // sampled apart
    QCOMPARE(shared.ids, separate.ids);
    QCOMPARE(shared.drafts.size(), size_t(3));
    for (const auto& [slot, drafts] : shared.drafts) QVERIFY(drafts.size() >= 11);
    QCOMPARE(shared.drafts, separate.drafts);
  }

  // The rates are tokens over the last 5 s of the scheduler's clock, and
  // fall back to zero once an idle scheduler's window holds no work. With a
  // ManualClock the figures are exact and no test waits 5 s.
  void ratesCoverTheWindowOfTheSchedulersClock() {
    auto m = Load("qwen3-tiny");
    LocalRunner runner(*m);
    ManualClock clock;
    Scheduler sched(runner, {.num_slots = 2,
                             .context = 64,
                             .max_batch_tokens = 16,
                             .idle_poll_ms = 100,
                             .clock = &clock});
    QVERIFY(sched.Start().ok());
    // An advance must find the scheduler parked on the clock: one that lands
    // while it is between recording a sample and computing its next idle
    // deadline moves that deadline too, and the sample never comes (seen
    // under TSan). Parked means its deadline is already set.
    const auto parked = [&clock] { return clock.AwaitWaiters(1) && clock.waiters() == 1; };
    // Parked idle (after recording a sample with nothing done, at time T).
    QVERIFY(parked());
    GenerationParams p;
    p.prompt = {1, 2, 3, 4, 5};
    p.max_tokens = 8;
    p.ignore_eos = true;
    auto s = sched.Submit(p);
    QVERIFY(s.ok());
    RequestUpdate last;
    QCOMPARE(Collect(**s, &last).size(), size_t{8});
    QCOMPARE(last.timing.ttft_ms(), 0.0);  // the clock stood still: every step at time T
    QVERIFY(parked());
    // One second later the idle scheduler records a sample: 5 prompt and 8
    // generated tokens in the 1 s since the first sample.
    clock.AdvanceMs(1000);
    SchedulerMetrics mt = sched.Metrics();
    for (const Deadline d = Deadline::AfterMs(10'000); mt.decode_tps == 0 && !d.expired();) {
      QThread::msleep(1);
      mt = sched.Metrics();
    }
    QCOMPARE(mt.decode_tps, 8.0);
    QCOMPARE(mt.prefill_tps, 5.0);
    QVERIFY(parked());  // again, after that sample
    // Six seconds on, the window (5 s) no longer reaches the work.
    clock.AdvanceMs(6000);
    for (const Deadline d = Deadline::AfterMs(10'000); mt.decode_tps != 0 && !d.expired();) {
      QThread::msleep(1);
      mt = sched.Metrics();
    }
    QCOMPARE(mt.decode_tps, 0.0);
    QCOMPARE(mt.prefill_tps, 0.0);
    QCOMPARE(mt.generation_tokens_total, uint64_t{8});
  }
};

QTEST_GUILESS_MAIN(TestScheduler)
#include "test_scheduler.moc"
