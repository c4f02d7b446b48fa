#include "octet/kernels/thread_pool.h"

#include <sched.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace octet::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spin iterations (~0.1 ms) before a thread sleeps: long enough to bridge the
// gap between back-to-back kernels of one decode step, short enough not to burn
// a core that another process (or our own descheduled thread) needs.
constexpr int kSpinIterations = 2000;

// The task index of a job that takes no more claims (above any task count).
constexpr uint64_t kClosed = 0xffffffffu;

}  // namespace

int ThreadPool::HardwareThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads_ = num_threads > 0 ? num_threads : HardwareThreads();
  cursors_ = std::make_unique<Cursor[]>(num_threads_);
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::Claim(int owner) {
  std::atomic<uint64_t>& cursor = cursors_[owner].state;
  for (;;) {
    uint64_t s = cursor.load(std::memory_order_acquire);
    const int64_t n = n_tasks_.load(std::memory_order_acquire);
    const int64_t index = static_cast<int64_t>(s & 0xffffffffu);
    // The end of owner's range (the next range's start), from the n read
    // above: if that n is a later job's, the compare-exchange fails.
    const int64_t end = n * (owner + 1) / num_threads_;
    if (index >= end) return -1;
    if (cursor.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return index;
  }
}

void ThreadPool::RunTasks(int thread) {
  int64_t ran = 0;
  // Its own range first, then the others' in turn.
  for (int i = 0; i < num_threads_; ++i) {
    const int owner = (thread + i) % num_threads_;
    for (int64_t task; (task = Claim(owner)) >= 0;) {
      (*fn_.load(std::memory_order_acquire))(task, thread);
      ++ran;
    }
  }
  if (ran == 0) return;
  const int64_t done = done_.fetch_add(ran, std::memory_order_acq_rel) + ran;
  // The worker that completes the job wakes the caller, under mu_: the caller
  // checks done_ under mu_ before it sleeps, so the check either sees this
  // count or is asleep when the notify comes. (No store-then-load handshake
  // of two atomics: qemu-user runs aarch64's seq_cst store and a following
  // load out of order on an x86 host, and a caller lost its wake-up there.)
  // The caller itself (thread 0) looks at done_ when it returns from here.
  if (thread != 0 && done == n_tasks_.load(std::memory_order_relaxed)) {
    MutexLock lock(mu_);
    done_cv_.notify_all();
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin first, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      MutexLock lock(mu_);
      lock.Wait(wake_, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    RunTasks(thread);
  }
}

void ThreadPool::ParallelFor(int64_t n_tasks, const TaskFn& fn) {
  if (n_tasks <= 0) return;
  if (num_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  MutexLock run_lock(run_mutex_);
  // Close the finished job before touching fn_/n_tasks_: a worker that read
  // a cursor's old state (j, i) and then this job's larger n_tasks_ would
  // otherwise claim (j, i) -> (j, i+1) and run this job's task i a second
  // time, and its extra done_ count could leave the caller below waiting
  // forever. With the index field at kClosed every such claim fails its
  // compare-exchange.
  for (int t = 0; t < num_threads_; ++t) {
    cursors_[t].state.store((static_cast<uint64_t>(job_) << 32) | kClosed,
                            std::memory_order_seq_cst);
  }
  fn_.store(&fn, std::memory_order_relaxed);
  n_tasks_.store(n_tasks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  ++job_;
  for (int t = 0; t < num_threads_; ++t) {
    const uint64_t begin = static_cast<uint64_t>(n_tasks * t / num_threads_);
    cursors_[t].state.store((static_cast<uint64_t>(job_) << 32) | begin, std::memory_order_release);
  }
  {
    MutexLock lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks(0);
  // Wait for tasks other threads claimed; unclaimed ones were run above.
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done_.load(std::memory_order_acquire) == n_tasks) return;
    CpuRelax();
  }
  // A thread still running a task was probably descheduled: sleep.
  MutexLock lock(mu_);
  lock.Wait(done_cv_, [&] { return done_.load(std::memory_order_acquire) == n_tasks; });
}

}  // namespace octet::kernels
