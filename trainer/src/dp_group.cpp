#include "octet/trainer/dp_group.h"

namespace octet::trainer {

Status CommunicatorCollective::AllReduceSum(float* data, size_t count) {
  return comm_->AllReduce(data, count, collectives::DType::kF32);
}

Status CommunicatorCollective::Barrier() { return comm_->Barrier(); }

DataParallelGroup::DataParallelGroup(std::unique_ptr<collectives::Communicator> comm,
                                     std::unique_ptr<collectives::Communicator> dup)
    : comm_(std::move(comm)), dup_(std::move(dup)), main_(comm_.get()), background_(dup_.get()) {}

Result<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Join(
    const std::string& rendezvous, int world_size, int rank,
    const collectives::CommunicatorOptions& options) {
  OCTET_ASSIGN_OR_RETURN(auto comm,
                         collectives::Communicator::Create(rendezvous, world_size, rank, options));
  OCTET_ASSIGN_OR_RETURN(auto dup, comm->Duplicate());
  return std::unique_ptr<DataParallelGroup>(new DataParallelGroup(std::move(comm), std::move(dup)));
}

std::string DataParallelGroup::Describe() const {
  std::string s = comm_->Describe();
  if (!comm_->fallback_reason().empty()) s += " (" + comm_->fallback_reason() + ")";
  return s;
}

}  // namespace octet::trainer
