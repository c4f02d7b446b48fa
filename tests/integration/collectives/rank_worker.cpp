#include "rank_worker.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/log.h"
#include "octet/collectives/communicator.h"
#include "reduce.h"
#include "transport.h"

namespace octet::collectives::test {

namespace {

// Small integers in [-4, 4]: every summation order gives the exact sum in
// f32, bf16 and f16 for up to 8 ranks, so results are compared exactly with
// a reference sum formed here in plain arithmetic.
int IntValue(int rank, size_t i, int salt) {
  const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u) ^
                     (static_cast<uint64_t>(rank + 1) * 40503u) ^ (static_cast<uint64_t>(salt) * 97u);
  return static_cast<int>((h >> 7) % 9) - 4;
}

void Store(DType d, uint8_t* p, float f) {
  if (d == DType::kF32) {
    std::memcpy(p, &f, 4);
  } else {
    const uint16_t h = d == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
    std::memcpy(p, &h, 2);
  }
}

float Load(DType d, const uint8_t* p) {
  if (d == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
}

std::vector<uint8_t> Input(DType d, int rank, size_t count, int salt) {
  std::vector<uint8_t> v(count * DTypeSize(d));
  for (size_t i = 0; i < count; ++i) Store(d, &v[i * DTypeSize(d)], float(IntValue(rank, i, salt)));
  return v;
}

// First element where `got` differs from the reference, or -1.
int64_t FirstWrong(DType d, const std::vector<uint8_t>& got, size_t count,
                   const std::function<int(size_t)>& want) {
  for (size_t i = 0; i < count; ++i) {
    if (Load(d, &got[i * DTypeSize(d)]) != static_cast<float>(want(i))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

struct Conformance {
  Communicator& c;
  int n, r;
  int salt = 0;
  int ops = 0;

  Status Wrong(const std::string& what, DType d, size_t count, int64_t at) {
    return DataLossError(what + " " + std::string(DTypeName(d)) + " count " +
                         std::to_string(count) + ": wrong at element " + std::to_string(at));
  }

  Status AllReduce(DType d, size_t count, bool in_place) {
    ++salt;
    ++ops;
    std::vector<uint8_t> in = Input(d, r, count, salt), out(in.size());
    if (in_place) {
      OCTET_RETURN_IF_ERROR(c.AllReduce(in.data(), count, d));
      out.swap(in);
    } else {
      OCTET_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, d));
    }
    const int s = salt;
    const int64_t bad = FirstWrong(d, out, count, [&](size_t i) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += IntValue(q, i, s);
      return sum;
    });
    return bad < 0 ? Status::Ok() : Wrong(in_place ? "all_reduce in place" : "all_reduce", d, count, bad);
  }

  Status AllGather(DType d, size_t count) {
    ++salt;
    ++ops;
    std::vector<uint8_t> in = Input(d, r, count, salt), out(n * in.size());
    OCTET_RETURN_IF_ERROR(c.AllGather(in.data(), out.data(), count, d));
    const int s = salt;
    const int64_t bad = FirstWrong(d, out, n * count, [&](size_t i) {
      return IntValue(static_cast<int>(i / count), i % count, s);
    });
    return bad < 0 ? Status::Ok() : Wrong("all_gather", d, count, bad);
  }

  Status ReduceScatter(DType d, size_t count) {
    ++salt;
    ++ops;
    std::vector<uint8_t> in = Input(d, r, n * count, salt), out(count * DTypeSize(d));
    OCTET_RETURN_IF_ERROR(c.ReduceScatter(in.data(), out.data(), count, d));
    const int s = salt;
    const int64_t bad = FirstWrong(d, out, count, [&](size_t i) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += IntValue(q, r * count + i, s);
      return sum;
    });
    return bad < 0 ? Status::Ok() : Wrong("reduce_scatter", d, count, bad);
  }

  Status Broadcast(size_t bytes, int root) {
    ++salt;
    ++ops;
    std::vector<uint8_t> buf(bytes), want(bytes);
    for (size_t i = 0; i < bytes; ++i) {
      want[i] = static_cast<uint8_t>(IntValue(root, i, salt) * 31 + 7);
      buf[i] = r == root ? want[i] : 0xee;
    }
    OCTET_RETURN_IF_ERROR(c.Broadcast(buf.data(), bytes, root));
    if (buf != want) return DataLossError("broadcast of " + std::to_string(bytes) + " bytes wrong");
    return Status::Ok();
  }

  // Each rank sends to the next and receives from the previous.
  Status RingExchange(size_t bytes) {
    ++salt;
    ++ops;
    std::vector<uint8_t> out(bytes), in(bytes, 0xee);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + r + salt);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    OCTET_RETURN_IF_ERROR(c.SendRecv(out.data(), bytes, next, in.data(), bytes, prev));
    for (size_t i = 0; i < bytes; ++i) {
      if (in[i] != static_cast<uint8_t>(i * 7 + prev + salt)) {
        return DataLossError("send/recv of " + std::to_string(bytes) + " bytes wrong at " +
                             std::to_string(i));
      }
    }
    return Status::Ok();
  }

  // Random (non-integer) inputs: every rank must hold the same bits.
  Status BitIdentical(size_t count) {
    ++ops;
    std::mt19937 rng(1234 + r);
    std::normal_distribution<float> g;
    std::vector<float> v(count);
    for (float& f : v) f = g(rng);
    OCTET_RETURN_IF_ERROR(c.AllReduce(v.data(), count, DType::kF32));
    uint64_t hash = 1469598103934665603ull;
    for (float f : v) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      hash = (hash ^ b) * 1099511628211ull;
    }
    std::vector<uint64_t> all(n);
    OCTET_RETURN_IF_ERROR(c.AllGather(&hash, all.data(), 2, DType::kF32));
    for (int q = 0; q < n; ++q) {
      if (all[q] != hash) {
        return DataLossError("rank " + std::to_string(q) + " holds different bits after all_reduce");
      }
    }
    return Status::Ok();
  }

  Status Run() {
    // Element counts: 1 element, counts that n does not divide, and one
    // all-reduce / broadcast of several MB.
    const size_t big = (size_t{3} << 20) / 4 + 1;  // 3 MiB + 4 bytes of f32
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1024} * n + 3, size_t{65537}}) {
        OCTET_RETURN_IF_ERROR(AllReduce(d, count, false));
        OCTET_RETURN_IF_ERROR(AllReduce(d, count, true));
        OCTET_RETURN_IF_ERROR(AllGather(d, count));
        OCTET_RETURN_IF_ERROR(ReduceScatter(d, count));
      }
      OCTET_RETURN_IF_ERROR(AllReduce(d, d == DType::kF32 ? big : 2 * big, false));
      // In place over several slots: over TCP each slot's step is summed
      // piece by piece while it lands, overwriting input already sent.
      if (d == DType::kF32) OCTET_RETURN_IF_ERROR(AllReduce(d, big, true));
    }
    for (size_t bytes : {size_t{1}, size_t{1000}, size_t{300001}, (size_t{3} << 20) + 1}) {
      OCTET_RETURN_IF_ERROR(Broadcast(bytes, static_cast<int>(bytes % n)));
    }
    for (size_t bytes : {size_t{0}, size_t{1}, (size_t{1} << 20) + 3}) {
      OCTET_RETURN_IF_ERROR(RingExchange(bytes));
    }
    OCTET_RETURN_IF_ERROR(BitIdentical(100003));
    ++ops;
    return c.Barrier();
  }
};

int Conform(const ArgParser& p, const std::string& rendezvous, int n, int r) {
  for (const std::string& tname : p.GetList("transports")) {
    auto transport = ParseTransport(tname);
    if (!transport.ok()) {
      std::printf("FAIL %s\n", transport.status().ToString().c_str());
      return 1;
    }
    if (*transport == TransportKind::kVerbs) {
      // Decided locally, alike on every rank of one host.
      if (Status probe = ProbeVerbs(TransportConfig{}); !probe.ok()) {
        std::printf("SKIP verbs: %s\n", probe.message().c_str());
        continue;
      }
    }
    for (AlgorithmKind algo : {AlgorithmKind::kOneShot, AlgorithmKind::kRing, AlgorithmKind::kAuto}) {
      CommunicatorOptions o;
      o.transport = *transport;
      o.algorithm = algo;
      o.oneshot_max_bytes = 16 << 10;  // auto: both algorithms within one run
      o.peer_timeout_ms = 30000;       // 8 ranks on 2 cores under sanitizers are slow
      auto comm = Communicator::Create(rendezvous, n, r, o);
      if (!comm.ok()) {
        std::printf("FAIL %s %s: %s\n", tname.c_str(), AlgorithmName(algo).data(),
                    comm.status().ToString().c_str());
        return 1;
      }
      if ((*comm)->transport() != *transport) {
        std::printf("FAIL %s fell back: %s\n", tname.c_str(), (*comm)->Describe().c_str());
        return 1;
      }
      Conformance run{**comm, n, r};
      if (Status s = run.Run(); !s.ok()) {
        std::printf("FAIL %s %s: %s\n", tname.c_str(), AlgorithmName(algo).data(),
                    s.ToString().c_str());
        return 1;
      }
      std::printf("OK %s %s: %d ops checked\n", tname.c_str(), AlgorithmName(algo).data(), run.ops);
      std::fflush(stdout);
    }
  }
  return 0;
}

int Loop(const ArgParser& p, const std::string& rendezvous, int n, int r) {
  CommunicatorOptions o;
  o.transport = *ParseTransport(p.GetString("transport"));
  o.algorithm = *ParseAlgorithm(p.GetString("algo"));
  o.peer_timeout_ms = static_cast<int>(*p.GetInt("timeout-ms"));
  const size_t count = static_cast<size_t>(*p.GetInt("count"));
  auto comm = Communicator::Create(rendezvous, n, r, o);
  if (!comm.ok()) {
    std::printf("ERROR %s\n", comm.status().ToString().c_str());
    return 2;
  }
  std::vector<float> v(count);
  for (int64_t it = 0;; ++it) {
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(IntValue(r, i, int(it % 1000)));
    Status s = (*comm)->AllReduce(v.data(), count, DType::kF32);
    if (!s.ok()) {
      std::printf("ERROR %s\nFAILED_PEER %d\n", s.ToString().c_str(), (*comm)->failed_peer());
      std::fflush(stdout);
      // Poisoned: any further call fails at once with the same error.
      Status again = (*comm)->Barrier();
      if (again.ok() || again.message() != (*comm)->health().message()) {
        std::printf("NOT_POISONED\n");
        return 5;
      }
      return 3;
    }
    for (size_t i = 0; i < count; ++i) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += IntValue(q, i, int(it % 1000));
      if (v[i] != static_cast<float>(sum)) {
        std::printf("WRONG iteration %lld element %zu\n", static_cast<long long>(it), i);
        return 4;
      }
    }
    if (it == 20) {
      std::printf("READY\n");
      std::fflush(stdout);
    }
  }
}

}  // namespace

std::vector<std::string> RankWorkerArgv(const std::string& exe, const std::string& mode,
                                        const std::string& rendezvous, int ranks, int rank,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {exe,          kRankWorkerFlag,        mode,
                                   "--rendezvous", rendezvous,          "--ranks",
                                   std::to_string(ranks), "--rank",     std::to_string(rank)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

int RankWorkerMain(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[2];
  ArgParser p("rank-worker", "one rank of a collectives test");
  p.Option("rendezvous", "HOST:PORT", "rank 0's address");
  p.Option("ranks", "N", "world size");
  p.Option("rank", "R", "this rank");
  p.Option("transports", "LIST", "conformance: transports to run", "shm,tcp,verbs");
  p.Option("transport", "T", "loop: transport", "shm");
  p.Option("algo", "A", "loop: algorithm", "oneshot");
  p.Option("count", "N", "loop: f32 elements per all-reduce", "4096");
  p.Option("timeout-ms", "MS", "loop: peer timeout", "3000");
  std::vector<std::string> args(argv + 3, argv + argc);
  if (Status s = p.Parse(args); !s.ok()) {
    std::printf("FAIL %s\n", s.ToString().c_str());
    return 2;
  }
  const int n = static_cast<int>(*p.GetInt("ranks"));
  const int r = static_cast<int>(*p.GetInt("rank"));
  SetLogTag("rank " + std::to_string(r));
  const std::string rendezvous = p.GetString("rendezvous");
  if (mode == "conformance") return Conform(p, rendezvous, n, r);
  if (mode == "loop") return Loop(p, rendezvous, n, r);
  std::printf("FAIL unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace octet::collectives::test
