#include "octet/engine/tp_runtime.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/log.h"
#include "octet/engine/tensor_parallel.h"

namespace octet::engine {

using collectives::Communicator;
using CommType = collectives::DType;

// ---- step plans ---------------------------------------------------------------
//
// Every leader call is one plan: a fixed 32-byte header broadcast from rank 0,
// then (when payload_bytes > 0) the payload broadcast. Integers little-endian
// as the host stores them (every rank of a group runs the same build).

enum class TpRuntime::PlanOp : uint32_t {
  kStep = 1,
  kReset = 2,
  kIdle = 3,
  kShutdown = 4,
  kMtpDraft = 5,
  kCopySlot = 6
};

namespace {

constexpr uint32_t kPlanMagic = 0x5054434f;  // "OCTP"
constexpr size_t kStatusBytes = 480;          // per-rank load status text in the start-up exchange
constexpr int64_t kIdleIntervalNs = 500'000'000;

struct PlanHeader {
  uint32_t magic = kPlanMagic;
  uint32_t op = 0;
  uint64_t seq = 0;
  uint64_t payload_bytes = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(PlanHeader) == 32);

class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void PutInts(const std::vector<int32_t>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(int32_t));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > b_.size()) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetInts(size_t n, std::vector<int32_t>* v) {
    if (pos_ + n * sizeof(int32_t) > b_.size()) return false;
    v->resize(n);
    std::memcpy(v->data(), b_.data() + pos_, n * sizeof(int32_t));
    pos_ += n * sizeof(int32_t);
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

std::vector<uint8_t> EncodeBatch(const std::vector<SequenceChunk>& batch) {
  Writer w;
  w.Put(static_cast<uint32_t>(batch.size()));
  for (const SequenceChunk& c : batch) {
    w.Put(static_cast<int32_t>(c.slot));
    w.Put(static_cast<int64_t>(c.start_pos));
    w.Put(static_cast<uint32_t>(c.tokens.size()));
    w.Put(static_cast<uint8_t>((c.all_logits ? 1 : 0) | (c.verify ? 2 : 0)));
    w.PutInts(c.tokens);
  }
  return std::move(w.bytes);
}

Status DecodeBatch(const std::vector<uint8_t>& bytes, std::vector<SequenceChunk>* batch) {
  Reader r(bytes);
  uint32_t n = 0;
  if (!r.Get(&n)) return DataLossError("step plan: truncated batch header");
  batch->resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    SequenceChunk& c = (*batch)[i];
    int32_t slot = 0;
    int64_t start = 0;
    uint32_t tokens = 0;
    uint8_t flags = 0;  // 1: all_logits, 2: verify
    if (!r.Get(&slot) || !r.Get(&start) || !r.Get(&tokens) || !r.Get(&flags) ||
        !r.GetInts(tokens, &c.tokens)) {
      return DataLossError("step plan: truncated sequence " + std::to_string(i));
    }
    c.slot = slot;
    c.start_pos = start;
    if (flags > 3) {
      return DataLossError("step plan: sequence " + std::to_string(i) + " has unknown flags " +
                           std::to_string(flags));
    }
    c.all_logits = (flags & 1) != 0;
    c.verify = (flags & 2) != 0;
  }
  if (!r.done()) return DataLossError("step plan: trailing bytes");
  return Status::Ok();
}

// An MTP draft call: chunk, slot, start position, k, whether rank 0 keeps
// the logits of every fed row (every rank then gathers them all), and the
// fed tokens.
// An MTP draft call: its requests, and whether rank 0 asked for the logits
// (every rank then gathers them the same way).
struct MtpPlan {
  uint8_t all_logits = 0;
  std::vector<MtpDraftRequest> requests;
};

std::vector<uint8_t> EncodeMtp(const MtpPlan& p) {
  Writer w;
  w.Put(p.all_logits);
  w.Put(static_cast<uint32_t>(p.requests.size()));
  for (const MtpDraftRequest& q : p.requests) {
    w.Put(static_cast<uint32_t>(q.chunk));
    w.Put(static_cast<int32_t>(q.slot));
    w.Put(static_cast<int64_t>(q.start_pos));
    w.Put(static_cast<int32_t>(q.k));
    w.Put(static_cast<uint32_t>(q.next.size()));
    w.PutInts(q.next);
  }
  return std::move(w.bytes);
}

Status DecodeMtp(const std::vector<uint8_t>& bytes, MtpPlan* p) {
  Reader r(bytes);
  uint32_t count = 0;
  bool ok = r.Get(&p->all_logits) && r.Get(&count) && count <= bytes.size();
  p->requests.clear();
  for (uint32_t i = 0; ok && i < count; ++i) {
    MtpDraftRequest q;
    uint32_t chunk = 0, n = 0;
    int32_t slot = 0, k = 0;
    int64_t start_pos = 0;
    ok = r.Get(&chunk) && r.Get(&slot) && r.Get(&start_pos) && r.Get(&k) && r.Get(&n) &&
         r.GetInts(n, &q.next);
    q.chunk = chunk;
    q.slot = slot;
    q.start_pos = start_pos;
    q.k = k;
    p->requests.push_back(std::move(q));
  }
  if (!ok || !r.done()) return DataLossError("MTP draft plan from rank 0 is malformed");
  return Status::Ok();
}

}  // namespace

// ---- start-up -------------------------------------------------------------------

Result<std::unique_ptr<TpRuntime>> TpRuntime::Create(const std::string& model_dir,
                                                     const TpRuntimeOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgumentError("rank " + std::to_string(o.rank) + " of world size " +
                                std::to_string(o.world_size) + " is out of range");
  }
  std::unique_ptr<TpRuntime> rt(new TpRuntime());
  rt->rank_ = o.rank;
  rt->world_ = o.world_size;

  // Load this rank's shard first (it may take long), then join: the
  // communicator's connect timeout covers ranks that load slowly, and a rank
  // that failed still joins to tell the others why.
  Status load_status;
  {
    LoadOptions lo = o.load;
    auto config = LoadModelConfig(model_dir);
    if (!config.ok()) {
      load_status = config.status();
    } else {
      const TpModelShape shape = TpModelShape::From(*config);
      load_status = CheckTpDegree(shape, o.world_size);
      if (load_status.ok()) {
        if (o.world_size > 1) lo.shard = MakeShardFunction(shape, o.world_size, o.rank);
        lo.tp_ranks = o.world_size;
        auto m = Model::Load(model_dir, lo);
        if (m.ok()) {
          rt->model_ = std::move(*m);
        } else {
          load_status = m.status();
        }
      }
    }
  }
  if (o.world_size == 1) {
    if (!load_status.ok()) return load_status;
    return rt;
  }

  auto comm = Communicator::Create(o.rendezvous, o.world_size, o.rank, o.comm);
  if (!comm.ok()) {
    if (!load_status.ok()) return load_status;  // the likelier cause, and ours
    return comm.status().WithContext("joining the TP group at " + o.rendezvous);
  }
  rt->comm_ = std::move(*comm);

  // Every rank learns whether every rank loaded.
  std::vector<char> mine(kStatusBytes, 0), all(kStatusBytes * o.world_size, 0);
  if (!load_status.ok()) {
    const std::string msg = load_status.message().empty() ? "load failed" : load_status.message();
    std::memcpy(mine.data(), msg.data(), std::min(msg.size(), kStatusBytes - 1));
  }
  OCTET_RETURN_IF_ERROR(
      rt->comm_->AllGather(mine.data(), all.data(), kStatusBytes / 4, CommType::kF32));
  for (int r = 0; r < o.world_size; ++r) {
    const char* text = all.data() + r * kStatusBytes;
    if (text[0] != 0) {
      const std::string msg(text, strnlen(text, kStatusBytes));
      if (r == o.rank) return load_status;
      return UnavailableError("rank " + std::to_string(r) + " could not load its shard: " + msg);
    }
  }

  ForwardHooks& h = rt->hooks_;
  TpRuntime* self = rt.get();
  kernels::KernelBackend* be = &rt->model_->backend();
  const bool device = be->memory_kind() == kernels::MemoryKind::kDevice;
  if (device && o.rank == 0) {
    OCTET_LOG(INFO) << "TP " << o.world_size << " on the " << be->name()
                    << " backend: each all-reduce copies its partial sums to host memory for "
                    << rt->comm_->Describe() << " and the sums back";
  }
  h.all_reduce = [self, device, be](float* data, int64_t n) -> Status {
    const int64_t t0 = NowNs();
    Status s;
    if (device) {
      // CopyToHost waits for the ops that wrote `data`; the copy back is
      // queued before any later op that reads it.
      const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
      self->reduce_host_.resize(static_cast<size_t>(n));
      be->CopyToHost(self->reduce_host_.data(), data, bytes);
      s = self->comm_->AllReduce(self->reduce_host_.data(), static_cast<size_t>(n), CommType::kF32);
      if (s.ok()) be->CopyToDevice(data, self->reduce_host_.data(), bytes);
    } else {
      s = self->comm_->AllReduce(data, static_cast<size_t>(n), CommType::kF32);
    }
    const int64_t dt = NowNs() - t0;
    MutexLock lock(self->mu_);
    self->stats_.allreduce_ns += dt;
    self->stats_.allreduce_calls += 1;
    return s;
  };
  h.gather_logits = [self, device, be](const float* local, int64_t rows, int64_t local_vocab,
                                       float* full) -> Status {
    if (device) {
      self->logits_host_.resize(static_cast<size_t>(rows * local_vocab));
      be->CopyToHost(self->logits_host_.data(), local,
                     rows * local_vocab * static_cast<int64_t>(sizeof(float)));
      local = self->logits_host_.data();
    }
    const int64_t vocab = self->model_->config().vocab_size;
    const int world = self->world_;
    const int64_t padded = VocabShard(vocab, world, 0).padded;
    // [rows, padded] blocks (padding zeros), gathered rank by rank.
    self->gather_in_.assign(static_cast<size_t>(rows * padded), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(self->gather_in_.data() + r * padded, local + r * local_vocab,
                  static_cast<size_t>(local_vocab) * sizeof(float));
    }
    self->gather_out_.resize(static_cast<size_t>(rows * padded * world));
    OCTET_RETURN_IF_ERROR(self->comm_->AllGather(self->gather_in_.data(),
                                                 self->gather_out_.data(),
                                                 static_cast<size_t>(rows * padded), CommType::kF32));
    for (int q = 0; q < world; ++q) {
      const VocabRange v = VocabShard(vocab, world, q);
      const float* block = self->gather_out_.data() + static_cast<size_t>(q) * rows * padded;
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(full + r * vocab + v.begin, block + r * padded,
                    static_cast<size_t>(v.count) * sizeof(float));
      }
    }
    return Status::Ok();
  };
  rt->last_plan_ns_ = NowNs();
  return rt;
}

TpRuntime::~TpRuntime() {
  if (rank_ == 0 && comm_ && !shut_down_ && health().ok()) (void)Shutdown();
}

std::string TpRuntime::Describe() const {
  if (!comm_) return "1 rank";
  return comm_->Describe();
}

Status TpRuntime::health() const {
  MutexLock lock(mu_);
  return failure_;
}

RunnerStats TpRuntime::stats() const {
  MutexLock lock(mu_);
  RunnerStats s = stats_;
  if (comm_) s.comm_ns = comm_->stats().busy_ns;
  return s;
}

Status TpRuntime::Fail(Status s) {
  MutexLock lock(mu_);
  if (failure_.ok()) failure_ = s;
  return s;
}

// ---- leader -----------------------------------------------------------------------

Status TpRuntime::SendPlan(PlanOp op, const std::vector<uint8_t>& payload) {
  if (rank_ != 0) return FailedPreconditionError("only rank 0 leads a TP group");
  if (shut_down_) return FailedPreconditionError("the TP group was shut down");
  if (Status h = health(); !h.ok()) return h;
  last_plan_ns_ = NowNs();
  if (!comm_) return Status::Ok();
  PlanHeader hdr;
  hdr.op = static_cast<uint32_t>(op);
  hdr.seq = ++seq_;
  hdr.payload_bytes = payload.size();
  if (Status s = comm_->Broadcast(&hdr, sizeof hdr, 0); !s.ok()) return Fail(s);
  if (!payload.empty()) {
    if (Status s = comm_->Broadcast(const_cast<uint8_t*>(payload.data()), payload.size(), 0);
        !s.ok()) {
      return Fail(s);
    }
  }
  return Status::Ok();
}

Status TpRuntime::ResetCache(int slots, int64_t capacity, kernels::KvDtype dtype) {
  if (slots < 1 || capacity < 1) {
    return InvalidArgumentError("a KV cache needs at least one slot and one position (asked for " +
                                std::to_string(slots) + " x " + std::to_string(capacity) + ")");
  }
  Writer w;
  w.Put(static_cast<int32_t>(slots));
  w.Put(static_cast<int64_t>(capacity));
  w.Put(static_cast<int32_t>(dtype));  // followers take rank 0's cache type
  OCTET_RETURN_IF_ERROR(SendPlan(PlanOp::kReset, w.bytes));
  cache_ = KvCache();
  OCTET_ASSIGN_OR_RETURN(cache_, model_->NewKvCache(slots, capacity, dtype));
  // The MTP head's cache (when loaded) follows, on every rank.
  return model_->ResetMtpCache(slots, capacity + kMtpChainPositions, dtype);
}

Status TpRuntime::MtpDraftBatch(const std::vector<MtpDraftRequest>& requests,
                                std::vector<std::vector<int32_t>>* drafts,
                                std::vector<float>* logits) {
  MtpPlan p;
  p.all_logits = logits != nullptr ? 1 : 0;
  p.requests = requests;
  OCTET_RETURN_IF_ERROR(SendPlan(PlanOp::kMtpDraft, EncodeMtp(p)));
  Status s = model_->MtpDraftBatch(requests, drafts, logits, comm_ ? hooks_ : ForwardHooks{});
  // As for a step: a failed collective poisons the group; a rejected call
  // fails the same way on every rank before any collective.
  if (!s.ok() && comm_ && comm_->poisoned()) return Fail(comm_->health());
  return s;
}

Status TpRuntime::RunStep(const std::vector<SequenceChunk>& batch, ForwardOutput* out) {
  const int64_t t0 = NowNs();
  Status s = model_->Forward(batch, cache_, out, comm_ ? hooks_ : ForwardHooks{});
  MutexLock lock(mu_);
  stats_.steps += 1;
  stats_.step_ns += NowNs() - t0;
  return s;
}

Status TpRuntime::Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) {
  OCTET_RETURN_IF_ERROR(SendPlan(PlanOp::kStep, EncodeBatch(batch)));
  Status s = RunStep(batch, out);
  // A failed collective poisons the group; a rejected batch (validation) fails
  // the same way on every rank before any collective and leaves it usable.
  if (!s.ok() && comm_ && comm_->poisoned()) return Fail(comm_->health());
  return s;
}

Status TpRuntime::CopySlot(int src, int dst, int64_t positions) {
  // Checked before the plan goes out, so followers only see valid copies.
  OCTET_RETURN_IF_ERROR(cache_.CheckCopy(src, dst, positions));
  Writer w;
  w.Put(static_cast<int32_t>(src));
  w.Put(static_cast<int32_t>(dst));
  w.Put(static_cast<int64_t>(positions));
  OCTET_RETURN_IF_ERROR(SendPlan(PlanOp::kCopySlot, w.bytes));
  cache_.CopyPositions(src, dst, positions, model_->backend());
  return model_->CopyMtpSlot(src, dst, positions);  // the MTP head's cache, when loaded
}

Status TpRuntime::Idle() {
  if (!comm_ || NowNs() - last_plan_ns_ < kIdleIntervalNs) return Status::Ok();
  return SendPlan(PlanOp::kIdle, {});
}

Status TpRuntime::Shutdown() {
  if (rank_ != 0) return FailedPreconditionError("only rank 0 leads a TP group");
  if (shut_down_) return Status::Ok();
  Status s = SendPlan(PlanOp::kShutdown, {});
  shut_down_ = true;
  return s;
}

// ---- followers --------------------------------------------------------------------

Status TpRuntime::Follow(const std::function<bool()>& stop, int stop_grace_ms) {
  if (rank_ == 0) return FailedPreconditionError("rank 0 leads; it does not follow");
  if (!comm_) return FailedPreconditionError("a single rank has nobody to follow");
  std::vector<uint8_t> payload;
  std::vector<SequenceChunk> batch;
  ForwardOutput out;
  std::optional<Deadline> leave_at;
  uint64_t expect_seq = 1;
  for (;;) {
    if (!leave_at && stop && stop()) leave_at = Deadline::AfterMs(stop_grace_ms);
    if (leave_at && leave_at->expired()) {
      return CancelledError("stopped before rank 0 shut the group down");
    }
    PlanHeader hdr;
    if (Status s = comm_->Broadcast(&hdr, sizeof hdr, 0); !s.ok()) return Fail(s);
    if (hdr.magic != kPlanMagic || hdr.seq != expect_seq) {
      return Fail(DataLossError("step plan " + std::to_string(expect_seq) +
                                " from rank 0 is malformed (magic/sequence mismatch)"));
    }
    ++expect_seq;
    payload.resize(hdr.payload_bytes);
    if (hdr.payload_bytes > 0) {
      if (Status s = comm_->Broadcast(payload.data(), payload.size(), 0); !s.ok()) return Fail(s);
    }
    switch (static_cast<PlanOp>(hdr.op)) {
      case PlanOp::kShutdown:
        return Status::Ok();
      case PlanOp::kIdle:
        break;
      case PlanOp::kReset: {
        Reader r(payload);
        int32_t slots = 0;
        int64_t capacity = 0;
        int32_t dtype = 0;
        if (!r.Get(&slots) || !r.Get(&capacity) || !r.Get(&dtype) || slots < 1 || capacity < 1 ||
            (dtype != static_cast<int32_t>(kernels::KvDtype::kF32) &&
             dtype != static_cast<int32_t>(kernels::KvDtype::kF16))) {
          return Fail(DataLossError("malformed KV cache reset plan from rank 0"));
        }
        cache_ = KvCache();
        auto cache = model_->NewKvCache(slots, capacity, static_cast<kernels::KvDtype>(dtype));
        if (!cache.ok()) return Fail(cache.status());
        cache_ = std::move(*cache);
        Status mtp = model_->ResetMtpCache(slots, capacity + kMtpChainPositions,
                                           static_cast<kernels::KvDtype>(dtype));
        if (!mtp.ok()) return Fail(mtp);
        break;
      }
      case PlanOp::kMtpDraft: {
        MtpPlan p;
        OCTET_RETURN_IF_ERROR(DecodeMtp(payload, &p));
        // Rank 0 drafts with the head, so every rank must hold its shard:
        // leave the group (rank 0's collective then fails naming this rank).
        if (model_->mtp_layers() == 0) {
          return Fail(FailedPreconditionError(
              "rank " + std::to_string(rank_) +
              " has no multi-token-prediction layer loaded but rank 0 drafts with it (start "
              "every rank with --speculative mtp)"));
        }
        std::vector<std::vector<int32_t>> drafts;
        std::vector<float> logits;  // gathered as rank 0 gathers them
        Status s =
            model_->MtpDraftBatch(p.requests, &drafts, p.all_logits ? &logits : nullptr, hooks_);
        if (!s.ok() && comm_->poisoned()) return Fail(comm_->health());
        break;
      }
      case PlanOp::kCopySlot: {
        Reader r(payload);
        int32_t src = 0, dst = 0;
        int64_t positions = 0;
        if (!r.Get(&src) || !r.Get(&dst) || !r.Get(&positions) ||
            !cache_.CheckCopy(src, dst, positions).ok()) {
          return Fail(DataLossError("malformed KV slot copy plan from rank 0"));
        }
        cache_.CopyPositions(src, dst, positions, model_->backend());
        if (Status s = model_->CopyMtpSlot(src, dst, positions); !s.ok()) return Fail(s);
        break;
      }
      case PlanOp::kStep: {
        OCTET_RETURN_IF_ERROR(DecodeBatch(payload, &batch));
        Status s = RunStep(batch, &out);
        // Rank 0 rejects an invalid batch the same way; only a broken group ends this loop.
        if (!s.ok() && comm_->poisoned()) return Fail(comm_->health());
        break;
      }
      default:
        return Fail(DataLossError("unknown step plan op " + std::to_string(hdr.op) +
                                  " from rank 0"));
    }
  }
}

}  // namespace octet::engine
