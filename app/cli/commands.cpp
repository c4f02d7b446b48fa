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
      {"models", "list (or rm) the models in the Hugging Face cache", RunModels, ""},
      {"plan", "memory plan: does a model fit these nodes", RunPlanWithRepoModel, ""},
      {"bench", "llama-benchy-style benchmark, runs stored in SQLite", RunBench, ""},
      {"collbench", "collectives benchmark like nccl-tests", RunCollbench, {}},
      {"route", "request router gateway", RunRoute, ""},
      {"train", "data-parallel GPT pre-training", RunTrain, ""},
      {"cluster", "cluster profiles, status and the local embedded cluster", RunCluster, ""},
      {"deploy", "deployments: instances on chosen nodes with a router in front", RunDeploy, ""},
      {"worker", "one rank of a job (spawned by octet and octet-agent)", RunWorker, ""},
  };
  return commands;
}

}  // namespace octet::cli
