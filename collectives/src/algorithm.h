// The algorithm interface: how a collective is split into transport steps.
// Algorithms see only the Transport interface, so every algorithm runs on
// every transport (the conformance test runs the full product).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "octet/base/status.h"
#include "octet/collectives/types.h"
#include "transport.h"

namespace octet::collectives {

// One collective call as the caller made it.
//  all_reduce:     in, out: count elements
//  all_gather:     in: count; out: size * count (rank r's at r * count)
//  reduce_scatter: in: size * count; out: count (block `rank`, summed)
//  broadcast:      out: count bytes (dtype ignored), root's copied to all
//  barrier:        nothing
struct CollectiveArgs {
  CollectiveOp op = CollectiveOp::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  int root = 0;
  size_t elem_bytes() const { return op == CollectiveOp::kBroadcast ? 1 : DTypeSize(dtype); }
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual AlgorithmKind kind() const = 0;
  // Every op is supported on every transport and world size; a caller may
  // still prefer another algorithm by size (see Communicator::AlgorithmFor).
  virtual Status Run(const CollectiveArgs& args, Transport& transport, Waiter& w) = 0;
};

std::unique_ptr<Algorithm> MakeOneShot();
std::unique_ptr<Algorithm> MakeRing();

// The byte range [begin, end) of ring chunk i when `count` elements are split
// into n nearly equal chunks (sizes differ by at most one element).
inline size_t RingChunkBegin(size_t count, int n, int i) {
  return count * static_cast<size_t>(i) / static_cast<size_t>(n);  // count < 2^60
}

}  // namespace octet::collectives
