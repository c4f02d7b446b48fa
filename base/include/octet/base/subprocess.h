// Child processes: rank workers spawned by `octet collbench/generate --tp`,
// jobs launched by octet-agent, agents started by the local cluster and tests.
//
// A Subprocess owns its child: the destructor kills (SIGKILL) a child that is
// still running and reaps it, so no orphan outlives its owner. Output can go to
// the parent's stderr/stdout (inherit), to a file, or through a pipe to a
// callback run on a reader thread (line-buffered is the callback's business).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet {

struct ExitStatus {
  bool exited = false;  // true: normal exit with `code`; false: killed by `signal`
  int code = 0;
  int signal = 0;
  bool success() const { return exited && code == 0; }
  std::string ToString() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

struct SpawnOptions {
  std::vector<std::string> argv;          // argv[0] is the program (PATH is searched)
  std::vector<std::string> env;           // "KEY=VALUE" added to (or replacing in) ours
  std::string cwd;                        // empty: inherit
  // Output routing: when `on_output` is set, stdout and stderr are merged into a
  // pipe and each chunk read is passed to it (from a reader thread). Otherwise,
  // when `output_file` is set, both go to that file (appended). Otherwise both
  // are inherited.
  std::function<void(std::string_view chunk)> on_output;
  std::string output_file;
  bool stdin_null = true;                 // stdin from /dev/null
  bool new_process_group = true;          // so Kill() reaches the child's children
  // Linux: the child gets SIGKILL when the spawning thread's process dies.
  bool die_with_parent = true;
};

class Subprocess {
 public:
  static Result<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Non-blocking: the exit status once the child has ended.
  std::optional<ExitStatus> Poll();
  // Waits until the child ends or `deadline` passes (DeadlineExceeded; the child
  // keeps running). Output callbacks have all run when this returns OK.
  Result<ExitStatus> Wait(Deadline deadline);
  // Sends `sig` to the child (and its process group when it has one).
  void Kill(int sig);
  // SIGTERM, wait up to `grace`, then SIGKILL; returns the exit status.
  ExitStatus Terminate(std::chrono::milliseconds grace);

 private:
  Subprocess() = default;
  void JoinReader();
  pid_t pid_ = -1;
  bool group_ = false;
  std::optional<ExitStatus> exit_;
  struct Reader;
  std::unique_ptr<Reader> reader_;
};

}  // namespace octet
