#include <iostream>

#include "command.h"

namespace octet::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"generate", "generate text or ids from a model folder or pulled repo",
       RunGenerateWithRepoModel, ""},
      {"chat", "interactive terminal chat with a model", RunChatWithRepoModel, ""},
      {"tokenize", "encode/decode with a tokenizer.json", RunTokenize, ""},
      {"serve", "OpenAI-compatible HTTP + gRPC server", RunServeWithRepoModel, ""},
      {"pull", "download a model from the Hugging Face Hub into the HF cache", RunPull, ""},
      {"models", "list (or rm) the models in the Hugging Face cache", RunModels, "",
       ModelsSubcommands},
      {"plan", "memory plan: does a model fit these nodes", RunPlanWithRepoModel, ""},
      {"bench", "llama-benchy-style benchmark, runs stored in SQLite", RunBench, "",
       BenchSubcommands},
      {"collbench", "collectives benchmark like nccl-tests", RunCollbench, {}},
      {"route", "request router gateway", RunRoute, "", RouteSubcommands},
      {"train", "data-parallel GPT pre-training", RunTrain, "", TrainSubcommands},
      {"cluster", "cluster profiles, status and the local embedded cluster", RunCluster, "",
       ClusterSubcommands},
      {"deploy", "deployments: instances on chosen nodes with a router in front", RunDeploy, "",
       DeploySubcommands},
      {"worker", "one rank of a job (spawned by octet and octet-agent)", RunWorker, ""},
  };
  return commands;
}

std::string ListCommandWords() {
  std::string out;
  for (const auto& c : Commands()) {
    out.append(c.name).append("\n");
    if (!c.subcommands) continue;
    for (const auto& s : c.subcommands()) out.append(c.name).append(" ").append(s.name) += "\n";
  }
  return out;
}

const Subcommand* FindSubcommand(const std::vector<Subcommand>& table, const std::string& word) {
  for (const auto& s : table) {
    if (s.name == word) return &s;
  }
  return nullptr;
}

std::string SubcommandNames(const std::vector<Subcommand>& table) {
  std::string out;
  for (const auto& s : table) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

std::string WithProgram(std::string_view program, const std::string& message) {
  if (message.rfind("octet ", 0) == 0 || message.rfind("octet: ", 0) == 0) return message;
  return std::string(program) + ": " + message;
}

int ParseUsageError(const Status& parse_status) {
  std::cerr << parse_status.message() << "\n";
  return kExitUsage;
}

}  // namespace octet::cli
