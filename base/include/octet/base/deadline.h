// A point in time by which a wait must end. Every blocking wait in Octet takes
// a Deadline (or a timeout turned into one), so nothing hangs.
#pragma once

#include <chrono>
#include <cstdint>

namespace octet {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline After(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline AfterMs(int64_t ms) { return After(std::chrono::milliseconds(ms)); }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }

  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }

  // Time left, clamped at zero (a huge value for Never()).
  std::chrono::nanoseconds remaining() const {
    if (is_never()) return std::chrono::hours(24 * 365);
    const auto left = at_ - Clock::now();
    return left.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                            : std::chrono::nanoseconds(0);
  }
  // For poll(2)/epoll: milliseconds left, rounded up, -1 for Never().
  int poll_timeout_ms() const {
    if (is_never()) return -1;
    const auto ns = remaining().count();
    return static_cast<int>((ns + 999'999) / 1'000'000);
  }
  // The earlier of two deadlines.
  static Deadline Min(Deadline a, Deadline b) { return a.at_ < b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

// Monotonic time in nanoseconds / seconds, for measurements.
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline double NowSeconds() { return static_cast<double>(NowNs()) * 1e-9; }

}  // namespace octet
