// PolicyFileWatcher: re-reads a policy file every interval_ms and applies it
// when its text changed and it parses (an invalid edit keeps the running
// policy and is reported).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <string>
#include <thread>

#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/base/thread_annotations.h"
#include "octet/router/router.h"

namespace octet::router {

struct PolicyFileWatcher::State {
  Router* router;
  std::string path;
  int64_t interval_ms;
  Callback on_result;
  Mutex check_mu;  // one CheckNow at a time
  std::string last_text GUARDED_BY(check_mu);
  Mutex mu;
  std::condition_variable cv;  // stop set
  bool stop GUARDED_BY(mu) = false;
  std::thread thread;
};

PolicyFileWatcher::PolicyFileWatcher(Router* router, std::string path, int64_t interval_ms,
                                     Callback on_result)
    : state_(std::make_unique<State>()) {
  state_->router = router;
  state_->path = std::move(path);
  state_->interval_ms = std::max<int64_t>(interval_ms, 10);
  state_->on_result = std::move(on_result);
  if (auto p = router->policy()) {
    MutexLock lock(state_->check_mu);  // no thread yet: for the analysis
    state_->last_text = p->source_text;
  }
  state_->thread = std::thread([this] {
    while (true) {
      {
        MutexLock lock(state_->mu);
        if (lock.WaitFor(state_->cv, std::chrono::milliseconds(state_->interval_ms),
                         [this]() REQUIRES(state_->mu) { return state_->stop; }))
          return;
      }
      CheckNow();
    }
  });
}

PolicyFileWatcher::~PolicyFileWatcher() {
  {
    MutexLock lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void PolicyFileWatcher::CheckNow() {
  MutexLock lock(state_->check_mu);
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
