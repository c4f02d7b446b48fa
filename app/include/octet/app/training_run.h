// A training run as the workbench sees it, without Qt: what a chosen data
// folder holds (prepared token shards, or text files that `octet train
// prepare` must tokenize first), the worker-telemetry lines `octet train
// --figures` prints on stderr ("@octet-figures {json}", kind "training"),
// and the curves built from them (train loss, validation loss and train
// tok/s against the optimizer step).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/wire/figures_line.h"

namespace octet::app {

enum class TrainingDataKind {
  kPrepared,  // meta.json (and train-*.bin, tokenizer.json): `octet train --data DIR`
  kText,      // .txt files (searched recursively): `octet train prepare` first
};

// What `dir` holds. NotFound / InvalidArgument with a sentence that names the
// folder when it is missing or holds neither prepared data nor .txt files.
// Stops at the first .txt file found, so a big corpus costs little.
Result<TrainingDataKind> ClassifyTrainingData(const std::string& dir);

// One "@octet-figures" line of `octet train --figures`. Absent figures are
// marked by has_step / has_val (a "starting" line carries neither).
struct TrainingFigures {
  std::string state;  // "starting" | "running" | "finished"
  bool has_step = false;
  int64_t train_step = 0;
  int64_t train_total_steps = 0;
  double train_loss = 0;
  double train_tps = 0;  // tokens per second of this step (this rank)
  double step_ms = 0;
  double compute_ms = 0;
  double allreduce_ms = 0;     // all-reduce wait not hidden behind backward
  double allreduce_share = 0;  // allreduce_ms / step_ms, 0..1
  double mfu = 0;              // 0..1
  bool has_val = false;
  int64_t val_step = 0;
  double val_loss = 0;
  double val_bpb = -1;  // bits per byte; -1 when the run has no token_bytes.npy
};

// The figures line itself is the wire's (octet/wire/figures_line.h).
using wire::IsFiguresLine;
using wire::kFiguresPrefix;

// Parses a figures line of kind "training". InvalidArgument for a line that is
// not one (another prefix, bad JSON, another kind, a key of the wrong type).
Result<TrainingFigures> ParseTrainingFigures(std::string_view line);

// Rank 0's progress lines of `octet train`: what an agent's job log holds for
// a training run (the agent keeps the "@octet-figures" lines for its
// telemetry and leaves them out of the log). The two formats, as cmd_train
// prints them:
//   "step K/N | loss L | lr xM | grad norm G | T tok/s | S ms (compute C,
//    all-reduce wait W, busy B) | mfu P%"   (one line)
//   "eval at step K | val loss V[ | X bits/byte]"
// Folds such a line into `f`, the run's figures so far (a step line keeps the
// last evaluation and an eval line keeps the step figures, as a figures line
// does), sets f->state to "running" and returns true; any other line returns
// false and leaves `f` as it was.
bool FoldTrainingLogLine(std::string_view line, TrainingFigures* f);

// The curves of one run, as figures lines arrive. x is the optimizer step.
// With `--ranks N` every rank reports its own step: the first report of a
// step is kept and later ones (other ranks) are ignored, so each curve has
// one point per step, in increasing step order.
struct TrainingPoint {
  int64_t step = 0;
  double value = 0;
};

class TrainingCurves {
 public:
  void Add(const TrainingFigures& f);

  const std::vector<TrainingPoint>& train_loss() const { return train_loss_; }
  const std::vector<TrainingPoint>& train_tps() const { return train_tps_; }
  const std::vector<TrainingPoint>& val_loss() const { return val_loss_; }
  // The newest figures line (any rank), if one arrived.
  const std::optional<TrainingFigures>& latest() const { return latest_; }
  int64_t total_steps() const { return total_steps_; }

 private:
  std::vector<TrainingPoint> train_loss_, train_tps_, val_loss_;
  std::optional<TrainingFigures> latest_;
  int64_t total_steps_ = 0;
};

}  // namespace octet::app
