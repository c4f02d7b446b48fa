// Lock annotations for Clang's thread-safety analysis (-Wthread-safety), and
// the annotated mutex the analysis needs to see: libstdc++'s std::mutex and
// std::lock_guard carry no annotations, so code that locks them directly is
// invisible to the checker.
//
//   class Queue {
//    public:
//     void Push(int v) EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       items_.push_back(v);
//       cv_.notify_one();
//     }
//    private:
//     void DropOldest() REQUIRES(mu_);   // callers hold mu_
//     Mutex mu_;
//     std::condition_variable cv_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//   };
//
// With clang the compiler then refuses (as an error in Octet's clang builds,
// cmake/OctetOptions.cmake) a read or write of items_ without mu_ held, a call
// of DropOldest without it, and a lock that is not released on every path.
// Under GCC every macro expands to nothing and Mutex is a plain std::mutex.
//
// Condition-variable predicates run with the lock held, but a lambda is a
// function of its own to the analysis: annotate it `[&]() REQUIRES(mu_) {...}`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define OCTET_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OCTET_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks the analysis tracks ("mutex" in messages).
#define CAPABILITY(name) OCTET_THREAD_ANNOTATION(capability(name))
// On an RAII class: its constructor acquires and its destructor releases.
#define SCOPED_CAPABILITY OCTET_THREAD_ANNOTATION(scoped_lockable)
// Abseil's thread_annotations.h (which gRPC's headers bring in) defines the
// next five names too, to the same attributes; whichever comes first stands.
// On a data member: read or written only with the lock held.
#ifndef GUARDED_BY
#define GUARDED_BY(lock) OCTET_THREAD_ANNOTATION(guarded_by(lock))
#endif
// On a pointer member: what it points to is read or written only with the lock held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(lock) OCTET_THREAD_ANNOTATION(pt_guarded_by(lock))
#endif
// On locks: the order in which they may be taken together.
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) OCTET_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) OCTET_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
// On a function: the caller holds these locks (exclusively / at least shared).
#define REQUIRES(...) OCTET_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) OCTET_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: it takes / gives back these locks (none named: `this`).
#define ACQUIRE(...) OCTET_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) OCTET_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) OCTET_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: the caller must not hold these locks (it takes them itself).
#define EXCLUDES(...) OCTET_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it checks (or knows) that the lock is held; the analysis trusts it.
#define ASSERT_CAPABILITY(x) OCTET_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns a reference to this lock.
#define RETURN_CAPABILITY(x) OCTET_THREAD_ANNOTATION(lock_returned(x))
// The way out, for code the analysis cannot follow; say why beside each use.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS OCTET_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace octet {

// A std::mutex the analysis can track. Not recursive.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For code that holds the lock where the analysis cannot see it taken (a
  // callback the holder invokes). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope, and waits on std::condition_variables with it
// (the lock is released while blocked and held again on return). Unlock/Lock
// let a scope run a callback without the lock.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // Waits until pred() holds.
  template <typename Pred>
  void Wait(std::condition_variable& cv, Pred pred) {
    cv.wait(lock_, pred);
  }
  // Waits until pred() holds (true) or `at` passed with it still false (false).
  template <typename ClockT, typename Duration, typename Pred>
  bool WaitUntil(std::condition_variable& cv, std::chrono::time_point<ClockT, Duration> at,
                 Pred pred) {
    return cv.wait_until(lock_, at, pred);
  }
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> d, Pred pred) {
    return cv.wait_for(lock_, d, pred);
  }
  // One wait without a predicate, at most `d` (spurious wake-ups included):
  // for a caller that re-checks its own condition in a loop.
  template <typename Rep, typename Period>
  void WaitOnceFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> d) {
    cv.wait_for(lock_, d);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace octet
