// A pool of threads started on demand, at most max_threads (more tasks wait
// in the queue), and kept for reuse: a task costs a thread hand-off, not a
// thread creation. Submit from any thread; Shutdown runs what is queued, then
// joins every thread (the destructor calls it).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace octet {

class TaskThreads {
 public:
  explicit TaskThreads(size_t max_threads = static_cast<size_t>(-1)) : max_threads_(max_threads) {}
  ~TaskThreads() { Shutdown(); }
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  void set_max_threads(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    max_threads_ = std::max<size_t>(n, 1);
  }
  void Submit(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    if (idle_ >= static_cast<int>(tasks_.size()) || threads_.size() >= max_threads_) {
      cv_.notify_one();
    } else {
      threads_.emplace_back([this] { Work(); });
    }
  }
  void Shutdown() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [this] { return !tasks_.empty() || shutdown_; });
      --idle_;
      if (tasks_.empty()) return;  // shutting down
      std::function<void()> fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  size_t max_threads_;                       // guarded by mu_
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  int idle_ = 0;                             // threads waiting for a task; guarded by mu_
  bool shutdown_ = false;                    // guarded by mu_
};

}  // namespace octet
