// `octet collbench`: benchmark collectives like nccl-tests.
//
// Without --rendezvous it spawns --ranks processes of itself on this host
// (each joining a rendezvous on 127.0.0.1) and waits for them; with
// --rendezvous HOST:PORT --rank R this process is one rank of a job started
// on several hosts. Rank 0 prints one row per size: bytes, count, dtype,
// algorithm, p50/p99 time of the slowest rank (µs), algbw = bytes / p50 and
// busbw (GB/s; all-reduce busbw = algbw * 2(n-1)/n, all-gather and
// reduce-scatter (n-1)/n), and #wrong with --check. --json prints one JSON
// document instead.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/cpu_affinity.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/subprocess.h"
#include "octet/collectives/communicator.h"
#include "octet/collectives/local_rendezvous.h"

namespace octet::cli {

namespace {

using collectives::AlgorithmKind;
using collectives::CollectiveOp;
using collectives::Communicator;
using collectives::CommunicatorOptions;
using collectives::DType;
using collectives::TransportKind;

struct BenchConfig {
  int ranks = 2;
  TransportKind transport = TransportKind::kShm;
  AlgorithmKind algorithm = AlgorithmKind::kAuto;
  std::string algo_text;
  CollectiveOp op = CollectiveOp::kAllReduce;
  DType dtype = DType::kF32;
  int64_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 50, warmup = 10;
  bool check = false, json = false;
  int timeout_ms = 10000;
  int connect_timeout_ms = 60000;
  int64_t oneshot_max = 0;
  std::string profile;
  std::string bind = "core";
  int cpu = -1;  // pin to this allowed CPU (index), -1: no pinning
};

struct Row {
  size_t bytes = 0, count = 0;
  AlgorithmKind algorithm = AlgorithmKind::kAuto;
  double p50_us = 0, p99_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;  // -1: not checked
};

ArgParser MakeParser() {
  ArgParser p("octet collbench",
              "Benchmark collectives like nccl-tests: one row per size with the slowest rank's\n"
              "p50/p99 time, algbw, busbw and #wrong. Spawns --ranks processes on this host,\n"
              "or joins a job on several hosts with --rendezvous HOST:PORT --rank R.");
  p.Option("ranks", "N", "number of ranks (processes)", "2");
  p.Option("transport", "T", "shm, tcp, verbs, nccl or auto", "shm");
  p.Option("algo", "A", "oneshot, ring, auto or nccl", "auto");
  p.Option("op", "OP", "all_reduce, all_gather or reduce_scatter", "all_reduce");
  p.Option("dtype", "D", "f32, bf16 or f16", "f32");
  p.Option("min-bytes", "SIZE", "smallest message (8, 4K, 1M...)", "8");
  p.Option("max-bytes", "SIZE", "largest message", "64M");
  p.Option("factor", "F", "size multiplier between rows", "2");
  p.Option("iters", "N", "timed iterations per size", "50");
  p.Option("warmup", "N", "untimed iterations per size", "10");
  p.Flag("check", "verify every result against the expected sum (#wrong)");
  p.Flag("json", "print one JSON document on stdout");
  p.Option("rendezvous", "HOST:PORT", "join a job: rank 0's address (with --rank)");
  p.Option("rank", "R", "this process's rank when joining a job");
  p.Option("timeout-ms", "MS", "peer timeout: a silent peer fails the run after this", "10000");
  p.Option("connect-timeout-ms", "MS", "how long to wait for every rank to join", "60000");
  p.Option("bind", "core|none",
           "spawned ranks: pin rank r to the r-th allowed CPU (as mpirun does for small jobs); "
           "core applies when ranks <= CPUs",
           "core");
  p.Option("cpu", "K", "pin this process to its K-th allowed CPU (set by --bind for spawned ranks)");
  p.Option("oneshot-max", "SIZE", "auto: one-shot up to this size (default: measure)");
  p.Option("profile", "FILE", "auto: read/store the measured algorithm table here");
  return p;
}

Result<BenchConfig> ReadConfig(const ArgParser& p) {
  BenchConfig c;
  OCTET_ASSIGN_OR_RETURN(int64_t ranks, p.GetInt("ranks"));
  if (ranks < 1 || ranks > 256) return InvalidArgumentError("--ranks must be 1..256");
  c.ranks = static_cast<int>(ranks);
  OCTET_ASSIGN_OR_RETURN(c.transport, collectives::ParseTransport(p.GetString("transport")));
  c.algo_text = p.GetString("algo");
  if (c.algo_text == "nccl") {
    c.transport = TransportKind::kNccl;
  } else {
    OCTET_ASSIGN_OR_RETURN(c.algorithm, collectives::ParseAlgorithm(c.algo_text));
  }
  OCTET_ASSIGN_OR_RETURN(c.op, collectives::ParseOp(p.GetString("op")));
  if (c.op != CollectiveOp::kAllReduce && c.op != CollectiveOp::kAllGather &&
      c.op != CollectiveOp::kReduceScatter) {
    return InvalidArgumentError("--op must be all_reduce, all_gather or reduce_scatter");
  }
  OCTET_ASSIGN_OR_RETURN(c.dtype, collectives::ParseDType(p.GetString("dtype")));
  OCTET_ASSIGN_OR_RETURN(c.min_bytes, p.GetBytes("min-bytes"));
  OCTET_ASSIGN_OR_RETURN(c.max_bytes, p.GetBytes("max-bytes"));
  if (c.min_bytes < 1 || c.max_bytes < c.min_bytes || c.max_bytes > (int64_t{8} << 30)) {
    return InvalidArgumentError("need 1 <= --min-bytes <= --max-bytes <= 8G");
  }
  OCTET_ASSIGN_OR_RETURN(c.factor, p.GetDouble("factor"));
  if (!(c.factor > 1.0)) return InvalidArgumentError("--factor must be greater than 1");
  OCTET_ASSIGN_OR_RETURN(int64_t iters, p.GetInt("iters"));
  OCTET_ASSIGN_OR_RETURN(int64_t warmup, p.GetInt("warmup"));
  if (iters < 1 || iters > 1'000'000 || warmup < 0 || warmup > 1'000'000) {
    return InvalidArgumentError("--iters must be >= 1 and --warmup >= 0");
  }
  c.iters = static_cast<int>(iters);
  c.warmup = static_cast<int>(warmup);
  OCTET_ASSIGN_OR_RETURN(int64_t timeout, p.GetInt("timeout-ms"));
  if (timeout < 1 || timeout > 3'600'000) return InvalidArgumentError("--timeout-ms must be 1..3600000");
  c.timeout_ms = static_cast<int>(timeout);
  OCTET_ASSIGN_OR_RETURN(int64_t connect_timeout, p.GetInt("connect-timeout-ms"));
  if (connect_timeout < 1 || connect_timeout > 3'600'000) {
    return InvalidArgumentError("--connect-timeout-ms must be 1..3600000");
  }
  c.connect_timeout_ms = static_cast<int>(connect_timeout);
  if (p.Given("oneshot-max")) {
    OCTET_ASSIGN_OR_RETURN(c.oneshot_max, p.GetBytes("oneshot-max"));
    if (c.oneshot_max < 1) return InvalidArgumentError("--oneshot-max must be positive");
  }
  c.profile = p.GetString("profile");
  c.bind = p.GetString("bind");
  if (c.bind != "core" && c.bind != "none") return InvalidArgumentError("--bind must be core or none");
  if (p.Given("cpu")) {
    OCTET_ASSIGN_OR_RETURN(int64_t cpu, p.GetInt("cpu"));
    if (cpu < 0 || cpu > 4096) return InvalidArgumentError("--cpu must be 0..4096");
    c.cpu = static_cast<int>(cpu);
  }
  c.check = p.GetFlag("check");
  c.json = p.GetFlag("json");
  return c;
}

// Elements per rank for a row of `bytes` total (all-gather: the gathered
// output; reduce-scatter: the scattered input), so that count * elem * parts
// is the row's byte size.
size_t PerRankCount(const BenchConfig& c, int64_t bytes) {
  const size_t elem = collectives::DTypeSize(c.dtype);
  const size_t parts = c.op == CollectiveOp::kAllReduce ? 1 : static_cast<size_t>(c.ranks);
  return std::max<size_t>(1, static_cast<size_t>(bytes) / (elem * parts));
}

// Integer-valued inputs: sums are exact in every dtype and order, so a
// result can be checked for equality.
int InputValue(int rank, size_t i) { return static_cast<int>((rank + 1) * (i % 5 + 1) % 7) - 3; }

void Store(DType d, uint8_t* p, int v) {
  const float f = static_cast<float>(v);
  if (d == DType::kF32) {
    std::memcpy(p, &f, 4);
    return;
  }
  // bf16 and f16 hold small integers exactly; build their bits directly.
  uint16_t h = 0;
  if (v != 0) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (d == DType::kBF16) {
      h = static_cast<uint16_t>(u >> 16);
    } else {
      const uint32_t sign = (u >> 16) & 0x8000u;
      const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
      h = static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((u >> 13) & 0x3ff));
    }
  }
  std::memcpy(p, &h, 2);
}

// Number of elements of `got` that differ from `want` (both raw bytes).
int64_t CountWrong(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t elem) {
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size(); i += elem) wrong += std::memcmp(&got[i], &want[i], elem) != 0;
  return wrong;
}

// Nearest-rank percentile (q in (0, 1]).
double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  k = std::min(v.size(), std::max<size_t>(k, 1)) - 1;
  return v[k];
}

// Runs the benchmark as one rank; rank 0 returns the rows.
Result<std::vector<Row>> RunRank(Communicator& comm, const BenchConfig& c) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = collectives::DTypeSize(c.dtype);
  std::vector<Row> rows;
  size_t last_count = 0;
  for (double b = static_cast<double>(c.min_bytes); b <= static_cast<double>(c.max_bytes) * 1.0001;
       b *= c.factor) {
    const size_t count = PerRankCount(c, static_cast<int64_t>(b));
    if (count == last_count) continue;
    last_count = count;
    const size_t in_elems = c.op == CollectiveOp::kReduceScatter ? count * n : count;
    const size_t out_elems = c.op == CollectiveOp::kAllGather ? count * n : count;
    std::vector<uint8_t> in(in_elems * elem), out(out_elems * elem), want;
    for (size_t i = 0; i < in_elems; ++i) Store(c.dtype, &in[i * elem], InputValue(r, i));
    if (c.check) {
      want.resize(out.size());
      for (size_t i = 0; i < out_elems; ++i) {
        int v = 0;
        if (c.op == CollectiveOp::kAllReduce) {
          for (int q = 0; q < n; ++q) v += InputValue(q, i);
        } else if (c.op == CollectiveOp::kAllGather) {
          v = InputValue(static_cast<int>(i / count), i % count);
        } else {
          for (int q = 0; q < n; ++q) v += InputValue(q, r * count + i);
        }
        Store(c.dtype, &want[i * elem], v);
      }
    }
    auto run_once = [&]() -> Status {
      switch (c.op) {
        case CollectiveOp::kAllGather: return comm.AllGather(in.data(), out.data(), count, c.dtype);
        case CollectiveOp::kReduceScatter:
          return comm.ReduceScatter(in.data(), out.data(), count, c.dtype);
        default: return comm.AllReduce(in.data(), out.data(), count, c.dtype);
      }
    };
    for (int i = 0; i < c.warmup; ++i) OCTET_RETURN_IF_ERROR(run_once());
    std::vector<double> mine(c.iters);
    int64_t wrong = 0;
    for (int i = 0; i < c.iters; ++i) {
      if (c.check) std::fill(out.begin(), out.end(), uint8_t{0xa5});
      const int64_t start = NowNs();
      OCTET_RETURN_IF_ERROR(run_once());
      mine[i] = static_cast<double>(NowNs() - start) * 1e-3;
      if (c.check) wrong += CountWrong(out, want, elem);
    }
    // The slowest rank's time of each iteration; wrong elements summed.
    std::vector<double> all(static_cast<size_t>(n) * c.iters);
    OCTET_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), 2 * c.iters, DType::kF32));
    std::vector<int64_t> wrongs(n);
    OCTET_RETURN_IF_ERROR(comm.AllGather(&wrong, wrongs.data(), 2, DType::kF32));
    std::vector<double> slowest(c.iters, 0);
    for (int q = 0; q < n; ++q) {
      for (int i = 0; i < c.iters; ++i) slowest[i] = std::max(slowest[i], all[q * c.iters + i]);
    }
    Row row;
    row.count = c.op == CollectiveOp::kAllReduce ? count : count * n;
    row.bytes = row.count * elem;
    const size_t payload = c.op == CollectiveOp::kAllReduce ? count * elem
                           : c.op == CollectiveOp::kAllGather ? count * elem
                                                              : count * elem * n;
    row.algorithm = comm.AlgorithmFor(c.op, payload);
    row.p50_us = Percentile(slowest, 0.5);
    row.p99_us = Percentile(slowest, 0.99);
    row.algbw = static_cast<double>(row.bytes) / (row.p50_us * 1e-6) / 1e9;
    const double factor = c.op == CollectiveOp::kAllReduce ? 2.0 * (n - 1) / n
                                                           : static_cast<double>(n - 1) / n;
    row.busbw = row.algbw * factor;
    if (c.check) {
      row.wrong = 0;
      for (int64_t w : wrongs) row.wrong += w;
    }
    rows.push_back(row);
    if (r == 0 && !c.json) {
      char line[256];
      std::snprintf(line, sizeof line, "%12zu %12zu %6s %8s %10.2f %10.2f %10.3f %10.3f %8s\n",
                    row.bytes, row.count, collectives::DTypeName(c.dtype).data(),
                    comm.transport() == TransportKind::kNccl
                        ? "nccl"
                        : collectives::AlgorithmName(row.algorithm).data(),
                    row.p50_us, row.p99_us, row.algbw, row.busbw,
                    c.check ? std::to_string(row.wrong).c_str() : "-");
      std::cout << line << std::flush;
    }
  }
  return rows;
}

int RunJoined(const BenchConfig& c, const std::string& rendezvous, int rank) {
  SetLogTag("rank " + std::to_string(rank));
  if (c.cpu >= 0 && !PinToCpuIndices({c.cpu})) {
    OCTET_LOG(WARNING) << "cannot pin rank " << rank << " to allowed CPU #" << c.cpu;
  }
  CommunicatorOptions o;
  o.transport = c.transport;
  o.algorithm = c.algorithm;
  o.peer_timeout_ms = c.timeout_ms;
  o.connect_timeout_ms = c.connect_timeout_ms;
  o.oneshot_max_bytes = static_cast<size_t>(c.oneshot_max);
  o.crossover_profile = c.profile;
  auto comm = Communicator::Create(rendezvous, c.ranks, rank, o);
  if (!comm.ok()) {
    std::cerr << "octet collbench: " << comm.status().message() << "\n";
    return kExitFailure;
  }
  Communicator& cm = **comm;
  if (rank == 0 && !c.json) {
    std::cout << "# octet collbench: " << collectives::OpName(c.op) << " "
              << collectives::DTypeName(c.dtype) << ", " << cm.Describe() << "\n"
              << "# time: p50/p99 of the slowest rank over " << c.iters << " iterations ("
              << c.warmup << " warm-up); busbw = algbw * "
              << (c.op == CollectiveOp::kAllReduce ? "2(n-1)/n" : "(n-1)/n") << "\n#\n"
              << "#      bytes        count  dtype     algo    p50(us)    p99(us) algbw(GB/s) "
                 "busbw(GB/s)  #wrong\n"
              << std::flush;
  }
  auto rows = RunRank(cm, c);
  if (!rows.ok()) {
    std::cerr << "octet collbench: " << rows.status().message() << "\n";
    return kExitFailure;
  }
  int64_t wrong = 0;
  double busbw_sum = 0;
  for (const Row& row : *rows) {
    wrong += std::max<int64_t>(0, row.wrong);
    busbw_sum += row.busbw;
  }
  if (rank == 0) {
    if (c.json) {
      nlohmann::json doc;
      doc["op"] = collectives::OpName(c.op);
      doc["dtype"] = collectives::DTypeName(c.dtype);
      doc["ranks"] = c.ranks;
      doc["transport"] = collectives::TransportName(cm.transport());
      doc["requested_transport"] = collectives::TransportName(c.transport);
      doc["algorithm"] = c.algo_text;
      doc["fallback_reason"] = cm.fallback_reason();
      doc["oneshot_max_bytes"] = cm.algorithm() == AlgorithmKind::kAuto &&
                                         cm.transport() != TransportKind::kNccl
                                     ? nlohmann::json(cm.oneshot_max_bytes())
                                     : nlohmann::json(nullptr);
      // auto's table: per band, the largest bytes per rank (null: every
      // larger size) and the algorithm.
      doc["algorithm_bands"] = nlohmann::json::array();
      for (const collectives::AlgorithmBand& band : cm.algorithm_bands()) {
        doc["algorithm_bands"].push_back(
            {{"max_bytes", band.max_bytes == std::numeric_limits<size_t>::max()
                               ? nlohmann::json(nullptr)
                               : nlohmann::json(band.max_bytes)},
             {"algorithm", std::string(collectives::AlgorithmName(band.algorithm))}});
      }
      doc["iters"] = c.iters;
      doc["warmup"] = c.warmup;
      doc["check"] = c.check;
      doc["rows"] = nlohmann::json::array();
      for (const Row& row : *rows) {
        doc["rows"].push_back({
            {"bytes", row.bytes},
            {"count", row.count},
            {"algorithm", cm.transport() == TransportKind::kNccl
                              ? "nccl"
                              : std::string(collectives::AlgorithmName(row.algorithm))},
            {"time_us_p50", row.p50_us},
            {"time_us_p99", row.p99_us},
            {"algbw_gbps", row.algbw},
            {"busbw_gbps", row.busbw},
            {"wrong", c.check ? nlohmann::json(row.wrong) : nlohmann::json(nullptr)},
        });
      }
      doc["avg_busbw_gbps"] = rows->empty() ? 0.0 : busbw_sum / rows->size();
      doc["wrong"] = c.check ? nlohmann::json(wrong) : nlohmann::json(nullptr);
      std::cout << doc.dump() << "\n";
    } else {
      std::cout << "# avg busbw: " << (rows->empty() ? 0.0 : busbw_sum / rows->size())
                << " GB/s; #wrong: " << (c.check ? std::to_string(wrong) : "not checked")
                << "\n";
    }
  }
  if (wrong > 0) {
    if (rank == 0) std::cerr << "octet collbench: " << wrong << " wrong elements\n";
    return kExitFailure;
  }
  return kExitOk;
}


// Spawns one process per rank (this program, joining a loopback rendezvous)
// and waits for all of them. A rank that fails makes the others fail within
// their peer timeout; they are killed if they take longer than that.
int RunSpawned(const BenchConfig& c, const std::vector<std::string>& args) {
  auto exe = SelfExecutablePath();
  if (!exe.ok()) {
    std::cerr << "octet collbench: " << exe.status().message() << "\n";
    return kExitFailure;
  }
  // Bound here, before any rank starts, and inherited by rank 0: a port that
  // was merely free a moment ago can be taken before rank 0 binds it.
  auto listener = collectives::LocalRendezvous::Open();
  if (!listener.ok()) {
    std::cerr << "octet collbench: " << listener.status().message() << "\n";
    return kExitFailure;
  }
  const std::string rendezvous = listener->address();
  // Like mpirun for small jobs: one rank per CPU, so the scheduler cannot
  // stack two ranks on one core while another sits idle.
  const bool bind = c.bind == "core" && c.ranks <= static_cast<int>(AllowedCpus().size());
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < c.ranks; ++r) {
    SpawnOptions o;
    o.argv = {*exe, "collbench"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--rendezvous", rendezvous, "--rank", std::to_string(r)});
    if (bind) o.argv.insert(o.argv.end(), {"--cpu", std::to_string(r)});
    if (r == 0) o.env.push_back(collectives::LocalRendezvous::EnvFor({&*listener}));
    o.new_process_group = false;  // Ctrl-C reaches the ranks too
    auto p = Subprocess::Spawn(o);  // output inherited: rank 0 prints the table
    if (r == 0) listener->Close();  // rank 0 holds it; no other child may
    if (!p.ok()) {
      std::cerr << "octet collbench: cannot start rank " << r << ": " << p.status().message()
                << "\n";
      return kExitFailure;
    }
    procs.push_back(std::move(*p));
  }
  int failed_rank = -1;
  ExitStatus failed_status;
  std::vector<bool> done(c.ranks, false);
  int remaining = c.ranks;
  std::optional<Deadline> give_up;
  while (remaining > 0) {
    for (int r = 0; r < c.ranks; ++r) {
      if (done[r]) continue;
      if (auto st = procs[r]->Poll()) {
        done[r] = true;
        --remaining;
        if (!st->success() && failed_rank < 0) {
          failed_rank = r;
          failed_status = *st;
          // The others notice within their peer timeout; allow that and more.
          give_up = Deadline::AfterMs(c.timeout_ms * 2 + 5000);
        }
      }
    }
    if (give_up && give_up->expired()) {
      for (int r = 0; r < c.ranks; ++r) {
        if (!done[r]) procs[r]->Terminate(std::chrono::milliseconds(500));
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (failed_rank >= 0) {
    std::cerr << "octet collbench: rank " << failed_rank << " failed (" << failed_status.ToString()
              << ")\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int RunCollbench(const std::vector<std::string>& args) {
  ArgParser p = MakeParser();
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  auto config = ReadConfig(p);
  if (!config.ok()) {
    std::cerr << "octet collbench: " << config.status().message() << "\n";
    return kExitUsage;
  }
  if (p.Given("rendezvous") != p.Given("rank")) {
    std::cerr << "octet collbench: --rendezvous and --rank go together\n";
    return kExitUsage;
  }
  if (p.Given("rendezvous")) {
    auto rank = p.GetInt("rank");
    if (!rank.ok() || *rank < 0 || *rank >= config->ranks) {
      std::cerr << "octet collbench: --rank must be 0.." << config->ranks - 1 << "\n";
      return kExitUsage;
    }
    return RunJoined(*config, p.GetString("rendezvous"), static_cast<int>(*rank));
  }
  return RunSpawned(*config, args);
}

}  // namespace octet::cli
