#include "octet/engine/draft_length.h"

#include <algorithm>

namespace octet::engine {

namespace {

// A kind's counts are halved once this many drafts were checked, so that the
// rate follows the text (a copied passage, then free writing).
constexpr double kMemory = 64;

int KindIndex(int kind) { return std::clamp(kind, 0, DraftLengthPolicy::kKinds - 1); }

// The length d in [least, max] with the most expected tokens per second: a
// step holding `step` and d drafts, each accepted at rate p once the one
// before it was, taking the step's time (`costs`, which has an estimate for
// step.rows) plus, when `drafting` is given, what making drafts 2..d adds
// over making one. *tokens_at_best: the drafts' expected tokens there.
int64_t BestLength(double p, int64_t least, int64_t max, const StepCosts& costs, StepSoFar step,
                   const StepCosts* drafting, double* tokens_at_best) {
  int64_t best = least;
  double best_rate = least == 0 ? step.tokens / costs.Seconds(step.rows) : -1;
  double best_tokens = 0;
  const double one = drafting != nullptr ? drafting->Seconds(1) : 0;
  double tokens = 0, chain = 1;  // chain: the chance that drafts 1..d are all accepted
  for (int64_t d = 1; d <= max; ++d) {
    chain *= p;
    tokens += chain;
    const double extra =
        drafting != nullptr && d > 1 ? std::max(0.0, drafting->Seconds(d) - one) : 0.0;
    const double rate = (step.tokens + tokens) / (costs.Seconds(step.rows + d) + extra);
    if (d >= least && rate > best_rate) {
      best_rate = rate;
      best = d;
      best_tokens = tokens;
    }
  }
  *tokens_at_best = best_tokens;
  return best;
}

}  // namespace

void StepCosts::Record(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  Row& r = rows_[static_cast<size_t>(rows)];
  ++steps_;
  // A forgotten row count starts over.
  if (r.count > 0 && steps_ - r.last_step > kForgetAfter) r.count = 0;
  if (r.count < kSamples) {
    r.seconds[static_cast<size_t>(r.count++)] = seconds;
  } else {
    std::rotate(r.seconds.begin(), r.seconds.begin() + 1, r.seconds.end());
    r.seconds.back() = seconds;
  }
  r.last_step = steps_;
}

double StepCosts::Measured(int64_t rows) const {
  const Row& r = rows_[static_cast<size_t>(rows)];
  // The first step of a row count warms up (buffers grown, code and weights
  // not yet in cache: several times a warm step's time at TP 2).
  if (r.count < 2 || steps_ - r.last_step > kForgetAfter) return 0;
  // The lower median of r.count samples (insertion sort: at most kSamples).
  std::array<double, kSamples> s = r.seconds;
  for (int i = 1; i < r.count; ++i) {
    for (int j = i; j > 0 && s[static_cast<size_t>(j)] < s[static_cast<size_t>(j - 1)]; --j) {
      std::swap(s[static_cast<size_t>(j)], s[static_cast<size_t>(j - 1)]);
    }
  }
  return s[static_cast<size_t>((r.count - 1) / 2)];
}

double StepCosts::Seconds(int64_t rows) const {
  rows = std::clamp<int64_t>(rows, 1, kMaxRows);
  if (const double m = Measured(rows); m > 0) return m;
  int64_t lo = rows - 1, hi = rows + 1;
  while (lo >= 1 && Measured(lo) == 0) --lo;
  while (hi <= kMaxRows && Measured(hi) == 0) ++hi;
  const bool have_lo = lo >= 1, have_hi = hi <= kMaxRows;
  if (have_lo && have_hi) {
    const double a = Measured(lo), b = Measured(hi);
    // The count just above a measured one: its time, the least it can cost,
    // so that it is tried where it would pay at that (and then measured).
    // A line between the two would price it as if every row cost alike;
    // where a step streams its weights, one more row costs next to nothing.
    if (rows == lo + 1) return a;
    return a + (b - a) * static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
  }
  if (have_lo) {
    // Past the longest measured: along the line through it and the next
    // measured one below (never cheaper than it); flat when it is alone.
    const double a = Measured(lo);
    int64_t below = lo - 1;
    while (below >= 1 && Measured(below) == 0) --below;
    if (below < 1) return a;
    const double slope = (a - Measured(below)) / static_cast<double>(lo - below);
    return a + std::max(0.0, slope) * static_cast<double>(rows - lo);
  }
  if (have_hi) return Measured(hi) * static_cast<double>(rows) / static_cast<double>(hi);
  return 0;
}

double DraftLengthPolicy::AcceptanceRate(int kind) const {
  const size_t k = static_cast<size_t>(KindIndex(kind));
  return (accepted_[k] + 2) / (checked_[k] + 3);
}

int64_t DraftLengthPolicy::Choose(int kind, int64_t drafted, const StepCosts& costs,
                                  StepSoFar* step) {
  if (drafted <= 0) return 0;
  const double p = AcceptanceRate(kind);
  int& declined = declined_[static_cast<size_t>(KindIndex(kind))];
  int64_t best = drafted;
  double best_tokens = 0;  // expected tokens of this sequence's drafts at `best`
  const double now = costs.Seconds(step->rows);  // the step as it stands
  if (declined >= kRetryAfter && now > 0) {
    // Verify one draft: enough to learn whether the kind's rate changed.
    best = 1;
    best_tokens = p;
  } else if (now > 0) {
    best = BestLength(p, 0, drafted, costs, *step, nullptr, &best_tokens);
  } else {
    double chain = 1;
    for (int64_t d = 1; d <= drafted; ++d) best_tokens += (chain *= p);
  }
  declined = best == 0 ? declined + 1 : 0;
  step->rows += best;
  step->tokens += best_tokens;
  return best;
}

int64_t DraftLengthPolicy::Plan(int kind, int64_t max, const StepCosts& costs,
                                const StepCosts& draft_costs, StepSoFar step) const {
  if (max <= 1 || costs.Seconds(step.rows) <= 0) return max;
  double tokens = 0;
  return BestLength(AcceptanceRate(kind), 1, max, costs, step, &draft_costs, &tokens);
}

void DraftLengthPolicy::Learn(int kind, int64_t verified, int64_t accepted) {
  if (verified <= 0) return;
  const size_t k = static_cast<size_t>(KindIndex(kind));
  accepted = std::clamp<int64_t>(accepted, 0, verified);
  accepted_[k] += static_cast<double>(accepted);
  checked_[k] += static_cast<double>(accepted + (accepted < verified ? 1 : 0));
  if (checked_[k] > kMemory) {
    accepted_[k] /= 2;
    checked_[k] /= 2;
  }
}

}  // namespace octet::engine
