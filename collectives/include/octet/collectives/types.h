// Element types, operations, transports and algorithms of Octet's collectives,
// with their names as they appear on the command line and in logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "octet/base/status.h"

namespace octet::collectives {

// Element types a reduction understands. bf16 and f16 are stored as raw
// uint16_t bits; reductions accumulate them in f32 and round once (to nearest
// even) when a result is stored.
enum class DType { kF32, kBF16, kF16 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "f32", "bf16", "f16"
Result<DType> ParseDType(std::string_view text);

// How bytes move between ranks. kAuto: shared memory when every rank is on one
// host, otherwise RDMA verbs when every rank has a device, otherwise TCP.
// kNccl is NCCL as a whole backend (GPU buffers staged from the host).
enum class TransportKind { kAuto, kShm, kTcp, kVerbs, kNccl };

std::string_view TransportName(TransportKind kind);  // "auto", "shm", "tcp", "verbs", "nccl"
Result<TransportKind> ParseTransport(std::string_view text);

// How a collective is split into steps.
//  kOneShot: every rank writes its whole input to every peer in one step, then
//            each rank reduces all n inputs locally in rank order (RoCEnante):
//            one network latency, (n-1)*S bytes out per rank. Results are
//            bit-identical on every rank.
//  kRing:    reduce-scatter then all-gather around a ring: 2(n-1) steps,
//            2(n-1)/n * S bytes out per rank. Results are bit-identical on
//            every rank (each element is reduced on one rank, then copied).
//  kAuto:    one-shot or ring per power-of-two size band, from a table all
//            ranks agree on at start-up (Communicator::algorithm_bands()), so
//            every rank picks the same.
enum class AlgorithmKind { kAuto, kOneShot, kRing };

std::string_view AlgorithmName(AlgorithmKind kind);  // "auto", "oneshot", "ring"
Result<AlgorithmKind> ParseAlgorithm(std::string_view text);

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kBarrier, kSendRecv };

std::string_view OpName(CollectiveOp op);  // "all_reduce", "all_gather", ...
Result<CollectiveOp> ParseOp(std::string_view text);

}  // namespace octet::collectives
