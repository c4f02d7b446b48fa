// Spawns and watches the rank processes of one integration test. Every child
// is owned by a Subprocess, so none outlives the test (killed and reaped on
// destruction even when a check fails half way).
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/subprocess.h"
#include "octet/collectives/local_rendezvous.h"

namespace octet::collectives::test {

class RankGroup {
 public:
  ~RankGroup() {
    for (auto& p : procs_) {
      if (p) p->Kill(SIGKILL);
    }
  }

  // Starts argvs[r] as rank r. With `rendezvous` (the address in the argvs),
  // rank 0 inherits its listening socket and this process's copy is closed
  // before the other ranks start (see local_rendezvous.h).
  Status Start(const std::vector<std::vector<std::string>>& argvs,
               LocalRendezvous* rendezvous = nullptr) {
    outputs_.resize(argvs.size());
    for (size_t r = 0; r < argvs.size(); ++r) {
      SpawnOptions o;
      o.argv = argvs[r];
      if (r == 0 && rendezvous) o.env.push_back(LocalRendezvous::EnvFor({rendezvous}));
      auto* out = &outputs_[r];
      o.on_output = [this, out](std::string_view chunk) {
        std::lock_guard<std::mutex> l(mu_);
        out->append(chunk);
      };
      auto p = Subprocess::Spawn(o);
      if (!p.ok()) return p.status();
      procs_.push_back(std::move(*p));
      if (r == 0 && rendezvous) rendezvous->Close();
    }
    return Status::Ok();
  }

  int size() const { return static_cast<int>(procs_.size()); }

  std::string Output(int r) {
    std::lock_guard<std::mutex> l(mu_);
    return outputs_[r];
  }

  std::string AllOutput() {
    std::lock_guard<std::mutex> l(mu_);
    std::string s;
    for (size_t r = 0; r < outputs_.size(); ++r) {
      s += "---- rank " + std::to_string(r) + " ----\n" + outputs_[r];
    }
    return s;
  }

  // True once every rank's output contains `text` (false on timeout or when a
  // rank exits first).
  bool WaitForText(const std::string& text, int timeout_ms) {
    const Deadline d = Deadline::AfterMs(timeout_ms);
    while (!d.expired()) {
      bool all = true;
      for (int r = 0; r < size(); ++r) {
        if (Output(r).find(text) == std::string::npos) {
          all = false;
          if (procs_[r]->Poll()) return false;
        }
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void Kill(int r, int sig) { procs_[r]->Kill(sig); }

  // Waits for rank r; on timeout kills it and reports timed_out.
  ExitStatus Wait(int r, Deadline deadline, bool* timed_out) {
    auto st = procs_[r]->Wait(deadline);
    if (st.ok()) return *st;
    *timed_out = true;
    return procs_[r]->Terminate(std::chrono::milliseconds(200));
  }

 private:
  std::vector<std::unique_ptr<Subprocess>> procs_;
  std::mutex mu_;
  std::vector<std::string> outputs_;  // by rank, guarded by mu_
};

}  // namespace octet::collectives::test
