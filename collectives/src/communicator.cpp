#include "octet/collectives/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "algorithm_table.h"
#include "backend.h"
#include "bootstrap.h"
#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "transport.h"
#include "wait.h"
#include "wire.h"

namespace octet::collectives {

struct Communicator::Impl {
  std::unique_ptr<Bootstrap> bootstrap;  // destroyed last: says BYE after the data links close
  std::unique_ptr<Waiter> waiter;
  std::unique_ptr<Backend> backend;
};

namespace {

// Everything that must be equal on every rank, compared at the rendezvous.
std::string ConfigDigest(const CommunicatorOptions& o) {
  std::ostringstream s;
  s << "transport=" << TransportName(o.transport) << " algorithm=" << AlgorithmName(o.algorithm)
    << " slot=" << o.slot_bytes << " chunk=" << o.chunk_bytes
    << " oneshot_max=" << o.oneshot_max_bytes << " self_test=" << o.self_test;
  return s.str();
}

TransportConfig MakeTransportConfig(const CommunicatorOptions& o) {
  TransportConfig c;
  c.slot_bytes = o.slot_bytes;
  c.chunk_bytes = o.chunk_bytes;
  c.connect_timeout_ms = o.connect_timeout_ms;
  c.verbs_device = o.verbs_device;
  c.verbs_port = o.verbs_port;
  c.verbs_gid_index = o.verbs_gid_index;
  return c;
}

// The transports to try, best first; everyone computes the same list from the
// options and the roster.
std::vector<TransportKind> Candidates(TransportKind requested, bool one_host) {
  using T = TransportKind;
  switch (requested) {
    case T::kAuto:
      return one_host ? std::vector<T>{T::kShm, T::kTcp} : std::vector<T>{T::kVerbs, T::kTcp};
    case T::kShm:
      return {T::kShm, T::kTcp};
    case T::kTcp:
      return {T::kTcp};
    case T::kVerbs:
      return one_host ? std::vector<T>{T::kVerbs, T::kShm, T::kTcp}
                      : std::vector<T>{T::kVerbs, T::kTcp};
    case T::kNccl:
      return one_host ? std::vector<T>{T::kNccl, T::kShm, T::kTcp}
                      : std::vector<T>{T::kNccl, T::kVerbs, T::kTcp};
  }
  return {T::kTcp};
}

Result<std::unique_ptr<Backend>> ConnectBackend(TransportKind kind, Bootstrap& b,
                                                const TransportConfig& config) {
  Result<std::unique_ptr<Transport>> t = UnavailableError("unknown transport");
  switch (kind) {
    case TransportKind::kNccl:
      return ConnectNccl(b, config);
    case TransportKind::kShm:
      t = ConnectShm(b, config);
      break;
    case TransportKind::kTcp:
      t = ConnectTcp(b, config);
      break;
    case TransportKind::kVerbs:
      t = ConnectVerbs(b, config);
      break;
    case TransportKind::kAuto:
      break;
  }
  if (!t.ok()) return t.status();
  return std::unique_ptr<Backend>(new TransportBackend(std::move(*t)));
}

// Self-test input: small integers, so every summation order is exact.
float SelfTestValue(int rank, size_t i) {
  return static_cast<float>((rank + 1) * (static_cast<int>(i % 13) - 6));
}

// A real all-reduce with each algorithm, checked against the expected sum.
Status SelfTest(Backend& backend, Waiter& w, int rank, int n) {
  const size_t count = 1031;  // not a multiple of any world size up to 8
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = SelfTestValue(rank, i);
  for (AlgorithmKind algo : {AlgorithmKind::kOneShot, AlgorithmKind::kRing}) {
    if (!backend.honours_algorithm() && algo == AlgorithmKind::kRing) continue;
    std::fill(out.begin(), out.end(), -1.0f);
    w.set_label(OpLabel{CollectiveOp::kAllReduce, 0, AlgorithmName(algo),
                        TransportName(backend.transport())});
    CollectiveArgs a{CollectiveOp::kAllReduce, in.data(), out.data(), count, DType::kF32, 0};
    OCTET_RETURN_IF_ERROR(backend.Collective(a, algo, w).WithContext("self-test"));
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += SelfTestValue(r, i);
      if (out[i] != expected) {
        return DataLossError("self-test: " + std::string(AlgorithmName(algo)) +
                             " all-reduce over " + std::string(TransportName(backend.transport())) +
                             " gave a wrong sum at element " + std::to_string(i) + ": " +
                             std::to_string(out[i]) + " instead of " + std::to_string(expected));
      }
    }
  }
  CollectiveArgs barrier{CollectiveOp::kBarrier, nullptr, nullptr, 0, DType::kF32, 0};
  return backend.Collective(barrier, AlgorithmKind::kOneShot, w).WithContext("self-test");
}

// Rank 0's table for this transport and world size in a profile file; empty
// when there is none (or the line is malformed: then it is measured again).
std::vector<AlgorithmBand> ReadProfile(const std::string& path, TransportKind kind, int n) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return {};
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string t;
    int size = 0;
    if (f >> t >> size && t == TransportName(kind) && size == n) return ParseProfileBands(f);
  }
  return {};
}

void WriteProfile(const std::string& path, TransportKind kind, int n,
                  const std::vector<AlgorithmBand>& bands) {
  std::string kept;
  if (auto text = ReadFileToString(path); text.ok()) {
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string t;
      int size = 0;
      if (f >> t >> size && t == TransportName(kind) && size == n) continue;
      if (line.rfind("# octet collectives", 0) == 0) continue;  // rewritten below
      if (!line.empty()) kept += line + "\n";
    }
  }
  kept = "# octet collectives algorithm table: transport world_size, then per size band "
         "algorithm:max_bytes_per_rank (max = every larger size)\n" +
         kept;
  kept += ProfileLine(kind, n, bands) + "\n";
  if (Status s = WriteFileAtomic(path, kept); !s.ok()) {
    OCTET_LOG(WARNING) << "collectives: cannot store the algorithm table: " << s.ToString();
  }
}

}  // namespace

class Communicator::CallScope {
 public:
  CallScope(Communicator* c, uint64_t bytes) : c_(c), bytes_(bytes), start_(NowNs()) {}
  ~CallScope() {
    c_->busy_ns_.fetch_add(NowNs() - start_, std::memory_order_relaxed);
    c_->calls_.fetch_add(1, std::memory_order_relaxed);
    c_->bytes_.fetch_add(bytes_, std::memory_order_relaxed);
    counter_->fetch_add(1, std::memory_order_relaxed);
    c_->busy_.store(false, std::memory_order_release);
  }
  void set_algorithm(AlgorithmKind a) {
    counter_ = a == AlgorithmKind::kOneShot ? &c_->oneshot_calls_
               : a == AlgorithmKind::kRing  ? &c_->ring_calls_
                                            : &c_->other_calls_;
  }

 private:
  Communicator* c_;
  uint64_t bytes_;
  int64_t start_;
  std::atomic<uint64_t>* counter_ = &c_->other_calls_;
};

Communicator::Communicator() : impl_(std::make_unique<Impl>()) {}
Communicator::~Communicator() = default;

Result<std::unique_ptr<Communicator>> Communicator::Create(const std::string& rendezvous,
                                                           int world_size, int rank,
                                                           const CommunicatorOptions& options) {
  if (options.peer_timeout_ms <= 0 || options.connect_timeout_ms <= 0) {
    return InvalidArgumentError("collectives: timeouts must be positive");
  }
  if (options.slot_bytes < 4096 || options.slot_bytes > (size_t{1} << 30)) {
    return InvalidArgumentError("collectives: slot_bytes must be 4 KiB..1 GiB");
  }
  if (options.chunk_bytes < 4096 || options.chunk_bytes > (size_t{1} << 30) ||
      options.chunk_bytes % 64 != 0) {
    return InvalidArgumentError("collectives: chunk_bytes must be 4 KiB..1 GiB, a multiple of 64");
  }
  std::unique_ptr<Communicator> c(new Communicator);
  c->options_ = options;
  c->algorithm_ = options.algorithm;
  Bootstrap::Options bo;
  bo.connect_timeout_ms = options.connect_timeout_ms;
  bo.config_digest = ConfigDigest(options);
  auto bootstrap = Bootstrap::Connect(rendezvous, world_size, rank, bo);
  if (!bootstrap.ok())
    return bootstrap.status().WithContext("collectives (rank " + std::to_string(rank) + ")");
  c->impl_->bootstrap = std::move(*bootstrap);
  c->rank_ = rank;
  c->size_ = world_size;
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const bool oversubscribed = static_cast<unsigned>(c->impl_->bootstrap->LocalRankCount()) > cpus;
  c->impl_->waiter = std::make_unique<Waiter>(
      c->impl_->bootstrap.get(), int64_t{options.peer_timeout_ms} * 1'000'000, oversubscribed);
  OCTET_RETURN_IF_ERROR(c->SelectBackend(options.self_test));
  OCTET_RETURN_IF_ERROR(c->AgreeCrossover());
  if (rank == 0) {
    OCTET_LOG(INFO) << "collectives: " << c->Describe();
  }
  return c;
}

Status Communicator::SelectBackend(bool self_test) {
  Bootstrap& b = *impl_->bootstrap;
  const TransportConfig config = MakeTransportConfig(options_);
  const auto candidates = Candidates(options_.transport, b.AllOnOneHost());
  std::string first_failure;
  for (TransportKind kind : candidates) {
    auto backend = ConnectBackend(kind, b, config);
    Status local = backend.ok() ? Status::Ok() : backend.status();
    if (local.ok() && self_test) {
      Waiter test_waiter(&b, std::min<int64_t>(options_.peer_timeout_ms, 10000) * 1'000'000, false);
      local = SelfTest(**backend, test_waiter, rank_, size_);
    }
    // The vote: everyone learns everyone's outcome. A failure every rank saw
    // alike (probes report through the bootstrap) is quoted as is; otherwise
    // the first failing rank is named.
    const Deadline deadline = Deadline::AfterMs(options_.connect_timeout_ms);
    WireWriter mine;
    mine.U32(static_cast<uint32_t>(local.code())).Str(local.message());
    auto votes = b.AllGather(mine.str(), deadline);
    if (!votes.ok()) return votes.status().WithContext("collectives: start-up vote");
    Status verdict;
    bool all_same = true;
    for (int p = 0; p < size_; ++p) {
      WireReader rd((*votes)[p]);
      const auto code = static_cast<StatusCode>(rd.U32());
      const std::string msg = rd.Str();
      if (code != local.code() || msg != local.message()) all_same = false;
      if (code != StatusCode::kOk && verdict.ok()) {
        verdict = Status(code, "rank " + std::to_string(p) + ": " + msg);
      }
    }
    if (!verdict.ok() && all_same) verdict = local;
    if (verdict.ok()) {
      impl_->backend = std::move(*backend);
      if (kind != candidates.front()) {
        fallback_reason_ = std::string(TransportName(candidates.front())) + " unavailable (" +
                           first_failure + "); using " + std::string(TransportName(kind));
        if (rank_ == 0) {
          OCTET_LOG(WARNING) << "collectives: " << TransportName(candidates.front())
                             << " unavailable (" << first_failure << "); all " << size_
                             << " ranks fall back to " << TransportName(kind);
        }
      }
      return Status::Ok();
    }
    OCTET_LOG(DEBUG) << "collectives: " << TransportName(kind)
                     << " rejected: " << verdict.message();
    if (first_failure.empty()) first_failure = verdict.message();
    if (backend.ok()) backend->reset();
  }
  return UnavailableError("collectives: no transport works for these " + std::to_string(size_) +
                          " ranks (" + first_failure + ")");
}

Status Communicator::AgreeCrossover() {
  Bootstrap& b = *impl_->bootstrap;
  if (size_ == 1 || !impl_->backend->honours_algorithm() ||
      options_.algorithm != AlgorithmKind::kAuto) {
    bands_.clear();
    return Status::Ok();
  }
  if (options_.oneshot_max_bytes > 0) {  // the same on every rank (config digest)
    bands_ = CrossoverBands(options_.oneshot_max_bytes);
    return Status::Ok();
  }
  // Each exchange gets the connect timeout from its own start: the timing
  // between them can take long on a loaded machine, and is not a peer's
  // silence.
  auto deadline = [this] { return Deadline::AfterMs(options_.connect_timeout_ms); };
  const TransportKind kind = impl_->backend->transport();
  // Rank 0's stored table, if any, decides for everyone.
  std::vector<AlgorithmBand> table;
  if (rank_ == 0 && !options_.crossover_profile.empty()) {
    table = ReadProfile(options_.crossover_profile, kind, size_);
  }
  OCTET_ASSIGN_OR_RETURN(auto from0, b.AllGather(EncodeBands(table), deadline()));
  table = DecodeBands(from0[0]);
  if (table.empty()) {
    const int64_t start = NowNs();
    // Every rank measures; rank 0 turns the slowest rank's figures into the
    // table and sends it to all, so every rank holds the same table.
    OCTET_RETURN_IF_ERROR(MeasureBands(&table));
    OCTET_ASSIGN_OR_RETURN(
        from0, b.AllGather(rank_ == 0 ? EncodeBands(table) : std::string(), deadline()));
    table = DecodeBands(from0[0]);
    if (table.empty()) {
      return DataLossError("collectives: rank 0 sent a malformed one-shot/ring table");
    }
    if (rank_ == 0) {
      OCTET_LOG(INFO) << "collectives: timed one-shot and ring at 8 B-16 MiB in "
                      << (NowNs() - start) / 1'000'000 << " ms (" << retimed_bands_
                      << " close sizes timed twice)";
      if (!options_.crossover_profile.empty()) {
        WriteProfile(options_.crossover_profile, kind, size_, table);
      }
    }
  }
  bands_ = std::move(table);
  return Status::Ok();
}

// Times both algorithms at every power of two from 8 B to 16 MiB in pairs
// (a block of one-shot runs and a block of ring runs back to back,
// alternating which goes first; see TimingSchedule), and on rank 0 turns the
// slowest rank's time of each run into the table (PairsFromBlocks, then
// ChooseBands: per band the median ratio over pairs, a tie within noise
// keeps the band below's choice). Bands whose pairs leave a >5% difference
// within noise get a second round of as many pairs (only up to 1 MiB, where
// runs are cheap), chosen by rank 0 and sent to all, so every rank runs the
// same collectives. Beyond 16 MiB the 16 MiB band decides (bandwidth-bound).
// Other ranks return an empty table. The sizes past 4 MiB matter: out of
// cache, one-shot's 1 MiB steps can beat ring where the two tie at 1-4 MiB
// (2 ranks over TCP: 64 MB one-shot 55 ms, ring 80 ms). Cost: see
// TimingSchedule (at most twice that up to 1 MiB), and a 16 MiB buffer while
// it runs.
Status Communicator::MeasureBands(std::vector<AlgorithmBand>* bands) {
  Bootstrap& b = *impl_->bootstrap;
  // Per exchange, from its start (see AgreeCrossover).
  auto deadline = [this] { return Deadline::AfterMs(options_.connect_timeout_ms); };
  const TransportKind kind = impl_->backend->transport();
  std::vector<size_t> sizes;
  for (size_t s = 8; s <= (size_t{16} << 20); s *= 2) sizes.push_back(s);
  std::vector<float> buf(sizes.back() / sizeof(float), 1.0f);
  Waiter& w = *impl_->waiter;
  auto run = [&](AlgorithmKind algo, size_t bytes) -> Result<int64_t> {
    w.set_label(OpLabel{CollectiveOp::kAllReduce, 0, AlgorithmName(algo), TransportName(kind)});
    CollectiveArgs a{CollectiveOp::kAllReduce, buf.data(),  buf.data(),
                     bytes / sizeof(float),    DType::kF32, 0};
    const int64_t start = NowNs();
    Status s = impl_->backend->Collective(a, algo, w);
    if (!s.ok()) return s.WithContext("collectives: timing one-shot and ring");
    return NowNs() - start;
  };
  // This rank's times of band k's pairs.
  std::vector<BandTimings> mine(sizes.size());
  auto time_band = [&](size_t k) -> Status {
    const size_t bytes = sizes[k];
    mine[k].bytes = bytes;
    const auto [pairs, block] = TimingSchedule(bytes);
    // i = 0 is a warm-up at this size, except above 4 MiB, where the first
    // runs at the largest size warmed everything up and a run costs most.
    const int first = bytes > (4 << 20) ? 1 : 0;
    for (int i = first; i <= pairs; ++i) {
      const bool oneshot_first = i % 2 == 0;
      for (AlgorithmKind algo : {oneshot_first ? AlgorithmKind::kOneShot : AlgorithmKind::kRing,
                                 oneshot_first ? AlgorithmKind::kRing : AlgorithmKind::kOneShot}) {
        for (int j = 0; j < block; ++j) {
          OCTET_ASSIGN_OR_RETURN(int64_t t, run(algo, bytes));
          if (i == 0) continue;
          (algo == AlgorithmKind::kOneShot ? mine[k].oneshot_ns : mine[k].ring_ns)
              .push_back(static_cast<double>(t));
        }
      }
    }
    return Status::Ok();
  };
  // Sends this rank's pairs of bands ks (band k's from pair from[k] on) to
  // all; rank 0 merges them into `slowest` (each run's slowest rank),
  // appending to what it holds.
  std::vector<BandTimings> slowest(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) slowest[k].bytes = sizes[k];
  auto gather = [&](const std::vector<size_t>& ks, const std::vector<size_t>& from) -> Status {
    WireWriter out;
    for (size_t k : ks) {
      const size_t count = mine[k].oneshot_ns.size() - from[k];
      out.U32(static_cast<uint32_t>(count));
      for (size_t i = from[k]; i < mine[k].oneshot_ns.size(); ++i) {
        out.I64(static_cast<int64_t>(mine[k].oneshot_ns[i]))
            .I64(static_cast<int64_t>(mine[k].ring_ns[i]));
      }
    }
    OCTET_ASSIGN_OR_RETURN(auto all, b.AllGather(out.str(), deadline()));
    if (rank_ != 0) return Status::Ok();
    std::vector<BandTimings> merged(sizes.size());
    for (int p = 0; p < size_; ++p) {
      WireReader rd(all[p]);
      for (size_t k : ks) {
        const size_t count = rd.U32();
        if (!rd.ok() || count > 1024 || (p > 0 && count != merged[k].oneshot_ns.size())) {
          return DataLossError("collectives: rank " + std::to_string(p) +
                               " sent malformed one-shot/ring timings");
        }
        merged[k].oneshot_ns.resize(count, 0);
        merged[k].ring_ns.resize(count, 0);
        for (size_t i = 0; i < count; ++i) {
          merged[k].oneshot_ns[i] =
              std::max(merged[k].oneshot_ns[i], static_cast<double>(rd.I64()));
          merged[k].ring_ns[i] = std::max(merged[k].ring_ns[i], static_cast<double>(rd.I64()));
        }
      }
      if (!rd.ok()) {
        return DataLossError("collectives: rank " + std::to_string(p) +
                             " sent malformed one-shot/ring timings");
      }
    }
    for (size_t k : ks) {
      auto& o = slowest[k].oneshot_ns;
      auto& r = slowest[k].ring_ns;
      o.insert(o.end(), merged[k].oneshot_ns.begin(), merged[k].oneshot_ns.end());
      r.insert(r.end(), merged[k].ring_ns.begin(), merged[k].ring_ns.end());
    }
    return Status::Ok();
  };
  // Both algorithms first run once at the largest size (committing every slot
  // page, which would otherwise be charged to whichever runs first).
  for (AlgorithmKind algo : {AlgorithmKind::kOneShot, AlgorithmKind::kRing}) {
    OCTET_RETURN_IF_ERROR(run(algo, sizes.back()).status());
  }
  std::vector<size_t> every(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    every[k] = k;
    OCTET_RETURN_IF_ERROR(time_band(k));
  }
  OCTET_RETURN_IF_ERROR(gather(every, std::vector<size_t>(sizes.size(), 0)));
  // Rank 0 names the bands to time again; everyone runs the same ones.
  // Rank 0's view: one figure per pair (the block's median).
  auto pairs_of = [&] {
    std::vector<BandTimings> out;
    for (const BandTimings& t : slowest) out.push_back(PairsFromBlocks(t, TimingSchedule(t.bytes).second));
    return out;
  };
  WireWriter retime;
  if (rank_ == 0) {
    const std::vector<size_t> ks = BandsToRetime(pairs_of());
    retime.U32(static_cast<uint32_t>(ks.size()));
    for (size_t k : ks) retime.U32(static_cast<uint32_t>(k));
  }
  OCTET_ASSIGN_OR_RETURN(auto from0, b.AllGather(retime.str(), deadline()));
  WireReader rd(from0[0]);
  std::vector<size_t> again(std::min<uint32_t>(rd.U32(), static_cast<uint32_t>(sizes.size())));
  for (size_t& k : again) k = std::min<size_t>(rd.U32(), sizes.size() - 1);
  if (!rd.ok() || !std::is_sorted(again.begin(), again.end()) ||
      std::adjacent_find(again.begin(), again.end()) != again.end()) {
    return DataLossError("collectives: rank 0 sent a malformed list of sizes to time again");
  }
  std::vector<size_t> before(sizes.size());
  for (size_t k : again) {
    before[k] = mine[k].oneshot_ns.size();
    OCTET_RETURN_IF_ERROR(time_band(k));
  }
  if (!again.empty()) OCTET_RETURN_IF_ERROR(gather(again, before));
  bands->clear();
  if (rank_ != 0) return Status::Ok();
  const std::vector<BandTimings> pairs = pairs_of();
  for (const BandTimings& t : pairs) {
    const BandJudgement j = JudgeBand(t);
    OCTET_LOG(DEBUG) << "collectives: " << t.bytes << " B: one-shot/ring "
                     << std::exp(j.log_ratio) << " (+-" << j.std_error * 100 << "%, "
                     << t.oneshot_ns.size() << " pairs, slowest rank)";
  }
  retimed_bands_ = again.size();
  *bands = ChooseBands(pairs);
  return Status::Ok();
}

TransportKind Communicator::transport() const {
  return impl_->backend ? impl_->backend->transport() : options_.transport;
}

std::string Communicator::Describe() const {
  std::string s = std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " over " +
                  std::string(TransportName(transport())) + ", ";
  if (impl_->backend && !impl_->backend->honours_algorithm()) return s + "NCCL's own algorithms";
  s += std::string(AlgorithmName(algorithm_));
  if (algorithm_ == AlgorithmKind::kAuto && !bands_.empty()) {
    s += " (";
    for (size_t i = 0; i < bands_.size(); ++i) {
      const char* name = bands_[i].algorithm == AlgorithmKind::kRing ? "ring" : "one-shot";
      if (i > 0) s += ", ";
      if (bands_.size() == 1) {
        s += std::string(name) + " at every size";
      } else if (bands_[i].max_bytes == kNoLimit) {
        s += std::string(name) + " above";
      } else {
        s += std::string(name) + " up to " + FormatBytes(static_cast<double>(bands_[i].max_bytes));
      }
    }
    s += ")";
  }
  if (!fallback_reason_.empty()) s += "; " + fallback_reason_;
  return s;
}

AlgorithmKind Communicator::AlgorithmFor(CollectiveOp op, size_t bytes) const {
  if (op == CollectiveOp::kBarrier) return AlgorithmKind::kOneShot;
  if (algorithm_ != AlgorithmKind::kAuto) return algorithm_;
  for (const AlgorithmBand& b : bands_) {  // a few rows, sorted
    if (bytes <= b.max_bytes) return b.algorithm;
  }
  return AlgorithmKind::kOneShot;  // one rank or NCCL: no table
}

size_t Communicator::oneshot_max_bytes() const {
  if (bands_.empty()) return kNoLimit;
  return bands_[0].algorithm == AlgorithmKind::kOneShot ? bands_[0].max_bytes : 0;
}

Status Communicator::health() const {
  if (!poisoned()) return Status::Ok();
  return poison_status_;
}

Status Communicator::Poison(Status why, int blamed) {
  if (poisoned()) return poison_status_;
  poison_status_ =
      Status(why.code(), "collectives (rank " + std::to_string(rank_) + "): " + why.message());
  failed_peer_.store(blamed, std::memory_order_release);
  poisoned_.store(true, std::memory_order_release);
  impl_->bootstrap->BroadcastAbort(blamed, why);
  OCTET_LOG(ERROR) << poison_status_.message() << "; communicator poisoned";
  return poison_status_;
}

Status Communicator::Run(CollectiveOp op, const void* in, void* out, size_t count, DType dtype,
                         int root, size_t payload_bytes, AlgorithmKind forced) {
  if (poisoned()) return poison_status_;
  if (busy_.exchange(true, std::memory_order_acquire)) {
    return FailedPreconditionError(
        "collectives: a second call while another is in progress on the same communicator "
        "(use one communicator per thread; see Communicator::Duplicate)");
  }
  CallScope scope(this, payload_bytes);
  if (count > 0 &&
      ((op != CollectiveOp::kBarrier && out == nullptr) ||
       (op != CollectiveOp::kBroadcast && op != CollectiveOp::kBarrier && in == nullptr))) {
    return InvalidArgumentError("collectives: " + std::string(OpName(op)) + " of " +
                                std::to_string(count) + " elements with a null buffer");
  }
  const AlgorithmKind algo =
      forced != AlgorithmKind::kAuto ? forced : AlgorithmFor(op, payload_bytes);
  scope.set_algorithm(impl_->backend->honours_algorithm() && size_ > 1 ? algo
                                                                       : AlgorithmKind::kAuto);
  Waiter& w = *impl_->waiter;
  w.set_label(OpLabel{op, ++op_index_, AlgorithmName(algo), TransportName(transport())});
  w.Blame(-1);
  const CollectiveArgs args{op, in, out, count, dtype, root};
  Status s = impl_->backend->Collective(args, algo, w);
  if (!s.ok()) return Poison(s, w.blamed());
  return s;
}

Status Communicator::AllReduce(void* data, size_t count, DType dtype) {
  return Run(CollectiveOp::kAllReduce, data, data, count, dtype, 0, count * DTypeSize(dtype));
}

Status Communicator::AllReduce(const void* in, void* out, size_t count, DType dtype) {
  return Run(CollectiveOp::kAllReduce, in, out, count, dtype, 0, count * DTypeSize(dtype));
}

Status Communicator::AllReduceWith(AlgorithmKind algorithm, const void* in, void* out,
                                   size_t count, DType dtype) {
  if (algorithm != AlgorithmKind::kOneShot && algorithm != AlgorithmKind::kRing) {
    return InvalidArgumentError("collectives: AllReduceWith takes oneshot or ring, not " +
                                std::string(AlgorithmName(algorithm)));
  }
  return Run(CollectiveOp::kAllReduce, in, out, count, dtype, 0, count * DTypeSize(dtype),
             algorithm);
}

Status Communicator::AllGather(const void* in, void* out, size_t count, DType dtype) {
  return Run(CollectiveOp::kAllGather, in, out, count, dtype, 0, count * DTypeSize(dtype));
}

Status Communicator::ReduceScatter(const void* in, void* out, size_t count, DType dtype) {
  return Run(CollectiveOp::kReduceScatter, in, out, count, dtype, 0,
             count * DTypeSize(dtype) * static_cast<size_t>(size_));
}

Status Communicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    return InvalidArgumentError("collectives: broadcast root " + std::to_string(root) +
                                " is outside 0.." + std::to_string(size_ - 1));
  }
  return Run(CollectiveOp::kBroadcast, data, data, bytes, DType::kF32, root, bytes);
}

Status Communicator::Barrier() {
  return Run(CollectiveOp::kBarrier, nullptr, nullptr, 0, DType::kF32, 0, 0);
}

Status Communicator::Send(const void* data, size_t bytes, int peer) {
  return SendRecv(data, bytes, peer, nullptr, 0, -1);
}

Status Communicator::Recv(void* data, size_t bytes, int peer) {
  return SendRecv(nullptr, 0, -1, data, bytes, peer);
}

Status Communicator::SendRecv(const void* send_data, size_t send_bytes, int send_peer,
                              void* recv_data, size_t recv_bytes, int recv_peer) {
  for (int p : {send_peer, recv_peer}) {
    if (p != -1 && (p < 0 || p >= size_ || p == rank_)) {
      return InvalidArgumentError("collectives: peer " + std::to_string(p) +
                                  " is not another rank of 0.." + std::to_string(size_ - 1));
    }
  }
  if ((send_peer >= 0 && send_bytes > 0 && !send_data) ||
      (recv_peer >= 0 && recv_bytes > 0 && !recv_data)) {
    return InvalidArgumentError("collectives: send/recv with a null buffer");
  }
  if (poisoned()) return poison_status_;
  if (busy_.exchange(true, std::memory_order_acquire)) {
    return FailedPreconditionError(
        "collectives: a second call while another is in progress on the same communicator");
  }
  CallScope scope(this, (send_peer >= 0 ? send_bytes : 0) + (recv_peer >= 0 ? recv_bytes : 0));
  Waiter& w = *impl_->waiter;
  w.set_label(OpLabel{CollectiveOp::kSendRecv, ++op_index_, {}, TransportName(transport())});
  w.Blame(-1);
  Status s = impl_->backend->SendRecv(send_peer, send_data, send_peer >= 0 ? send_bytes : 0,
                                      recv_peer, recv_data, recv_peer >= 0 ? recv_bytes : 0, w);
  if (!s.ok()) return Poison(s, w.blamed());
  return s;
}

Result<std::unique_ptr<Communicator>> Communicator::Duplicate() {
  if (poisoned()) return poison_status_;
  if (busy_.exchange(true, std::memory_order_acquire)) {
    return FailedPreconditionError("collectives: Duplicate while another call is in progress");
  }
  struct Release {
    std::atomic<bool>* b;
    ~Release() { b->store(false, std::memory_order_release); }
  } release{&busy_};
  std::unique_ptr<Communicator> c(new Communicator);
  c->options_ = options_;
  c->options_.transport = transport();
  c->algorithm_ = algorithm_;
  c->bands_ = bands_;
  c->rank_ = rank_;
  c->size_ = size_;
  auto b = impl_->bootstrap->Duplicate(Deadline::AfterMs(options_.connect_timeout_ms));
  if (!b.ok()) return b.status().WithContext("collectives: Duplicate");
  c->impl_->bootstrap = std::move(*b);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  c->impl_->waiter = std::make_unique<Waiter>(
      c->impl_->bootstrap.get(), int64_t{options_.peer_timeout_ms} * 1'000'000,
      static_cast<unsigned>(c->impl_->bootstrap->LocalRankCount()) > cpus);
  OCTET_RETURN_IF_ERROR(c->SelectBackend(/*self_test=*/false));
  return c;
}

CollectiveStats Communicator::stats() const {
  CollectiveStats s;
  s.calls = calls_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.busy_ns = busy_ns_.load(std::memory_order_relaxed);
  s.oneshot_calls = oneshot_calls_.load(std::memory_order_relaxed);
  s.ring_calls = ring_calls_.load(std::memory_order_relaxed);
  s.other_calls = other_calls_.load(std::memory_order_relaxed);
  return s;
}

void Communicator::ResetStats() {
  calls_ = 0;
  bytes_ = 0;
  busy_ns_ = 0;
  oneshot_calls_ = 0;
  ring_calls_ = 0;
  other_calls_ = 0;
}

}  // namespace octet::collectives
