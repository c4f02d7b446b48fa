#include "octet/wire/proto_convert.h"

#include "octet/v1/jobs.pb.h"
#include "octet/v1/telemetry.pb.h"

namespace octet::wire {

void ToProto(const JobSpec& s, v1::JobSpec* p) {
  p->set_job_id(s.job_id);
  p->set_kind(s.kind == JobKind::kTraining ? v1::JOB_KIND_TRAINING
              : s.kind == JobKind::kRouter ? v1::JOB_KIND_ROUTER
                                           : v1::JOB_KIND_INFERENCE);
  p->set_model(s.model);
  p->set_world_size(s.world_size);
  p->set_rank(s.rank);
  p->set_rendezvous(s.rendezvous);
  p->set_transport(s.transport);
  p->set_algorithm(s.algorithm);
  p->set_port(s.port);
  p->set_policy(s.policy);
  for (const auto& a : s.extra_args) p->add_extra_args(a);
  p->set_threads(s.threads);
  p->set_deployment(s.deployment);
  p->set_instance(s.instance);
}

JobSpec FromProto(const v1::JobSpec& p) {
  JobSpec s;
  s.job_id = p.job_id();
  switch (p.kind()) {
    case v1::JOB_KIND_TRAINING:
      s.kind = JobKind::kTraining;
      break;
    case v1::JOB_KIND_ROUTER:
      s.kind = JobKind::kRouter;
      break;
    default:
      s.kind = JobKind::kInference;
      break;
  }
  s.model = p.model();
  if (p.world_size()) s.world_size = p.world_size();
  s.rank = p.rank();
  s.rendezvous = p.rendezvous();
  if (!p.transport().empty()) s.transport = p.transport();
  if (!p.algorithm().empty()) s.algorithm = p.algorithm();
  s.port = p.port();
  s.policy = p.policy();
  s.extra_args.assign(p.extra_args().begin(), p.extra_args().end());
  s.threads = p.threads();
  s.deployment = p.deployment();
  s.instance = p.instance();
  return s;
}

void ToProto(const WorkerFigures& w, v1::WorkerFigures* p) {
  p->set_job_id(w.job_id);
  p->set_rank(w.rank);
  p->set_kind(w.kind);
  p->set_state(w.state);
  p->set_prefill_tps(w.prefill_tps);
  p->set_decode_tps(w.decode_tps);
  p->set_step_ms(w.step_ms);
  p->set_allreduce_share(w.allreduce_share);
  p->set_kv_used_fraction(w.kv_used_fraction);
  p->set_running_requests(w.running_requests);
  p->set_queued_requests(w.queued_requests);
  p->set_train_loss(w.train_loss);
  p->set_train_tps(w.train_tps);
  p->set_train_step(w.train_step);
  p->set_memory_bytes(w.memory_bytes);
  p->set_spec_drafted_tokens(w.spec_drafted_tokens);
  p->set_spec_accepted_tokens(w.spec_accepted_tokens);
  p->set_backend(w.backend);
}

WorkerFigures FromProto(const v1::WorkerFigures& p) {
  WorkerFigures f;
  f.job_id = p.job_id();
  f.rank = p.rank();
  f.kind = p.kind();
  f.state = p.state();
  f.prefill_tps = p.prefill_tps();
  f.decode_tps = p.decode_tps();
  f.step_ms = p.step_ms();
  f.allreduce_share = p.allreduce_share();
  f.kv_used_fraction = p.kv_used_fraction();
  f.running_requests = p.running_requests();
  f.queued_requests = p.queued_requests();
  f.train_loss = p.train_loss();
  f.train_tps = p.train_tps();
  f.train_step = p.train_step();
  f.memory_bytes = p.memory_bytes();
  f.spec_drafted_tokens = p.spec_drafted_tokens();
  f.spec_accepted_tokens = p.spec_accepted_tokens();
  f.backend = p.backend();
  return f;
}

}  // namespace octet::wire
