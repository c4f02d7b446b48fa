// octet_bench_collectives: the collectives figures of issue 5 in one run.
//
//   build/default/bin/octet_bench_collectives [--ranks 2,4] [--transports shm,tcp]
//       [--min-bytes 8] [--max-bytes 64M] [--iters 20] [--warmup 5] [--block 5]
//       [--repeats 3] [--no-mpi] [--in-place] [--json]
//
// For every world size and transport it starts --ranks processes of itself
// (worker mode), each holding an auto communicator (it measures its table at
// start-up, as a user's would) on which one-shot and ring also run, forced
// (Communicator::AllReduceWith), so the three differ only in the algorithm:
// the same links, sockets and waiter state. (With --separate-communicators a
// one-shot and a ring communicator of their own run them instead, given the
// 16 MiB all-reduces of auto's start-up unless --no-equal-warmup; at 4 ranks
// over TCP two communicators running the same algorithm differed by 10-20%.)
// Per size the three take turns in blocks of --block timed iterations, the block order
// rotating, until each has run --iters iterations: noise on a shared machine
// hits all three alike. It reports per size each algorithm's p50 of the
// slowest rank and auto over the better of one-shot and ring (the better by
// p50 over the run): the median of per-round ratios (auto's block median
// over that algorithm's block median in the same round) and their spread
// (25th-75th percentile). That whole run is repeated --repeats times, taking turns with
// OpenMPI's MPI_Allreduce on the same sizes when mpirun and
// octet_bench_mpi_allreduce are there (`--mca pml ob1 --mca btl self,tcp` for
// the TCP rows: OpenMPI's TCP BTL, like for like; OpenMPI's default, shared
// memory, otherwise); auto/best is the median over repeats, the OpenMPI
// ratio compares each side's best p50 over repeats. Plus this machine's
// single-thread memcpy bandwidth. Summary per configuration: where one-shot
// stops winning, auto's worst ratio, auto's start-up time, the shm one-shot
// latency at 8-32 KB, ring busbw at the largest size as a fraction of memcpy
// bandwidth. Figures are as measured on a possibly busy machine; compare
// ratios within one run.
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet/collectives/communicator.h"
#include "octet/collectives/local_rendezvous.h"

using namespace octet;
using nlohmann::json;

namespace {

struct Output {
  int code = -1;
  std::string out;
};

Output Run(const std::vector<std::string>& argv, int timeout_s = 3600) {
  Output r;
  auto text = std::make_shared<std::string>();
  auto mu = std::make_shared<std::mutex>();
  SpawnOptions o;
  o.argv = argv;
  o.on_output = [text, mu](std::string_view c) {
    std::lock_guard<std::mutex> l(*mu);
    text->append(c);
  };
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) {
    r.out = p.status().ToString();
    return r;
  }
  auto st = (*p)->Wait(Deadline::AfterMs(int64_t{timeout_s} * 1000));
  if (!st.ok()) {
    (*p)->Terminate(std::chrono::milliseconds(500));
    r.out = "timed out";
    return r;
  }
  r.code = st->exited ? st->code : -st->signal;
  std::lock_guard<std::mutex> l(*mu);
  r.out = *text;
  return r;
}

// The JSON document in a program's output (the line that starts with '{').
json FindJson(const std::string& out) {
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    if (out[at] == '{') {
      json j = json::parse(out.substr(at, end - at), nullptr, false);
      if (!j.is_discarded()) return j;
    }
    at = end + 1;
  }
  return json();
}

// Single-thread memcpy bandwidth over `bytes` (best of several), GB/s.
double MemcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    const int64_t t0 = NowNs();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = static_cast<double>(NowNs() - t0) * 1e-9;
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    a[i] = b[bytes - 1 - i];  // keep the copies observable
  }
  return best;
}

int64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Bookkeeping cost of one collective call: a world of one rank, where the
// call does its checks, statistics, algorithm choice and a 4-byte local step.
// Thread CPU time, so a busy machine's preemptions do not count.
double PerCallOverheadNs() {
  collectives::CommunicatorOptions o;
  o.algorithm = collectives::AlgorithmKind::kOneShot;
  auto comm = collectives::Communicator::Create("127.0.0.1:1", 1, 0, o);
  if (!comm.ok()) return NAN;
  float x = 1;
  const int calls = 200000;
  const int64_t t0 = ThreadCpuNs();
  for (int i = 0; i < calls; ++i) {
    if (!(*comm)->AllReduce(&x, 1, collectives::DType::kF32).ok()) return NAN;
  }
  return static_cast<double>(ThreadCpuNs() - t0) / calls;
}

std::string Which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string c = p.substr(start, end - start) + "/" + name;
    if (end > start && ::access(c.c_str(), X_OK) == 0) return c;
    start = end + 1;
  }
  return {};
}

std::map<int64_t, json> RowsBySize(const json& doc) {
  std::map<int64_t, json> m;
  if (doc.is_object() && doc.contains("rows")) {
    for (const json& r : doc["rows"]) m[r["bytes"].get<int64_t>()] = r;
  }
  return m;
}


// --- worker mode: one rank of an interleaved one-shot / ring / auto run ---

constexpr const char* kAlgos[3] = {"oneshot", "ring", "auto"};

int InputValue(int rank, size_t i) { return static_cast<int>((rank + 1) * (i % 5 + 1) % 7) - 3; }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  k = std::min(v.size(), std::max<size_t>(k, 1)) - 1;
  return v[k];
}

// Runs as rank `rank`; rank 0 prints one JSON document: per size the three
// algorithms' p50 (slowest rank per iteration), auto's choice, auto/best and
// the per-round ratios' quartiles, #wrong; auto's start-up time.
int RunWorker(const ArgParser& p) {
  using namespace collectives;
  const int64_t rank = p.GetInt("rank").value_or(-1), n = p.GetInt("worker").value_or(0);
  const auto ports = p.GetIntList("ports");
  const auto min_bytes = ParseByteSize(p.GetString("min-bytes"));
  const auto max_bytes = ParseByteSize(p.GetString("max-bytes"));
  const int64_t iters = p.GetInt("iters").value_or(0), warmup = p.GetInt("warmup").value_or(0);
  const int64_t block = p.GetInt("block").value_or(0);
  const bool in_place = p.GetFlag("in-place");
  auto transport = ParseTransport(p.GetString("transports"));
  if (rank < 0 || rank >= n || !ports.ok() || ports->size() != 3 || !min_bytes.ok() ||
      !max_bytes.ok() || iters < 1 || block < 1 || warmup < 0 || !transport.ok()) {
    std::cerr << "octet_bench_collectives: bad worker arguments\n";
    return 2;
  }
  if (p.Given("cpu")) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(p.GetInt("cpu").value_or(0)), &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  std::unique_ptr<Communicator> comm[3];
  double auto_startup_ms = 0;
  for (int a = 0; a < 3; ++a) {
    CommunicatorOptions o;
    o.transport = *transport;
    o.algorithm = *ParseAlgorithm(kAlgos[a]);
    o.peer_timeout_ms = 10000;
    const int64_t t0 = NowNs();
    auto c = Communicator::Create("127.0.0.1:" + std::to_string((*ports)[a]), static_cast<int>(n),
                                  static_cast<int>(rank), o);
    if (!c.ok()) {
      std::cerr << "rank " << rank << ": " << c.status().ToString() << "\n";
      return 1;
    }
    if (a == 2) auto_startup_ms = static_cast<double>(NowNs() - t0) / 1e6;
    comm[a] = std::move(*c);
  }
  // auto's start-up ran 16 MiB all-reduces on its links (TCP sockets grow
  // their buffers with such traffic, which moves 256 KiB-1 MiB times by
  // 10-30%); give the one-shot and ring communicators the same history so
  // the three differ only in the algorithm.
  const bool separate = p.GetFlag("separate-communicators");
  if (separate && !p.GetFlag("no-equal-warmup")) {
    std::vector<float> big((size_t{16} << 20) / sizeof(float), 1.0f);
    for (int a = 0; a < 2; ++a) {
      for (int i = 0; i < 3; ++i) {
        if (!comm[a]->AllReduce(big.data(), big.size(), DType::kF32).ok()) return 1;
      }
    }
  }
  json doc;
  doc["ranks"] = n;
  doc["transport"] = TransportName(comm[2]->transport());
  doc["auto_startup_ms"] = auto_startup_ms;
  doc["auto_table"] = comm[2]->Describe();
  doc["rows"] = json::array();
  for (int64_t bytes = std::max<int64_t>(*min_bytes, 4); bytes <= *max_bytes; bytes *= 2) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    std::vector<float> in(count), out(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      in[i] = static_cast<float>(InputValue(static_cast<int>(rank), i));
      int v = 0;
      for (int q = 0; q < n; ++q) v += InputValue(q, i);
      want[i] = static_cast<float>(v);
    }
    int64_t wrong = 0;
    // In place (the engine's and the trainer's call) each run's input is the
    // sum of the run before: the buffer starts at zero and must stay zero.
    auto Once = [&](int a) {
      const float* src = in_place ? out.data() : in.data();
      if (a == 2 || separate) return comm[a]->AllReduce(src, out.data(), count, DType::kF32).ok();
      const AlgorithmKind forced = a == 0 ? AlgorithmKind::kOneShot : AlgorithmKind::kRing;
      return comm[2]->AllReduceWith(forced, src, out.data(), count, DType::kF32).ok();
    };
    if (in_place) {
      std::fill(out.begin(), out.end(), 0.0f);
      std::fill(want.begin(), want.end(), 0.0f);
    }
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < warmup; ++i) {
        if (!Once(a)) return 1;
      }
      for (size_t i = 0; i < count; ++i) wrong += out[i] != want[i];
    }
    // times[a]: this rank's time of each of algorithm a's iterations, in
    // round order; round r runs algorithm (r + j) % 3 as its j-th block.
    const int64_t rounds = (iters + block - 1) / block;
    std::vector<double> times[3];
    for (int64_t r = 0; r < rounds; ++r) {
      for (int j = 0; j < 3; ++j) {
        const int a = static_cast<int>((r + j) % 3);
        for (int64_t i = 0; i < block; ++i) {
          const int64_t t0 = NowNs();
          if (!Once(a)) return 1;
          times[a].push_back(static_cast<double>(NowNs() - t0) * 1e-3);
        }
      }
    }
    for (size_t i = 0; i < count; ++i) wrong += out[i] != want[i];
    // Slowest rank per iteration, over the auto communicator (doubles as
    // pairs of f32 words: all-gather copies bytes).
    const size_t per = static_cast<size_t>(rounds * block);
    std::vector<double> mine(3 * per), all(3 * per * static_cast<size_t>(n));
    for (int a = 0; a < 3; ++a) std::copy(times[a].begin(), times[a].end(), mine.begin() + a * per);
    if (!comm[2]->AllGather(mine.data(), all.data(), 2 * mine.size(), DType::kF32).ok()) return 1;
    int64_t wrong_all = 0;
    std::vector<int64_t> wrongs(n);
    if (!comm[2]->AllGather(&wrong, wrongs.data(), 2, DType::kF32).ok()) return 1;
    for (int64_t w : wrongs) wrong_all += w;
    if (rank != 0) continue;
    std::vector<double> slowest[3];
    for (int a = 0; a < 3; ++a) {
      slowest[a].assign(per, 0);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < per; ++i) {
          slowest[a][i] = std::max(slowest[a][i], all[q * 3 * per + a * per + i]);
        }
      }
    }
    const double p50[3] = {Quantile(slowest[0], 0.5), Quantile(slowest[1], 0.5),
                           Quantile(slowest[2], 0.5)};
    // Per-round ratio: auto's block median over the block median of the
    // algorithm that is better over the whole run (not the better block of
    // each round: the smaller of two noisy figures is biased low).
    const int best = p50[0] <= p50[1] ? 0 : 1;
    std::vector<double> round_ratio;
    for (int64_t r = 0; r < rounds; ++r) {
      double med[3];
      for (int a = 0; a < 3; ++a) {
        std::vector<double> b(slowest[a].begin() + r * block, slowest[a].begin() + (r + 1) * block);
        med[a] = Quantile(b, 0.5);
      }
      round_ratio.push_back(med[2] / med[best]);
    }
    const AlgorithmKind chose = comm[2]->AlgorithmFor(CollectiveOp::kAllReduce, count * 4);
    doc["rows"].push_back({{"bytes", count * 4},
                           {"oneshot_us", p50[0]},
                           {"ring_us", p50[1]},
                           {"auto_us", p50[2]},
                           {"auto_algorithm", AlgorithmName(chose)},
                           {"auto_over_best_pooled", p50[2] / p50[best]},
                           {"auto_over_best", Quantile(round_ratio, 0.5)},
                           {"auto_over_best_q25", Quantile(round_ratio, 0.25)},
                           {"auto_over_best_q75", Quantile(round_ratio, 0.75)},
                           {"wrong", wrong_all}});
  }
  if (rank == 0) std::cout << doc.dump() << "\n" << std::flush;
  return 0;
}

// Starts `n` workers of this program and returns rank 0's JSON document
// (null on failure, with the output in *error).
json RunInterleaved(const std::string& self, int64_t n, const std::string& transport,
                    const std::vector<std::string>& common, std::string* error) {
  // Bound here and inherited by rank 0 (see local_rendezvous.h): no other
  // process can take the ports before rank 0 listens on them.
  std::vector<collectives::LocalRendezvous> listeners;
  std::vector<std::string> ports;
  for (int a = 0; a < 3; ++a) {
    auto l = collectives::LocalRendezvous::Open();
    if (!l.ok()) {
      *error = l.status().ToString();
      return json();
    }
    ports.push_back(std::to_string(l->port()));
    listeners.push_back(std::move(*l));
  }
  const std::string port_list = ports[0] + "," + ports[1] + "," + ports[2];
  // Like mpirun for small jobs: one rank per CPU when there are enough.
  const bool bind = n <= static_cast<int64_t>(std::thread::hardware_concurrency());
  std::vector<std::unique_ptr<Subprocess>> procs;
  std::vector<std::shared_ptr<std::string>> texts;
  auto mu = std::make_shared<std::mutex>();
  for (int64_t r = 0; r < n; ++r) {
    auto text = std::make_shared<std::string>();
    texts.push_back(text);
    SpawnOptions o;
    o.argv = {self, "--worker", std::to_string(n), "--rank", std::to_string(r), "--ports",
              port_list, "--transports", transport};
    o.argv.insert(o.argv.end(), common.begin(), common.end());
    if (bind) o.argv.insert(o.argv.end(), {"--cpu", std::to_string(r)});
    if (r == 0) {
      o.env.push_back(
          collectives::LocalRendezvous::EnvFor({&listeners[0], &listeners[1], &listeners[2]}));
    }
    o.on_output = [text, mu](std::string_view c) {
      std::lock_guard<std::mutex> l(*mu);
      text->append(c);
    };
    auto proc = Subprocess::Spawn(o);
    if (!proc.ok()) {
      *error = proc.status().ToString();
      return json();
    }
    procs.push_back(std::move(*proc));
    if (r == 0) listeners.clear();  // rank 0 holds them; no other child may
  }
  bool ok = true;
  for (auto& proc : procs) {
    auto st = proc->Wait(Deadline::AfterMs(3600 * 1000));
    if (!st.ok() || !st->success()) ok = false;
  }
  std::lock_guard<std::mutex> l(*mu);
  json doc = FindJson(*texts[0]);
  if (!ok || doc.is_null()) {
    for (int64_t r = 0; r < n; ++r) *error += "rank " + std::to_string(r) + ": " + *texts[r];
    return json();
  }
  return doc;
}
}  // namespace

int main(int argc, char** argv) {
  ArgParser p("octet_bench_collectives",
              "Collectives figures: one-shot, ring and auto interleaved in one run, vs OpenMPI.");
  p.Option("ranks", "LIST", "world sizes", "2,4");
  p.Option("transports", "LIST", "transports", "shm,tcp");
  p.Option("min-bytes", "SIZE", "smallest message", "8");
  p.Option("max-bytes", "SIZE", "largest message", "64M");
  p.Option("iters", "N", "timed iterations per size and algorithm", "20");
  p.Option("warmup", "N", "warm-up iterations per size and algorithm", "5");
  p.Option("block", "N", "iterations of one algorithm before the next takes its turn", "5");
  p.Option("repeats", "N",
           "runs of the whole interleaved job, taking turns with OpenMPI; auto/best is the "
           "median over them, the OpenMPI ratio uses each side's best p50",
           "3");
  p.Flag("no-mpi", "skip the OpenMPI comparison");
  p.Flag("json", "print one JSON document on stdout");
  p.Flag("separate-communicators",
         "run one-shot and ring on communicators of their own instead of forcing them on "
         "auto's");
  p.Flag("no-equal-warmup",
         "with --separate-communicators: skip the 16 MiB all-reduces that give the one-shot "
         "and ring communicators the history of auto's start-up timing");
  p.Flag("in-place", "in-place all-reduces (the engine's and the trainer's call) of a zero buffer");
  p.Option("worker", "N", "internal: run as one rank of an N-rank job");
  p.Option("rank", "R", "internal (worker): this rank");
  p.Option("ports", "A,B,C", "internal (worker): rendezvous ports of the three communicators");
  p.Option("cpu", "K", "internal (worker): pin to CPU K");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  if (p.Given("worker")) return RunWorker(p);
  auto ranks = p.GetIntList("ranks");
  if (!ranks.ok()) {
    std::cerr << ranks.status().message() << "\n";
    return 2;
  }
  const bool as_json = p.GetFlag("json");
  auto repeats_arg = p.GetInt("repeats");
  if (!repeats_arg.ok() || *repeats_arg < 1) {
    std::cerr << "--repeats: want a positive integer\n";
    return 2;
  }
  const int64_t repeats = *repeats_arg;
  auto self = SelfExecutablePath();
  if (!self.ok()) return 1;
  const std::string bin = DirName(*self);
  const std::string mpi_bench = bin + "/octet_bench_mpi_allreduce";
  const std::string mpirun = Which("mpirun");
  const bool with_mpi = !p.GetFlag("no-mpi") && !mpirun.empty() && PathExists(mpi_bench);
  const std::vector<std::string> common = {
      "--min-bytes", p.GetString("min-bytes"), "--max-bytes", p.GetString("max-bytes"),
      "--iters",     p.GetString("iters"),     "--warmup",    p.GetString("warmup")};
  std::vector<std::string> worker_args = common;
  worker_args.insert(worker_args.end(), {"--block", p.GetString("block")});
  if (p.GetFlag("no-equal-warmup")) worker_args.push_back("--no-equal-warmup");
  if (p.GetFlag("separate-communicators")) worker_args.push_back("--separate-communicators");
  if (p.GetFlag("in-place")) worker_args.push_back("--in-place");
  auto log = [&](const std::string& s) { (as_json ? std::cerr : std::cout) << s << std::flush; };

  const auto max_bytes = ParseByteSize(p.GetString("max-bytes"));
  const double memcpy_gbps = MemcpyBandwidth(static_cast<size_t>(
      std::min<int64_t>(max_bytes.ok() ? *max_bytes : 64 << 20, int64_t{256} << 20)));
  log("memcpy bandwidth (one thread, " + p.GetString("max-bytes") +
      "): " + std::to_string(memcpy_gbps) + " GB/s\n");
  if (!with_mpi && !p.GetFlag("no-mpi")) {
    log("OpenMPI comparison skipped: " +
        std::string(mpirun.empty() ? "mpirun not found (installers/install-deps.sh --bench)"
                                   : "octet_bench_mpi_allreduce not built") +
        "\n");
  }

  const double overhead_ns = PerCallOverheadNs();
  log("per-call overhead (1 rank, 4-byte all_reduce): " + std::to_string(overhead_ns) + " ns\n");

  json report;
  report["memcpy_gbps"] = memcpy_gbps;
  report["per_call_overhead_ns"] = overhead_ns;
  report["runs"] = json::array();
  int failures = 0;
  for (int64_t n : *ranks) {
    for (const std::string& transport : p.GetList("transports")) {
      json run;
      run["ranks"] = n;
      run["transport"] = transport;
      run["octet_runs"] = json::array();
      // Per size: each repeat's interleaved row; OpenMPI's best p50.
      std::map<int64_t, std::vector<json>> octet_rows;
      std::map<int64_t, double> mpi_best;
      std::vector<double> startup_ms;
      // Per repeat: geometric mean over sizes <= 32 KiB of OpenMPI's p50 over
      // auto's p50 in the runs just before it (neighbours in time, so load
      // changes between repeats cancel out).
      std::vector<double> paired_small_ratio;
      json last_octet;
      for (int64_t rep = 0; rep < repeats; ++rep) {
        log("running: " + std::to_string(n) + " ranks over " + transport +
            ", one-shot / ring / auto interleaved ...\n");
        std::string error;
        const json doc = RunInterleaved(*self, n, transport, worker_args, &error);
        last_octet = json();
        if (doc.is_null()) {
          log("  failed:\n" + error + "\n");
          ++failures;
        } else {
          run["octet_runs"].push_back(doc);
          last_octet = doc;
          startup_ms.push_back(doc["auto_startup_ms"].get<double>());
          for (const json& r : doc["rows"]) {
            octet_rows[r["bytes"].get<int64_t>()].push_back(r);
            if (r["wrong"].get<int64_t>() != 0) {
              log("  WRONG results at " + std::to_string(r["bytes"].get<int64_t>()) + " bytes\n");
              ++failures;
            }
          }
        }
        if (!with_mpi) continue;
        std::vector<std::string> argv = {mpirun, "--allow-run-as-root", "--oversubscribe", "-np",
                                         std::to_string(n)};
        // ob1: with the UCX PML (chosen by default where UCX works) the BTL
        // list is ignored and UCX takes shared memory.
        if (transport == "tcp")
          argv.insert(argv.end(), {"--mca", "pml", "ob1", "--mca", "btl", "self,tcp"});
        argv.push_back(mpi_bench);
        argv.insert(argv.end(), common.begin(), common.end());
        argv.push_back("--json");
        log("running: mpirun -np " + std::to_string(n) +
            (transport == "tcp" ? " --mca pml ob1 --mca btl self,tcp" : "") +
            " octet_bench_mpi_allreduce ...\n");
        const Output o = Run(argv);
        const json mpi_doc = FindJson(o.out);
        if (o.code != 0 || mpi_doc.is_null()) {
          log("  OpenMPI run failed (exit " + std::to_string(o.code) + "):\n" + o.out + "\n");
          continue;
        }
        const auto mpi_rows = RowsBySize(mpi_doc);
        for (auto& [bytes, row] : mpi_rows) {
          const double t = row["time_us_p50"].get<double>();
          if (!mpi_best.count(bytes) || t < mpi_best[bytes]) mpi_best[bytes] = t;
        }
        if (!last_octet.is_null()) {
          double g = 0;
          int k = 0;
          for (const json& r : last_octet["rows"]) {
            const int64_t bytes = r["bytes"].get<int64_t>();
            if (bytes > 32 << 10 || !mpi_rows.count(bytes)) continue;
            g += std::log(mpi_rows.at(bytes)["time_us_p50"].get<double>() /
                          r["auto_us"].get<double>());
            ++k;
          }
          if (k > 0) paired_small_ratio.push_back(std::exp(g / k));
        }
      }
      char line[400];
      std::string table = "\n# " + std::to_string(n) + " ranks over " + transport +
                          ", all_reduce f32: p50 of the slowest rank (us), one-shot / ring / "
                          "auto interleaved; median over " +
                          std::to_string(repeats) + " runs\n";
      std::snprintf(line, sizeof line, "# %11s %9s %9s %9s %8s %9s %15s %9s %9s\n", "bytes",
                    "oneshot", "ring", "auto", "auto=", "auto/best", "spread(q25-q75)", "openmpi",
                    "mpi/octet");
      table += line;
      json cmp = json::array();
      double worst_auto = 0;
      int64_t oneshot_wins_up_to = 0;
      bool oneshot_lost = false;
      std::vector<double> small_mpi_ratio;
      for (const auto& [bytes, row_reps] : octet_rows) {
        const auto& reps = row_reps;  // a structured binding: clang 14 cannot capture one
        auto median_of = [&](const char* key) {
          std::vector<double> v;
          for (const json& r : reps) v.push_back(r[key].get<double>());
          return Quantile(v, 0.5);
        };
        auto best_of = [&](const char* key) {
          double b = INFINITY;
          for (const json& r : reps) b = std::min(b, r[key].get<double>());
          return b;
        };
        const double t_os = median_of("oneshot_us"), t_ring = median_of("ring_us");
        const double t_auto = median_of("auto_us");
        const double ratio = median_of("auto_over_best");
        double q25 = INFINITY, q75 = 0;  // over all runs' rounds
        for (const json& r : reps) {
          q25 = std::min(q25, r["auto_over_best_q25"].get<double>());
          q75 = std::max(q75, r["auto_over_best_q75"].get<double>());
        }
        std::string chose;
        for (const json& r : reps) {
          const std::string a = r["auto_algorithm"].get<std::string>() == "ring" ? "R" : "O";
          chose += a;
        }
        worst_auto = std::max(worst_auto, ratio);
        if (!oneshot_lost && t_os <= t_ring) oneshot_wins_up_to = bytes;
        if (t_os > t_ring) oneshot_lost = true;
        double mpi = NAN, mpi_ratio = NAN;
        if (mpi_best.count(bytes)) {
          mpi = mpi_best[bytes];
          const double octet_best =
              std::min({best_of("oneshot_us"), best_of("ring_us"), best_of("auto_us")});
          mpi_ratio = mpi / octet_best;
          if (bytes <= 32 << 10) small_mpi_ratio.push_back(mpi_ratio);
        }
        char spread[40];
        std::snprintf(spread, sizeof spread, "%.2f-%.2f", q25, q75);
        std::snprintf(line, sizeof line, "  %11lld %9.2f %9.2f %9.2f %8s %9.3f %15s %9.2f %9.3f\n",
                      static_cast<long long>(bytes), t_os, t_ring, t_auto, chose.c_str(), ratio,
                      spread, mpi, mpi_ratio);
        table += line;
        cmp.push_back(
            {{"bytes", bytes},
             {"oneshot_us", t_os},
             {"ring_us", t_ring},
             {"auto_us", t_auto},
             {"auto_choices", chose},
             {"auto_over_best", ratio},
             {"auto_over_best_q25", q25},
             {"auto_over_best_q75", q75},
             {"openmpi_us", std::isnan(mpi) ? json(nullptr) : json(mpi)},
             {"openmpi_over_octet", std::isnan(mpi_ratio) ? json(nullptr) : json(mpi_ratio)}});
      }
      run["comparison"] = cmp;
      run["oneshot_beats_ring_up_to_bytes"] = oneshot_wins_up_to;
      run["auto_worst_over_best"] = worst_auto;
      run["auto_startup_ms"] = startup_ms;
      table += "# auto= : auto's algorithm in each run (O one-shot, R ring)\n";
      table +=
          "# one-shot at least as fast as ring up to " + std::to_string(oneshot_wins_up_to) +
          " bytes; auto's worst p50 over the better of the two: " + std::to_string(worst_auto) +
          "\n";
      if (!startup_ms.empty()) {
        table += "# auto start-up (communicator creation incl. timing) ms:";
        for (double ms : startup_ms) table += " " + std::to_string(static_cast<int>(ms));
        table += "\n";
      }
      if (!paired_small_ratio.empty()) {
        run["openmpi_over_auto_small_per_repeat"] = paired_small_ratio;
        table += "# OpenMPI time / auto time for <= 32 KiB, each repeat (geometric mean):";
        for (double r : paired_small_ratio) table += " " + std::to_string(r).substr(0, 5);
        table += "; median " + std::to_string(Quantile(paired_small_ratio, 0.5)).substr(0, 5) + "\n";
      }
      if (!small_mpi_ratio.empty()) {
        double g = 0;
        for (double r : small_mpi_ratio) g += std::log(r);
        g = std::exp(g / small_mpi_ratio.size());
        run["openmpi_over_octet_small_geomean"] = g;
        table +=
            "# OpenMPI time / Octet time for <= 32 KiB (geometric mean of best p50s): " +
            std::to_string(g) + " (above 1: Octet faster)\n";
      }
      if (!octet_rows.empty()) {
        const auto& [last_bytes, last] = *octet_rows.rbegin();
        std::vector<double> ring_us;
        for (const json& r : last) ring_us.push_back(r["ring_us"].get<double>());
        const double t = *std::min_element(ring_us.begin(), ring_us.end());
        const double busbw = static_cast<double>(last_bytes) / (t * 1e-6) / 1e9 * 2.0 *
                             static_cast<double>(n - 1) / static_cast<double>(n);
        run["ring_busbw_at_max_gbps"] = busbw;
        run["ring_busbw_over_memcpy"] = busbw / memcpy_gbps;
        table += "# ring busbw at " + std::to_string(last_bytes) +
                 " bytes (best run): " + std::to_string(busbw) +
                 " GB/s = " + std::to_string(busbw / memcpy_gbps) + " x memcpy bandwidth\n";
      }
      if (transport == "shm" && n == 2) {
        std::string lat;
        for (int64_t b : {8 << 10, 16 << 10, 32 << 10}) {
          if (octet_rows.count(b)) {
            double t = INFINITY;
            for (const json& r : octet_rows[b]) t = std::min(t, r["oneshot_us"].get<double>());
            run["shm_oneshot_us"][std::to_string(b)] = t;
            lat += " " + std::to_string(b / 1024) + " KiB " + std::to_string(t) + " us;";
          }
        }
        table += "# shm one-shot at 2 ranks (p50, best run):" + lat + "\n";
      }
      log(table);
      report["runs"].push_back(run);
    }
  }
  if (as_json) std::cout << report.dump() << "\n";
  return failures ? 1 : 0;
}
