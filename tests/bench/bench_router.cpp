// bench_router: the router's two performance figures.
//
//  1. Routing overhead: classify + pick replica (RouterCore::Route, with the
//     shipped example policy, classifier and stickiness) over the labelled
//     requests, in-process; also with the JSON parse of the body, which is what
//     the gateway's octet_router_routing_overhead_seconds records.
//  2. TTFT added by the gateway at C concurrent streams: C clients stream
//     chat completions from loopback upstreams directly, then through the
//     gateway, alternating, and the client-side time to first byte is
//     compared. Two arrival patterns (see Arrival): steady (about C streams
//     in flight, starts spread evenly: what "C concurrent streams" means for a
//     deployed gateway) and burst (C requests in the same instant, in step:
//     the worst case, mostly queueing on this machine's cores). The gateway
//     runs in a child process by default, as `octet route` is deployed, so its
//     CPU per stream and per token is measured exactly (/proc/PID/stat);
//     clients, upstreams and gateway still share the machine's cores.
//
// Prints a table and one JSON document (--json: only the JSON on stdout).
// Figures, not pass/fail: compare within one run; the machine's load shows.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/subprocess.h"
#include "octet/router/classifier.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "openai_upstream.h"
#include "router_client.h"
#include "router_core.h"

using namespace octet;
using namespace octet::router;
using nlohmann::json;

namespace {

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, max = 0, mean = 0;
  size_t n = 0;
};

Percentiles Summarise(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  p.n = v.size();
  return p;
}

json ToJson(const Percentiles& p) {
  return json{{"n", p.n},     {"mean", p.mean}, {"p50", p.p50},
              {"p99", p.p99}, {"p999", p.p999}, {"max", p.max}};
}

// How the streaming clients arrive.
//   kSteady: client k starts at k/C of one stream's duration and re-issues as
//     soon as each stream ends, so about C streams are in flight at any time
//     and starts are spread evenly: "C concurrent streams" at steady state.
//     Only requests started once every client runs and before the first
//     client finishes count (the ramp up and down are left out).
//   kBurst: all C clients start in the same instant (a barrier) and stay in
//     step: C arrivals at once, then C first tokens at once, and so on.
enum class Arrival { kSteady, kBurst };

const char* ArrivalName(Arrival a) { return a == Arrival::kSteady ? "steady" : "burst"; }

struct LoadResult {
  std::vector<double> ttft_ms;  // client-side time to first body byte, counted requests
  double mean_in_flight = 0;    // streams in flight when a counted request started
  int failures = 0;
  int streams = 0;  // every stream run (counted or not), for CPU per stream
};

// `clients` threads each stream `rounds` chat completions, the k-th client to
// ports[k % ports.size()]. `stream_ms` is one stream's nominal duration (the
// steady arrivals' spread).
LoadResult StreamLoad(const std::vector<int>& ports, int clients, int rounds,
                      const std::vector<std::string>& prompts, Arrival arrival, double stream_ms) {
  struct Sample {
    int64_t start_ns;
    double ttft_ms;
    int in_flight;
  };
  std::vector<std::vector<Sample>> per(static_cast<size_t>(clients));
  std::vector<int64_t> first_ns(static_cast<size_t>(clients)),
      last_ns(static_cast<size_t>(clients));
  std::atomic<int> failed{0}, in_flight{0};
  std::barrier start(clients + 1);
  int64_t t0 = 0;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      const int port = ports[static_cast<size_t>(c) % ports.size()];
      start.arrive_and_wait();
      if (arrival == Arrival::kSteady) {
        const auto offset = std::chrono::nanoseconds(
            static_cast<int64_t>(stream_ms * 1e6 * c / static_cast<double>(clients)));
        std::this_thread::sleep_until(
            std::chrono::steady_clock::time_point(std::chrono::nanoseconds(t0) + offset));
      }
      first_ns[static_cast<size_t>(c)] = NowNs();
      for (int r = 0; r < rounds; ++r) {
        const auto& prompt = prompts[static_cast<size_t>(c + r) % prompts.size()];
        const int64_t s = NowNs();
        const int now_in = in_flight.fetch_add(1) + 1;
        test::ClientResult res = test::Chat(port, prompt, true);
        in_flight.fetch_sub(1);
        if (res.status != 200 || !test::ParseSse(res.body).done)
          ++failed;
        else
          per[static_cast<size_t>(c)].push_back(Sample{s, res.ttft_ms, now_in});
      }
      last_ns[static_cast<size_t>(c)] = NowNs();
    });
  t0 = NowNs();  // NowNs() is steady_clock nanoseconds
  start.arrive_and_wait();
  for (auto& t : threads) t.join();
  int64_t window_begin = 0, window_end = INT64_MAX;
  if (arrival == Arrival::kSteady) {
    window_begin = *std::max_element(first_ns.begin(), first_ns.end());
    window_end = *std::min_element(last_ns.begin(), last_ns.end());
  }
  LoadResult out;
  double in_flight_sum = 0;
  for (auto& v : per)
    for (const Sample& s : v)
      if (s.start_ns >= window_begin && s.start_ns < window_end) {
        out.ttft_ms.push_back(s.ttft_ms);
        in_flight_sum += s.in_flight;
      }
  if (!out.ttft_ms.empty())
    out.mean_in_flight = in_flight_sum / static_cast<double>(out.ttft_ms.size());
  out.failures = failed.load();
  out.streams = clients * rounds;
  return out;
}

// CPU time (user + system) in milliseconds of this process, or of process
// `pid` (from /proc/PID/stat; clock-tick resolution).
double CpuMs(pid_t pid = 0) {
  if (pid == 0) {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
  }
  auto text = ReadFileToString("/proc/" + std::to_string(pid) + "/stat");
  if (!text.ok()) return 0;
  // Fields after the ")" that ends the command name: state is field 3, utime 14, stime 15.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(text->substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (in >> field); ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) * 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The gateway process of --gateway-process 1: serves POLICY until SIGTERM and
// prints "GATEWAY_PORT <port>" once it accepts connections.
int ServeGateway(const std::string& policy_file) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // before any thread starts: all inherit it
  // Threads inherit the name: `perf report --comm gateway`, top -H.
  pthread_setname_np(pthread_self(), "gateway");
  auto parsed = LoadPolicyFile(policy_file);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 1;
  }
  auto router = Router::Create(parsed.policy);
  if (!router.ok()) {
    std::cerr << router.status().message() << "\n";
    return 1;
  }
  GatewayOptions go = GatewayOptionsFromPolicy(parsed.policy->gateway);
  go.port = 0;
  auto gw = Gateway::Start(router->get(), go);
  if (!gw.ok()) {
    std::cerr << gw.status().message() << "\n";
    return 1;
  }
  std::printf("GATEWAY_PORT %d\n", (*gw)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&term, &sig);
  (*gw)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_router", "Routing overhead and gateway TTFT at many concurrent streams.");
  p.Option("source-dir", "DIR", "the Octet source tree (for resources/routing)",
           OCTET_SOURCE_DIR_DEFAULT);
  p.Option("overhead-rounds", "N", "passes over the labelled requests", "30");
  p.Option("clients", "C", "concurrent streaming clients", "200");
  p.Option("rounds", "R", "sequential requests per client and pass", "4");
  p.Option("passes", "N", "alternating direct/gateway passes per arrival mode", "2");
  p.Option("arrival", "MODE", "steady, burst or both (see Arrival)", "both");
  p.Option("gateway-process", "0|1", "run the gateway in a child process of its own", "1");
  p.Option("serve-gateway", "POLICY", "(internal) run only a gateway for POLICY until SIGTERM", "");
  p.Option("upstreams", "N", "loopback upstream servers", "4");
  p.Option("ttft-ms", "MS", "upstream time to first token", "50");
  p.Option("tokens", "N", "tokens per response", "16");
  p.Option("token-ms", "MS", "upstream time between tokens", "10");
  p.Flag("json", "print only the JSON document on stdout");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  SetLogLevel(LogLevel::kWarning);
  if (const std::string served = p.GetString("serve-gateway"); !served.empty())
    return ServeGateway(served);
  const bool as_json = p.GetFlag("json");
  std::FILE* human = as_json ? stderr : stdout;
  const std::string dir = p.GetString("source-dir") + "/resources/routing/";

  // ---- 1. Routing overhead -------------------------------------------------
  auto parsed = LoadPolicyFile(dir + "example-policy.yaml");
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 1;
  }
  auto data = ReadLabelledRequests(dir + "labelled-requests.jsonl");
  if (!data.ok()) {
    std::cerr << data.status().message() << "\n";
    return 1;
  }
  RouterOptions ro;
  ro.active_health_checks = false;
  auto router = Router::Create(parsed.policy, ro);
  if (!router.ok()) {
    std::cerr << router.status().message() << "\n";
    return 1;
  }
  RouterCore& core = (*router)->core();
  std::vector<std::string> bodies;
  for (const auto& ex : *data) bodies.push_back(ex.request.dump());
  const int rounds = static_cast<int>(p.GetInt("overhead-rounds").value_or(30));
  std::vector<double> decide_us, with_parse_us;
  // Half the requests carry a session header (pins are created and read).
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < bodies.size(); ++i) {
      const std::string session = "s" + std::to_string(i % 64);
      const HeaderLookup headers = [&](std::string_view name) {
        return (i % 2 == 0 && name == "x-session-id") ? session : std::string();
      };
      const int64_t t0 = NowNs();
      json body = json::parse(bodies[i]);
      const int64_t t1 = NowNs();
      auto routed = core.Route(body, ExtractFeatures(body), headers);
      const int64_t t2 = NowNs();
      if (!routed.ok()) {
        std::cerr << routed.status().message() << "\n";
        return 1;
      }
      decide_us.push_back(static_cast<double>(t2 - t1) / 1e3);
      with_parse_us.push_back(static_cast<double>(t2 - t0) / 1e3);
    }
  }
  const Percentiles decide = Summarise(decide_us), full = Summarise(with_parse_us);
  std::fprintf(human,
               "routing overhead over %zu decisions (example policy, classifier, stickiness):\n",
               decide.n);
  std::fprintf(human,
               "  classify + pick replica          p50 %6.1f us  p99 %6.1f us  p99.9 %6.1f us  max "
               "%7.1f us\n",
               decide.p50, decide.p99, decide.p999, decide.max);
  std::fprintf(human,
               "  + JSON parse of the body         p50 %6.1f us  p99 %6.1f us  p99.9 %6.1f us  max "
               "%7.1f us\n",
               full.p50, full.p99, full.p999, full.max);

  // ---- 2. Gateway TTFT under concurrent streams -------------------------------
  const int clients = static_cast<int>(p.GetInt("clients").value_or(200));
  const int req_rounds = static_cast<int>(p.GetInt("rounds").value_or(4));
  const int passes = static_cast<int>(p.GetInt("passes").value_or(2));
  const int n_up = static_cast<int>(p.GetInt("upstreams").value_or(4));
  const int ttft_ms = static_cast<int>(p.GetInt("ttft-ms").value_or(50));
  const int n_tokens = static_cast<int>(p.GetInt("tokens").value_or(16));
  const int token_ms = static_cast<int>(p.GetInt("token-ms").value_or(10));
  const bool own_process = p.GetInt("gateway-process").value_or(1) != 0;
  std::vector<Arrival> arrivals;
  const std::string arrival_flag = p.GetString("arrival");
  if (arrival_flag == "steady" || arrival_flag == "both") arrivals.push_back(Arrival::kSteady);
  if (arrival_flag == "burst" || arrival_flag == "both") arrivals.push_back(Arrival::kBurst);
  if (arrivals.empty()) {
    std::cerr << "--arrival must be steady, burst or both, not '" << arrival_flag << "'\n";
    return 2;
  }
  std::vector<std::unique_ptr<test::OpenAiUpstream>> ups;
  std::vector<int> up_ports;
  for (int i = 0; i < n_up; ++i) {
    test::UpstreamOptions o;
    o.name = "U" + std::to_string(i);
    o.ttft_ms = ttft_ms;
    o.tokens = n_tokens;
    o.token_interval_ms = token_ms;
    o.threads = clients + 64;
    auto u = test::OpenAiUpstream::Start(o);
    if (!u.ok()) {
      std::cerr << u.status().message() << "\n";
      return 1;
    }
    up_ports.push_back((*u)->port());
    ups.push_back(std::move(*u));
  }
  // One pool of all upstreams (least request), the classifier still consulted.
  std::string yaml = "version: 1\ngateway: {threads: " + std::to_string(clients + 64) +
                     "}\npools:\n  - name: p\n    replicas: [";
  for (int i = 0; i < n_up; ++i) yaml += (i ? ", " : "") + ups[static_cast<size_t>(i)]->url();
  yaml +=
      "]\n    health_check: {interval_ms: 1000}\nclassifiers:\n  - name: difficulty\n"
      "    weights: " +
      dir +
      "difficulty.weights.json\nroutes:\n  - name: hard\n    match: {hard: true}\n"
      "    pool: p\n  - name: easy\n    pool: p\nstickiness: {mode: off}\n";

  // The gateway: in a child process of its own (as `octet route` runs; its CPU
  // is then measured exactly), or in this process.
  std::unique_ptr<Subprocess> gw_child;
  std::unique_ptr<Router> gw_router;
  std::unique_ptr<Gateway> gw;
  int gw_port = 0;
  const std::string policy_path =
      "/tmp/bench_router_policy_" + std::to_string(::getpid()) + ".yaml";
  if (own_process) {
    if (Status s = WriteFileAtomic(policy_path, yaml); !s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    auto self = SelfExecutablePath();
    if (!self.ok()) {
      std::cerr << self.status().message() << "\n";
      return 1;
    }
    auto output = std::make_shared<std::pair<std::mutex, std::string>>();
    SpawnOptions so;
    so.argv = {*self, "--serve-gateway", policy_path};
    so.on_output = [output](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(output->first);
      output->second.append(chunk);
      std::fputs(std::string(chunk).c_str(), stderr);
    };
    auto child = Subprocess::Spawn(so);
    if (!child.ok()) {
      std::cerr << child.status().message() << "\n";
      return 1;
    }
    gw_child = std::move(*child);
    const Deadline d = Deadline::AfterMs(20000);
    while (gw_port == 0 && !d.expired() && !gw_child->Poll()) {
      {
        std::lock_guard<std::mutex> lock(output->first);
        const size_t at = output->second.find("GATEWAY_PORT ");
        if (at != std::string::npos && output->second.find('\n', at) != std::string::npos)
          gw_port = std::atoi(output->second.c_str() + at + 13);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::remove(policy_path.c_str());
    if (gw_port <= 0) {
      std::cerr << "the gateway process did not report its port\n";
      return 1;
    }
  } else {
    PolicyParseOptions po;
    po.base_dir = dir;
    auto gw_policy = ParsePolicy(yaml, "bench.yaml", po);
    if (!gw_policy.ok()) {
      std::cerr << gw_policy.status().message() << "\n";
      return 1;
    }
    auto r = Router::Create(gw_policy.policy);
    if (!r.ok()) return 1;
    gw_router = std::move(*r);
    GatewayOptions go;
    go.threads = clients + 64;
    auto g = Gateway::Start(gw_router.get(), go);
    if (!g.ok()) {
      std::cerr << g.status().message() << "\n";
      return 1;
    }
    gw = std::move(*g);
    gw_port = gw->port();
  }
  const pid_t gw_pid = gw_child ? gw_child->pid() : 0;
  std::vector<std::string> prompts;
  for (size_t i = 0; i < data->size() && prompts.size() < 64; i += 5) {
    const auto& msgs = (*data)[i].request["messages"];
    for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
      if ((*it)["role"] == "user" && (*it)["content"].is_string()) {
        prompts.push_back((*it)["content"].get<std::string>());
        break;
      }
  }
  const double stream_ms = ttft_ms + static_cast<double>(std::max(0, n_tokens - 1) * token_ms);
  int total_failures = 0;
  // Warm-up (connections, thread pools).
  total_failures +=
      StreamLoad(up_ports, std::min(clients, 32), 1, prompts, Arrival::kBurst, stream_ms).failures;
  total_failures +=
      StreamLoad({gw_port}, std::min(clients, 32), 1, prompts, Arrival::kBurst, stream_ms).failures;

  std::fprintf(human,
               "\nTTFT at %d concurrent streams, client-side: %d upstreams (TTFT %d ms, %d tokens "
               "%d ms apart), gateway %s, %u cores shared by all\n",
               clients, n_up, ttft_ms, n_tokens, token_ms,
               own_process ? "in its own process" : "in the benchmark process",
               std::thread::hardware_concurrency());
  json modes = json::object();
  for (const Arrival arrival : arrivals) {
    // Direct and routed alternate, `passes` times, so drift in the machine's
    // load hits both.
    std::vector<double> direct, routed;
    double in_flight_direct = 0, in_flight_routed = 0;
    double cpu_direct = 0, cpu_routed = 0, cpu_gateway = 0;
    int streams = 0;
    for (int pass = 0; pass < passes; ++pass) {
      double c0 = CpuMs();
      LoadResult d = StreamLoad(up_ports, clients, req_rounds, prompts, arrival, stream_ms);
      cpu_direct += CpuMs() - c0;
      c0 = CpuMs();
      const double g0 = gw_pid ? CpuMs(gw_pid) : 0;
      LoadResult r = StreamLoad({gw_port}, clients, req_rounds, prompts, arrival, stream_ms);
      cpu_routed += CpuMs() - c0;
      if (gw_pid) cpu_gateway += CpuMs(gw_pid) - g0;
      total_failures += d.failures + r.failures;
      direct.insert(direct.end(), d.ttft_ms.begin(), d.ttft_ms.end());
      routed.insert(routed.end(), r.ttft_ms.begin(), r.ttft_ms.end());
      in_flight_direct += d.mean_in_flight / passes;
      in_flight_routed += r.mean_in_flight / passes;
      streams += r.streams;
    }
    // In-process, the gateway's CPU is estimated as the extra CPU of the routed runs.
    if (!gw_pid) cpu_gateway = cpu_routed - cpu_direct;
    const double cpu_us_per_stream = cpu_gateway * 1e3 / streams;
    const double cpu_us_per_token = cpu_us_per_stream / n_tokens;
    const Percentiles pd = Summarise(direct), pr = Summarise(routed);
    std::fprintf(human, "  %s arrivals: %s\n", ArrivalName(arrival),
                 arrival == Arrival::kSteady
                     ? "starts spread evenly over one stream, each client re-issues at once "
                       "(the goal's measure)"
                     : "all clients start at the same instant and stay in step (worst case)");
    std::fprintf(human,
                 "    direct to upstreams   p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms  (%zu "
                 "streams, %.0f in flight)\n",
                 pd.p50, pd.p99, pd.mean, pd.n, in_flight_direct);
    std::fprintf(human,
                 "    through the gateway   p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms  (%zu "
                 "streams, %.0f in flight)\n",
                 pr.p50, pr.p99, pr.mean, pr.n, in_flight_routed);
    std::fprintf(human, "    added by the gateway  p50 %+7.2f ms  p99 %+7.2f ms  mean %+7.2f ms\n",
                 pr.p50 - pd.p50, pr.p99 - pd.p99, pr.mean - pd.mean);
    std::fprintf(human, "    gateway CPU: %.0f us per stream, %.1f us per token%s\n",
                 cpu_us_per_stream, cpu_us_per_token,
                 gw_pid ? " (its process)" : " (estimate: process CPU routed - direct)");
    modes[ArrivalName(arrival)] = json{{"direct", ToJson(pd)},
                                       {"gateway", ToJson(pr)},
                                       {"added_p50", pr.p50 - pd.p50},
                                       {"added_p99", pr.p99 - pd.p99},
                                       {"added_mean", pr.mean - pd.mean},
                                       {"mean_in_flight_direct", in_flight_direct},
                                       {"mean_in_flight_gateway", in_flight_routed},
                                       {"gateway_cpu_us_per_stream", cpu_us_per_stream},
                                       {"gateway_cpu_us_per_token", cpu_us_per_token}};
  }
  json gw_overhead = nullptr;
  if (gw_router) {
    const RouterStats gs = gw_router->Stats();
    gw_overhead = json{{"p50", gs.overhead_us_p50}, {"p99", gs.overhead_us_p99}};
    std::fprintf(human, "  gateway routing overhead under load: p50 %.1f us, p99 %.1f us\n",
                 gs.overhead_us_p50, gs.overhead_us_p99);
  }
  std::fprintf(human, "  failed streams: %d\n", total_failures);
  json doc{{"routing_overhead_us",
            {{"classify_pick", ToJson(decide)}, {"with_json_parse", ToJson(full)}}},
           {"ttft_ms",
            {{"clients", clients},
             {"rounds", req_rounds},
             {"passes", passes},
             {"upstreams", n_up},
             {"upstream_ttft_ms", ttft_ms},
             {"tokens", n_tokens},
             {"token_interval_ms", token_ms},
             {"gateway_own_process", own_process},
             {"arrivals", modes}}},
           {"gateway_overhead_us", gw_overhead},
           {"failed_streams", total_failures},
           {"hardware_concurrency", std::thread::hardware_concurrency()}};
  std::cout << doc.dump() << "\n";
  if (gw) gw->Stop();
  if (gw_child) gw_child->Terminate(std::chrono::milliseconds(5000));
  for (auto& u : ups) u->Stop();
  return total_failures == 0 ? 0 : 1;
}
