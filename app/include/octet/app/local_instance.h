// An inference instance or a router gateway started on this machine for the
// workbench: `octet serve --model DIR --tp N ...` (rank 0 here, ranks 1..N-1
// as `octet worker` processes it spawns) or `octet route --policy FILE`, each
// on a free port. The process's output is passed on line by line (the Launch
// panel's log: model load, rendezvous, self-test, errors), and the instance is
// ready once it prints the address it serves on.
//
// Threads: `on_line` and `on_ready` run on the output reader thread. Start()
// must be called from a thread that lives as long as the instance (the child
// is killed when its spawning thread ends); Poll() and Stop() from any one
// thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/base/subprocess.h"

namespace octet::app {

struct InstanceSpec {
  enum class Kind { kInference, kRouter };
  Kind kind = Kind::kInference;
  // Inference.
  std::string model_dir;
  int tp = 1;
  std::string transport = "shm";  // shm | tcp
  std::string algo = "auto";      // auto | oneshot | ring
  std::string served_name;        // "" : the folder name
  int num_slots = 4;  // KV cache slots (--slots)
  int context = 0;  // 0: the model's (capped by the server)
  // Router.
  std::string policy_file;
  // The `octet` executable ("" : beside this program).
  std::string octet_binary;
  std::string host = "127.0.0.1";

  // The command line run (argv[0] resolved).
  Result<std::vector<std::string>> Argv() const;
};

class LocalInstance {
 public:
  using LineFn = std::function<void(const std::string& line)>;
  using ReadyFn = std::function<void(const std::string& base_url)>;

  static Result<std::unique_ptr<LocalInstance>> Start(const InstanceSpec& spec, LineFn on_line,
                                                      ReadyFn on_ready);
  ~LocalInstance();  // stops the process (SIGTERM, then SIGKILL after 3 s)

  const InstanceSpec& spec() const { return spec_; }
  // "http://127.0.0.1:PORT" once ready, else "".
  std::string base_url() const;
  // The exit status once the process has ended (non-blocking).
  std::optional<ExitStatus> Poll();
  // The last error line the process printed ("octet serve: error: ..."), or "".
  std::string last_error() const;
  // SIGTERM, then SIGKILL after `grace_ms`.
  ExitStatus Stop(int grace_ms = 3000);

 private:
  LocalInstance() = default;
  void OnOutput(std::string_view chunk);

  InstanceSpec spec_;
  LineFn on_line_;
  ReadyFn on_ready_;
  mutable std::mutex mu_;
  std::string partial_;
  std::string base_url_;
  std::string last_error_;
  std::unique_ptr<Subprocess> process_;
  std::optional<ExitStatus> exit_;
};

}  // namespace octet::app
