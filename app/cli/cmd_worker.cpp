// `octet worker`: one rank of a job, as octet-agent's job supervisor starts it
// (agent/include/octet/agent/job_supervisor.h):
//
//   octet worker --job inference|training --model DIR --world-size N --rank R
//                --rendezvous HOST:PORT --transport shm|tcp|verbs
//                --algo auto|oneshot|ring|nccl [--port P] [--threads T] [extra...]
//
// This file only dispatches on --job; each kind's worker lives with its
// command (training: cmd_train.cpp).
#include <iostream>
#include <string>
#include <vector>

#include "command.h"

namespace octet::cli {

int RunWorker(const std::vector<std::string>& args) {
  std::string job;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--job") job = args[i + 1];
  }
  if (job.empty()) {
    for (const auto& a : args) {
      if (a == "--help" || a == "-h") {
        std::cout << "usage: octet worker --job inference|training --model DIR --world-size N "
                     "--rank R --rendezvous HOST:PORT --transport shm|tcp|verbs --algo "
                     "auto|oneshot|ring|nccl [--port P] [--threads T] [extra...]\n\n"
                     "One rank of a job, as octet-agent starts it. --job training: the extra "
                     "flags are `octet train` flags (see `octet train --help`); --model is the "
                     "run's folder.\n";
        return kExitOk;
      }
    }
    std::cerr << "octet worker: --job inference|training is required\n";
    return kExitUsage;
  }
  if (job == "training") return RunTrainingWorker(args);
  if (job == "inference") {
    std::cerr << "octet worker: --job inference is not available in this build yet: it waits "
                 "for tensor-parallel serving (issue 6)\n";
    return kExitUnavailable;
  }
  std::cerr << "octet worker: unknown --job '" << job << "' (inference or training)\n";
  return kExitUsage;
}

}  // namespace octet::cli
