// bench_router: the router's two performance figures.
//
//  1. Routing overhead: classify + pick replica (RouterCore::Route, with the
//     shipped example policy, classifier and stickiness) over the labelled
//     requests, in-process; also with the JSON parse of the body, which is what
//     the gateway's octet_router_routing_overhead_seconds records.
//  2. TTFT added by the gateway at C concurrent streams: C clients stream
//     chat completions from loopback upstreams directly, then through the
//     gateway, and the client-side time to first byte is compared.
//
// Prints a table and one JSON document (--json: only the JSON on stdout).
// Figures, not pass/fail: compare within one run; the machine's load shows.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"
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

// Client TTFTs (ms) of `clients` threads each streaming `rounds` requests, the
// k-th client to urls[k % urls.size()].
std::vector<double> StreamLoad(const std::vector<int>& ports, int clients, int rounds,
                               const std::vector<std::string>& prompts, int* failures) {
  std::vector<std::vector<double>> per(static_cast<size_t>(clients));
  std::atomic<int> failed{0};
  std::barrier start(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      const int port = ports[static_cast<size_t>(c) % ports.size()];
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        const auto& prompt = prompts[static_cast<size_t>(c + r) % prompts.size()];
        test::ClientResult res = test::Chat(port, prompt, true);
        if (res.status != 200 || !test::ParseSse(res.body).done)
          ++failed;
        else
          per[static_cast<size_t>(c)].push_back(res.ttft_ms);
      }
    });
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  *failures = failed.load();
  return all;
}

// Process CPU time (user + system) in milliseconds.
double CpuMs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_router", "Routing overhead and gateway TTFT at many concurrent streams.");
  p.Option("source-dir", "DIR", "the Octet source tree (for resources/routing)",
           OCTET_SOURCE_DIR_DEFAULT);
  p.Option("overhead-rounds", "N", "passes over the labelled requests", "30");
  p.Option("clients", "C", "concurrent streaming clients", "200");
  p.Option("rounds", "R", "sequential requests per client", "3");
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
  const int req_rounds = static_cast<int>(p.GetInt("rounds").value_or(3));
  const int n_up = static_cast<int>(p.GetInt("upstreams").value_or(4));
  std::vector<std::unique_ptr<test::OpenAiUpstream>> ups;
  std::vector<int> up_ports;
  for (int i = 0; i < n_up; ++i) {
    test::UpstreamOptions o;
    o.name = "U" + std::to_string(i);
    o.ttft_ms = static_cast<int>(p.GetInt("ttft-ms").value_or(50));
    o.tokens = static_cast<int>(p.GetInt("tokens").value_or(16));
    o.token_interval_ms = static_cast<int>(p.GetInt("token-ms").value_or(10));
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
  std::string yaml = "version: 1\npools:\n  - name: p\n    replicas: [";
  for (int i = 0; i < n_up; ++i) yaml += (i ? ", " : "") + ups[static_cast<size_t>(i)]->url();
  yaml +=
      "]\n    health_check: {interval_ms: 1000}\nclassifiers:\n  - name: difficulty\n"
      "    weights: difficulty.weights.json\nroutes:\n  - name: hard\n    match: {hard: true}\n"
      "    pool: p\n  - name: easy\n    pool: p\nstickiness: {mode: off}\n";
  PolicyParseOptions po;
  po.base_dir = dir;
  auto gw_policy = ParsePolicy(yaml, "bench.yaml", po);
  if (!gw_policy.ok()) {
    std::cerr << gw_policy.status().message() << "\n";
    return 1;
  }
  auto gw_router = Router::Create(gw_policy.policy);
  if (!gw_router.ok()) return 1;
  GatewayOptions go;
  go.threads = clients + 64;
  auto gw = Gateway::Start(gw_router->get(), go);
  if (!gw.ok()) {
    std::cerr << gw.status().message() << "\n";
    return 1;
  }
  std::vector<std::string> prompts;
  for (size_t i = 0; i < data->size() && prompts.size() < 64; i += 5) {
    const auto& msgs = (*data)[i].request["messages"];
    for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
      if ((*it)["role"] == "user" && (*it)["content"].is_string()) {
        prompts.push_back((*it)["content"].get<std::string>());
        break;
      }
  }
  // Warm-up (connections, thread pools), then direct and routed, twice each
  // in alternation so drift in the machine's load hits both.
  int failures = 0, total_failures = 0;
  StreamLoad(up_ports, std::min(clients, 32), 1, prompts, &failures);
  StreamLoad({(*gw)->port()}, std::min(clients, 32), 1, prompts, &failures);
  std::vector<double> direct, routed;
  double cpu_direct = 0, cpu_routed = 0;  // whole process: clients + upstreams (+ gateway)
  for (int pass = 0; pass < 2; ++pass) {
    double c0 = CpuMs();
    auto d = StreamLoad(up_ports, clients, req_rounds, prompts, &failures);
    cpu_direct += CpuMs() - c0;
    total_failures += failures;
    direct.insert(direct.end(), d.begin(), d.end());
    c0 = CpuMs();
    auto r = StreamLoad({(*gw)->port()}, clients, req_rounds, prompts, &failures);
    cpu_routed += CpuMs() - c0;
    total_failures += failures;
    routed.insert(routed.end(), r.begin(), r.end());
  }
  const double streams = 2.0 * clients * req_rounds;
  const double tokens = streams * static_cast<double>(p.GetInt("tokens").value_or(16));
  const double gateway_cpu_us_per_token = (cpu_routed - cpu_direct) * 1e3 / tokens;
  const Percentiles pd = Summarise(direct), pr = Summarise(routed);
  const RouterStats gs = (*gw_router)->Stats();
  std::fprintf(
      human,
      "\nTTFT at %d concurrent streams (%d upstreams, upstream TTFT %lld ms), client-side:\n",
      clients, n_up, static_cast<long long>(p.GetInt("ttft-ms").value_or(50)));
  std::fprintf(human,
               "  direct to upstreams   p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms  (%zu streams)\n",
               pd.p50, pd.p99, pd.mean, pd.n);
  std::fprintf(human,
               "  through the gateway   p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms  (%zu streams)\n",
               pr.p50, pr.p99, pr.mean, pr.n);
  std::fprintf(human, "  added by the gateway  p50 %+7.2f ms  p99 %+7.2f ms  mean %+7.2f ms\n",
               pr.p50 - pd.p50, pr.p99 - pd.p99, pr.mean - pd.mean);
  std::fprintf(
      human,
      "  gateway routing overhead under load: p50 %.1f us, p99 %.1f us; failed streams: %d\n",
      gs.overhead_us_p50, gs.overhead_us_p99, total_failures);
  std::fprintf(
      human, "  gateway CPU per forwarded token: %.1f us (process CPU routed - direct, %u cores)\n",
      gateway_cpu_us_per_token, std::thread::hardware_concurrency());
  json doc{{"routing_overhead_us",
            {{"classify_pick", ToJson(decide)}, {"with_json_parse", ToJson(full)}}},
           {"ttft_ms",
            {{"clients", clients},
             {"rounds", req_rounds},
             {"upstreams", n_up},
             {"direct", ToJson(pd)},
             {"gateway", ToJson(pr)},
             {"added_p50", pr.p50 - pd.p50},
             {"added_p99", pr.p99 - pd.p99},
             {"added_mean", pr.mean - pd.mean}}},
           {"gateway_overhead_us", {{"p50", gs.overhead_us_p50}, {"p99", gs.overhead_us_p99}}},
           {"gateway_cpu_us_per_token", gateway_cpu_us_per_token},
           {"failed_streams", total_failures},
           {"hardware_concurrency", std::thread::hardware_concurrency()}};
  std::cout << doc.dump() << "\n";
  (*gw)->Stop();
  for (auto& u : ups) u->Stop();
  return total_failures == 0 ? 0 : 1;
}
