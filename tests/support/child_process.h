// Starting the programs under test (octet, octet-agent) from a test and
// reading what they print: CapturedProcess keeps a child's merged stdout and
// stderr in memory and waits (with a deadline) for a line; AgentArgv and
// WaitForAgentAddress start an octet-agent whose files all live in one folder
// and read the address it listens on. Built on base's Subprocess: the child is
// killed when the CapturedProcess (or the test process) goes away.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/status.h"
#include "octet/base/subprocess.h"

namespace octet::test {

// A child process whose merged output is kept, with a wait for a line.
class CapturedProcess {
 public:
  Status Start(std::vector<std::string> argv) {
    SpawnOptions so;
    so.argv = std::move(argv);
    auto out = out_;
    auto mu = mu_;
    so.on_output = [out, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      out->append(chunk);
    };
    OCTET_ASSIGN_OR_RETURN(proc_, Subprocess::Spawn(so));
    return Status::Ok();
  }
  // Everything the child printed so far.
  std::string output() const {
    std::lock_guard<std::mutex> lock(*mu_);
    return *out_;
  }
  // The text after `key` once it appears (up to the end of its line); "" when
  // the child exits or `timeout_ms` passes first.
  std::string WaitFor(const std::string& key, int timeout_ms) {
    for (const Deadline d = Deadline::AfterMs(timeout_ms); !d.expired();) {
      const std::string text = output();
      const size_t p = text.find(key);
      if (p != std::string::npos) {
        const size_t e = text.find('\n', p);
        if (e != std::string::npos) return text.substr(p + key.size(), e - p - key.size());
      }
      if (proc_->Poll()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }
  // Null before Start (or after a failed one).
  Subprocess* proc() { return proc_.get(); }
  const Subprocess* proc() const { return proc_.get(); }
  // Ends the child (SIGTERM, then SIGKILL after `grace`); nothing when none runs.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000)) {
    if (proc_) proc_->Terminate(grace);
    proc_.reset();
  }

 private:
  std::shared_ptr<std::string> out_ = std::make_shared<std::string>();
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
  std::unique_ptr<Subprocess> proc_;
};

// The command line of `bin_dir`/octet-agent listening on `listen` (host:port,
// port 0 for any) with its files in `dir`: the cluster token it reads
// (dir/token), its state (dir/state), its machine id (dir/machine-id) and the
// address it writes once it listens (dir/address); no discovery. `extra` flags
// follow.
inline std::vector<std::string> AgentArgv(const std::string& bin_dir, const std::string& dir,
                                          const std::string& listen,
                                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {
      bin_dir + "/octet-agent", "--listen",       listen,         "--token-file",
      dir + "/token",           "--state-dir",    dir + "/state", "--machine-id-file",
      dir + "/machine-id",      "--no-discovery", "--port-file",  dir + "/address"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// The address (host:port) an agent wrote to `port_file` once it listens; ""
// when `timeout_ms` passes first. The file is complete once it ends in a newline.
inline std::string WaitForAgentAddress(const std::string& port_file, int timeout_ms) {
  for (const Deadline d = Deadline::AfterMs(timeout_ms); !d.expired();) {
    auto a = ReadFileToString(port_file);
    if (a.ok() && !a->empty() && a->back() == '\n') return a->substr(0, a->size() - 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

}  // namespace octet::test
