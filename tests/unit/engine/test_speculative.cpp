// Speculative decoding (octet/engine/generate.h): prompt-lookup drafting, the
// accept/reject rule that keeps the sampled distribution, and greedy output
// equal to plain greedy decoding — on the reference fixtures (their stored
// greedy ids and logits) and on the trained demo model, where drafts are
// actually accepted.
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "fixture_reference.h"
#include "forwarding_runner.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/engine/draft_length.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
#include "octet/engine/tokenizer.h"
#include "octet/kernels/backend.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::unique_ptr<Model> LoadOrDie(const std::string& dir) {
  LoadOptions o;
  o.threads = 2;
  auto m = Model::Load(dir, o);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  return std::move(*m);
}

GenerateResult GenerateOrDie(Model& m, const std::vector<int32_t>& prompt, GenerateOptions o) {
  auto r = Generate(m, prompt, o);
  if (!r.ok()) qFatal("%s", r.status().ToString().c_str());
  return std::move(*r);
}

// Two steps of `rows` rows (the first of a row count only warms up).
void RecordTwice(StepCosts& c, int64_t rows, double seconds) {
  c.Record(rows, seconds);
  c.Record(rows, seconds);
}

// A fixture folder's reference.json (prompt, greedy ids, the `mtp` section)
// and logits.npy.
struct Fixture {
  nlohmann::json ref;
  std::vector<int32_t> prompt, generated;
  std::vector<float> logits;
};

Fixture LoadFixture(const std::string& dir) {
  Fixture f;
  auto text = ReadFileToString(dir + "/reference.json");
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  f.ref = nlohmann::json::parse(*text);
  f.prompt = f.ref["prompt_ids"].get<std::vector<int32_t>>();
  f.generated = f.ref["generated_ids"].get<std::vector<int32_t>>();
  auto npy = ReadNpy(dir + "/logits.npy");
  if (!npy.ok()) qFatal("%s", npy.status().ToString().c_str());
  f.logits = npy->AsFloat();
  return f;
}

// A fixture's MTP reference: the whole sequence (prompt and generated ids),
// the `mtp` section of reference.json, and the head's logits of each of the
// sequence's positions but the last ([T, vocab]).
struct MtpFixture {
  nlohmann::json mtp;
  std::vector<int32_t> seq;
  int64_t T = 0, vocab = 0, prompt = 0;
  std::vector<float> logits;
};

MtpFixture LoadMtpFixture(const std::string& dir) {
  const Fixture fx = LoadFixture(dir);
  MtpFixture f;
  f.mtp = fx.ref["mtp"];
  f.seq = fx.prompt;
  f.prompt = static_cast<int64_t>(fx.prompt.size());
  f.seq.insert(f.seq.end(), fx.generated.begin(), fx.generated.end());
  f.T = static_cast<int64_t>(f.seq.size()) - 1;
  auto npy = ReadNpy(dir + "/" + f.mtp["logits_file"].get<std::string>());
  if (!npy.ok()) qFatal("%s", npy.status().ToString().c_str());
  if (npy->shape.size() != 2 || npy->shape[0] != f.T)
    qFatal("%s: MTP logits of another shape", dir.c_str());
  f.vocab = npy->shape[1];
  f.logits = npy->AsFloat();
  return f;
}

// A float as printf's %.9g and its bits, for messages about bitwise equality.
std::string FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", f, b);
  return buf;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
  }
  return d;
}

// One MtpDraft call's output against the references, "" when it matches:
// `logits` holds the first step's rows of MTP positions fed - rows .. fed - 1
// (the fixture's `mtp` logits) and then the chained steps' rows, and `drafts`
// the head's k drafts after it was fed positions 0..fed - 1 (the chain
// reference's case `fed`).
std::string CheckMtpCall(const MtpFixture& fx, const test::MtpChainReference& chain, int64_t fed,
                         int64_t rows, const std::vector<int32_t>& drafts,
                         const std::vector<float>& logits) {
  const int64_t V = fx.vocab;
  const std::string at = "fed " + std::to_string(fed) + ", " + std::to_string(rows) + " rows: ";
  const test::MtpChainCase& want = chain.by_fed.at(static_cast<size_t>(fed));
  if (int64_t(logits.size()) != (rows + chain.k - 1) * V) {
    return at + std::to_string(logits.size()) + " logits";
  }
  const double atol = fx.mtp["suggested_logits_atol"].get<double>();
  double first = 0, chained = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < V; ++v) {
      first = std::max(first, std::fabs(double(logits[size_t(r * V + v)]) -
                                        fx.logits[size_t((fed - rows + r) * V + v)]));
    }
  }
  for (int s = 0; s + 1 < chain.k; ++s) {
    for (int64_t v = 0; v < V; ++v) {
      chained = std::max(chained, std::fabs(double(logits[size_t((rows + s) * V + v)]) -
                                            want.chained[size_t(s)][size_t(v)]));
    }
  }
  if (first > atol || chained > atol) {
    return at + "max |first-step logits - ref| " + std::to_string(first) +
           ", max |chained logits - ref| " + std::to_string(chained);
  }
  if (drafts != want.drafts) {
    std::string got, ref;
    for (int32_t d : drafts) got += " " + std::to_string(d);
    for (int32_t d : want.drafts) ref += " " + std::to_string(d);
    return at + "drafts" + got + ", reference" + ref;
  }
  return "";
}

const char* kFixtureModels[] = {"llama3-tiny",         "qwen2-tiny",     "qwen3-tiny",
                                "qwen3-tiny-nvfp4",    "qwen3-moe-tiny", "glm4-moe-tiny",
                                "glm4-moe-tiny-nvfp4", "minicpm-tiny"};

}  // namespace

class TestSpeculative : public QObject {
  Q_OBJECT
 private slots:
  void ngramDraftTakesTheLatestLongestMatch() {
    // ... 7 8 9 | 7 8 5 6 | 7 8 -> the last "7 8" before the tail is followed by 5 6.
    const std::vector<int32_t> h = {1, 7, 8, 9, 3, 7, 8, 5, 6, 2, 7, 8};
    QCOMPARE(NgramDraft(h, 2, 3, 2), (std::vector<int32_t>{5, 6}));
    QCOMPARE(NgramDraft(h, 5, 3, 2), (std::vector<int32_t>{5, 6, 2, 7, 8}));
    // A longer n-gram wins over a later shorter one: "2 7 8" occurred once.
    const std::vector<int32_t> g = {2, 7, 8, 4, 4, 9, 7, 8, 3, 3, 2, 7, 8};
    QCOMPARE(NgramDraft(g, 2, 3, 2), (std::vector<int32_t>{4, 4}));
    QCOMPARE(NgramDraft(g, 2, 2, 2), (std::vector<int32_t>{3, 3}));
    // No recurring n-gram, too short a history, or min above what recurs.
    QVERIFY(NgramDraft({1, 2, 3, 4}, 3, 3, 1).empty());
    QVERIFY(NgramDraft({5}, 3, 3, 1).empty());
    QVERIFY(NgramDraft({1, 2, 9, 2}, 3, 3, 2).empty());
    QCOMPARE(NgramDraft({1, 2, 9, 2}, 3, 3, 1), (std::vector<int32_t>{9, 2}));
  }

  void optionsAreChecked() {
    QVERIFY(!ParseSpeculativeMethod("eagle").ok());
    QCOMPARE(*ParseSpeculativeMethod("ngram"), SpeculativeMethod::kNgram);
    SpeculativeOptions o;
    o.method = SpeculativeMethod::kMtp;
    o.draft_tokens = 4;
    QVERIFY(!ValidateSpeculative(o).ok());
    o.method = SpeculativeMethod::kNgram;
    QVERIFY(ValidateSpeculative(o).ok());
    o.draft_tokens = 0;
    QVERIFY(!ValidateSpeculative(o).ok());
  }

  // The matched n-gram's length is the draft's kind (its acceptance is
  // learned per kind).
  void ngramDraftTellsTheMatchLength() {
    int n = -1;
    QCOMPARE(NgramDraft({1, 7, 8, 9, 3, 7, 8}, 2, 3, 1, &n), (std::vector<int32_t>{9, 3}));
    QCOMPARE(n, 2);
    QVERIFY(NgramDraft({1, 2, 3, 4}, 2, 3, 1, &n).empty());
    QCOMPARE(n, 0);
    NgramDrafter d(3, 1);
    QCOMPARE(d.Draft({4, 5, 6, 4, 5, 6}, 2), (std::vector<int32_t>{4, 5}));
    QCOMPARE(d.kind(), 3);
  }

  // NgramDrafter (an index of each token's positions, grown as the history
  // grows) drafts exactly what NgramDraft (a scan of the whole history) does,
  // and tells the same match length: histories over 3, 20 and 1000 ids
  // (matches everywhere, often, rarely), growing by one to four tokens a
  // call as decoding with accepted drafts does, every n-gram size range and
  // draft length; and a history that starts over (shorter than the last).
  void ngramDrafterIsNgramDraft() {
    std::mt19937 rng(7);
    int checked = 0, found = 0;
    for (int vocab : {3, 20, 1000}) {
      for (auto [max_n, min_n] : {std::pair{3, 1}, {3, 2}, {1, 1}, {5, 2}}) {
        for (int k : {1, 4}) {
          NgramDrafter drafter(max_n, min_n);
          std::vector<int32_t> h;
          for (int round = 0; round < 2; ++round) {
            h.resize(static_cast<size_t>(round * 37));  // round 1: a shorter history
            while (h.size() < 400) {
              // Text that repeats itself in part: copies of earlier stretches.
              const int grow = 1 + static_cast<int>(rng() % 4);
              for (int i = 0; i < grow; ++i) {
                if (h.size() > 8 && rng() % 3 == 0) {
                  h.push_back(h[rng() % (h.size() - 1)]);
                } else {
                  h.push_back(static_cast<int32_t>(rng() % vocab));
                }
              }
              int n_scan = -1;
              const std::vector<int32_t> want = NgramDraft(h, k, max_n, min_n, &n_scan);
              const std::vector<int32_t> got = drafter.Draft(h, k);
              if (got != want || drafter.kind() != n_scan) {
                QFAIL(("vocab " + std::to_string(vocab) + ", n " + std::to_string(min_n) + ".." +
                       std::to_string(max_n) + ", k " + std::to_string(k) + ", length " +
                       std::to_string(h.size()) + ": the index drafted otherwise")
                          .c_str());
              }
              ++checked;
              found += want.empty() ? 0 : 1;
            }
          }
        }
      }
    }
    QVERIFY2(found > checked / 4 && found < checked, std::to_string(found).c_str());
  }

  // What a step of R rows costs: the recent steps' lower median (a delay
  // only adds time) from the second step of a row count on (the first warms
  // up); between measured row counts, one row more than the one below at
  // its time (an untried count looks as cheap as it could be, so it is
  // tried) and the rest interpolated; extrapolated along the
  // last two past the longest measured (flat when it is alone: an untried
  // length looks no dearer, so it is tried), in proportion to the rows below
  // the shortest measured (a shorter step looks as cheap as it could be, so
  // it is tried), and forgotten when not run for a while.
  void stepCostsComeFromRecentSteps() {
    StepCosts c;
    QCOMPARE(c.Seconds(1), 0.0);
    c.Record(4, 4e-3);
    c.Record(4, 4e-3);
    QCOMPARE(c.Seconds(1), 1e-3);
    QCOMPARE(c.Seconds(2), 2e-3);
    QCOMPARE(c.Seconds(6), 4e-3);
    c = StepCosts();
    c.Record(1, 9e-3);  // a cold first step
    QCOMPARE(c.Seconds(1), 0.0);
    c.Record(1, 1e-3);
    QCOMPARE(c.Seconds(1), 1e-3);
    QCOMPARE(c.Seconds(5), 1e-3);
    c.Record(5, 3e-3);
    c.Record(5, 3e-3);
    QCOMPARE(c.Seconds(2), 1e-3);  // one row more than 1: 1's time
    QCOMPARE(c.Seconds(3), 2e-3);
    QCOMPARE(c.Seconds(4), 2.5e-3);
    QCOMPARE(c.Seconds(9), 5e-3);  // 0.5 ms a row, as from 1 to 5
    // A step slowed down by something else does not move the estimate.
    c.Record(1, 50e-3);
    QCOMPARE(c.Seconds(1), 9e-3);  // the lower median of 9, 1, 50
    c.Record(1, 1.2e-3);
    QCOMPARE(c.Seconds(1), 1.2e-3);  // of 9, 1, 50, 1.2
    // Only the last kSamples count.
    for (int i = 0; i < StepCosts::kSamples; ++i) c.Record(1, 2e-3);
    QCOMPARE(c.Seconds(1), 2e-3);
    // Nothing that cannot be a step's time.
    c.Record(0, 1.0);
    c.Record(2, 0.0);
    c.Record(2, -1.0);
    c.Record(StepCosts::kMaxRows + 1, 1.0);
    QCOMPARE(c.Seconds(2), 2e-3);
    QCOMPARE(c.Seconds(3), 2e-3 + (3e-3 - 2e-3) * 2 / 4);
    // Five rows not run for kForgetAfter steps: unmeasured again.
    for (int64_t i = 0; i < StepCosts::kForgetAfter; ++i) c.Record(1, 2e-3);
    QCOMPARE(c.Seconds(5), 2e-3);
    // Once two-row steps are measured, three rows are the count to try.
    StepCosts d;
    RecordTwice(d, 1, 2e-3);
    RecordTwice(d, 5, 3e-3);
    RecordTwice(d, 2, 2.1e-3);
    QCOMPARE(d.Seconds(2), 2.1e-3);
    QCOMPARE(d.Seconds(3), 2.1e-3);
    QCOMPARE(d.Seconds(4), 2.1e-3 + (3e-3 - 2.1e-3) * 2 / 3);
  }

  // The length with the most expected tokens per second of the step.
  void draftLengthPaysForItsRows() {
    DraftLengthPolicy policy;
    // Nothing measured: every draft is verified.
    StepCosts none;
    StepSoFar step{1, 1};
    QCOMPARE(policy.Choose(3, 4, none, &step), int64_t(4));
    QCOMPARE(step.rows, int64_t(5));
    QVERIFY(step.tokens > 1);
    // Rows that cost nothing: every draft pays, at any rate.
    StepCosts flat;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(flat, r, 1e-3);
    for (int i = 0; i < 20; ++i) policy.Learn(1, 1, 0);
    QVERIFY(policy.AcceptanceRate(1) < 0.1);
    step = {1, 1};
    QCOMPARE(policy.Choose(1, 8, flat, &step), int64_t(8));
    // Each row half a one-row step: a kind seldom accepted is not verified,
    // one nearly always accepted is, in full.
    StepCosts steep;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(steep, r, 1e-3 * (1 + 0.5 * double(r - 1)));
    for (int i = 0; i < 20; ++i) policy.Learn(3, 4, 4);
    QVERIFY(policy.AcceptanceRate(3) > 0.95);
    step = {1, 1};
    QCOMPARE(policy.Choose(1, 4, steep, &step), int64_t(0));
    QCOMPARE(step.rows, int64_t(1));
    QCOMPARE(step.tokens, 1.0);
    QCOMPARE(policy.Choose(3, 4, steep, &step), int64_t(4));
    // In between: half of them accepted, a row 0.3 of a one-row step: one
    // draft (1.5 / 1.3 = 1.15 tokens a unit of time; none 1, two 1.75 / 1.6).
    DraftLengthPolicy half;
    for (int i = 0; i < 30; ++i) half.Learn(2, 2, 1);  // accepted, then rejected
    QVERIFY(std::fabs(half.AcceptanceRate(2) - 0.5) < 0.02);
    StepCosts dear;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(dear, r, 1e-3 * (1 + 0.3 * double(r - 1)));
    step = {1, 1};
    QCOMPARE(half.Choose(2, 4, dear, &step), int64_t(1));
    // A row added to a step of many rows costs little of it: in a batch of
    // 16 decoding sequences the same drafts are all verified.
    RecordTwice(dear, 16, 10e-3);
    RecordTwice(dear, 24, 10.1e-3);
    step = {16, 16};
    QCOMPARE(half.Choose(2, 4, dear, &step), int64_t(4));
    QCOMPARE(step.rows, int64_t(20));
    // One-, three- and four-row steps measured, two rows never run (the
    // policy had gone from verifying every draft to two at a time): the
    // untried two-row step is priced at one row's time, so one draft is
    // verified (1.6 tokens in 1 ms against two drafts' 1.97 in 1.4 ms; on the
    // line, 1.6 in 1.2 ms, it was two); once two rows are measured dearer
    // than that, two drafts again (1.6 / 1.3 < 1.97 / 1.4).
    DraftLengthPolicy most;
    for (int i = 0; i < 40; ++i) most.Learn(2, 1, i % 5 < 3 ? 1 : 0);  // 3 of 5 accepted
    QVERIFY(std::fabs(most.AcceptanceRate(2) - 0.6) < 0.02);
    StepCosts gap;
    RecordTwice(gap, 1, 1.0e-3);
    RecordTwice(gap, 3, 1.4e-3);
    RecordTwice(gap, 4, 1.9e-3);
    step = {1, 1};
    QCOMPARE(most.Choose(2, 4, gap, &step), int64_t(1));
    RecordTwice(gap, 2, 1.3e-3);
    step = {1, 1};
    QCOMPARE(most.Choose(2, 4, gap, &step), int64_t(2));
  }

  // How many drafts a drafter that pays for each (the MTP head) makes: the
  // first is free (the head's forward over the kept rows runs anyway), each
  // further one costs what the drafting times say it adds.
  void draftPlanPaysForTheDrafting() {
    DraftLengthPolicy policy;
    for (int i = 0; i < 30; ++i) policy.Learn(0, 3, 3);  // nearly always accepted
    QVERIFY(policy.AcceptanceRate(0) > 0.95);
    StepCosts flat;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(flat, r, 1e-3);
    StepCosts none;
    // Nothing measured about the steps: all of them.
    QCOMPARE(policy.Plan(0, 3, none, none, {1, 1}), int64_t(3));
    QCOMPARE(policy.Plan(0, 1, flat, none, {1, 1}), int64_t(1));
    // Free rows, drafting not measured yet (looks free): all of them.
    QCOMPARE(policy.Plan(0, 3, flat, none, {1, 1}), int64_t(3));
    // Each further draft as dear as a whole step: only the free one
    // (1.95 tokens in 1 ms, against 2.9 in 2 ms).
    StepCosts dear_chain;
    for (int64_t d = 1; d <= 3; ++d) RecordTwice(dear_chain, d, 1e-3 * double(d));
    QCOMPARE(policy.Plan(0, 3, flat, dear_chain, {1, 1}), int64_t(1));
    // A tenth of a step each: all three (3.85 tokens in 1.2 ms).
    StepCosts cheap_chain;
    for (int64_t d = 1; d <= 3; ++d) RecordTwice(cheap_chain, d, 1e-4 * double(d));
    QCOMPARE(policy.Plan(0, 3, flat, cheap_chain, {1, 1}), int64_t(3));
    // A kind seldom accepted, rows dear: one (never none: it comes with the
    // head's forward); rows and drafting free: all three, for what they may
    // add at no cost.
    DraftLengthPolicy seldom;
    for (int i = 0; i < 30; ++i) seldom.Learn(0, 1, 0);
    StepCosts steep;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(steep, r, 1e-3 * double(r));
    QCOMPARE(seldom.Plan(0, 3, steep, cheap_chain, {1, 1}), int64_t(1));
    QCOMPARE(seldom.Plan(0, 3, flat, none, {1, 1}), int64_t(3));
    // Plan changes nothing: Choose still verifies none of the seldom kind's.
    StepSoFar step{1, 1};
    QCOMPARE(seldom.Choose(0, 3, steep, &step), int64_t(0));
  }

  // A kind declined kRetryAfter times in a row has one draft verified (the
  // text may have changed since its rate was learned); Learn counts a
  // draft as checked only when every draft before it was accepted, and
  // forgets old drafts so that the rate follows the text.
  void draftLengthRetriesAndForgets() {
    DraftLengthPolicy policy;
    StepCosts steep;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(steep, r, 1e-3 * double(r));
    for (int i = 0; i < 10; ++i) policy.Learn(1, 3, 0);
    for (int i = 0; i < DraftLengthPolicy::kRetryAfter; ++i) {
      StepSoFar step{1, 1};
      QCOMPARE(policy.Choose(1, 3, steep, &step), int64_t(0));
    }
    StepSoFar step{1, 1};
    QCOMPARE(policy.Choose(1, 3, steep, &step), int64_t(1));
    step = {1, 1};
    QCOMPARE(policy.Choose(1, 3, steep, &step), int64_t(0));

    DraftLengthPolicy rates;
    QVERIFY(std::fabs(rates.AcceptanceRate(0) - 2.0 / 3) < 1e-12);
    rates.Learn(0, 4, 2);  // two accepted, the third rejected, the fourth not looked at
    QVERIFY(std::fabs(rates.AcceptanceRate(0) - 4.0 / 6) < 1e-12);
    rates.Learn(0, 2, 2);  // both accepted (nothing rejected)
    QVERIFY(std::fabs(rates.AcceptanceRate(0) - 6.0 / 8) < 1e-12);
    for (int i = 0; i < 200; ++i) rates.Learn(0, 1, 1);
    QVERIFY(rates.AcceptanceRate(0) > 0.95);
    for (int i = 0; i < 200; ++i) rates.Learn(0, 1, 0);
    QVERIFY2(rates.AcceptanceRate(0) < 0.1, std::to_string(rates.AcceptanceRate(0)).c_str());
    // Kinds past the last share it; a negative one is the first.
    const int last = DraftLengthPolicy::kKinds - 1;
    rates.Learn(DraftLengthPolicy::kKinds + 3, 1, 1);
    QVERIFY(std::fabs(rates.AcceptanceRate(last) - 3.0 / 4) < 1e-12);  // learned into the last
    QCOMPARE(rates.AcceptanceRate(DraftLengthPolicy::kKinds + 3), rates.AcceptanceRate(last));
    const double first = rates.AcceptanceRate(0);
    rates.Learn(-2, 1, 0);
    QVERIFY(rates.AcceptanceRate(0) < first);  // learned into the first
    QCOMPARE(rates.AcceptanceRate(-1), rates.AcceptanceRate(0));
  }

  // The accept/reject rule: whatever the draft, the token Verify returns is
  // distributed as Sample's (temperature, top-k and top-p applied), and so is
  // Sample's own draw. 200,000 draws per draft, fixed seeds, a chi-square test
  // against the exact probabilities (df <= 7; 40 is beyond the 1e-6 tail).
  // Top-k with top-p, top-p alone (the nucleus found in growing batches) and
  // temperature alone (every id, unranked) are separate paths.
  void verifyKeepsTheSampledDistribution_data() {
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    QTest::newRow("top-k 6, top-p 0.95") << 6 << 0.95f;
    QTest::newRow("top-p 0.9 alone") << 0 << 0.9f;
    QTest::newRow("temperature alone") << 0 << 1.0f;
  }
  void verifyKeepsTheSampledDistribution() {
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    auto backend = std::move(*kernels::CreateBackend("scalar", {1}));
    const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 2.0f, -1.0f, 1.7f, 0.9f, -3.0f};
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = top_k;
    sp.top_p = top_p;
    // The exact distribution: softmax(logits / T) over the top k, cut at top_p of its mass.
    std::vector<int> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[a] > logits[b]; });
    const int k = top_k > 0 ? top_k : int(logits.size());
    std::vector<double> w(k);
    double z = 0;
    for (int i = 0; i < k; ++i) z += w[i] = std::exp((logits[order[i]] - logits[order[0]]) / 0.8);
    int keep = k;
    double cum = 0;
    for (int i = 0; i < k && top_p < 1.0f; ++i) {
      cum += w[i] / z;
      if (cum >= top_p) {
        keep = i + 1;
        break;
      }
    }
    std::map<int32_t, double> p;
    double zk = 0;
    for (int i = 0; i < keep; ++i) zk += w[i];
    for (int i = 0; i < keep; ++i) p[order[i]] = w[i] / zk;
    if (top_p < 1.0f) QVERIFY(keep >= 3 && keep < 6);  // the cut matters in this example

    auto chi2_of = [&](std::map<int32_t, int>& count, int n) {
      double chi2 = 0;
      for (const auto& [id, prob] : p) {
        const double e = prob * n;
        chi2 += (count[id] - e) * (count[id] - e) / e;
      }
      return chi2;
    };
    const int n = 200000;
    // Drafts: the favourite, a middling token, one outside top-p (when cut), the last.
    for (int32_t draft : {order[0], order[2], order[std::min(keep, 7)], order[7]}) {
      Sampler s(SamplingParams{sp.temperature, sp.top_k, sp.top_p, uint64_t(1000 + draft)});
      std::map<int32_t, int> count;
      int accepted_n = 0;
      for (int i = 0; i < n; ++i) {
        bool accepted = false;
        const int32_t id =
            s.Verify(logits.data(), int64_t(logits.size()), *backend, draft, &accepted);
        QCOMPARE(accepted, id == draft);
        accepted_n += accepted;
        ++count[id];
      }
      for (const auto& [id, c] : count) QVERIFY2(p.count(id), "a token outside the distribution");
      const double chi2 = chi2_of(count, n);
      QVERIFY2(chi2 < 40.0,
               ("draft " + std::to_string(draft) + ": chi2 " + std::to_string(chi2)).c_str());
      // The acceptance rate is p(draft).
      const double pd = p.count(draft) ? p[draft] : 0.0;
      QVERIFY2(std::fabs(accepted_n / double(n) - pd) < 0.005,
               (std::to_string(accepted_n / double(n)) + " vs " + std::to_string(pd)).c_str());
    }
    // Sample draws from the same distribution.
    Sampler s(SamplingParams{sp.temperature, sp.top_k, sp.top_p, 77});
    std::map<int32_t, int> count;
    for (int i = 0; i < n; ++i) ++count[s.Sample(logits.data(), int64_t(logits.size()), *backend)];
    for (const auto& [id, c] : count) QVERIFY2(p.count(id), "Sample: a token outside it");
    const double chi2 = chi2_of(count, n);
    QVERIFY2(chi2 < 40.0, ("Sample: chi2 " + std::to_string(chi2)).c_str());
    // Greedy: accepted exactly when the draft is the argmax.
    Sampler g(SamplingParams{});
    bool accepted = false;
    QCOMPARE(g.Verify(logits.data(), 8, *backend, 3, &accepted), 1);
    QVERIFY(!accepted);
    QCOMPARE(g.Verify(logits.data(), 8, *backend, 1, &accepted), 1);
    QVERIFY(accepted);
  }

  void mtpHeadMatchesTheReference_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("glm4-moe-tiny") << QString("glm4-moe-tiny");
    QTest::newRow("glm4-moe-tiny-nvfp4") << QString("glm4-moe-tiny-nvfp4");
  }
  // The MTP layer's draft logits over the whole sequence (the fixture's `mtp`
  // section: vLLM's first draft step), fed the main model's final hidden
  // states and the next tokens; their argmaxes are the reference drafts.
  void mtpHeadMatchesTheReference() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    const MtpFixture fx = LoadMtpFixture(dir);
    const auto& mtp = fx.mtp;
    const std::vector<int32_t>& seq = fx.seq;
    const int64_t T = fx.T;
    QCOMPARE(fx.vocab, int64_t{288});
    const std::vector<float>& want_logits = fx.logits;

    LoadOptions o;
    o.threads = 2;
    o.load_mtp = true;
    auto m = Model::Load(dir, o);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    QCOMPARE((*m)->mtp_layers(), int64_t(1));
    KvCache cache = *(*m)->NewKvCache(1, T);
    auto mtp_cache = (*m)->NewMtpCache(1, T);
    QVERIFY2(mtp_cache.ok(), mtp_cache.status().ToString().c_str());
    SequenceChunk ch;
    ch.tokens.assign(seq.begin(), seq.end() - 1);
    ch.all_logits = true;
    ForwardOutput out;
    Status s = (*m)->Forward({ch}, cache, &out);
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::vector<int32_t> next(seq.begin() + 1, seq.end());
    QCOMPARE(next, mtp["input_ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> drafts;
    std::vector<float> logits;
    s = (*m)->MtpDraft(0, 0, 0, next, *mtp_cache, 1, &drafts, &logits);
    QVERIFY2(s.ok(), s.ToString().c_str());
    QCOMPARE(int64_t(logits.size()), T * 288);
    double d = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      d = std::max(d, std::fabs(double(logits[i]) - want_logits[i]));
    }
    QVERIFY2(d <= mtp["suggested_logits_atol"].get<double>(),
             ("max |mtp logits - ref| = " + std::to_string(d)).c_str());
    const auto want_drafts = mtp["draft_ids"].get<std::vector<int32_t>>();
    for (int64_t j = 0; j < T; ++j) {
      const float* row = logits.data() + j * 288;
      QCOMPARE(int32_t(std::max_element(row, row + 288) - row), want_drafts[j]);
    }
    QCOMPARE(drafts, std::vector<int32_t>{want_drafts.back()});
    // Without load_mtp the layer is not there to draft with.
    auto plain = Model::Load(dir, LoadOptions{});
    QVERIFY(plain.ok());
    QCOMPARE((*plain)->mtp_layers(), int64_t(0));
    QVERIFY(!(*plain)->NewMtpCache(1, 8).ok());
  }

  void mtpChainMatchesTheReference_data() { mtpHeadMatchesTheReference_data(); }
  // The chained drafts (2..k: the head fed its own output at the previous
  // position and the draft that output gave) against
  // data/mtp_chain_references.json, an independent NumPy implementation that
  // reproduces the fixture's logits and first-step MTP logits. First after a
  // forward of every prefix of the sequence; then as speculative decoding
  // calls the head: the prompt, a verify chunk whose drafts were all kept, one
  // whose drafts were rejected (garbage rows after its first; one token fed),
  // and one that overwrites the previous call's chained positions.
  void mtpChainMatchesTheReference() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    const MtpFixture fx = LoadMtpFixture(dir);
    const test::MtpChainReference chain =
        test::LoadMtpChainReference(test::SourceDir(), test::FixturesDir(), model.toStdString());
    QCOMPARE(chain.k, 3);
    const std::vector<int32_t>& seq = fx.seq;
    const int64_t T = fx.T, P = fx.prompt;
    QCOMPARE(int64_t(chain.by_fed.size()), T + 1);
    LoadOptions o;
    o.threads = 2;
    o.load_mtp = true;
    auto m = Model::Load(dir, o);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    std::vector<int32_t> drafts;
    std::vector<float> logits;
    ForwardOutput out;
    auto tokens = [&](int64_t b, int64_t e) {
      return std::vector<int32_t>(seq.begin() + b, seq.begin() + e);
    };
    for (int64_t fed = 1; fed <= T; ++fed) {
      KvCache cache = *(*m)->NewKvCache(1, T);
      auto mtp_cache = (*m)->NewMtpCache(1, T + kMtpChainPositions);
      QVERIFY2(mtp_cache.ok(), mtp_cache.status().ToString().c_str());
      SequenceChunk ch;
      ch.tokens = tokens(0, fed);
      Status s = (*m)->Forward({ch}, cache, &out);
      QVERIFY2(s.ok(), s.ToString().c_str());
      s = (*m)->MtpDraft(0, 0, 0, tokens(1, fed + 1), *mtp_cache, 3, &drafts, &logits);
      QVERIFY2(s.ok(), s.ToString().c_str());
      const std::string bad = CheckMtpCall(fx, chain, fed, fed, drafts, logits);
      QVERIFY2(bad.empty(), bad.c_str());
    }
    // As speculative decoding: (main chunk start, its tokens, MTP rows fed).
    QVERIFY(P + 7 <= T);
    std::vector<int32_t> rejected = tokens(P + 3, P + 6);
    rejected[1] = (rejected[1] + 1) % int32_t(fx.vocab);
    rejected[2] = (rejected[2] + 5) % int32_t(fx.vocab);
    const struct {
      int64_t start;
      std::vector<int32_t> chunk;
      int64_t fed_rows;
    } calls[] = {{0, tokens(0, P), P},
                 {P, tokens(P, P + 3), 3},
                 {P + 3, rejected, 1},
                 {P + 4, tokens(P + 4, P + 6), 2}};
    KvCache cache = *(*m)->NewKvCache(1, T);
    auto mtp_cache = (*m)->NewMtpCache(1, T + kMtpChainPositions);
    QVERIFY2(mtp_cache.ok(), mtp_cache.status().ToString().c_str());
    for (const auto& c : calls) {
      SequenceChunk ch;
      ch.start_pos = c.start;
      ch.tokens = c.chunk;
      Status s = (*m)->Forward({ch}, cache, &out);
      QVERIFY2(s.ok(), s.ToString().c_str());
      const int64_t fed = c.start + c.fed_rows;
      s = (*m)->MtpDraft(0, 0, c.start, tokens(c.start + 1, fed + 1), *mtp_cache, 3, &drafts,
                         &logits);
      QVERIFY2(s.ok(), s.ToString().c_str());
      const std::string bad = CheckMtpCall(fx, chain, fed, c.fed_rows, drafts, logits);
      QVERIFY2(bad.empty(), bad.c_str());
    }
  }

  void mtpHeadDraftsABatchAsOne_data() { mtpHeadMatchesTheReference_data(); }
  // Several sequences' drafts in one call (the scheduler's): three chunks of
  // one forward in three slots - the fixture's sequence and two prefixes of
  // it - drafted together with k = 1, 3, 2. Every fed row's logits are the
  // reference's row at its position, every chained row's the chain
  // reference's; each request's drafts are the reference's and those of the
  // same request made alone.
  void mtpHeadDraftsABatchAsOne() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    const MtpFixture fx = LoadMtpFixture(dir);
    const std::vector<int32_t>& seq = fx.seq;
    const int64_t T = fx.T, V = fx.vocab;
    const std::vector<float>& want_logits = fx.logits;
    const int64_t lengths[3] = {T, T / 2, T - 3};
    const int ks[3] = {1, 3, 2};
    LoadOptions o;
    o.threads = 2;
    o.load_mtp = true;
    auto m = Model::Load(dir, o);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    KvCache cache = *(*m)->NewKvCache(3, T);
    auto mtp_cache = (*m)->NewMtpCache(3, T + kMtpChainPositions);
    QVERIFY2(mtp_cache.ok(), mtp_cache.status().ToString().c_str());
    std::vector<SequenceChunk> batch(3);
    std::vector<MtpDraftRequest> requests(3);
    for (int r = 0; r < 3; ++r) {
      batch[r].slot = r;
      batch[r].tokens.assign(seq.begin(), seq.begin() + lengths[r]);
      requests[r] = {size_t(r), r, 0,
                     std::vector<int32_t>(seq.begin() + 1, seq.begin() + 1 + lengths[r]), ks[r]};
    }
    ForwardOutput out;
    Status s = (*m)->Forward(batch, cache, &out);
    QVERIFY2(s.ok(), s.ToString().c_str());
    // Refused before anything runs: one slot twice, a chunk not in the step.
    std::vector<std::vector<int32_t>> drafts;
    auto twice = requests;
    twice[2].slot = 0;
    Status dup = (*m)->MtpDraftBatch(twice, *mtp_cache, &drafts);
    QCOMPARE(dup.code(), StatusCode::kInvalidArgument);
    QVERIFY2(dup.message().find("request 2): slot 0 is drafted for by an earlier request") !=
                 std::string::npos,
             dup.ToString().c_str());
    auto stray = requests;
    stray[1].chunk = 3;
    s = (*m)->MtpDraftBatch(stray, *mtp_cache, &drafts);
    QCOMPARE(s.code(), StatusCode::kInvalidArgument);
    QVERIFY2(s.message().find("request 1") != std::string::npos, s.ToString().c_str());
    for (int r = 0; r < 3; ++r) QCOMPARE(mtp_cache->length(r), int64_t(0));

    std::vector<float> logits;
    s = (*m)->MtpDraftBatch(requests, *mtp_cache, &drafts, &logits);
    QVERIFY2(s.ok(), s.ToString().c_str());
    // The fed rows, then the chained steps': requests 1 and 2, then 1 alone.
    QCOMPARE(int64_t(logits.size()), (lengths[0] + lengths[1] + lengths[2] + 3) * V);
    double d = 0;
    const float* row = logits.data();
    for (int r = 0; r < 3; ++r) {
      for (int64_t i = 0; i < lengths[r] * V; ++i) {
        d = std::max(d, std::fabs(double(row[i]) - want_logits[static_cast<size_t>(i)]));
      }
      row += lengths[r] * V;
    }
    const test::MtpChainReference chain =
        test::LoadMtpChainReference(test::SourceDir(), test::FixturesDir(), model.toStdString());
    const std::pair<int, int> chained[3] = {{1, 0}, {2, 0}, {1, 1}};  // request, chain step
    for (auto [r, step] : chained) {
      const auto& want = chain.by_fed.at(size_t(lengths[r])).chained.at(size_t(step));
      for (int64_t i = 0; i < V; ++i) d = std::max(d, std::fabs(double(row[i]) - want[size_t(i)]));
      row += V;
    }
    QVERIFY2(d <= fx.mtp["suggested_logits_atol"].get<double>(),
             ("max |batched mtp logits - ref| = " + std::to_string(d)).c_str());
    QCOMPARE(drafts.size(), size_t(3));
    for (int r = 0; r < 3; ++r) {
      QCOMPARE(int(drafts[r].size()), ks[r]);
      const auto& ref = chain.by_fed.at(size_t(lengths[r])).drafts;
      QCOMPARE(drafts[r], std::vector<int32_t>(ref.begin(), ref.begin() + ks[r]));
      QCOMPARE(mtp_cache->length(r), lengths[r] + ks[r] - 1);
      // Alone: its own forward and a fresh MTP cache.
      KvCache one = *(*m)->NewKvCache(1, T);
      auto one_mtp = (*m)->NewMtpCache(1, T + kMtpChainPositions);
      QVERIFY(one_mtp.ok());
      SequenceChunk ch = batch[r];
      ch.slot = 0;
      QVERIFY((*m)->Forward({ch}, one, &out).ok());
      std::vector<int32_t> alone;
      s = (*m)->MtpDraft(0, 0, 0, requests[r].next, *one_mtp, ks[r], &alone);
      QVERIFY2(s.ok(), s.ToString().c_str());
      QCOMPARE(drafts[r], alone);
    }
  }

  void mtpSpeculationKeepsTheReference_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("k");
    for (const char* m : {"glm4-moe-tiny", "glm4-moe-tiny-nvfp4"}) {
      for (int k : {1, 2, 3}) {
        QTest::newRow((std::string(m) + "/k" + std::to_string(k)).c_str()) << QString(m) << k;
      }
    }
  }
  // Speculative decoding with the MTP head: the fixture's greedy ids and
  // logits exactly as without it. (With these random weights the drafts are
  // rejected - the fixture README counts 0 of 36 matches - so this checks the
  // verification and the head's bookkeeping step by step, not a speed-up.)
  void mtpSpeculationKeepsTheReference() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    QFETCH(int, k);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    const Fixture fx = LoadFixture(dir);
    const auto& prompt = fx.prompt;
    const auto& generated = fx.generated;
    const auto& want_logits = fx.logits;
    LoadOptions lo;
    lo.threads = 2;
    lo.load_mtp = true;
    auto m = Model::Load(dir, lo);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    GenerateOptions o;
    o.max_tokens = static_cast<int64_t>(generated.size());
    o.stop_at_eos = false;
    o.collect_logits = true;
    o.speculative.method = SpeculativeMethod::kMtp;
    o.speculative.draft_tokens = k;
    o.speculative.adaptive = false;  // every step verifies the head's drafts
    auto r = Generate(**m, prompt, o);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->ids, generated);
    QCOMPARE(r->logits.size(), want_logits.size());
    const double d = MaxAbsDiff(r->logits, want_logits);
    QVERIFY2(d <= 2e-3, ("max |logits - ref| = " + std::to_string(d)).c_str());
    // Every step but the last (no room left) carried drafts from the head.
    QVERIFY2(r->drafted_tokens >= r->decode_steps - 1,
             (std::to_string(r->drafted_tokens) + " drafted in " + std::to_string(r->decode_steps) +
              " steps")
                 .c_str());
    // A model loaded without the head cannot draft with it.
    auto plain = Model::Load(dir, LoadOptions{});
    QVERIFY(plain.ok());
    auto refused = Generate(**plain, prompt, o);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.status().message().find("multi-token-prediction") != std::string::npos,
             refused.status().ToString().c_str());
  }

  // Generate asks the MTP head for no more drafts than the next step can
  // take (the tokens still wanted) and, with draft lengths that pay, than it
  // will verify: each further draft is a forward of the head.
  void mtpDraftsWhatTheStepMayVerify() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/glm4-moe-tiny";
    const Fixture fx = LoadFixture(dir);
    QVERIFY(fx.prompt.size() > 4);
    LoadOptions lo;
    lo.threads = 1;
    lo.load_mtp = true;
    auto m = Model::Load(dir, lo);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    // Records the drafts asked of each decode-time call (fed at most 4 rows).
    class Counting final : public test::ForwardingRunner {
     public:
      using ForwardingRunner::ForwardingRunner;
      Status MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                           std::vector<std::vector<int32_t>>* drafts,
                           std::vector<float>* logits) override {
        for (const MtpDraftRequest& q : requests) {
          if (q.next.size() <= 4) asked.push_back(q.k);
        }
        return inner_.MtpDraftBatch(requests, drafts, logits);
      }
      std::vector<int> asked;
    };
    GenerateOptions o;
    o.max_tokens = 12;
    o.stop_at_eos = false;
    Counting plain_runner(**m);
    auto plain = Generate(plain_runner, fx.prompt, o);
    QVERIFY2(plain.ok(), plain.status().ToString().c_str());
    QVERIFY(plain->ids.size() >= fx.generated.size());  // the reference's greedy ids come first
    QCOMPARE(std::vector<int32_t>(plain->ids.begin(), plain->ids.begin() + fx.generated.size()),
             fx.generated);
    o.speculative.method = SpeculativeMethod::kMtp;
    o.speculative.draft_tokens = 3;
    // Fixed lengths: 3 a step until the last ones (room for 2, 1, none).
    o.speculative.adaptive = false;
    Counting fixed_runner(**m);
    auto fixed = Generate(fixed_runner, fx.prompt, o);
    QVERIFY2(fixed.ok(), fixed.status().ToString().c_str());
    QCOMPARE(fixed->ids, plain->ids);
    QCOMPARE(fixed_runner.asked, (std::vector<int>{3, 3, 3, 3, 3, 3, 3, 2, 1, 1}));
    // Rows dear and this head's drafts seldom accepted (these random
    // weights': never): one, the forward its cache needs anyway. (Seconds a
    // row: Generate records the real steps into these costs, and no step of
    // this model takes that long, even under an emulator.)
    o.speculative.adaptive = true;
    StepCosts costs;
    for (int64_t r = 1; r <= 9; ++r) RecordTwice(costs, r, 10.0 * double(r));
    DraftLengthPolicy rates;
    for (int i = 0; i < 30; ++i) rates.Learn(0, 1, 0);
    StepCosts drafting;  // the head's drafting times, kept by the caller (chat's turns)
    o.step_costs = &costs;
    o.draft_length = &rates;
    o.draft_costs = &drafting;
    Counting auto_runner(**m);
    auto adaptive = Generate(auto_runner, fx.prompt, o);
    QVERIFY2(adaptive.ok(), adaptive.status().ToString().c_str());
    QCOMPARE(adaptive->ids, plain->ids);
    QCOMPARE(auto_runner.asked, std::vector<int>(10, 1));
    QVERIFY(drafting.Seconds(1) > 0);
  }

  void greedyEqualsTheReference_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("k");
    for (const char* m : kFixtureModels) {
      for (int k : {1, 3}) {
        QTest::newRow((std::string(m) + "/k" + std::to_string(k)).c_str()) << QString(m) << k;
      }
    }
  }
  // The fixtures' greedy ids and every logits row, with n-gram speculation
  // (drafts where an id of the sequence recurs); then a prompt holding every
  // id, where every step drafts (random weights reject nearly all of them:
  // the rejection path), against the plain run of the same prompt.
  void greedyEqualsTheReference() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    QFETCH(int, k);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    const Fixture fx = LoadFixture(dir);
    const auto& prompt = fx.prompt;
    const auto& generated = fx.generated;
    const auto& want_logits = fx.logits;
    auto m = LoadOrDie(dir);
    GenerateOptions o;
    o.max_tokens = static_cast<int64_t>(generated.size());
    o.stop_at_eos = false;
    o.collect_logits = true;
    o.speculative.method = SpeculativeMethod::kNgram;
    o.speculative.draft_tokens = k;
    o.speculative.ngram_min = 1;  // draft as often as possible
    o.speculative.adaptive = false;
    GenerateResult r = GenerateOrDie(*m, prompt, o);
    QCOMPARE(r.ids, generated);
    QCOMPARE(r.logits.size(), want_logits.size());
    const double d = MaxAbsDiff(r.logits, want_logits);
    QVERIFY2(d <= 2e-3, ("max |logits - ref| = " + std::to_string(d)).c_str());

    // Every id of the vocabulary (in a scrambled order) before the fixture's
    // prompt: whatever the model picks occurred before, so every step drafts.
    const int64_t V = m->config().vocab_size;
    std::vector<int32_t> twice;
    for (int64_t i = 0; i < V; ++i) twice.push_back(static_cast<int32_t>((i * 7919) % V));
    QCOMPARE(std::set<int32_t>(twice.begin(), twice.end()).size(), size_t(V));
    twice.insert(twice.end(), prompt.begin(), prompt.end());
    GenerateOptions plain = o;
    plain.speculative.method = SpeculativeMethod::kOff;
    plain.collect_logits = false;
    o.collect_logits = false;
    const GenerateResult s = GenerateOrDie(*m, twice, o);
    QCOMPARE(s.ids, GenerateOrDie(*m, twice, plain).ids);
    QVERIFY(s.drafted_tokens >= s.decode_steps - 1);  // the last step has no room for drafts
  }

  // What `generate --speculative` promises against plain `generate`, to the
  // last bit: every verify row gets the logits plain one-token decoding gives
  // that position (SequenceChunk::verify), whatever the number of drafts (5
  // rows: where AMX and BFMMLA would take BF16 batches and AVX-512 its wide
  // lanes; 9: where the GEMM would, for NVFP4 everywhere and dense weights
  // off AVX2), on every CPU backend. So greedy speculation
  // equals plain greedy decoding even at an argmax near-tie. The prompt holds
  // every id, so every step drafts.
  void verifyRowsArePlainDecodingBitForBit_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("backend");
    // F32, BF16 and NVFP4 weights, dense and MoE (a few models: under qemu
    // each backend of each costs ~6 s).
    for (const char* m : {"llama3-tiny", "qwen3-tiny", "qwen3-tiny-nvfp4", "glm4-moe-tiny",
                          "glm4-moe-tiny-nvfp4"}) {
      for (const auto& b : kernels::ProbeBackends()) {
        if (!b.available) continue;
        QTest::newRow((std::string(m) + "/" + b.name).c_str())
            << QString(m) << QString::fromStdString(b.name);
      }
    }
  }
  void verifyRowsArePlainDecodingBitForBit() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    QFETCH(QString, backend);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    LoadOptions lo;
    lo.threads = 2;
    lo.backend = backend.toStdString();
    auto m = Model::Load(dir, lo);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    const int64_t V = (*m)->config().vocab_size;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < V; ++i) prompt.push_back(static_cast<int32_t>((i * 7919) % V));
    const Fixture fx = LoadFixture(dir);
    prompt.insert(prompt.end(), fx.prompt.begin(), fx.prompt.end());
    GenerateOptions plain;
    plain.max_tokens = 10;
    plain.stop_at_eos = false;
    plain.collect_logits = true;
    const GenerateResult a = GenerateOrDie(**m, prompt, plain);
    for (int k : {4, 8}) {
      GenerateOptions spec = plain;
      spec.speculative.method = SpeculativeMethod::kNgram;
      spec.speculative.draft_tokens = k;
      spec.speculative.ngram_min = 1;
      spec.speculative.adaptive = false;  // every step K + 1 rows
      const GenerateResult s = GenerateOrDie(**m, prompt, spec);
      QCOMPARE(s.ids, a.ids);
      QVERIFY(s.drafted_tokens >= k);  // the first step drafted k
      QCOMPARE(s.logits.size(), a.logits.size());
      const auto [pa, ps] =
          std::mismatch(a.logits.begin(), a.logits.end(), s.logits.begin(),
                        [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; });
      if (pa != a.logits.end()) {
        const size_t at = static_cast<size_t>(pa - a.logits.begin());
        QFAIL(("K = " + std::to_string(k) + ": logit " + std::to_string(at % V) + " of row " +
               std::to_string(at / V) + ": plain " + FloatBits(*pa) + ", speculative " +
               FloatBits(*ps))
                  .c_str());
      }
    }
  }

  // Verify is Sample's own draw, compared with the draft: sampled speculative
  // decoding takes the random stream as plain sampling does, so with the
  // same seed it gives the same tokens, whatever was drafted and verified
  // (fixed lengths, or lengths chosen by timing). On the demo model, whose
  // answer copies the prompt (drafts often accepted), and on a fixture with
  // random weights behind a prompt holding every id (drafts every step,
  // nearly all rejected); temperature alone, top-k and top-p.
  void sampledSpeculationIsPlainSampling_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    for (const char* m : {"nanochat-demo", "qwen3-tiny"}) {
      QTest::newRow((std::string(m) + "/temperature").c_str()) << QString(m) << 0 << 1.0f;
      QTest::newRow((std::string(m) + "/top-k").c_str()) << QString(m) << 20 << 1.0f;
      QTest::newRow((std::string(m) + "/top-p").c_str()) << QString(m) << 0 << 0.9f;
    }
  }
  void sampledSpeculationIsPlainSampling() {
    QFETCH(QString, model);
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    std::string dir;
    std::vector<int32_t> prompt;
    if (model == "nanochat-demo") {
      dir = test::SourceDir() + "/resources/models/nanochat-demo";
      auto tok = Tokenizer::Load(dir + "/tokenizer.json");
      QVERIFY2(tok.ok(), tok.status().ToString().c_str());
      const std::string moses =
          "And the LORD said unto Moses, Speak unto the children of Israel, and say unto them. ";
      prompt = tok->Encode(moses + moses + "And the LORD said unto Moses,", {});
    } else {
      OCTET_REQUIRE_FIXTURES();
      dir = test::FixturesDir() + "/" + model.toStdString();
    }
    auto m = LoadOrDie(dir);
    if (prompt.empty()) {
      const int64_t V = m->config().vocab_size;
      for (int64_t i = 0; i < V; ++i) prompt.push_back(static_cast<int32_t>((i * 7919) % V));
    }
    int64_t accepted = 0;
    for (uint64_t seed : {1, 2}) {
      GenerateOptions plain;
      plain.max_tokens = 32;
      plain.stop_at_eos = false;
      plain.sampling = {.temperature = 0.8f, .top_k = top_k, .top_p = top_p, .seed = seed};
      const GenerateResult a = GenerateOrDie(*m, prompt, plain);
      // Fixed K = 2 and 5, and K = 5 with lengths chosen by timing.
      for (const auto& [k, adaptive] : {std::pair{2, false}, {5, false}, {5, true}}) {
        GenerateOptions spec = plain;
        spec.speculative.method = SpeculativeMethod::kNgram;
        spec.speculative.draft_tokens = k;
        spec.speculative.ngram_min = 1;
        spec.speculative.adaptive = adaptive;
        const GenerateResult b = GenerateOrDie(*m, prompt, spec);
        QVERIFY2(b.ids == a.ids, ("seed " + std::to_string(seed) + ", K = " + std::to_string(k) +
                                  (adaptive ? ", auto" : ", fixed"))
                                     .c_str());
        QVERIFY(b.drafted_tokens > 0);
        accepted += b.accepted_tokens;
      }
    }
    if (model == "nanochat-demo") QVERIFY(accepted > 0);  // the acceptance path ran too
  }

  // On the trained demo model a prompt that repeats itself makes the answer
  // copy it: drafts are accepted, several tokens per step, and the output is
  // still plain greedy decoding's.
  // With the lengths chosen by the step costs (auto) too: the same ids, and
  // the first step (no step measured yet) verifies its K drafts; how many
  // later ones are verified and accepted depends on this machine's step times
  // (under qemu, where a row is dear, the first drafts were rejected and none
  // verified after).
  void acceptedDraftsKeepGreedyOutput_data() {
    QTest::addColumn<int>("k");
    QTest::addColumn<bool>("adaptive");
    for (bool adaptive : {false, true}) {
      for (int k : {1, 2, 3, 5}) {
        QTest::newRow(((adaptive ? "auto/k" : "fixed/k") + std::to_string(k)).c_str())
            << k << adaptive;
      }
    }
  }
  void acceptedDraftsKeepGreedyOutput() {
    QFETCH(int, k);
    QFETCH(bool, adaptive);
    const std::string dir = test::SourceDir() + "/resources/models/nanochat-demo";
    auto m = LoadOrDie(dir);
    auto tok = Tokenizer::Load(dir + "/tokenizer.json");
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    const std::string line = "The quick brown fox jumps over the lazy dog. ";
    const std::vector<int32_t> prompt = tok->Encode(line + line + line + "The quick", {});
    GenerateOptions plain;
    plain.max_tokens = 48;
    plain.stop_at_eos = false;
    GenerateOptions spec = plain;
    spec.speculative.method = SpeculativeMethod::kNgram;
    spec.speculative.draft_tokens = k;
    spec.speculative.adaptive = adaptive;
    // The caller's: they hold the decode steps' times and the drafts' rates after.
    StepCosts costs;
    DraftLengthPolicy rates;
    spec.step_costs = &costs;
    spec.draft_length = &rates;
    const GenerateResult a = GenerateOrDie(*m, prompt, plain);
    const GenerateResult b = GenerateOrDie(*m, prompt, spec);
    QCOMPARE(costs.Seconds(1) > 0, adaptive);
    bool learned = false;
    for (int kind = 0; kind < DraftLengthPolicy::kKinds; ++kind) {
      learned = learned || rates.AcceptanceRate(kind) != DraftLengthPolicy().AcceptanceRate(kind);
    }
    QCOMPARE(learned, adaptive);
    QCOMPARE(b.ids, a.ids);
    QVERIFY(b.accepted_tokens <= b.drafted_tokens);
    // Every step but the first gives one token plus its accepted drafts.
    QCOMPARE(int64_t(b.ids.size()) - 1, b.decode_steps + b.accepted_tokens);
    if (adaptive) {
      QVERIFY2(b.drafted_tokens >= k, std::to_string(b.drafted_tokens).c_str());
    } else {
      QVERIFY2(b.accepted_tokens > 0, ("drafted " + std::to_string(b.drafted_tokens)).c_str());
      QVERIFY(b.decode_steps < a.decode_steps);
    }
  }
};

QTEST_APPLESS_MAIN(TestSpeculative)
#include "test_speculative.moc"
