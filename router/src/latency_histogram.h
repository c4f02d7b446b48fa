// LatencyHistogram: the router's duration histograms (routing overhead, and
// per pool time to first byte and request duration), read for quantiles by
// Router::Stats and as Prometheus histograms by /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "octet/base/prom_metrics.h"

namespace octet::router {

// Lock-free log-scale histogram of durations: 8 buckets per power of two from
// 1 ns to 2^40 ns, so quantiles are within ~9%.
class LatencyHistogram {
 public:
  // `prom_bounds` (seconds): also kept as a Prometheus histogram with these
  // bucket bounds, for /metrics.
  explicit LatencyHistogram(const std::vector<double>& prom_bounds) : prom_(prom_bounds) {}
  void Record(int64_t ns);
  const prom::Histogram& prom() const { return prom_; }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum_seconds() const { return static_cast<double>(sum_ns_.load()) * 1e-9; }
  // The upper edge of the bucket holding quantile q (0 < q <= 1); 0 when empty.
  double QuantileNs(double q) const;

 private:
  static constexpr int kSubBuckets = 8;
  static constexpr int kBuckets = 41 * kSubBuckets;
  static int BucketOf(int64_t ns);
  static double BucketUpperNs(int b);
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
  prom::Histogram prom_;
};

}  // namespace octet::router
