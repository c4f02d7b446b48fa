// How many drafted tokens a speculative step verifies (SpeculativeOptions::
// adaptive). A drafted token costs a row of the verification step whether or
// not it is accepted. Where a step streams its weights from memory (a real
// model on a CPU, any model on the GPU) a row costs next to nothing and every
// draft pays; where the weights stay in cache (nanochat-demo on a CPU) or a
// row routes to experts of its own (MoE), a row can cost a tenth of a step or
// more, and a draft that is seldom accepted slows decoding down. So the length
// is chosen each step from two things measured while decoding: what a step of
// each row count takes on this machine (StepCosts, one per decoding loop) and
// how often this sequence's drafts of the same kind were accepted
// (DraftLengthPolicy, one per sequence). Which length is chosen never changes
// the output: drafts are only checked (greedy output stays plain greedy
// decoding, sampled output plain sampling's for the seed: Sampler::Verify).
#pragma once

#include <array>
#include <cstdint>

namespace octet::engine {

// Seconds a forward step of R rows takes, learned from the steps run. Not
// thread-safe (one decoding loop records and asks).
class StepCosts {
 public:
  static constexpr int64_t kMaxRows = 256;  // steps with more rows are not recorded
  static constexpr int kSamples = 4;        // recent steps kept per row count
  // A row count not run for this many recorded steps is taken as unmeasured
  // again: the machine's load changes, and a length that looked dear then
  // gets tried again. Not sooner: each forgotten length costs steps of it to
  // measure again (serving nanochat-demo to 4 clients, forgetting after 64
  // steps spent a fifth of the steps on lengths that did not pay).
  static constexpr int64_t kForgetAfter = 512;
  // A step of `rows` rows took `seconds` (ignored unless both are positive:
  // a manual test clock reads 0).
  void Record(int64_t rows, double seconds);
  // The estimate for `rows` rows: the lower median of the recent steps of
  // that many rows (delays only ever add time) where there are two or more
  // (the first step of a row count is a warm-up, not its cost); else, between
  // the nearest row counts measured below and above, one row more than the
  // one below at its time (the least it can cost: so it is tried, and
  // measured, one count at a time) and further ones along the line between
  // them.
  // Past the measured ones: above the longest, along the line through it and
  // the next measured one below (never cheaper than it; its time alone when
  // it is the only one, so a longer step looks no dearer and gets tried);
  // below the shortest, its time scaled down by the rows (a shorter step
  // looks as much cheaper as it could be, and gets tried). 0 before any step.
  double Seconds(int64_t rows) const;

 private:
  struct Row {
    std::array<double, kSamples> seconds{};
    int count = 0;          // samples held (up to kSamples)
    int64_t last_step = 0;  // steps_ when it was last recorded
  };
  double Measured(int64_t rows) const;  // 0: none, or forgotten
  std::array<Row, kMaxRows + 1> rows_{};
  int64_t steps_ = 0;
};

// What a step being formed holds so far: its rows and the tokens they are
// expected to yield (one for each decoding sequence's own row, and its share
// of accepted drafts).
struct StepSoFar {
  int64_t rows = 0;
  double tokens = 0;
};

// One sequence's acceptance statistics by kind of draft (Drafter::kind: for
// prompt lookup the length of the matched n-gram, longer matches being right
// more often) and the choice they lead to.
class DraftLengthPolicy {
 public:
  static constexpr int kKinds = 8;  // kinds above are counted as the last
  // A kind whose drafts were declined this many times in a row has its first
  // draft verified once: its rate was learned from earlier text, and only a
  // verified draft can show that it changed.
  static constexpr int kRetryAfter = 16;
  // How many of the `drafted` tokens (of kind `kind`) to verify in a step
  // that holds `*step` besides them (this sequence's own row included): the
  // length that gives the step the most expected tokens per second, each
  // further draft being accepted at the kind's rate once its predecessor
  // was. With no step measured yet every draft is verified. Adds the chosen
  // rows and their expected tokens to *step.
  int64_t Choose(int kind, int64_t drafted, const StepCosts& costs, StepSoFar* step);
  // For a drafter whose drafts cost time of their own (the MTP head: a forward
  // of it each, chained): how many of up to `max` drafts (of kind `kind`) to
  // make for a step expected to hold `step` besides them. The first costs
  // nothing extra (the head's forward over the kept rows runs anyway: its
  // cache follows the sequence); each further one what `draft_costs`, the
  // drafter's measured time by drafts made, adds over one. The count with the
  // most expected tokens per second of the step and the drafting, at least
  // 1; `max` before anything is measured. Choose then verifies up to that
  // many.
  int64_t Plan(int kind, int64_t max, const StepCosts& costs, const StepCosts& draft_costs,
               StepSoFar step) const;
  // After a verification step: `verified` drafts of kind `kind` were checked
  // and the first `accepted` of them were accepted.
  void Learn(int kind, int64_t verified, int64_t accepted);
  // The kind's estimated rate, (accepted + 2) / (checked + 3) over recent
  // drafts (a draft counts as checked when all before it were accepted):
  // 2/3 for a kind not yet seen. In a simulation of nanochat-demo's n-gram
  // drafts over C's measured step costs a prior of 1/2 or 1 chose worse
  // (1 verified too much, 1/2 too little where rows cost next to nothing).
  double AcceptanceRate(int kind) const;

 private:
  std::array<double, kKinds> accepted_{}, checked_{};
  std::array<int, kKinds> declined_{};  // Choose's zeros in a row
};

}  // namespace octet::engine
