// `octet pull REPO[@REVISION] [--include GLOB]...`: download a model from the
// Hugging Face Hub into the shared HF cache (app/include/octet/app/hub.h),
// verified and resumable. Progress on stderr (one line redrawn on a terminal,
// plain lines when piped); --json prints one summary document on stdout.
// SIGINT/SIGTERM stop the downloads cleanly; a rerun resumes them.
//
// `--cluster NAME`: every node of a saved cluster gets the model in its agent's
// model store (a hub cache inside its model roots: octet-agent --models-dir,
// default FIRST-MODEL-ROOT/hub), so the snapshot folder is a model path the
// agents launch. The first node downloads from the Hub; the others copy its
// verified files over the agents' authenticated gRPC API (ModelService), each
// running `octet pull --from-peer` into its own store, with the same checksums
// and resume. Progress per node on stderr.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "command.h"
#include "octet/app/agent_client.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/hub.h"
#include "octet/base/args.h"
#include "octet/base/json.h"

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet pull";

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) {
  g_stop_signal.store(sig);
  g_stop.store(true);
}

std::string Rate(double bytes_per_s) { return FormatBytes(bytes_per_s) + "/s"; }

std::string Eta(double s) {
  if (s < 0) return "--";
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  }
  return buf;
}

std::string Percent(int64_t done, int64_t total) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%3d%%",
                total > 0 ? int(100.0 * double(done) / double(total)) : 100);
  return buf;
}

// Draws app::hub::PullProgress on stderr. On a terminal: finished files as
// lines, and one status line (the busiest file and the total) redrawn in
// place. Piped: no escape codes; a line per file event and a total line
// every few seconds.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : tty_(isatty(STDERR_FILENO)), quiet_(quiet) {}

  void operator()(const app::hub::PullProgress& p) {
    if (quiet_) return;
    using E = app::hub::PullProgress::Event;
    std::lock_guard<std::mutex> lock(mu_);
    const std::string total =
        "total " + std::to_string(p.files_done) + "/" + std::to_string(p.files_total) + " files " +
        FormatBytes(double(p.bytes_done)) + "/" + FormatBytes(double(p.bytes_total)) + " " +
        Percent(p.bytes_done, p.bytes_total) + " " + Rate(p.bytes_per_s) + " ETA " + Eta(p.eta_s);
    std::string line;
    switch (p.event) {
      case E::kFileDone:
        line = "  " + p.file.path + "  " + FormatBytes(double(p.file.total)) + "  done (" +
               p.detail + ")";
        break;
      case E::kFileCached:
        line = "  " + p.file.path + "  " + FormatBytes(double(p.file.total)) + "  " + p.detail;
        break;
      case E::kFileRetry:
        line = "  " + p.file.path + ": " + p.detail;
        break;
      case E::kFileStarted:
        if (!tty_) {
          line = "  " + p.file.path + "  " + FormatBytes(double(p.file.total)) +
                 (p.file.done > 0 ? "  resuming at " + FormatBytes(double(p.file.done)) : "  ...");
        }
        break;
      case E::kTick:
        break;
    }
    if (tty_) {
      if (!line.empty()) std::fprintf(stderr, "\r\033[K%s\n", line.c_str());
      std::string status = total;
      if (!p.active.empty()) {
        const auto& a = p.active.front();
        status = a.path + " " + Percent(a.done, a.total) + " " + Rate(a.bytes_per_s) +
                 (p.active.size() > 1 ? " (+" + std::to_string(p.active.size() - 1) + ")" : "") +
                 " | " + total;
      }
      std::fprintf(stderr, "\r\033[K%s", status.c_str());
      drawn_ = true;
    } else {
      if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
      const auto now = std::chrono::steady_clock::now();
      if (p.event == E::kTick && p.bytes_total > 0 && now - last_total_ > std::chrono::seconds(5)) {
        // Per-file lines for what is in flight, then the total.
        for (const auto& a : p.active) {
          std::fprintf(stderr, "  %s  %s/%s %s %s\n", a.path.c_str(),
                       FormatBytes(double(a.done)).c_str(), FormatBytes(double(a.total)).c_str(),
                       Percent(a.done, a.total).c_str(), Rate(a.bytes_per_s).c_str());
        }
        std::fprintf(stderr, "%s\n", total.c_str());
        last_total_ = now;
      }
    }
    std::fflush(stderr);
  }

  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  const bool tty_;
  const bool quiet_;
  std::mutex mu_;
  bool drawn_ = false;  // guarded by mu_
  std::chrono::steady_clock::time_point last_total_ = std::chrono::steady_clock::now();
};

// `--from-peer HOST:PORT`: the file list and bytes from another agent's
// store, authenticated with the cluster token the agent hands its pull
// ($OCTET_PEER_TOKEN; $OCTET_PEER_CA_PEM with TLS).
Result<std::unique_ptr<app::hub::PullSource>> PeerSource(const std::string& address,
                                                         const std::string& tls_name,
                                                         std::shared_ptr<app::AgentClient>* keep) {
  app::AgentEndpoint ep;
  ep.address = address;
  const char* token = std::getenv("OCTET_PEER_TOKEN");
  if (!token || !*token) {
    return FailedPreconditionError(
        "--from-peer needs the cluster token in $OCTET_PEER_TOKEN "
        "(the agent sets it when it runs the pull)");
  }
  ep.token = token;
  if (const char* ca = std::getenv("OCTET_PEER_CA_PEM"); ca && *ca) ep.tls_ca_pem = ca;
  ep.tls_server_name = tls_name;
  OCTET_ASSIGN_OR_RETURN(auto client, app::AgentClient::Create(ep));
  std::shared_ptr<app::AgentClient> peer(std::move(client));
  *keep = peer;
  auto blob_paths = std::make_shared<std::map<std::string, std::string>>();
  auto src = std::make_unique<app::hub::PullSource>();
  src->name = "peer " + address;
  src->info = [peer, blob_paths](const app::hub::RepoRef& ref) -> Result<app::hub::RepoInfo> {
    OCTET_ASSIGN_OR_RETURN(app::PeerSnapshot snap,
                           peer->GetSnapshot(ref.repo, ref.revision, Deadline::AfterMs(30'000)));
    app::hub::RepoInfo info;
    info.ref = ref;
    info.commit = snap.commit;
    auto hex = [](const std::string& s, size_t n) {
      return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
    };
    for (const auto& f : snap.files) {
      app::hub::HubFile h;
      h.path = f.path;
      h.size = f.size;
      // The blob's name is the checksum the Hub listed for it.
      if (hex(f.blob, 64)) {
        h.sha256 = f.blob;
      } else if (hex(f.blob, 40)) {
        h.blob_id = f.blob;
      } else {
        h.blob_id = f.blob.empty() ? snap.commit + "-" + f.path : f.blob;  // size check only
        for (auto& ch : h.blob_id) ch = ch == '/' ? '%' : ch;
      }
      (*blob_paths)[f.path] = f.blob_path;
      info.files.push_back(std::move(h));
    }
    return info;
  };
  src->read = [peer, blob_paths](const app::hub::HubFile& f, int64_t offset,
                                 const std::function<Status(const char*, size_t)>& on_data) {
    auto it = blob_paths->find(f.path);
    if (it == blob_paths->end()) return NotFoundError(f.path + ": not in the peer's snapshot");
    // Deadline: a minute plus 10 MB/s for what is left.
    const int64_t left = std::max<int64_t>(0, f.size - offset);
    return peer->ReadFile(it->second, offset, on_data, Deadline::AfterMs(60'000 + left / 10'000));
  };
  return src;
}

std::string NodeProgress(const app::ModelPullEvent& e) {
  return std::to_string(e.files_done) + "/" + std::to_string(e.files_total) + " files " +
         FormatBytes(double(e.bytes_done)) + "/" + FormatBytes(double(e.bytes_total)) + " " +
         Percent(e.bytes_done, e.bytes_total) + " " + Rate(e.bytes_per_s);
}

// `octet pull REPO --cluster NAME`.
int PullOntoCluster(const std::string& cluster, const std::string& config_dir,
                    const app::hub::RepoRef& ref, const app::hub::HubConfig& c,
                    const app::hub::PullOptions& o, bool json, bool quiet) {
  auto profile = app::LoadProfile(cluster, config_dir);
  if (!profile.ok()) {
    std::cerr << kProgram << ": --cluster " << cluster << ": " << profile.status().message()
              << "\n";
    return kExitFailure;
  }
  const size_t n = profile->nodes.size();
  if (n == 0) {
    std::cerr << kProgram << ": cluster '" << cluster << "' has no nodes\n";
    return kExitFailure;
  }
  std::vector<app::AgentEndpoint> eps(n);
  std::vector<std::unique_ptr<app::AgentClient>> clients(n);
  for (size_t i = 0; i < n; ++i) {
    auto ep = app::EndpointFor(*profile, i);
    if (!ep.ok()) {
      std::cerr << WithProgram(kProgram, ep.status().message()) << "\n";
      return kExitFailure;
    }
    eps[i] = *ep;
    auto cl = app::AgentClient::Create(*ep);
    if (!cl.ok()) {
      std::cerr << WithProgram(kProgram, cl.status().message()) << "\n";
      return kExitFailure;
    }
    clients[i] = std::move(*cl);
  }
  std::mutex out_mu;
  struct NodeResult {
    Result<app::ModelPullEvent> r = UnavailableError("not run");
    std::string source;
  };
  std::vector<NodeResult> results(n);
  auto run = [&](size_t i, const std::string& peer) {
    app::ModelPullRequest req;
    req.repo = ref.repo;
    req.revision = ref.revision;
    req.include = o.include;
    req.endpoint = c.endpoint;
    if (peer.empty()) req.hf_token = c.token;  // only the node that asks the Hub
    req.jobs = static_cast<uint32_t>(o.jobs);
    if (!peer.empty()) {
      req.peer = peer;
      req.peer_tls_ca_pem = eps[0].tls_ca_pem;
      req.peer_tls_server_name = eps[0].tls_server_name;
    }
    const std::string& name = profile->nodes[i].name;
    results[i].source = peer.empty() ? "hub" : "peer " + profile->nodes[0].name;
    auto last = std::chrono::steady_clock::time_point();
    results[i].r = clients[i]->PullModel(
        req,
        [&, name](const app::ModelPullEvent& e) {
          if (quiet) return;
          std::lock_guard<std::mutex> lock(out_mu);
          if (!e.line.empty()) {
            std::fprintf(stderr, "[%s] %s\n", name.c_str(), e.line.c_str());
          } else if (!e.finished) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last >= std::chrono::seconds(1) ||
                (e.files_total > 0 && e.files_done == e.files_total)) {
              std::fprintf(stderr, "[%s] %s\n", name.c_str(), NodeProgress(e).c_str());
              last = now;
            }
          }
        },
        &g_stop);
  };
  if (!quiet) {
    std::cerr << kProgram << ": " << ref.ToString() << " onto cluster " << cluster << " (" << n
              << " nodes): " << profile->nodes[0].name << " from " << c.endpoint
              << (n > 1 ? ", the others from " + profile->nodes[0].name : std::string()) << "\n";
  }
  run(0, "");
  bool ok = results[0].r.ok() && results[0].r->ok;
  if (ok && n > 1) {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < n; ++i) threads.emplace_back(run, i, eps[0].address);
    for (auto& t : threads) t.join();
  }
  nlohmann::json nodes = nlohmann::json::array();
  std::string commit;
  int failed = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& res = results[i];
    nlohmann::json j = {{"name", profile->nodes[i].name},
                        {"address", profile->nodes[i].address},
                        {"source", res.source}};
    std::string error;
    if (!res.r.ok()) {
      error = res.r.status().message();
    } else if (!res.r->ok) {
      error = res.r->error;
    }
    if (i > 0 && !results[0].r.ok()) error = "not started: the first node's pull failed";
    if (i > 0 && results[0].r.ok() && !results[0].r->ok) {
      error = "not started: the first node's pull failed";
    }
    j["ok"] = error.empty();
    if (error.empty()) {
      j["commit"] = res.r->commit;
      j["snapshot"] = res.r->snapshot_dir;
      j["network_bytes"] = res.r->network_bytes;
      j["files_downloaded"] = res.r->files_downloaded;
      j["files"] = res.r->files_total;
      j["bytes"] = res.r->bytes_total;
      commit = res.r->commit;
    } else {
      j["error"] = error;
      ++failed;
    }
    nodes.push_back(j);
    if (!quiet || !error.empty()) {
      if (error.empty()) {
        std::cerr << kProgram << ": " << profile->nodes[i].name << ": " << res.r->snapshot_dir
                  << "  (" << res.r->files_downloaded << " of " << res.r->files_total
                  << " files fetched from " << res.source << ", "
                  << FormatBytes(double(res.r->network_bytes)) << ")\n";
      } else {
        std::cerr << kProgram << ": " << profile->nodes[i].name << ": error: " << error << "\n";
      }
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"repo", ref.repo},
                                {"revision", ref.revision},
                                {"commit", commit},
                                {"cluster", cluster},
                                {"nodes", nodes}}
                     .dump(2)
              << "\n";
  }
  if (g_stop.load()) {
    const int sig = g_stop_signal.load();
    return sig > 0 ? 128 + sig : kExitFailure;
  }
  return failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace

int RunPull(const std::vector<std::string>& args) {
  ArgParser p(kProgram,
              "Download a model from the Hugging Face Hub into the shared Hugging Face cache\n"
              "($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), verified (sha256) and\n"
              "resumable. Then `--model ORG/NAME` works in generate, chat and serve.\n"
              "Environment: HF_TOKEN (or $HF_HOME/token) for gated repos, HF_ENDPOINT for a\n"
              "mirror, HF_HUB_OFFLINE=1 to resolve from the cache only.");
  p.Positional("REPO[@REVISION]", "the repo id, e.g. Qwen/Qwen3-0.6B or Qwen/Qwen3-0.6B@main")
      .Option("include", "GLOB",
              "only files matching GLOB (repeatable or comma-separated; "
              "'*' also matches '/')")
      .Option("jobs", "N", "files downloaded at once", "4")
      .Option("attempts", "N", "tries per file before giving up (resumed with Range)", "5")
      .Option("timeout", "SECONDS", "longest wait for the Hub (connect, and each read)", "30")
      .Option("cache-dir", "DIR", "the hub cache folder (default: from the environment)")
      .Option("endpoint", "URL", "the Hub or a mirror (default: $HF_ENDPOINT or huggingface.co)")
      .Option("cluster", "NAME",
              "pull onto every node of this saved cluster (into each agent's model store; the "
              "first node downloads, the others copy from it)")
      .Option("config-dir", "DIR", "where cluster profiles are (with --cluster)")
      .Option("from-peer", "HOST:PORT",
              "copy from that agent's store instead of the Hub (what agents run for --cluster)")
      .Option("peer-tls-name", "NAME", "the name in the peer agent's certificate")
      .Flag("progress-lines", "machine-readable progress on stdout (@octet-pull {json} lines)")
      .Flag("trust-cache", "do not re-hash blobs already in the cache (size check only)")
      .Flag("quiet", "no progress on stderr")
      .Flag("json", "print a JSON summary on stdout");
  // --include may be repeated: gather every occurrence before the parser
  // (which keeps the last) sees them.
  std::vector<std::string> includes;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--include" && i + 1 < args.size()) includes.push_back(args[i + 1]);
    if (args[i].rfind("--include=", 0) == 0) includes.push_back(args[i].substr(10));
  }
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  auto usage = [](const std::string& why) {
    std::cerr << kProgram << ": " << why << " (see " << kProgram << " --help)\n";
    return kExitUsage;
  };
  if (p.positional().size() != 1) return usage("give exactly one REPO[@REVISION]");
  auto ref = app::hub::ParseRepoRef(p.positional()[0]);
  if (!ref.ok()) return usage(ref.status().message());
  app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
  if (p.Given("cache-dir")) c.cache_dir = p.GetString("cache-dir");
  if (p.Given("endpoint")) {
    c.endpoint = p.GetString("endpoint");
    while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  }
  auto jobs = p.GetInt("jobs");
  auto attempts = p.GetInt("attempts");
  auto timeout = p.GetDouble("timeout");
  if (!jobs.ok() || *jobs < 1 || *jobs > 64) return usage("--jobs takes 1..64");
  if (!attempts.ok() || *attempts < 1) return usage("--attempts takes a positive number");
  if (!timeout.ok() || *timeout <= 0) return usage("--timeout takes a positive number of seconds");
  c.connect_timeout_ms = c.read_timeout_ms = static_cast<int>(*timeout * 1000);

  app::hub::PullOptions o;
  for (const auto& inc : includes) {
    size_t start = 0;
    while (start <= inc.size()) {
      size_t comma = inc.find(',', start);
      if (comma == std::string::npos) comma = inc.size();
      if (comma > start) o.include.push_back(inc.substr(start, comma - start));
      start = comma + 1;
    }
  }
  o.jobs = static_cast<int>(*jobs);
  o.attempts = static_cast<int>(*attempts);
  o.verify_cached = !p.GetFlag("trust-cache");
  o.cancel = &g_stop;
  const bool json = p.GetFlag("json");
  const bool lines = p.GetFlag("progress-lines");
  ProgressPrinter printer(p.GetFlag("quiet"));
  std::mutex lines_mu;
  auto last_line = std::chrono::steady_clock::time_point();
  o.progress = [&](const app::hub::PullProgress& pr) {
    printer(pr);
    if (!lines) return;
    std::lock_guard<std::mutex> lock(lines_mu);
    const auto now = std::chrono::steady_clock::now();
    if (pr.event == app::hub::PullProgress::Event::kTick &&
        now - last_line < std::chrono::milliseconds(500)) {
      return;
    }
    last_line = now;
    std::printf("@octet-pull %s\n", nlohmann::json{{"files_done", pr.files_done},
                                                   {"files_total", pr.files_total},
                                                   {"bytes_done", pr.bytes_done},
                                                   {"bytes_total", pr.bytes_total},
                                                   {"bytes_per_s", pr.bytes_per_s}}
                                        .dump()
                                        .c_str());
    std::fflush(stdout);
  };
  std::shared_ptr<app::AgentClient> peer_client;
  std::unique_ptr<app::hub::PullSource> peer;
  if (p.Given("from-peer")) {
    if (p.Given("cluster")) return usage("--from-peer and --cluster do not go together");
    auto src = PeerSource(p.GetString("from-peer"), p.GetString("peer-tls-name"), &peer_client);
    if (!src.ok()) {
      std::cerr << kProgram << ": error: " << src.status().message() << "\n";
      return kExitFailure;
    }
    peer = std::move(*src);
    o.source = peer.get();
  }

  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  if (p.Given("cluster")) {
    return PullOntoCluster(p.GetString("cluster"), p.GetString("config-dir"), *ref, c, o, json,
                           p.GetFlag("quiet"));
  }
  if (!p.GetFlag("quiet")) {
    std::cerr << kProgram << ": " << ref->ToString() << " from " << (peer ? peer->name : c.endpoint)
              << " into " << c.cache_dir << (c.offline ? " (offline: cache only)" : "")
              << (c.token.empty() ? "" : " (token from " + c.token_source + ")") << "\n";
  }
  auto r = app::hub::Pull(c, *ref, o);
  printer.End();
  if (!r.ok()) {
    std::cerr << kProgram << ": error: " << r.status().message() << "\n";
    if (r.status().code() == StatusCode::kCancelled) {
      const int sig = g_stop_signal.load();
      return sig > 0 ? 128 + sig : kExitFailure;
    }
    return kExitFailure;
  }
  int downloaded = 0;
  for (const auto& f : r->files) downloaded += f.downloaded ? 1 : 0;
  if (lines) {
    std::printf("@octet-pull-done %s\n", nlohmann::json{{"commit", r->commit},
                                                        {"snapshot", r->snapshot_dir},
                                                        {"network_bytes", r->network_bytes},
                                                        {"files_downloaded", downloaded},
                                                        {"files_total", r->files.size()},
                                                        {"bytes_total", r->bytes_total}}
                                             .dump()
                                             .c_str());
    std::fflush(stdout);
  }
  if (json) {
    nlohmann::json j;
    j["repo"] = r->ref.repo;
    j["revision"] = r->ref.revision;
    j["commit"] = r->commit;
    j["snapshot"] = r->snapshot_dir;
    j["offline"] = r->offline;
    j["bytes_total"] = r->bytes_total;
    j["network_bytes"] = r->network_bytes;
    j["seconds"] = r->seconds;
    j["files_downloaded"] = downloaded;
    j["files_cached"] = static_cast<int>(r->files.size()) - downloaded;
    j["files"] = nlohmann::json::array();
    for (const auto& f : r->files) {
      nlohmann::json jf = {{"path", f.file.path},
                           {"size", f.file.size},
                           {"downloaded", f.downloaded},
                           {"network_bytes", f.network_bytes}};
      if (!f.file.sha256.empty()) jf["sha256"] = f.file.sha256;
      j["files"].push_back(jf);
    }
    std::cout << j.dump(2) << "\n";
  }
  if (!p.GetFlag("quiet")) {
    std::cerr << kProgram << ": " << r->ref.ToString() << " -> " << r->snapshot_dir << "  ("
              << r->files.size() << " files, " << FormatBytes(double(r->bytes_total)) << "; "
              << (r->offline ? std::string("offline, from the cache")
                             : std::to_string(downloaded) + " downloaded, " +
                                   FormatBytes(double(r->network_bytes)) + " over the network")
              << ")\n";
  }
  return kExitOk;
}

}  // namespace octet::cli
