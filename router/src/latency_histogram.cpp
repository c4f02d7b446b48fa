#include "latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace octet::router {

int LatencyHistogram::BucketOf(int64_t ns) {
  if (ns < 1) ns = 1;
  const auto u = static_cast<uint64_t>(ns);
  const int msb = 63 - __builtin_clzll(u);
  int sub = 0;
  if (msb >= 3)
    sub = static_cast<int>((u >> (msb - 3)) & 7);
  else
    sub = static_cast<int>((u << (3 - msb)) & 7);
  const int b = msb * kSubBuckets + sub;
  return std::min(b, kBuckets - 1);
}

double LatencyHistogram::BucketUpperNs(int b) {
  const int msb = b / kSubBuckets, sub = b % kSubBuckets;
  return std::ldexp(1.0 + (sub + 1) / 8.0, msb);
}

void LatencyHistogram::Record(int64_t ns) {
  buckets_[static_cast<size_t>(BucketOf(ns))].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(ns, 0)), std::memory_order_relaxed);
  prom_.Observe(static_cast<double>(std::max<int64_t>(ns, 0)) * 1e-9);
}

double LatencyHistogram::QuantileNs(double q) const {
  uint64_t total = 0;
  std::array<uint64_t, kBuckets> snap{};
  for (int b = 0; b < kBuckets; ++b) {
    snap[static_cast<size_t>(b)] = buckets_[static_cast<size_t>(b)].load(std::memory_order_relaxed);
    total += snap[static_cast<size_t>(b)];
  }
  if (total == 0) return 0;
  const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += snap[static_cast<size_t>(b)];
    if (seen >= std::max<uint64_t>(rank, 1)) return BucketUpperNs(b);
  }
  return BucketUpperNs(kBuckets - 1);
}

}  // namespace octet::router
