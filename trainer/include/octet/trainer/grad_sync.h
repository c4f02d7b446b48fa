// Data-parallel gradient synchronisation: the small collective interface the
// trainer needs, and a DDP-style bucketer that all-reduces gradients in
// buckets while the rest of backward still runs.
//
// Buckets (PyTorch DDP's scheme): parameters are taken in reverse buffer order
// (the order backward finishes them: lm_head, last block, ..., wte) and packed
// into contiguous ranges of the gradient buffer of at least `bucket_bytes`
// (whole tensors; the last bucket may be smaller). The layout depends only on
// the model and the size, so every rank builds the same buckets and issues the
// same all-reduces in the same order. GptModel::Backward's ready hook tells
// the bucketer which gradients are final; as soon as a bucket is complete it
// is handed to a background thread that all-reduces it (sum) and divides by the
// world size, overlapping communication with the remaining backward.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/status.h"
#include "octet/base/thread_annotations.h"
#include "octet/trainer/gpt_model.h"

namespace octet::trainer {

// What the trainer needs from a communicator. One instance is used by one
// thread at a time; the trainer uses two (main thread and the bucketer's
// thread), like a Communicator and its Duplicate().
class GradientCollective {
 public:
  virtual ~GradientCollective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In-place sum over all ranks of `count` floats; every rank gets the same
  // bits. Errors name the peer that failed.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  virtual Status Barrier() = 0;
};

struct GradientBucket {
  int64_t begin = 0;  // element range [begin, end) of the gradient buffer
  int64_t end = 0;
};

// Buckets for `tensors` (laid out back to back), each >= bucket_bytes except
// possibly the last (the one holding the buffer's start). Ordered as they
// become ready: the first bucket ends at the buffer's end.
std::vector<GradientBucket> PlanBuckets(const std::vector<ParamTensor>& tensors,
                                        int64_t bucket_bytes);

class GradientBucketer {
 public:
  // `grads` has `total` floats; `collective` is used only from the
  // bucketer's own thread.
  GradientBucketer(float* grads, int64_t total, std::vector<GradientBucket> buckets,
                   GradientCollective* collective);
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Call before the backward pass whose gradients are to be reduced.
  void Begin();
  // The model's GradReadyFn: gradients [begin, end) are final.
  void OnReady(int64_t begin, int64_t end);
  // Waits until every bucket is reduced and averaged. The first error (a
  // failed peer) is returned; `deadline` bounds the wait in case the
  // collective never returns.
  Status Finish(Deadline deadline);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Of the last step: time the background thread spent in all-reduce, and
  // time Finish waited (the communication not hidden behind backward).
  int64_t last_busy_ns() const { return last_busy_ns_; }
  int64_t last_wait_ns() const { return last_wait_ns_; }

 private:
  void ThreadLoop();

  float* grads_;
  int64_t total_;
  std::vector<GradientBucket> buckets_;
  GradientCollective* collective_;
  float inv_world_;

  // Main thread only.
  int64_t ready_low_ = 0;      // gradients [ready_low_, total_) are final
  size_t next_to_launch_ = 0;  // buckets_[0 .. next_to_launch_) handed over
  int64_t last_wait_ns_ = 0;
  int64_t last_busy_ns_ = 0;  // busy_ns_ as Finish saw it

  Mutex mu_;
  std::condition_variable cv_;  // queue_, done_ or stop_ changed
  std::deque<size_t> queue_ GUARDED_BY(mu_);
  size_t done_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  int64_t busy_ns_ GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace octet::trainer
