#include "octet/trainer/grad_sync.h"

#include <algorithm>

namespace octet::trainer {

std::vector<GradientBucket> PlanBuckets(const std::vector<ParamTensor>& tensors,
                                        int64_t bucket_bytes) {
  std::vector<GradientBucket> out;
  if (tensors.empty()) return out;
  const int64_t min_elems = std::max<int64_t>(1, bucket_bytes / int64_t{sizeof(float)});
  int64_t end = tensors.back().offset + tensors.back().numel;
  int64_t begin = end;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    begin = it->offset;
    if (end - begin >= min_elems) {
      out.push_back({begin, end});
      end = begin;
    }
  }
  if (end > tensors.front().offset) out.push_back({tensors.front().offset, end});
  return out;
}

GradientBucketer::GradientBucketer(float* grads, int64_t total, std::vector<GradientBucket> buckets,
                                   GradientCollective* collective)
    : grads_(grads),
      total_(total),
      buckets_(std::move(buckets)),
      collective_(collective),
      inv_world_(1.0f / static_cast<float>(collective->world_size())) {
  ready_low_ = total_;
  thread_ = std::thread([this] { ThreadLoop(); });
}

GradientBucketer::~GradientBucketer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientBucketer::Begin() {
  MutexLock lock(mu_);
  ready_low_ = total_;
  next_to_launch_ = 0;
  queue_.clear();
  done_ = 0;
  busy_ns_ = 0;
  // A failed collective poisons the run: error_ stays set.
}

void GradientBucketer::OnReady(int64_t begin, int64_t end) {
  // Ranges arrive from the end of the buffer downwards, without gaps.
  if (end == ready_low_) ready_low_ = begin;
  size_t launch_to = next_to_launch_;
  while (launch_to < buckets_.size() && ready_low_ <= buckets_[launch_to].begin) ++launch_to;
  if (launch_to == next_to_launch_) return;
  {
    MutexLock lock(mu_);
    for (size_t b = next_to_launch_; b < launch_to; ++b) queue_.push_back(b);
  }
  next_to_launch_ = launch_to;
  cv_.notify_all();
}

Status GradientBucketer::Finish(Deadline deadline) {
  const int64_t start = NowNs();
  // Anything not reported ready (a caller that skipped hooks) goes now, in order.
  if (next_to_launch_ < buckets_.size()) OnReady(0, ready_low_);
  MutexLock lock(mu_);
  while (done_ < buckets_.size() && error_.ok()) {
    if (deadline.expired()) {
      return DeadlineExceededError("gradient all-reduce did not finish: " + std::to_string(done_) +
                                   " of " + std::to_string(buckets_.size()) + " buckets reduced");
    }
    lock.WaitOnceFor(cv_, std::min<std::chrono::nanoseconds>(deadline.remaining(),
                                                             std::chrono::milliseconds(100)));
  }
  last_wait_ns_ = NowNs() - start;
  last_busy_ns_ = busy_ns_;
  return error_;
}

void GradientBucketer::ThreadLoop() {
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(cv_, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t b = queue_.front();
    queue_.pop_front();
    const bool failed = !error_.ok();
    lock.Unlock();
    Status s;
    int64_t took = 0;
    if (!failed) {
      const GradientBucket& bucket = buckets_[b];
      float* data = grads_ + bucket.begin;
      const int64_t n = bucket.end - bucket.begin;
      const int64_t t0 = NowNs();
      s = collective_->AllReduceSum(data, static_cast<size_t>(n));
      if (s.ok()) {
        for (int64_t i = 0; i < n; ++i) data[i] *= inv_world_;
      }
      took = NowNs() - t0;
    }
    lock.Lock();
    busy_ns_ += took;
    if (!s.ok() && error_.ok()) error_ = s;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace octet::trainer
