// Serving benchmark (issue 6): a random-weight Qwen3-0.6B-shaped checkpoint
// served by `octet serve --tp 1` (2 threads) and `--tp 2` (1 thread per rank),
// each measured with the `octet bench` runner at --pp 512 --tg 128 over
// concurrency 1,2,4,8. Per configuration and concurrency it reports aggregate
// and per-request decode t/s, prefill t/s, TTFT, and the share of decode time
// spent in all-reduce. The share comes from the server's own counters
// (/metrics: octet_step_seconds_total, octet_allreduce_seconds_total), polled
// every 200 ms; only the intervals in which no prompt token was processed
// count, so it is the decode-only share. The same intervals give "pure decode
// t/s" (tokens generated / wall time while nothing but decode ran): llama-benchy's
// total tg t/s also spans the prefill steps of requests that joined later,
// which dominate on a slow CPU. Ratios use the pure decode figure. Goals (checked as ratios within this
// one run, printed, never asserted): TP 2 decodes at >= 90% of TP 1, and
// aggregate decode at c=8 is >= 3x c=1.
//
//   bench_serving [--dir /tmp/octet-bench-serving] [--pp 512] [--tg 128]
//                 [--concurrency 1,2,4,8] [--runs 1] [--configs 1x2,2x1] [--db F]
//
// --configs lists TPxTHREADS per rank. A table goes to stderr and one JSON
// document to stdout. Figures are from a shared 2-core machine: noisy.
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "octet/app/bench_runner.h"
#include "octet/app/bench_store.h"
#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/subprocess.h"
#include "octet/engine/random_checkpoint.h"

using namespace octet;
using nlohmann::json;

namespace {

struct Counters {
  double prompt_tokens = 0, generated = 0, step_s = 0, allreduce_s = 0, t_s = 0, running = 0;
};

// The counters of a Prometheus text page (our own names, no labels needed).
bool ParseCounters(const std::string& text, Counters* c) {
  int found = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    std::string name = line.substr(0, sp);
    if (const size_t brace = name.find('{'); brace != std::string::npos) name.resize(brace);
    const double v = std::atof(line.c_str() + sp + 1);
    if (name == "octet_prompt_tokens_total") c->prompt_tokens = v, ++found;
    if (name == "octet_generation_tokens_total") c->generated = v, ++found;
    if (name == "octet_requests_running") c->running = v, ++found;
    if (name == "octet_step_seconds_total") c->step_s = v, ++found;
    if (name == "octet_allreduce_seconds_total") c->allreduce_s = v, ++found;
  }
  return found == 5;
}

// Polls /metrics and sums the decode-only intervals.
class DecodeShareMeter {
 public:
  explicit DecodeShareMeter(int port) : port_(port) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~DecodeShareMeter() {
    stop_ = true;
    thread_.join();
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    step_s_ = allreduce_s_ = wall_s_ = generated_ = 0;
  }
  struct Totals {
    double allreduce_s = 0, step_s = 0, wall_s = 0, generated = 0;
  };
  // Sums over the decode-only intervals since Reset.
  Totals Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return {allreduce_s_, step_s_, wall_s_, generated_};
  }

 private:
  void Loop() {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(5, 0);
    Counters prev;
    bool have_prev = false;
    while (!stop_) {
      auto r = cli.Get("/metrics");
      Counters now;
      now.t_s = NowSeconds();
      if (r && r->status == 200 && ParseCounters(r->body, &now)) {
        // Decode-only: requests held slots at both ends and no prompt token
        // was processed in between. (Intervals without a new token count too:
        // dropping them would favour the intervals that happened to catch one.)
        if (have_prev && now.prompt_tokens == prev.prompt_tokens && prev.running > 0 &&
            now.running > 0) {
          std::lock_guard<std::mutex> lock(mu_);
          step_s_ += now.step_s - prev.step_s;
          allreduce_s_ += now.allreduce_s - prev.allreduce_s;
          wall_s_ += now.t_s - prev.t_s;
          generated_ += now.generated - prev.generated;
        }
        prev = now;
        have_prev = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  int port_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  double step_s_ = 0, allreduce_s_ = 0, wall_s_ = 0, generated_ = 0;
  std::thread thread_;
};

struct Server {
  std::unique_ptr<Subprocess> proc;
  std::shared_ptr<std::string> out = std::make_shared<std::string>();
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  int port = 0;
};

Result<Server> StartServer(const std::string& octet, const std::string& model, int tp,
                           int threads) {
  Server s;
  SpawnOptions o;
  o.argv = {octet, "serve", "--model", model, "--tp", std::to_string(tp), "--threads",
            std::to_string(threads), "--port", "0", "--grpc-port", "off", "--slots", "8",
            "--context", "1024", "--kv-memory", "4GiB"};
  auto out = s.out;
  auto mu = s.mu;
  o.on_output = [out, mu](std::string_view chunk) {
    std::lock_guard<std::mutex> lock(*mu);
    out->append(chunk);
  };
  OCTET_ASSIGN_OR_RETURN(s.proc, Subprocess::Spawn(o));
  const std::regex re("on http://[0-9.]+:([0-9]+)");
  const Deadline d = Deadline::AfterMs(600'000);
  while (!d.expired()) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(*mu);
      text = *out;
    }
    std::smatch m;
    if (std::regex_search(text, m, re)) {
      s.port = std::stoi(m[1]);
      return s;
    }
    if (s.proc->Poll()) return UnavailableError("octet serve exited: " + text);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceededError("octet serve did not start within 10 min");
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_serving", "octet serve TP 1 vs TP 2 measured with the octet bench runner.");
  p.Option("dir", "DIR", "where the random checkpoint is written (kept)", "/tmp/octet-bench-serving")
      .Option("pp", "N", "prompt tokens", "512")
      .Option("tg", "N", "generated tokens per request", "128")
      .Option("concurrency", "C,...", "concurrency levels", "1,2,4,8")
      .Option("runs", "N", "repetitions of each test", "1")
      .Option("configs", "TPxTHREADS,...", "server configurations", "1x2,2x1")
      .Option("db", "FILE", "also store the runs in this run store");
  if (Status s = p.Parse(std::vector<std::string>(argv + 1, argv + argc)); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  auto pp = p.GetInt("pp");
  auto tg = p.GetInt("tg");
  auto conc = p.GetIntList("concurrency");
  auto runs = p.GetInt("runs");
  if (!pp.ok() || !tg.ok() || !conc.ok() || !runs.ok()) {
    std::cerr << "bad numbers\n";
    return 2;
  }
  std::vector<std::pair<int, int>> configs;
  {
    std::istringstream in(p.GetString("configs"));
    std::string item;
    while (std::getline(in, item, ',')) {
      int tp = 0, th = 0;
      if (std::sscanf(item.c_str(), "%dx%d", &tp, &th) != 2 || tp < 1 || th < 1) {
        std::cerr << "--configs: '" << item << "' is not TPxTHREADS\n";
        return 2;
      }
      configs.push_back({tp, th});
    }
  }
  auto self = SelfExecutablePath();
  if (!self.ok()) return 1;
  const std::string octet = JoinPath(DirName(*self), "octet");
  const std::string model = p.GetString("dir") + "/qwen3-0.6b-random";
  if (!PathExists(model + "/config.json")) {
    std::cerr << "writing a random-weight Qwen3-0.6B checkpoint to " << model << "\n";
    if (Status s = engine::WriteRandomCheckpoint(engine::RandomModelShape::Qwen3_0_6B(), model);
        !s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
  }
  std::unique_ptr<app::BenchRunStore> store;
  if (p.Given("db")) {
    auto s = app::BenchRunStore::Open(p.GetString("db"));
    if (!s.ok()) {
      std::cerr << s.status().ToString() << "\n";
      return 1;
    }
    store = std::move(*s);
  }

  json report = {{"pp", *pp}, {"tg", *tg}, {"runs", *runs}, {"configs", json::array()}};
  std::map<std::pair<int, int64_t>, double> decode_tps;  // (tp, c) -> aggregate decode t/s
  for (auto [tp, threads] : configs) {
    std::cerr << "\n== octet serve --tp " << tp << " --threads " << threads << " ==\n";
    auto server = StartServer(octet, model, tp, threads);
    if (!server.ok()) {
      std::cerr << server.status().ToString() << "\n";
      return 1;
    }
    DecodeShareMeter meter(server->port);
    json rows = json::array();
    std::fprintf(stderr, "%4s %12s %12s %12s %12s %12s %10s\n", "c", "pure dec t/s",
                 "tg t/s", "tg t/s/req", "pp t/s", "ttft ms", "AR share");
    for (int64_t c : *conc) {
      app::BenchConfig cfg;
      cfg.url = "http://127.0.0.1:" + std::to_string(server->port);
      cfg.pp = {*pp};
      cfg.tg = {*tg};
      cfg.concurrency = {c};
      cfg.runs = static_cast<int>(*runs);
      cfg.label = "bench_serving tp" + std::to_string(tp) + "x" + std::to_string(threads);
      cfg.topology.tp = tp;
      meter.Reset();
      auto run = app::RunBenchmark(cfg, store.get());
      if (!run.ok() || run->results.empty()) {
        std::cerr << "c=" << c << ": " << run.status().ToString() << "\n";
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // last poll
      const DecodeShareMeter::Totals t = meter.Take();
      const double share = t.step_s > 0 ? t.allreduce_s / t.step_s : 0.0;
      const double pure_decode_tps = t.wall_s > 0 ? t.generated / t.wall_s : 0.0;
      const app::BenchResult& r = run->results[0];
      decode_tps[{tp, c}] = pure_decode_tps;
      std::fprintf(stderr, "%4lld %12.2f %12.2f %12.2f %12.1f %12.1f %9.1f%%\n",
                   static_cast<long long>(c), pure_decode_tps, r.tg_throughput.mean,
                   r.tg_req_throughput.mean, r.pp_throughput.mean, r.e2e_ttft.mean, share * 100);
      rows.push_back({{"concurrency", c},
                      {"decode_only_tps", pure_decode_tps},
                      {"decode_only_seconds", t.wall_s},
                      {"decode_tps", r.tg_throughput.mean},
                      {"decode_tps_per_request", r.tg_req_throughput.mean},
                      {"prefill_tps", r.pp_throughput.mean},
                      {"ttft_ms", r.e2e_ttft.mean},
                      {"decode_allreduce_share", share},
                      {"decode_step_seconds_measured", t.step_s},
                      {"failed_requests", r.failed_requests}});
    }
    server->proc->Terminate(std::chrono::milliseconds(5000));
    report["configs"].push_back({{"tp", tp}, {"threads_per_rank", threads}, {"results", rows}});
  }
  // Ratios within this run.
  json ratios = json::object();
  if (configs.size() >= 2) {
    const int a = configs[0].first, b = configs[1].first;
    std::cerr << "\nTP " << b << " / TP " << a << " pure decode t/s (goal >= 0.90):";
    for (int64_t c : *conc) {
      const double x = decode_tps[{a, c}], y = decode_tps[{b, c}];
      const double q = x > 0 ? y / x : 0;
      std::fprintf(stderr, "  c%lld %.2f", static_cast<long long>(c), q);
      ratios["tp" + std::to_string(b) + "_over_tp" + std::to_string(a) + "_c" + std::to_string(c)] = q;
    }
    std::cerr << "\n";
  }
  if (conc->size() >= 2) {
    const int64_t lo = conc->front(), hi = conc->back();
    for (auto [tp, th] : configs) {
      const double x = decode_tps[{tp, lo}], y = decode_tps[{tp, hi}];
      const double q = x > 0 ? y / x : 0;
      std::fprintf(stderr, "TP %d: pure decode t/s c%lld / c%lld = %.2f (goal >= 3)\n", tp,
                   static_cast<long long>(hi), static_cast<long long>(lo), q);
      ratios["tp" + std::to_string(tp) + "_c" + std::to_string(hi) + "_over_c" +
             std::to_string(lo)] = q;
    }
  }
  report["ratios"] = ratios;
  std::cout << report.dump(2) << "\n";
  return 0;
}
