// PolicyFileWatcher: re-reads a policy file every interval_ms and applies it
// when its text changed and it parses (an invalid edit keeps the running
// policy and is reported).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/router/router.h"

namespace octet::router {

struct PolicyFileWatcher::State {
  Router* router;
  std::string path;
  int64_t interval_ms;
  Callback on_result;
  std::string last_text;  // guarded by check_mu
  std::mutex check_mu;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;  // guarded by mu
  std::thread thread;
};

PolicyFileWatcher::PolicyFileWatcher(Router* router, std::string path, int64_t interval_ms,
                                     Callback on_result)
    : state_(std::make_unique<State>()) {
  state_->router = router;
  state_->path = std::move(path);
  state_->interval_ms = std::max<int64_t>(interval_ms, 10);
  state_->on_result = std::move(on_result);
  if (auto p = router->policy()) state_->last_text = p->source_text;
  state_->thread = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(state_->mu);
        state_->cv.wait_for(lock, std::chrono::milliseconds(state_->interval_ms),
                            [this] { return state_->stop; });
        if (state_->stop) return;
      }
      CheckNow();
    }
  });
}

PolicyFileWatcher::~PolicyFileWatcher() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void PolicyFileWatcher::CheckNow() {
  std::lock_guard<std::mutex> lock(state_->check_mu);
  auto text = ReadFileToString(state_->path);
  if (!text.ok() || *text == state_->last_text) return;  // a missing file is a rename in progress
  state_->last_text = *text;
  PolicyParseResult r = ParsePolicy(*text, state_->path);
  Status applied;
  if (r.ok()) {
    applied = state_->router->ApplyPolicy(r.policy);
    if (applied.ok())
      OCTET_LOG(INFO) << "policy " << state_->path << " reloaded (generation "
                      << state_->router->policy_generation() << ")";
    else
      OCTET_LOG(ERROR) << "policy " << state_->path << " not applied: " << applied.message();
  } else {
    applied = r.status();
    OCTET_LOG(ERROR) << "policy " << state_->path
                     << " changed but is invalid; keeping the running policy:\n"
                     << r.status().message();
  }
  if (state_->on_result) state_->on_result(r, applied);
}

}  // namespace octet::router
