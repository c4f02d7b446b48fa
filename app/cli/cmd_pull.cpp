// `octet pull REPO[@REVISION] [--include GLOB]...`: download a model from the
// Hugging Face Hub into the shared HF cache (app/include/octet/app/hub.h),
// verified and resumable. Progress on stderr (one line redrawn on a terminal,
// plain lines when piped); --json prints one summary document on stdout.
// SIGINT/SIGTERM stop the downloads cleanly; a rerun resumes them.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "command.h"
#include "octet/app/hub.h"
#include "octet/base/args.h"

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
  ProgressPrinter printer(p.GetFlag("quiet"));
  o.progress = [&printer](const app::hub::PullProgress& pr) { printer(pr); };

  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  if (!p.GetFlag("quiet")) {
    std::cerr << kProgram << ": " << ref->ToString() << " from " << c.endpoint << " into "
              << c.cache_dir << (c.offline ? " (offline: cache only)" : "")
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
