// Running one model instance from the command line: the local tensor-parallel
// launch of `octet generate/serve --tp N` (rank 0 in this process, ranks
// 1..N-1 as `octet worker` processes on a loopback rendezvous, each pinned to
// its own CPUs), stop signals, and the two things a rank 0 does: one
// generation (`octet generate`, a worker given --prompt-ids) or serving
// (`octet serve`, `octet worker` from an agent).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/cpu_affinity.h"  // AllowedCpus, PinToCpuIndices
#include "octet/base/net_util.h"
#include "octet/base/status.h"
#include "octet/base/subprocess.h"
#include "octet/engine/generate.h"
#include "octet/engine/tokenizer.h"
#include "octet/engine/tp_runtime.h"

namespace octet::cli {

// SIGTERM/SIGINT set a flag (StopRequested) instead of killing the process.
void InstallStopSignals();
bool StopRequested();
// The exit code of a command ended by such a signal: 128 + its number (the
// shell's convention: 143 for SIGTERM, 130 for SIGINT).
int StopExitCode();

// The "@octet-figures" lines on stdout and a command's last error line on
// stderr are written whole: every writer holds this lock.
std::mutex& OutputLock();
// One "@octet-figures" line (wire/figures_line.h) on stdout.
void PrintFigures(const nlohmann::json& figures);

// "0,1" -> {0, 1}; "2-3" -> {2, 3}.
Result<std::vector<int>> ParseCpuList(const std::string& text);


// How a local TP group is laid out on this machine.
struct LocalTpPlan {
  int tp = 1;
  int threads_per_rank = 1;
  bool pin = false;                       // each rank on its own CPUs
  std::vector<std::vector<int>> cpus;     // per rank: AllowedCpus() indices
  std::string Describe() const;           // "2 ranks x 1 thread, pinned to CPUs 0 | 1"
};
// `threads` is per rank (0: the allowed CPUs divided by tp, at least 1);
// `bind` is "core" (pin when the ranks' threads fit the CPUs) or "none".
LocalTpPlan PlanLocalTp(int tp, int threads, const std::string& bind);

struct FollowerSpawn {
  std::string model;
  std::string rendezvous;
  std::string transport = "shm";
  std::string algo = "auto";
  int peer_timeout_ms = 0;  // 0: the collectives' default
  std::string backend = "auto";
  bool nvfp4_tiles = true;       // --nvfp4-tiles
  std::string quantize = "off";  // --quantize
  bool check_memory = true;      // false: --ignore-memory-check
  bool load_mtp = false;         // --speculative mtp: every rank holds its shard of the MTP head
};
// Starts ranks 1..tp-1 as `octet worker --job inference` processes (output
// inherited, so their errors reach the user).
Result<std::vector<std::unique_ptr<Subprocess>>> SpawnFollowers(const FollowerSpawn& spawn,
                                                                const LocalTpPlan& plan);
// Waits for followers to end (after Shutdown), killing any still running at the deadline.
void ReapFollowers(std::vector<std::unique_ptr<Subprocess>>& followers, int grace_ms);

// Flags every instance-running command shares (--transport, --algo, ...).
void AddInstanceFlags(ArgParser& p);
// --nvfp4-tiles: its help text, and its value (on or off) as LoadOptions::nvfp4_tiles.
extern const char* const kNvfp4TilesHelp;
Result<bool> ParseNvfp4Tiles(const std::string& value);
// --quantize nvfp4|off: its help text (the value goes through engine::ParseLoadQuantize).
extern const char* const kQuantizeHelp;
// Reads them into runtime options (rendezvous, world size and rank are the caller's).
Status ReadInstanceFlags(const ArgParser& p, engine::TpRuntimeOptions* o);

// `octet generate/serve --tp N`: --tp, --bind, --transport and --algo (and the
// AddInstanceFlags flags, read into `o`) checked; rank 0's options get the
// world size. An InvalidArgument error is a usage message.
struct LocalTpFlags {
  int tp = 1;
  std::string bind = "core";
  std::string transport = "shm";
  std::string algo = "auto";
};
Result<LocalTpFlags> ReadLocalTpFlags(const ArgParser& p, engine::TpRuntimeOptions* o);

// For tp > 1: lays the group out on this machine's CPUs (`*plan`), picks a
// loopback rendezvous (into `o`) and starts ranks 1..tp-1; this process, rank
// 0, is not pinned yet (the caller does it with plan->cpus[0] when plan->pin).
Result<std::vector<std::unique_ptr<Subprocess>>> StartLocalFollowers(
    const LocalTpFlags& flags, const std::string& model, engine::TpRuntimeOptions* o,
    LocalTpPlan* plan);

// ---- what rank 0 does ----------------------------------------------------------

// One generation as `octet generate` does it (flags from AddGenerateFlags).
// Everything that can be checked (and the tokenizer) is prepared before the
// model instance exists, so that a TP group never waits on it.
struct GenerateJob {
  std::vector<int32_t> prompt;
  engine::GenerateOptions gen;
  std::optional<engine::Tokenizer> tok;
  bool json = false;
  std::string logits_out;
  int exit_code = 0;  // != 0: `error` says why (kExitUsage or kExitFailure)
  std::string error;
};
void AddGenerateFlags(ArgParser& p);
// --speculative off|ngram|mtp and --draft-tokens K (generate, chat, serve;
// AddGenerateFlags adds them, AddServeFlags too unless `worker`, whose
// parser has them from AddGenerateFlags). Read returns the message of a usage
// error (an unknown method, K out of range for it).
void AddSpeculativeFlags(ArgParser& p);
Result<engine::SpeculativeOptions> ReadSpeculativeFlags(const ArgParser& p);
GenerateJob PrepareGenerate(const ArgParser& p, const std::string& model_dir);
// Prints "<program>: <error>" and returns job.exit_code.
int ReportPrepareError(const GenerateJob& job, const std::string& program);
// Runs it: prints the ids/text (or the JSON document), writes --logits-out.
// Returns the exit code.
int RunGenerateOn(engine::ModelRunner& runner, GenerateJob& job, const std::string& program,
                  int tp);

// Serving: scheduler + OpenAI HTTP (+ gRPC) until a stop signal or a fatal
// error (then the last line printed is "<program>: error: <why>" and the
// result is 1). Flags from AddServeFlags.
void AddServeFlags(ArgParser& p, bool worker);
// The model folder's tokenizer.json when it has one (serving works without).
Result<std::optional<engine::Tokenizer>> LoadOptionalTokenizer(const std::string& model_dir);
int RunServeOn(engine::TpRuntime& runtime, const std::optional<engine::Tokenizer>& tokenizer,
               const ArgParser& p, const std::string& program, bool print_figures);

// A follower rank until the leader shuts the group down; prints figures.
int RunFollower(engine::TpRuntime& runtime, const std::string& program, bool print_figures);

}  // namespace octet::cli
