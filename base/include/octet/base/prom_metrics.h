// Prometheus text exposition helpers shared by `octet serve` and `octet route`:
// cumulative histograms (_bucket{le=...}, _sum, _count) with vLLM-like bucket
// bounds, numbers written so that counters stay exact integers, and the
// octet_build_info gauge.
//
// Thread-safety: Histogram::Observe and Write may be called from any thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "octet/base/thread_annotations.h"

namespace octet::prom {

// Bucket upper bounds (the +Inf bucket is implicit), in seconds or tokens.
// Latencies follow vLLM's choices so that dashboards built for it read ours.
const std::vector<double>& TtftBuckets();            // 1 ms .. 2560 s
const std::vector<double>& InterTokenBuckets();      // 10 ms .. 80 s
const std::vector<double>& RequestLatencyBuckets();  // 0.3 s .. 7680 s (end-to-end, queue)
const std::vector<double>& FastBuckets();            // 1 us .. 1 s (routing overhead)
// 1, 2, 5, 10, 20, 50, ... up to the first bound >= max_value (token counts).
std::vector<double> OneTwoFiveBuckets(double max_value);

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Observes `value` n times (one lock).
  void ObserveN(double value, uint64_t n);
  uint64_t count() const;
  double sum() const;
  // Writes the sample lines (no HELP/TYPE): NAME_bucket{LABELS,le="..."} per
  // bound and +Inf, NAME_sum{LABELS}, NAME_count{LABELS}. `labels` is either
  // empty or 'a="x",b="y"' (already escaped).
  void Write(std::ostream& o, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable Mutex mu_;
  // Per bound, not cumulative; last: above every bound.
  std::vector<uint64_t> counts_ GUARDED_BY(mu_);
  uint64_t count_ GUARDED_BY(mu_) = 0;
  double sum_ GUARDED_BY(mu_) = 0;
};

// "# HELP NAME HELP\n# TYPE NAME TYPE\n".
void WriteHead(std::ostream& o, const std::string& name, const char* type, const std::string& help);
// A sample value: integers exactly ("1234567"), others with 17 significant digits,
// NaN and infinities as Prometheus spells them.
std::string Value(double v);
std::string Value(uint64_t v);
std::string Value(int64_t v);
// A label value with \, " and newlines escaped.
std::string EscapeLabel(const std::string& s);
// octet_build_info{version,commit,compiler,arch,cuda,nccl,verbs} 1 with its HELP/TYPE.
std::string BuildInfoMetric();

}  // namespace octet::prom
