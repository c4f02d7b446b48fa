#include "octet/base/clock.h"

#include <chrono>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

class RealClock final : public Clock {
 public:
  int64_t NowNs() const override { return octet::NowNs(); }
  void SleepForMs(int64_t ms) override {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, int64_t deadline_ns,
                 const std::function<bool()>& pred) override {
    using Steady = std::chrono::steady_clock;
    return lock.WaitUntil(cv, Steady::time_point(std::chrono::nanoseconds(deadline_ns)), pred);
  }
};

// How often a ManualClock waiter re-checks the time (real time).
constexpr auto kManualPoll = std::chrono::milliseconds(1);

// Counts a thread as waiting on the clock for its scope.
class WaiterCount {
 public:
  explicit WaiterCount(std::atomic<int>& n) : n_(n) { n_.fetch_add(1, std::memory_order_acq_rel); }
  ~WaiterCount() { n_.fetch_sub(1, std::memory_order_acq_rel); }

 private:
  std::atomic<int>& n_;
};

void WarnNotAdvanced(int64_t real_limit_ms) {
  OCTET_LOG(WARNING) << "ManualClock: a wait ended after " << real_limit_ms
                     << " ms of real time without the clock reaching its deadline (did the test "
                        "forget to advance it?)";
}

}  // namespace

Clock& Clock::Real() {
  static RealClock* clock = new RealClock();  // never destroyed: threads may outlive statics
  return *clock;
}

ManualClock::ManualClock(int64_t start_ns, int64_t real_limit_ms)
    : now_ns_(start_ns), real_limit_ms_(real_limit_ms) {}

void ManualClock::SleepForMs(int64_t ms) {
  WaiterCount counted(waiters_);
  const int64_t until = NowNs() + ms * 1'000'000;
  const Deadline give_up = Deadline::AfterMs(real_limit_ms_);
  while (NowNs() < until) {
    if (give_up.expired()) {
      WarnNotAdvanced(real_limit_ms_);
      return;
    }
    std::this_thread::sleep_for(kManualPoll);
  }
}

bool ManualClock::AwaitWaiters(int n, int64_t real_ms) const {
  const Deadline d = Deadline::AfterMs(real_ms);
  while (waiters() < n) {
    if (d.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool ManualClock::WaitUntil(MutexLock& lock, std::condition_variable& cv, int64_t deadline_ns,
                            const std::function<bool()>& pred) {
  WaiterCount counted(waiters_);
  const Deadline give_up = Deadline::AfterMs(real_limit_ms_);
  while (!pred()) {
    if (NowNs() >= deadline_ns) return false;
    if (give_up.expired()) {
      WarnNotAdvanced(real_limit_ms_);
      return false;
    }
    lock.WaitOnceFor(cv, kManualPoll);
  }
  return true;
}

}  // namespace octet
