// A fixed pool of worker threads for data-parallel kernels.
//
//   ThreadPool pool(4);                       // 4 threads in all: the caller + 3 workers
//   pool.ParallelFor(n_chunks, [&](int64_t chunk, int thread) { ... });
//
// ParallelFor gives each thread a contiguous home range of the task indices
// (thread t: [n*t/T, n*(t+1)/T)) and it runs them in order; a thread that has
// finished its own range takes the next unclaimed tasks of the others' (so
// uneven tasks, and a thread that is descheduled, still balance). Claiming
// from one's own range touches only one's own cache line, and consecutive
// tasks of a thread are neighbours (a matmul task's rows follow the previous
// task's, so the memory stream runs on). The calling thread works too.
// Workers spin briefly after a job (decode runs a few hundred short jobs per
// token) and then sleep on a condition variable.
//
// Thread-safety: ParallelFor may be called from several threads; calls are
// serialised by `run_mutex_` (annotated for Clang's thread-safety analysis).
// A task must not call ParallelFor on the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "octet/base/thread_annotations.h"

namespace octet::kernels {

class ThreadPool {
 public:
  using TaskFn = std::function<void(int64_t task, int thread)>;

  // `num_threads` counts the caller; <= 0 means all hardware threads.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Runs fn(task, thread) for every task in [0, n_tasks); returns when all have
  // run. `thread` is in [0, size()) and unique among concurrently running tasks
  // (use it to index per-thread scratch).
  void ParallelFor(int64_t n_tasks, const TaskFn& fn) EXCLUDES(run_mutex_, mu_);

  // Number of hardware threads this process may use.
  static int HardwareThreads();

 private:
  void WorkerLoop(int thread) EXCLUDES(mu_);
  void RunTasks(int thread) EXCLUDES(mu_);
  // Claims the next task of range `owner` of the current job; -1 when that
  // range has none left (or the job is over).
  int64_t Claim(int owner);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  Mutex run_mutex_;  // serialises ParallelFor callers

  // The current job. The caller writes fn_ and n_tasks_, then publishes the
  // job in every range's cursor (release). A thread claims task i of job j
  // from range r by a CAS of cursors_[r] from (j, i) to (j, i+1); a successful
  // claim proves the job is still running, so fn_/n_tasks_ read before the
  // claim belong to it (the caller closes every cursor of the previous job,
  // index field all ones, before it writes them). Each thread adds the tasks
  // it ran to done_ once, when it finds nothing left to claim; the caller
  // returns when done_ reaches n_tasks_: it never waits for a worker that was
  // descheduled before claiming anything (important when the cores are shared).
  struct alignas(64) Cursor {
    std::atomic<uint64_t> state{0};  // (job << 32) | next task index
  };
  std::unique_ptr<Cursor[]> cursors_;  // one per thread (its home range)
  std::atomic<const TaskFn*> fn_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  uint32_t job_ GUARDED_BY(run_mutex_) = 0;  // written by the caller only

  // Waking workers: generation_ changes with every job; sleepers wait on wake_.
  // A caller whose tasks are still running elsewhere after a short spin sleeps
  // on done_cv_; the worker whose count completes done_ notifies it, under mu_.
  // mu_ guards no field (they are atomics): it orders a sleeper's check of its
  // condition against the notify, so that no wake-up is lost.
  Mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace octet::kernels
