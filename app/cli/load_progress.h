// Progress of loading a checkpoint (engine::LoadOptions::progress) as
// `octet serve` and `octet generate` show it: on a terminal a line on stderr
// redrawn in place (tensors, bytes, rate; at most 10 times a second and at
// the end); with --json one line on stdout per tensor loaded,
//   {"event":"load","tensors_done":n,"tensors_total":n,"bytes_done":b,
//    "bytes_total":b,"bytes_per_s":r,"elapsed_s":s,"tensor":"name"}
// the last one with tensors_done == tensors_total, all before the ready line.
// Neither when stderr is not a terminal and --json is off.
#pragma once

#include <chrono>
#include <functional>

#include "octet/engine/model.h"

namespace octet::cli {

class LoadProgressReporter {
 public:
  // `json`: lines on stdout; `terminal`: the redrawn line on stderr.
  LoadProgressReporter(bool json, bool terminal) : json_(json), terminal_(terminal) {}

  // The callback for LoadOptions::progress, or an empty one when nothing is
  // shown. The reporter must outlive the load.
  std::function<void(const engine::LoadProgress&)> Callback();

  // The JSON line for `p` after `elapsed_s` seconds (exposed for its test).
  static std::string JsonLine(const engine::LoadProgress& p, double elapsed_s);

 private:
  void Report(const engine::LoadProgress& p);

  bool json_;
  bool terminal_;
  bool started_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace octet::cli
