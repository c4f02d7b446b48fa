// Log-probabilities and n > 1 through the continuous-batching scheduler.
//
// Logprobs are checked two ways, never against the scheduler's own output:
// against the log-softmax (computed here, in double) of the reference
// fixtures' logits.npy rows for the stored greedy tokens, and within 1e-5
// against the log-softmax of the engine's own logits (Generate with
// collect_logits). n > 1 (one prefill, the KV cache copied to the other
// sequences) is checked against the same sequences served without the copy
// (a runner that cannot copy slots, so every sequence prefills itself) and
// against Generate alone for greedy requests.
#include <QtTest>
#include <cmath>

#include "forwarding_runner.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/engine/generate.h"
#include "octet/engine/scheduler.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::unique_ptr<Model> Load(const std::string& dir) {
  LoadOptions lo;
  lo.threads = 1;
  auto m = Model::Load(dir, lo);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  return std::move(*m);
}

// log_softmax(row)[id], in double.
double LogSoftmax(const float* row, int64_t vocab, int32_t id) {
  double mx = row[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, double(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - mx);
  return double(row[id]) - mx - std::log(sum);
}

struct Served {
  std::vector<int32_t> ids;
  std::vector<TokenLogprob> logprobs;
  RequestUpdate last;
};

Served Collect(RequestStream& s) {
  Served out;
  RequestUpdate u;
  const Deadline d = Deadline::AfterMs(60'000);
  while (!d.expired()) {
    if (!s.Next(Deadline::AfterMs(1000), &u)) continue;
    out.ids.insert(out.ids.end(), u.ids.begin(), u.ids.end());
    for (auto& t : u.logprobs) out.logprobs.push_back(t);
    if (u.done) break;
  }
  out.last = u;
  return out;
}

// A runner that cannot copy KV slots: every sequence of a group prefills
// for itself.
class NoCopyRunner final : public test::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  Status CopySlot(int, int, int64_t) override {
    return UnimplementedError("this runner cannot copy KV cache slots");
  }
};

// n sequences of `prompt` on a fresh scheduler over `runner`.
std::vector<Served> ServeN(ModelRunner& runner, const std::vector<int32_t>& prompt, int n,
                           SamplingParams sampling, int64_t max_tokens, int logprobs,
                           SchedulerMetrics* metrics = nullptr) {
  SchedulerOptions so;
  so.num_slots = 4;
  so.context = 64;
  so.max_batch_tokens = 64;
  Scheduler sched(runner, so);
  if (Status s = sched.Start(); !s.ok()) qFatal("%s", s.ToString().c_str());
  GenerationParams p;
  p.prompt = prompt;
  p.max_tokens = max_tokens;
  p.sampling = sampling;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  auto streams = sched.SubmitN(p, n);
  if (!streams.ok()) qFatal("%s", streams.status().ToString().c_str());
  std::vector<Served> out;
  for (auto& s : *streams) out.push_back(Collect(*s));
  if (metrics) *metrics = sched.Metrics();
  return out;
}

const char* kModels[] = {"llama3-tiny",      "qwen2-tiny",     "qwen3-tiny",
                         "qwen3-tiny-nvfp4", "qwen3-moe-tiny", "minicpm-tiny"};

}  // namespace

class TestLogprobsN : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  void logprobsMatchTheFixtureLogits_data() {
    QTest::addColumn<QString>("model");
    for (const char* m : kModels) QTest::newRow(m) << QString(m);
  }
  // The greedy tokens' logprobs and top-5 alternatives equal log_softmax of
  // the reference logits (made by PyTorch) within the fixture's logits
  // tolerance (a shift of every logit by up to atol moves a logprob by up to 2 atol).
  void logprobsMatchTheFixtureLogits() {
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    auto text = ReadFileToString(dir + "/reference.json");
    QVERIFY2(text.ok(), text.status().ToString().c_str());
    const auto ref = nlohmann::json::parse(*text);
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto generated = ref["generated_ids"].get<std::vector<int32_t>>();
    const double atol = ref.value("suggested_logits_atol", 1e-3);
    auto npy = ReadNpy(dir + "/logits.npy");
    QVERIFY2(npy.ok(), npy.status().ToString().c_str());
    const std::vector<float> logits = npy->AsFloat();
    const int64_t vocab = npy->shape[1];

    auto m = Load(dir);
    LocalRunner runner(*m);
    SamplingParams greedy;
    const auto served =
        ServeN(runner, prompt, 1, greedy, static_cast<int64_t>(generated.size()), 5);
    QCOMPARE(served.size(), size_t(1));
    const Served& s = served[0];
    QCOMPARE(s.ids, generated);
    QCOMPARE(s.logprobs.size(), generated.size());
    double worst = 0;
    for (size_t j = 0; j < generated.size(); ++j) {
      const float* row = logits.data() + (prompt.size() - 1 + j) * vocab;
      const TokenLogprob& t = s.logprobs[j];
      QCOMPARE(t.id, generated[j]);
      worst = std::max(worst, std::fabs(t.logprob - LogSoftmax(row, vocab, generated[j])));
      QCOMPARE(t.top.size(), size_t(5));
      QCOMPARE(t.top[0].first, generated[j]);  // the greedy token is the most likely
      QCOMPARE(t.top[0].second, t.logprob);
      for (size_t k = 0; k < t.top.size(); ++k) {
        if (k > 0) QVERIFY(t.top[k].second <= t.top[k - 1].second);
        worst =
            std::max(worst, std::fabs(t.top[k].second - LogSoftmax(row, vocab, t.top[k].first)));
      }
    }
    qInfo("%s: max |logprob - log_softmax(logits.npy)| = %.3g (atol %.3g)",
          model.toLocal8Bit().constData(), worst, atol);
    QVERIFY2(worst <= 2 * atol + 1e-5, qPrintable(QString::number(worst)));
  }

  // Sampled tokens' logprobs are those of the raw distribution (before
  // temperature and top-k), equal to log_softmax of the engine's own logits
  // (Generate with collect_logits, the same request) within 1e-5.
  void logprobsEqualTheEnginesOwnSoftmax() {
    const std::string dir = test::FixturesDir() + "/qwen3-tiny";
    auto m = Load(dir);
    const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 250, 7};
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.seed = 1234;
    const int64_t max_tokens = 12;
    GenerateOptions g;
    g.max_tokens = max_tokens;
    g.sampling = sp;
    g.stop_at_eos = false;
    g.collect_logits = true;
    auto ref = Generate(*m, prompt, g);
    QVERIFY2(ref.ok(), ref.status().ToString().c_str());
    LocalRunner runner(*m);
    const auto served = ServeN(runner, prompt, 1, sp, max_tokens, 3);
    const Served& s = served[0];
    QCOMPARE(s.ids, ref->ids);  // same seed, same logits: the same draws
    QCOMPARE(s.logprobs.size(), ref->ids.size());
    double worst = 0;
    for (size_t j = 0; j < s.ids.size(); ++j) {
      const float* row = ref->logits.data() + (prompt.size() - 1 + j) * ref->vocab;
      worst =
          std::max(worst, std::fabs(s.logprobs[j].logprob - LogSoftmax(row, ref->vocab, s.ids[j])));
      for (const auto& [id, lp] : s.logprobs[j].top) {
        worst = std::max(worst, std::fabs(lp - LogSoftmax(row, ref->vocab, id)));
      }
    }
    qInfo("max |logprob - log_softmax(engine logits)| = %.3g", worst);
    QVERIFY2(worst <= 1e-5, qPrintable(QString::number(worst)));
    // ComputeLogprobs on its own: top entries sorted, ties by lower id.
    const std::vector<float> row = {0.5f, 2.0f, 2.0f, -1.0f};
    const TokenLogprob t = ComputeLogprobs(row.data(), 4, 3, 3);
    QCOMPARE(t.top.size(), size_t(3));
    QCOMPARE(t.top[0].first, 1);
    QCOMPARE(t.top[1].first, 2);
    QCOMPARE(t.top[2].first, 0);
    QVERIFY(std::fabs(t.logprob - LogSoftmax(row.data(), 4, 3)) < 1e-6);
  }

  // n = 2 sampled: distinct streams, each reproducible with the same seed,
  // equal to the same two sequences prefilled separately (no KV copy), and
  // the prompt processed once.
  void nSequencesShareOnePrefill() {
    auto m = Load(test::FixturesDir() + "/qwen3-tiny");
    const std::vector<int32_t> prompt = {11, 23, 5, 180, 77, 9, 301, 64, 2};
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 77;
    LocalRunner runner(*m);
    SchedulerMetrics metrics;
    const auto a = ServeN(runner, prompt, 2, sp, 16, 2, &metrics);
    QCOMPARE(a.size(), size_t(2));
    QCOMPARE(a[0].ids.size(), size_t(16));
    QCOMPARE(a[1].ids.size(), size_t(16));
    QVERIFY(a[0].ids != a[1].ids);
    QCOMPARE(metrics.prompt_tokens_total, uint64_t(prompt.size()));  // one prefill
    QCOMPARE(a[0].last.prompt_tokens, int64_t(prompt.size()));
    const auto again = ServeN(runner, prompt, 2, sp, 16, 2);
    QCOMPARE(again[0].ids, a[0].ids);
    QCOMPARE(again[1].ids, a[1].ids);
    NoCopyRunner no_copy(*m);
    SchedulerMetrics separate_metrics;
    const auto b = ServeN(no_copy, prompt, 2, sp, 16, 2, &separate_metrics);
    QCOMPARE(separate_metrics.prompt_tokens_total, uint64_t(2 * prompt.size()));
    QCOMPARE(b[0].ids, a[0].ids);
    QCOMPARE(b[1].ids, a[1].ids);
    for (size_t i = 0; i < 2; ++i) {
      QCOMPARE(a[i].logprobs.size(), a[i].ids.size());
      for (size_t j = 0; j < a[i].ids.size(); ++j) {
        QVERIFY(std::fabs(a[i].logprobs[j].logprob - b[i].logprobs[j].logprob) <= 1e-5);
      }
    }
    // Sequence i samples with seed + i: the second equals a single request seeded 78.
    SamplingParams sp2 = sp;
    sp2.seed = 78;
    const auto single = ServeN(runner, prompt, 1, sp2, 16, -1);
    QCOMPARE(single[0].ids, a[1].ids);
  }

  // n = 3 at temperature 0: three identical greedy streams, equal to Generate alone.
  void nGreedyStreamsAreIdentical() {
    auto m = Load(test::FixturesDir() + "/llama3-tiny");
    const std::vector<int32_t> prompt = {1, 2, 3, 40, 50, 60, 7};
    GenerateOptions g;
    g.max_tokens = 10;
    g.stop_at_eos = false;
    auto ref = Generate(*m, prompt, g);
    QVERIFY2(ref.ok(), ref.status().ToString().c_str());
    LocalRunner runner(*m);
    const auto s = ServeN(runner, prompt, 3, SamplingParams{}, 10, -1);
    QCOMPARE(s.size(), size_t(3));
    for (const Served& x : s) {
      QCOMPARE(x.ids, ref->ids);
      QVERIFY(x.logprobs.empty());  // not asked for
      QCOMPARE(x.last.finish_reason, std::string("length"));
    }
  }

  // The repetition penalty (transformers' rule) on hand-made logits: a seen
  // id's positive logit is divided by the penalty, a negative one multiplied.
  void repetitionPenalty() {
    auto backend = kernels::CreateBackend("scalar", {1});
    QVERIFY2(backend.ok(), backend.status().ToString().c_str());
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    Sampler s(p);
    s.SetPrompt({0});
    const std::vector<float> row = {3.0f, 2.0f, 1.0f};
    QCOMPARE(s.Sample(row.data(), 3, **backend), 1);  // 3 / 2 = 1.5 < 2
    QCOMPARE(s.Sample(row.data(), 3, **backend), 0);  // 1.5 > 2 / 2 = 1
    Sampler n(p);
    n.SetPrompt({0});
    const std::vector<float> neg = {-1.0f, -1.5f};
    QCOMPARE(n.Sample(neg.data(), 2, **backend), 1);  // -1 * 2 = -2 < -1.5
    Sampler none(SamplingParams{});
    none.SetPrompt({0});
    QCOMPARE(none.Sample(row.data(), 3, **backend), 0);
    p.repetition_penalty = 0.0f;
    QVERIFY(!ValidateSampling(p).ok());
  }

  // Out-of-range n and top logprobs are refused with errors that say the bound.
  void boundsAreRefused() {
    auto m = Load(test::FixturesDir() + "/llama3-tiny");
    LocalRunner runner(*m);
    SchedulerOptions so;
    so.num_slots = 4;
    so.context = 64;
    so.max_batch_tokens = 64;
    Scheduler sched(runner, so);
    QVERIFY(sched.Start().ok());
    GenerationParams p;
    p.prompt = {1, 2, 3};
    p.max_tokens = 4;
    for (int n : {0, 5, 17}) {
      auto r = sched.SubmitN(p, n);
      QVERIFY(!r.ok());
      QCOMPARE(r.status().code(), StatusCode::kInvalidArgument);
      QVERIFY2(r.status().message().find("between 1 and 4") != std::string::npos,
               r.status().message().c_str());
    }
    for (int lp : {-2, 21}) {
      p.logprobs = lp;
      auto r = sched.Submit(p);
      QVERIFY(!r.ok());
      QCOMPARE(r.status().code(), StatusCode::kInvalidArgument);
      QVERIFY2(r.status().message().find("between 0 and 20") != std::string::npos,
               r.status().message().c_str());
    }
    // A group larger than the free slots waits for them and then runs.
    p.logprobs = -1;
    auto one = sched.Submit(p);
    auto four = sched.SubmitN(p, 4);
    QVERIFY(one.ok() && four.ok());
    QCOMPARE(Collect(**one).last.finish_reason, std::string("length"));
    for (auto& s : *four) QCOMPARE(Collect(*s).ids.size(), size_t(4));
  }
};

QTEST_GUILESS_MAIN(TestLogprobsN)
#include "test_logprobs_n.moc"
