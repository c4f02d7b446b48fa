#include "command.h"

namespace octet::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"generate", "generate text or ids from a model folder", RunGenerate, ""},
      {"chat", "interactive terminal chat with a model", RunChat, ""},
      {"tokenize", "encode/decode with a tokenizer.json", RunTokenize, ""},
      {"serve", "OpenAI-compatible HTTP + gRPC server", RunServe, ""},
      {"plan", "memory plan: does a model fit these nodes", RunPlan, ""},
      {"bench", "llama-benchy-style benchmark, runs stored in SQLite", RunBench, ""},
      {"collbench", "collectives benchmark like nccl-tests", RunCollbench, {}},
      {"route", "request router gateway", RunRoute, ""},
      {"train", "data-parallel GPT pre-training", nullptr, "waiting for the trainer (issue 10)"},
      {"cluster", "cluster profiles, status and the local embedded cluster", RunCluster, ""},
      {"worker", "one rank of a job (spawned by octet and octet-agent)", RunWorker, ""},
  };
  return commands;
}

}  // namespace octet::cli
