// An inference instance, a router gateway or a training run started on this
// machine for the workbench: `octet serve --model DIR --tp N ...` (rank 0
// here, ranks 1..N-1 as `octet worker` processes it spawns) or `octet route
// --policy FILE`, each on a free port; or `octet train --figures ...` (with
// `--ranks N`, rank processes it spawns), preceded by `octet train prepare`
// when the data folder holds text files. The process's output is passed on
// line by line (the Launch panel's log: model load, rendezvous, self-test,
// errors), and a server is ready once it prints the address it serves on.
// A training run's "@octet-figures" lines are parsed (on the reader thread)
// and passed to `on_figures` instead of `on_line`; an inference instance's
// (`octet serve --figures`: tok/s, requests, once a second) to
// `on_worker_figures`, as an agent reads its workers' (the Dashboard shows both).
//
// A run is one or more stages run one after another (training: prepare, then
// train); the next stage starts when Poll() sees the previous one succeed,
// and a failed stage ends the run.
//
// Threads: `on_line`, `on_ready` and `on_figures` run on the output reader
// thread. Start() and Poll() must be called from one thread that lives as long
// as the instance (the child is killed when its spawning thread ends, and
// Poll() starts the next stage); Stop() may run on another thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "octet/app/cluster_types.h"
#include "octet/app/training_run.h"
#include "octet/base/status.h"
#include "octet/base/subprocess.h"

namespace octet::app {

struct InstanceSpec {
  enum class Kind { kInference, kRouter, kTraining };
  Kind kind = Kind::kInference;
  // Inference.
  std::string model_dir;
  int tp = 1;
  std::string transport = "shm";  // shm | tcp
  std::string algo = "auto";      // auto | oneshot | ring
  std::string served_name;        // "" : the folder name
  int num_slots = 4;  // KV cache slots (--slots)
  int context = 0;  // 0: the model's (capped by the server)
  std::string quantize = "off";  // off | nvfp4: the unquantized linear weights at load (--quantize)
  // Speculative decoding (--speculative off | ngram | mtp) and drafts a step
  // (--draft-tokens; 0: the method's default, DefaultDraftTokens).
  std::string speculative = "off";
  int draft_tokens = 0;
  // Router.
  std::string policy_file;
  // Training. `train_data_dir` holds prepared data (meta.json) or .txt files;
  // text is first prepared into `train_prepared_dir` (which must not hold
  // prepared data yet) with a `train_vocab_size` tokenizer.
  std::string train_data_dir;
  std::string train_prepared_dir;
  int train_vocab_size = 4096;
  std::string train_config = "tiny";  // a preset (tiny, d4, d12, ...) or a config.json
  std::string train_out_dir;          // checkpoints and the final model folder
  int64_t train_steps = 100;
  int train_ranks = 1;        // rank processes on this machine (--ranks)
  int train_seq_len = 0;      // 0: the config's
  int train_batch_size = 0;   // sequences per rank per micro-batch; 0: octet train's default
  int train_eval_every = 0;   // validation every K steps (and at the end); 0: none
  int train_threads = 0;      // compute threads per rank; 0: octet train decides
  // The `octet` executable ("" : beside this program).
  std::string octet_binary;
  std::string host = "127.0.0.1";

  // The command line of the main process (argv[0] resolved): serve, route or train.
  Result<std::vector<std::string>> Argv() const;

  struct Stage {
    std::string name;  // "preparing data", "training", "serving", "routing"
    std::vector<std::string> argv;
  };
  // Every process the run is, in order (training from text: prepare, train).
  // Checks the inputs (for training: what the data folder holds).
  Result<std::vector<Stage>> Stages() const;
};

// `octet serve`'s --draft-tokens when none is given for --speculative METHOD
// ("ngram", "mtp"), and the most it takes.
int DefaultDraftTokens(const std::string& method);
int MaxDraftTokens(const std::string& method);
// Appends --speculative METHOD (and --draft-tokens N when N > 0) unless METHOD
// is "off"; an unknown method or an N out of range is an error that says so.
Status AppendSpeculativeArgs(const std::string& method, int draft_tokens,
                             std::vector<std::string>* argv);

class LocalInstance {
 public:
  using LineFn = std::function<void(const std::string& line)>;
  using ReadyFn = std::function<void(const std::string& base_url)>;
  using FiguresFn = std::function<void(const TrainingFigures& figures)>;
  // Rank 0's figures (job_id and kind left empty: the caller names the instance).
  using WorkerFiguresFn = std::function<void(const WorkerFigures& figures)>;

  static Result<std::unique_ptr<LocalInstance>> Start(const InstanceSpec& spec, LineFn on_line,
                                                      ReadyFn on_ready,
                                                      FiguresFn on_figures = nullptr,
                                                      WorkerFiguresFn on_worker_figures = nullptr);
  ~LocalInstance();  // stops the process (SIGTERM, then SIGKILL after 3 s)

  const InstanceSpec& spec() const { return spec_; }
  // "http://127.0.0.1:PORT" once ready, else "".
  std::string base_url() const;
  // The exit status once the run has ended: its last stage, or the first one
  // that failed (non-blocking). Starts the next stage when one succeeded.
  std::optional<ExitStatus> Poll();
  // The stage running now (0-based) and how many there are.
  int stage() const;
  int stage_count() const { return static_cast<int>(stages_.size()); }
  const std::string& stage_name(int i) const { return stages_[i].name; }
  // The last error line the process printed ("octet serve: error: ..."), or "".
  std::string last_error() const;
  // SIGTERM, then SIGKILL after `grace_ms`; no later stage starts.
  ExitStatus Stop(int grace_ms = 3000);

 private:
  LocalInstance() = default;
  void OnOutput(std::string_view chunk);
  Status SpawnStage(int i);

  InstanceSpec spec_;
  LineFn on_line_;
  ReadyFn on_ready_;
  FiguresFn on_figures_;
  WorkerFiguresFn on_worker_figures_;
  std::vector<InstanceSpec::Stage> stages_;
  mutable std::mutex mu_;
  std::string partial_;
  std::string base_url_;
  std::string last_error_;
  // Guards the stage and the end (Poll on the spawning thread, Stop on another).
  // Never held while waiting for a process.
  mutable std::mutex run_mu_;
  int stage_ = 0;
  bool stopping_ = false;
  std::unique_ptr<Subprocess> process_;
  std::vector<std::unique_ptr<Subprocess>> finished_;  // earlier stages (their readers end)
  std::optional<ExitStatus> exit_;
};

}  // namespace octet::app
