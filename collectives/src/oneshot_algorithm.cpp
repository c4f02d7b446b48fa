// One-shot ("RoCEnante"): every rank contributes its whole input to one
// transport step; each rank then reduces (or copies) all n contributions
// locally in rank order 0..n-1, so every rank computes bit-identical sums.
// Messages larger than the transport's slot are split into several steps.
#include <algorithm>
#include <cstring>

#include "algorithm.h"
#include "reduce.h"

namespace octet::collectives {

namespace {

// The piece size of ReduceAsItLands: well inside L2 with n inputs and the
// output, large enough that a piece costs far more than its wait check.
constexpr size_t kReducePieceBytes = 128 << 10;

class OneShotAlgorithm final : public Algorithm {
 public:
  AlgorithmKind kind() const override { return AlgorithmKind::kOneShot; }

  Status Run(const CollectiveArgs& a, Transport& t, Waiter& w) override {
    const int n = t.size();
    ptrs_.assign(n, nullptr);
    switch (a.op) {
      case CollectiveOp::kAllReduce: return AllReduce(a, t, w);
      case CollectiveOp::kAllGather: return AllGather(a, t, w);
      case CollectiveOp::kReduceScatter: return ReduceScatter(a, t, w);
      case CollectiveOp::kBroadcast: return Broadcast(a, t, w);
      case CollectiveOp::kBarrier: return Step(t, w, PublishSpec{nullptr, 0, 0, 0, false}, 0);
      case CollectiveOp::kSendRecv: break;
    }
    return InvalidArgumentError("one-shot does not run " + std::string(OpName(a.op)));
  }

 private:
  // One step: contribute `spec`, wait for every peer's contribution of
  // `expect(p)` bytes, leaving their addresses in ptrs_.
  template <typename Expect>
  Status StepWith(Transport& t, Waiter& w, const PublishSpec& spec, Expect expect) {
    const uint64_t seq = t.NextSeq();
    OCTET_RETURN_IF_ERROR(t.Publish(seq, spec, w));
    for (int p = 0; p < t.size(); ++p) {
      // Start with the next rank so ranks do not all wait on rank 0 first.
      const int peer = (t.rank() + 1 + p) % t.size();
      auto r = t.WaitPublished(peer, seq, expect(peer), w);
      if (!r.ok()) return r.status();
      ptrs_[peer] = *r;
    }
    return t.FinishPublish(seq, w);
  }
  Status Step(Transport& t, Waiter& w, const PublishSpec& spec, size_t bytes) {
    return StepWith(t, w, spec, [bytes](int) { return bytes; });
  }

  size_t ElemsPerStep(const Transport& t, size_t elem, int blocks) const {
    return std::max<size_t>(1, t.slot_bytes() / (elem * static_cast<size_t>(blocks)));
  }

  Status AllReduce(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const size_t elem = a.elem_bytes();
    const size_t step = ElemsPerStep(t, elem, 1);
    const auto* in = static_cast<const uint8_t*>(a.in);
    auto* out = static_cast<uint8_t*>(a.out);
    for (size_t off = 0; off < a.count; off += step) {
      const size_t m = std::min(step, a.count - off);
      const PublishSpec spec{in + off * elem, m * elem, 0, 1, false};
      if (t.lands_in_pieces() && m * elem >= 2 * kReducePieceBytes) {
        OCTET_RETURN_IF_ERROR(ReduceAsItLands(a, t, w, spec, out + off * elem, m));
        continue;
      }
      OCTET_RETURN_IF_ERROR(Step(t, w, spec, m * elem));
      ReduceSum(a.dtype, out + off * elem, reinterpret_cast<const void* const*>(ptrs_.data()),
                t.size(), m);
    }
    return Status::Ok();
  }

  // One all-reduce step of `m` elements where contributions land in pieces
  // (TCP): each piece of kReducePieceBytes is summed as soon as every rank's
  // part of it is there, while the kernel is still delivering the rest, and
  // out of cache instead of after the whole step has pushed it out. 2 ranks
  // over TCP, 1 MiB: the whole step first lost to ring by 3-12%. Every
  // element is still summed in rank order 0..n-1, so results stay
  // bit-identical on every rank.
  Status ReduceAsItLands(const CollectiveArgs& a, Transport& t, Waiter& w, const PublishSpec& spec,
                         uint8_t* out, size_t m) {
    const size_t elem = a.elem_bytes(), bytes = m * elem;
    const int n = t.size();
    const uint64_t seq = t.NextSeq();
    OCTET_RETURN_IF_ERROR(t.Publish(seq, spec, w));
    const size_t piece = std::max<size_t>(1, kReducePieceBytes / elem);
    for (size_t done = 0; done < m; done += piece) {
      const size_t k = std::min(piece, m - done);
      const size_t end = (done + k) * elem;
      for (int p = 0; p < n; ++p) {
        const int peer = (t.rank() + 1 + p) % n;
        auto r = t.WaitPublishedPrefix(peer, seq, bytes, end, w);
        if (!r.ok()) return r.status();
        ptrs_[peer] = *r + done * elem;
      }
      // In place, this piece of our input must have left before it is
      // overwritten with the sum.
      OCTET_RETURN_IF_ERROR(t.FinishPublishPrefix(seq, end, w));
      ReduceSum(a.dtype, out + done * elem, reinterpret_cast<const void* const*>(ptrs_.data()), n,
                k);
    }
    return t.FinishPublish(seq, w);
  }

  Status AllGather(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const size_t elem = a.elem_bytes();
    const size_t step = ElemsPerStep(t, elem, 1);
    const auto* in = static_cast<const uint8_t*>(a.in);
    auto* out = static_cast<uint8_t*>(a.out);
    for (size_t off = 0; off < a.count; off += step) {
      const size_t m = std::min(step, a.count - off);
      OCTET_RETURN_IF_ERROR(Step(t, w, PublishSpec{in + off * elem, m * elem, 0, 1, false}, m * elem));
      for (int p = 0; p < t.size(); ++p) {
        uint8_t* dst = out + (static_cast<size_t>(p) * a.count + off) * elem;
        if (dst != ptrs_[p]) std::memmove(dst, ptrs_[p], m * elem);
      }
    }
    return Status::Ok();
  }

  Status ReduceScatter(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const size_t elem = a.elem_bytes();
    const size_t step = ElemsPerStep(t, elem, t.size());
    const auto* in = static_cast<const uint8_t*>(a.in);
    auto* out = static_cast<uint8_t*>(a.out);
    for (size_t off = 0; off < a.count; off += step) {
      const size_t m = std::min(step, a.count - off);
      const PublishSpec spec{in + off * elem, m * elem, a.count * elem, t.size(), true};
      OCTET_RETURN_IF_ERROR(Step(t, w, spec, m * elem));
      ReduceSum(a.dtype, out + off * elem, reinterpret_cast<const void* const*>(ptrs_.data()),
                t.size(), m);
    }
    return Status::Ok();
  }

  Status Broadcast(const CollectiveArgs& a, Transport& t, Waiter& w) {
    const size_t step = t.slot_bytes();
    auto* data = static_cast<uint8_t*>(a.out);
    const bool root = t.rank() == a.root;
    for (size_t off = 0; off < a.count; off += step) {
      const size_t m = std::min(step, a.count - off);
      // Non-roots contribute zero bytes: they take part so that the
      // one-step-ahead invariant holds (see transport.h).
      const PublishSpec spec = root ? PublishSpec{data + off, m, 0, 1, false}
                                    : PublishSpec{nullptr, 0, 0, 0, false};
      OCTET_RETURN_IF_ERROR(StepWith(t, w, spec, [&](int p) { return p == a.root ? m : 0; }));
      if (!root) std::memcpy(data + off, ptrs_[a.root], m);
    }
    return Status::Ok();
  }

  std::vector<const uint8_t*> ptrs_;
};

}  // namespace

std::unique_ptr<Algorithm> MakeOneShot() { return std::make_unique<OneShotAlgorithm>(); }

}  // namespace octet::collectives
