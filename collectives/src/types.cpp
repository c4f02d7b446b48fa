#include "octet/collectives/types.h"

#include <string>

namespace octet::collectives {

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view t) {
  if (t == "f32" || t == "float32" || t == "float") return DType::kF32;
  if (t == "bf16" || t == "bfloat16") return DType::kBF16;
  if (t == "f16" || t == "float16" || t == "half") return DType::kF16;
  return InvalidArgumentError("unknown dtype '" + std::string(t) + "' (f32, bf16 or f16)");
}

std::string_view TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto: return "auto";
    case TransportKind::kShm: return "shm";
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kVerbs: return "verbs";
    case TransportKind::kNccl: return "nccl";
  }
  return "?";
}

Result<TransportKind> ParseTransport(std::string_view t) {
  for (TransportKind k : {TransportKind::kAuto, TransportKind::kShm, TransportKind::kTcp,
                          TransportKind::kVerbs, TransportKind::kNccl}) {
    if (t == TransportName(k)) return k;
  }
  return InvalidArgumentError("unknown transport '" + std::string(t) +
                              "' (auto, shm, tcp, verbs or nccl)");
}

std::string_view AlgorithmName(AlgorithmKind kind) {
  switch (kind) {
    case AlgorithmKind::kAuto: return "auto";
    case AlgorithmKind::kOneShot: return "oneshot";
    case AlgorithmKind::kRing: return "ring";
  }
  return "?";
}

Result<AlgorithmKind> ParseAlgorithm(std::string_view t) {
  if (t == "auto") return AlgorithmKind::kAuto;
  if (t == "oneshot" || t == "one-shot" || t == "one_shot") return AlgorithmKind::kOneShot;
  if (t == "ring") return AlgorithmKind::kRing;
  return InvalidArgumentError("unknown algorithm '" + std::string(t) + "' (auto, oneshot or ring)");
}

std::string_view OpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
    case CollectiveOp::kSendRecv: return "send_recv";
  }
  return "?";
}

Result<CollectiveOp> ParseOp(std::string_view t) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                          CollectiveOp::kReduceScatter, CollectiveOp::kBroadcast,
                          CollectiveOp::kBarrier, CollectiveOp::kSendRecv}) {
    if (t == OpName(op)) return op;
  }
  return InvalidArgumentError("unknown op '" + std::string(t) +
                              "' (all_reduce, all_gather, reduce_scatter, broadcast, barrier)");
}

}  // namespace octet::collectives
