// A job as the agents run it and the clients ask for it, and the live figures
// a running worker reports: plain copyable values, the same on both ends of
// the JobService and TelemetryService calls (proto_convert.h maps them to the
// wire messages, figures_line.h to the workers' "@octet-figures" lines).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace octet::wire {

enum class JobKind { kInference, kTraining, kRouter };
std::string_view JobKindName(JobKind kind);  // "inference", "training", "router"

struct JobSpec {
  std::string job_id;  // [A-Za-z0-9._-]{1,64}, unique on its node while kept
  JobKind kind = JobKind::kInference;
  std::string model;        // model folder (inference, training)
  uint32_t world_size = 1;  // TP degree (inference) or DP ranks (training)
  uint32_t rank = 0;
  std::string rendezvous;          // HOST:PORT of rank 0's rendezvous; rank 0 may give HOST:0
  std::string transport = "tcp";   // shm | tcp | verbs
  std::string algorithm = "auto";  // auto | oneshot | ring | nccl
  uint32_t port = 0;               // serving port (rank 0 of inference, router); 0: none
  std::string policy;              // router: policy YAML path
  std::vector<std::string> extra_args;
  uint32_t threads = 0;  // 0: the worker decides
  // `octet deploy`: the deployment and replica ("large-0") the job belongs to
  // ("" for jobs launched one by one); each [A-Za-z0-9._-]{0,64}.
  std::string deployment;
  std::string instance;

  bool operator==(const JobSpec&) const = default;
};

// A worker's live figures, as reported on its "@octet-figures" lines and
// carried by the agent's telemetry.
struct WorkerFigures {
  std::string job_id;
  uint32_t rank = 0;
  std::string kind;   // "inference", "training", "router"
  std::string state;  // "starting" until the first report, then the worker's own
  double prefill_tps = 0;
  double decode_tps = 0;
  double step_ms = 0;
  double allreduce_share = 0;  // 0..1
  double kv_used_fraction = 0;
  uint32_t running_requests = 0;
  uint32_t queued_requests = 0;
  double train_loss = 0;
  double train_tps = 0;
  uint64_t train_step = 0;
  uint64_t memory_bytes = 0;  // resident memory of the process (from /proc)
  // The kernel backend the rank computes with ("avx512", "neon", "cuda", ...),
  // once its model is loaded; "" before, or from a worker that does not say.
  std::string backend;
  // Speculative decoding: draft tokens proposed and kept, since the start.
  uint64_t spec_drafted_tokens = 0;
  uint64_t spec_accepted_tokens = 0;

  bool operator==(const WorkerFigures&) const = default;
};

}  // namespace octet::wire
