// Telemetry cost: N octet-agent processes (real-node mode: memory from
// /proc/meminfo, CPU from /proc/stat, counters from /proc/net/dev), each
// streaming samples to this program at R Hz. Prints the CPU each agent used
// (user+system from /proc/<pid>/stat) per second of wall time, as a share of
// one core, idle and while streaming. Figures, not a pass/fail test.
//
//   bench_telemetry [--agents 8] [--rate-hz 10] [--seconds 10] [--json]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "octet/agent/cluster_token.h"
#include "octet/agent/system_stats.h"
#include "octet/app/agent_client.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"

using namespace octet;

int main(int argc, char** argv) {
  ArgParser p("bench_telemetry", "CPU cost of octet-agent telemetry streams.");
  p.Option("agents", "N", "agent processes", "8");
  p.Option("rate-hz", "R", "samples per second per agent", "10");
  p.Option("seconds", "S", "measured seconds (idle, then streaming)", "10");
  p.Option("agent-bin", "PATH", "octet-agent (default: beside this program's build)");
  p.Flag("json", "print one JSON document");
  if (Status s = p.Parse(argc, argv); !s.ok() || p.help_requested()) {
    std::cerr << (p.help_requested() ? p.Usage() : s.message() + "\n");
    return p.help_requested() ? 0 : 2;
  }
  const int n = static_cast<int>(p.GetInt("agents").value_or(8));
  const double hz = p.GetDouble("rate-hz").value_or(10);
  const double seconds = p.GetDouble("seconds").value_or(10);
  if (n < 1 || n > 64 || hz <= 0 || hz > 20 || seconds <= 0) {
    std::cerr << "bench_telemetry: agents 1..64, rate 0..20 Hz, seconds > 0\n";
    return 2;
  }
  std::string agent_bin = p.GetString("agent-bin");
  if (agent_bin.empty()) {
    const std::string self_dir = DirName(*SelfExecutablePath());
    agent_bin = PathExists(self_dir + "/octet-agent")
                    ? self_dir + "/octet-agent"
                    : JoinPath(DirName(self_dir), "bin/octet-agent");
  }
  char tmpl[] = "/tmp/octet-bench-telemetry-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl) ? tmpl : "";
  if (dir.empty()) return 1;
  const std::string token = *agent::GenerateClusterToken();
  if (!agent::WriteTokenFile(dir + "/token", token).ok()) return 1;

  std::vector<std::unique_ptr<Subprocess>> agents;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    const std::string d = dir + "/node-" + std::to_string(i);
    MakeDirs(d).IgnoreError();
    SpawnOptions so;
    so.argv = {agent_bin,     "--listen", "127.0.0.1:0",    "--token-file", dir + "/token",
               "--state-dir", d,          "--no-discovery", "--port-file",  d + "/address",
               "--log-level", "warning"};
    so.output_file = d + "/agent.log";
    auto proc = Subprocess::Spawn(so);
    if (!proc.ok()) {
      std::cerr << proc.status().ToString() << "\n";
      return 1;
    }
    agents.push_back(std::move(*proc));
    const Deadline dl = Deadline::AfterMs(20'000);
    std::string address;
    while (address.empty() && !dl.expired()) {
      address = ReadFileToString(d + "/address").value_or("");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (!address.empty() && address.back() == '\n') address.pop_back();
    if (address.empty()) {
      std::cerr << "agent " << i << " did not start\n";
      return 1;
    }
    addresses.push_back(address);
  }
  auto cpu = [&] {
    std::vector<double> v;
    for (auto& a : agents) v.push_back(agent::ReadProcessCpuSeconds(a->pid()).value_or(0));
    return v;
  };
  const auto measure = [&](double secs) {
    const auto c0 = cpu();
    const double t0 = NowSeconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(secs * 1000)));
    const auto c1 = cpu();
    const double wall = NowSeconds() - t0;
    std::vector<double> pct;
    for (size_t i = 0; i < c0.size(); ++i) pct.push_back(100.0 * (c1[i] - c0[i]) / wall);
    return pct;
  };
  // Let start-up settle, then measure idle.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto idle = measure(seconds);

  std::vector<std::unique_ptr<app::AgentClient>> clients;
  std::vector<std::unique_ptr<app::AgentStream>> streams;
  std::vector<std::atomic<int64_t>> samples(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    clients.push_back(
        std::move(*app::AgentClient::Create({addresses[static_cast<size_t>(i)], token, "", ""})));
    std::atomic<int64_t>* count = &samples[static_cast<size_t>(i)];
    streams.push_back(clients.back()->StreamTelemetry(
        static_cast<uint32_t>(1000.0 / hz), [count](const app::TelemetrySample&) { ++*count; },
        nullptr));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // streams established
  const int64_t before = [&] {
    int64_t s = 0;
    for (auto& c : samples) s += c.load();
    return s;
  }();
  const auto busy = measure(seconds);
  int64_t received = -before;
  for (auto& c : samples) received += c.load();
  streams.clear();
  clients.clear();
  for (auto& a : agents) a->Terminate(std::chrono::milliseconds(3000));
  agents.clear();
  std::system(("rm -rf '" + dir + "'").c_str());

  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / static_cast<double>(v.size());
  };
  const double max_busy = *std::max_element(busy.begin(), busy.end());
  const double rate = static_cast<double>(received) / seconds / n;
  if (p.GetFlag("json")) {
    nlohmann::json j = {{"agents", n},
                        {"rate_hz", hz},
                        {"seconds", seconds},
                        {"samples_per_agent_per_s", rate},
                        {"idle_core_pct", idle},
                        {"streaming_core_pct", busy},
                        {"streaming_core_pct_mean", mean(busy)},
                        {"streaming_core_pct_max", max_busy},
                        {"idle_core_pct_mean", mean(idle)}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("# %d agents, telemetry at %.1f Hz, %.0f s per phase\n", n, hz, seconds);
    std::printf("%6s %12s %16s\n", "agent", "idle %core", "streaming %core");
    for (int i = 0; i < n; ++i) {
      std::printf("%6d %12.3f %16.3f\n", i, idle[static_cast<size_t>(i)],
                  busy[static_cast<size_t>(i)]);
    }
    std::printf("mean   %12.3f %16.3f   (max %.3f); received %.2f samples/s per agent\n",
                mean(idle), mean(busy), max_busy, rate);
  }
  return 0;
}
