// Time as Octet's components read it.
//
// UnixMs: wall-clock milliseconds, as the wire and the stores record them.
//
// Clock: monotonic time and waiting, injectable (LevelDB's Env idea). A
// component whose behaviour depends on elapsed time (health-check intervals,
// ejection and session-pin expiry, figure windows, idle polls) reads and waits
// through a Clock it is given; production passes Clock::Real(), tests a
// ManualClock that they advance instead of sleeping. I/O deadlines against
// real sockets and processes stay on Deadline (deadline.h): the kernel keeps
// real time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>

#include "octet/base/thread_annotations.h"

namespace octet {

// Milliseconds since the Unix epoch (system clock: comparable across nodes
// with synchronized clocks, not monotonic; use Deadline for timeouts).
int64_t UnixMs();

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Monotonic nanoseconds. The real clock's is the steady clock's count (the
  // same timeline as octet::NowNs()); only differences are meaningful.
  virtual int64_t NowNs() const = 0;
  int64_t NowMs() const { return NowNs() / 1'000'000; }

  // Blocks the calling thread for `ms` of this clock's time.
  virtual void SleepForMs(int64_t ms) = 0;

  // With `lock` held on the mutex that guards what pred() reads (and `cv`
  // notified when that changes): waits until pred() holds (true) or this
  // clock reaches `deadline_ns` (false). The lock is held whenever pred()
  // runs and on return.
  virtual bool WaitUntil(MutexLock& lock, std::condition_variable& cv, int64_t deadline_ns,
                         const std::function<bool()>& pred) = 0;
  bool WaitForMs(MutexLock& lock, std::condition_variable& cv, int64_t ms,
                 const std::function<bool()>& pred) {
    return WaitUntil(lock, cv, NowNs() + ms * 1'000'000, pred);
  }

  // The process's real clock (the steady clock; never destroyed).
  static Clock& Real();
};

// A clock that moves only when told to (tests). Waiters notice an Advance
// within about a millisecond of real time: they re-check the time on that
// period, since the condition variables they wait on belong to their owners.
// So that a forgotten Advance cannot hang a test, a wait also ends after
// `real_limit_ms` of real time (logged as a warning; WaitUntil then returns
// false as if the deadline had passed).
class ManualClock final : public Clock {
 public:
  // Starts at `start_ns`, far from zero, so that callers' "0 = never" stays distinct.
  explicit ManualClock(int64_t start_ns = 1'000'000'000'000, int64_t real_limit_ms = 60'000);

  int64_t NowNs() const override { return now_ns_.load(std::memory_order_acquire); }
  void SleepForMs(int64_t ms) override;
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, int64_t deadline_ns,
                 const std::function<bool()>& pred) override;

  void AdvanceNs(int64_t ns) { now_ns_.fetch_add(ns, std::memory_order_acq_rel); }
  void AdvanceMs(int64_t ms) { AdvanceNs(ms * 1'000'000); }
  // Threads inside SleepForMs or WaitUntil now: a test can wait until a
  // background thread is parked on the clock before it advances it.
  int waiters() const { return waiters_.load(std::memory_order_acquire); }
  // Waits (real time, at most `real_ms`) until `n` threads are parked on the
  // clock; true when they are. Parked means the deadline each waits for is
  // already set: an Advance before that would move it too.
  bool AwaitWaiters(int n, int64_t real_ms = 10'000) const;

 private:
  std::atomic<int64_t> now_ns_;
  std::atomic<int> waiters_{0};
  const int64_t real_limit_ms_;
};

}  // namespace octet
