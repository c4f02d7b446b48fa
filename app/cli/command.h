// The `octet` command table. Each subcommand is a function taking the words
// after its name and returning the process exit code. Contract
// (shared/docs/CLI.md, beside the repository):
// every subcommand has --help, exits non-zero with a one-line reason on bad
// input, and takes --json for one machine-readable document on stdout.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

// A word after a command's name that selects what it does (`octet cluster
// status`); `run` takes the words after it.
struct Subcommand {
  std::string_view name;
  CommandFn run;
};

struct Command {
  std::string_view name;
  std::string_view summary;
  CommandFn run;                // nullptr: the issue that builds it has not landed
  std::string_view pending;     // for run == nullptr: what it waits for
  // The command's subcommands (the table its `run` dispatches on); null when
  // it has none.
  const std::vector<Subcommand>& (*subcommands)() = nullptr;
};

// All subcommands, in the order `octet --help` lists them.
const std::vector<Command>& Commands();

// `octet help --commands`: one line per command and per subcommand ("cluster
// status"), from the tables above; what tests walk to check every command's
// usage errors.
std::string ListCommandWords();

// The entry of `table` named `word`, or null.
const Subcommand* FindSubcommand(const std::vector<Subcommand>& table, const std::string& word);
// "init, add, status" for an "unknown subcommand" message.
std::string SubcommandNames(const std::vector<Subcommand>& table);

// A usage error from ArgParser::Parse (its message already names the program
// and the flag) on stderr, once; returns kExitUsage.
int ParseUsageError(const Status& parse_status);

// "PROGRAM: message", or `message` alone when it already starts with a
// program's name ("octet serve: --port ..."), as ArgParser's errors do: an
// error names the program once.
std::string WithProgram(std::string_view program, const std::string& message);

// The subcommand tables (each in its command's file).
const std::vector<Subcommand>& BenchSubcommands();
const std::vector<Subcommand>& ClusterSubcommands();
const std::vector<Subcommand>& DeploySubcommands();
const std::vector<Subcommand>& ModelsSubcommands();
const std::vector<Subcommand>& RouteSubcommands();
const std::vector<Subcommand>& TrainSubcommands();

// Subcommands (app/cli/cmd_<name>.cpp).
int RunBench(const std::vector<std::string>& args);
int RunChat(const std::vector<std::string>& args);
int RunCluster(const std::vector<std::string>& args);
int RunCollbench(const std::vector<std::string>& args);
int RunDeploy(const std::vector<std::string>& args);
int RunGenerate(const std::vector<std::string>& args);
int RunModels(const std::vector<std::string>& args);
int RunPlan(const std::vector<std::string>& args);
int RunPull(const std::vector<std::string>& args);
int RunRoute(const std::vector<std::string>& args);
int RunServe(const std::vector<std::string>& args);
int RunTokenize(const std::vector<std::string>& args);
int RunTrain(const std::vector<std::string>& args);
int RunWorker(const std::vector<std::string>& args);
// generate/chat/serve/plan with `--model ORG/NAME[@REV]` resolved to the
// pulled snapshot folder first (cmd_models.cpp); then the commands above.
int RunGenerateWithRepoModel(const std::vector<std::string>& args);
int RunChatWithRepoModel(const std::vector<std::string>& args);
int RunServeWithRepoModel(const std::vector<std::string>& args);
int RunPlanWithRepoModel(const std::vector<std::string>& args);
// `octet worker --job training ...` (cmd_train.cpp), dispatched by RunWorker.
int RunTrainingWorker(const std::vector<std::string>& args);

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // the work failed (I/O, model, peer)
inline constexpr int kExitUsage = 2;        // bad flags or input
inline constexpr int kExitUnavailable = 3;  // the feature is not in this build yet

}  // namespace octet::cli
