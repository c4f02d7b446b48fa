// A fixed pool of worker threads for data-parallel kernels.
//
//   ThreadPool pool(4);                       // 4 threads in all: the caller + 3 workers
//   pool.ParallelFor(n_chunks, [&](int64_t chunk, int thread) { ... });
//
// ParallelFor hands out task indices from a shared counter (threads steal the
// next chunk as they finish one), so uneven chunks balance themselves. The
// calling thread works too. Workers spin briefly after a job (decode runs a
// few hundred short jobs per token) and then sleep on a condition variable.
//
// Thread-safety: ParallelFor may be called from several threads; calls are
// serialised by `run_mutex_`. A task must not call ParallelFor on the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  void ParallelFor(int64_t n_tasks, const TaskFn& fn);

  // Number of hardware threads this process may use.
  static int HardwareThreads();

 private:
  void WorkerLoop(int thread);
  void RunTasks(int thread);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // serialises ParallelFor callers

  // The current job. The caller writes fn_ and n_tasks_, then publishes the
  // job in state_ (release). A thread claims task i of job j by a CAS of
  // state_ from (j, i) to (j, i+1); a successful claim proves the job is still
  // running, so fn_/n_tasks_ read before the claim belong to it (the caller
  // closes the previous job, index field all ones, before it writes them).
  // The caller returns when done_ reaches n_tasks_: it never waits for a worker
  // that was descheduled before claiming anything (important when the cores
  // are shared).
  std::atomic<uint64_t> state_{0};  // (job << 32) | next task index
  std::atomic<const TaskFn*> fn_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  std::atomic<int64_t> done_{0};
  uint32_t job_ = 0;  // written by the caller only (under run_mutex_)

  // Waking workers: generation_ changes with every job; sleepers wait on wake_.
  // A caller whose tasks are still running elsewhere after a short spin sleeps
  // on done_cv_ (caller_waiting_ set); the thread finishing the last task wakes it.
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  std::atomic<bool> caller_waiting_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace octet::kernels
