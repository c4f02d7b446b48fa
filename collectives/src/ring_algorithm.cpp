// Ring: reduce-scatter then all-gather around the ring r -> r+1, with every
// step a pipelined SendRecv that reduces (or copies) each piece as it lands.
// All-reduce sends 2(n-1)/n of the message per rank, so it wins for large
// messages; each element is summed on one rank and then copied, so results
// are bit-identical everywhere.
#include <algorithm>
#include <cstring>

#include "algorithm.h"
#include "reduce.h"

namespace octet::collectives {

namespace {

class RingAlgorithm final : public Algorithm {
 public:
  AlgorithmKind kind() const override { return AlgorithmKind::kRing; }

  Status Run(const CollectiveArgs& a, Transport& t, Waiter& w) override {
    switch (a.op) {
      case CollectiveOp::kAllReduce: return AllReduce(a, t, w);
      case CollectiveOp::kAllGather: return AllGather(a, t, w);
      case CollectiveOp::kReduceScatter: return ReduceScatter(a, t, w);
      case CollectiveOp::kBroadcast: return Broadcast(a, t, w);
      case CollectiveOp::kBarrier:
      case CollectiveOp::kSendRecv: break;
    }
    return InvalidArgumentError("ring does not run " + std::string(OpName(a.op)));
  }

 private:
  Status AllReduce(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const int n = t.size(), r = t.rank();
    const size_t elem = a.elem_bytes();
    const auto* in = static_cast<const uint8_t*>(a.in);
    auto* out = static_cast<uint8_t*>(a.out);
    if (n == 1) {
      if (a.out != a.in) std::memcpy(out, in, a.count * elem);
      return Status::Ok();
    }
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    auto begin = [&](int i) { return RingChunkBegin(a.count, n, i) * elem; };
    auto bytes = [&](int i) { return begin(i + 1) - begin(i); };
    // Reduce-scatter: after step s, rank r holds s+2 contributions of chunk
    // r-s-1; after n-1 steps it holds the full sum of chunk r+1. Each chunk
    // of `out` is first written as in + received, so out needs no initial
    // copy of in (chunk r, never received here, arrives in the all-gather).
    for (int s = 0; s < n - 1; ++s) {
      const int send = (r - s + 2 * n) % n;
      const int recv = (r - s - 1 + 2 * n) % n;
      uint8_t* acc = out + begin(recv);
      const uint8_t* mine = in + begin(recv);
      const uint8_t* src = s == 0 ? in + begin(send) : out + begin(send);
      OCTET_RETURN_IF_ERROR(t.SendRecv(
          right, src, bytes(send), left, bytes(recv),
          [&](size_t off, const uint8_t* data, size_t len) {
            ReduceSum2(a.dtype, acc + off, mine + off, data, len / elem);
            return Status::Ok();
          },
          w));
    }
    // All-gather the finished chunks.
    for (int s = 0; s < n - 1; ++s) {
      const int send = (r + 1 - s + 2 * n) % n;
      const int recv = (r - s + 2 * n) % n;
      uint8_t* dst = out + begin(recv);
      OCTET_RETURN_IF_ERROR(t.SendRecv(
          right, out + begin(send), bytes(send), left, bytes(recv),
          [&](size_t off, const uint8_t* data, size_t len) {
            if (len) std::memcpy(dst + off, data, len);
            return Status::Ok();
          },
          w));
    }
    return Status::Ok();
  }

  Status AllGather(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const int n = t.size(), r = t.rank();
    const size_t block = a.count * a.elem_bytes();
    auto* out = static_cast<uint8_t*>(a.out);
    if (out + r * block != a.in) std::memmove(out + r * block, a.in, block);
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int s = 0; s < n - 1; ++s) {
      const int send = (r - s + n) % n;
      const int recv = (r - s - 1 + n) % n;
      uint8_t* dst = out + recv * block;
      OCTET_RETURN_IF_ERROR(t.SendRecv(
          right, out + send * block, block, left, block,
          [&](size_t off, const uint8_t* data, size_t len) {
            if (len) std::memcpy(dst + off, data, len);
            return Status::Ok();
          },
          w));
    }
    return Status::Ok();
  }

  Status ReduceScatter(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const int n = t.size(), r = t.rank();
    const size_t elem = a.elem_bytes();
    const size_t block = a.count * elem;
    const auto* in = static_cast<const uint8_t*>(a.in);
    auto* out = static_cast<uint8_t*>(a.out);
    if (n == 1) {
      if (out != in) std::memmove(out, in, block);
      return Status::Ok();
    }
    scratch_.resize(2 * block);
    uint8_t* acc = scratch_.data();          // partial sum sent this step
    uint8_t* next = scratch_.data() + block;  // partial sum received this step
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    // Step s sends the partial sum of block r-s-1 and receives that of block
    // r-s-2, adding this rank's input; the last step lands block r in out.
    for (int s = 0; s < n - 1; ++s) {
      const int send = (r - s - 1 + 2 * n) % n;
      const int recv = (r - s - 2 + 2 * n) % n;
      const uint8_t* src = s == 0 ? in + send * block : acc;
      uint8_t* dst = s == n - 2 ? out : next;
      const uint8_t* mine = in + recv * block;
      OCTET_RETURN_IF_ERROR(t.SendRecv(
          right, src, block, left, block,
          [&](size_t off, const uint8_t* data, size_t len) {
            ReduceSum2(a.dtype, dst + off, mine + off, data, len / elem);
            return Status::Ok();
          },
          w));
      std::swap(acc, next);
    }
    return Status::Ok();
  }

  // A pipelined chain root -> root+1 -> ...: each rank receives piece k from
  // its predecessor while forwarding piece k-1 to its successor.
  Status Broadcast(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const int n = t.size(), r = t.rank();
    if (n == 1 || a.count == 0) return Status::Ok();
    auto* data = static_cast<uint8_t*>(a.out);
    const int pos = (r - a.root + n) % n;
    const int prev = pos == 0 ? -1 : (r + n - 1) % n;
    const int next = pos == n - 1 ? -1 : (r + 1) % n;
    const size_t piece = std::max<size_t>(64 << 10, a.count / 16 + 1);
    const size_t pieces = (a.count + piece - 1) / piece;
    auto piece_bytes = [&](size_t k) { return std::min(piece, a.count - k * piece); };
    // Iteration k: receive piece k (k < pieces) and forward piece k-1 (k >= 1).
    // The root has everything and sends piece k at iteration k.
    for (size_t k = 0; k <= pieces; ++k) {
      int send_peer = -1, recv_peer = -1;
      size_t send_k = 0;
      if (prev < 0) {
        if (k < pieces) send_peer = next, send_k = k;
      } else {
        if (k < pieces) recv_peer = prev;
        if (k >= 1 && next >= 0) send_peer = next, send_k = k - 1;
      }
      if (send_peer < 0 && recv_peer < 0) continue;
      uint8_t* dst = data + k * piece;
      OCTET_RETURN_IF_ERROR(t.SendRecv(
          send_peer, data + send_k * piece, send_peer < 0 ? 0 : piece_bytes(send_k), recv_peer,
          recv_peer < 0 ? 0 : piece_bytes(k),
          [&](size_t off, const uint8_t* d, size_t len) {
            if (len) std::memcpy(dst + off, d, len);
            return Status::Ok();
          },
          w));
    }
    return Status::Ok();
  }

  std::vector<uint8_t> scratch_;
};

}  // namespace

std::unique_ptr<Algorithm> MakeRing() { return std::make_unique<RingAlgorithm>(); }

}  // namespace octet::collectives
