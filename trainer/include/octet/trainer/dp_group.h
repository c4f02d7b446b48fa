// A data-parallel group: the trainer's two GradientCollective channels over
// one octet::collectives::Communicator and its Duplicate().
//
//   auto group = DataParallelGroup::Join("10.0.0.1:29500", world, rank, options);
//   Trainer::Create(train_options, backend, (*group)->main(), (*group)->background());
//
// `main` is the communicator the training loop's own thread uses (loss and
// validation sums, the final barrier); `background` is a duplicate used only
// by the GradientBucketer's thread for the gradient buckets, so the two
// threads never issue collectives on one communicator at the same time
// (a Communicator runs one operation at a time).
//
// Join is collective: every rank calls it with the same rendezvous, world
// size and options. Failures after start are fail-stop: a rank that dies or
// stays silent longer than options.peer_timeout_ms fails the current call on
// every other rank with an error naming it ("rank 3 ...").
#pragma once

#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/collectives/communicator.h"
#include "octet/trainer/grad_sync.h"

namespace octet::trainer {

// GradientCollective over a Communicator (not owned): f32 sum all-reduce in
// place, barrier.
class CommunicatorCollective final : public GradientCollective {
 public:
  explicit CommunicatorCollective(collectives::Communicator* comm) : comm_(comm) {}
  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->size(); }
  Status AllReduceSum(float* data, size_t count) override;
  Status Barrier() override;

 private:
  collectives::Communicator* comm_;
};

class DataParallelGroup {
 public:
  static Result<std::unique_ptr<DataParallelGroup>> Join(
      const std::string& rendezvous, int world_size, int rank,
      const collectives::CommunicatorOptions& options);

  GradientCollective* main() { return &main_; }
  GradientCollective* background() { return &background_; }
  const collectives::Communicator& communicator() const { return *comm_; }
  // "2 ranks over shm, auto (one-shot up to 64.0 KiB)" plus the fallback
  // reason when the transport asked for was not usable.
  std::string Describe() const;

 private:
  DataParallelGroup(std::unique_ptr<collectives::Communicator> comm,
                    std::unique_ptr<collectives::Communicator> dup);
  std::unique_ptr<collectives::Communicator> comm_;
  std::unique_ptr<collectives::Communicator> dup_;
  CommunicatorCollective main_;
  CommunicatorCollective background_;
};

}  // namespace octet::trainer
