// The `octet` command table. Each subcommand is a function taking the words
// after its name and returning the process exit code. Contract (../docs CLI.md):
// every subcommand has --help, exits non-zero with a one-line reason on bad
// input, and takes --json for one machine-readable document on stdout.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace octet::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  std::string_view name;
  std::string_view summary;
  CommandFn run;                // nullptr: the issue that builds it has not landed
  std::string_view pending;     // for run == nullptr: what it waits for
};

// All subcommands, in the order `octet --help` lists them.
const std::vector<Command>& Commands();

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
