// `octet bench`: llama-benchy-style measurement of an OpenAI-compatible
// endpoint, and the SQLite run store behind it.
//
//   octet bench --url URL [--model NAME] --pp 512,2048 --tg 128 --concurrency 1,4,8
//               [--depth 0] [--runs 3] [--db FILE.sqlite] [--label TEXT]
//               [--prompt-mode token-ids|text] [--json | --csv]
//   octet bench list    --db FILE [--limit N] [--json]
//   octet bench show    --db FILE RUN [--json | --csv]
//   octet bench compare --db FILE RUN_A RUN_B [--json]
//   octet bench import  --db FILE REPORT.json [--label TEXT]   (llama-benchy JSON)
//   octet bench delete  --db FILE RUN
//
// The metrics and the JSON layout are llama-benchy's (octet/app/bench_runner.h);
// a run stored with --db carries its topology snapshot. Progress on a terminal
// only. Contract: shared/docs/CLI.md.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include "command.h"
#include "octet/app/bench_runner.h"
#include "octet/app/bench_store.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet bench";

int UsageError(const std::string& program, const std::string& why) {
  std::cerr << WithProgram(program, why) << " (see " << program << " --help)\n";
  return kExitUsage;
}

int Failure(const std::string& program, const std::string& why) {
  std::cerr << program << ": " << why << "\n";
  return kExitFailure;
}

std::string When(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

Result<std::unique_ptr<app::BenchRunStore>> OpenStore(const ArgParser& p) {
  if (!p.Given("db")) return InvalidArgumentError("--db FILE.sqlite is required");
  return app::BenchRunStore::Open(p.GetString("db"));
}

Result<int64_t> RunId(const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v > 0) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return InvalidArgumentError("'" + text + "' is not a run id (see octet bench list)");
}

nlohmann::json RunSummaryJson(const app::BenchRun& r) {
  return {{"id", r.id},
          {"created_unix_ms", r.created_unix_ms},
          {"label", r.label},
          {"state", r.state},
          {"error", r.error},
          {"source", r.source},
          {"tool", r.tool},
          {"url", r.url},
          {"model", r.topology.model},
          {"tp", r.topology.tp},
          {"nodes", r.topology.nodes},
          {"transport", r.topology.transport},
          {"algorithm", r.topology.algorithm},
          {"speculative", r.topology.speculative},
          {"results", r.result_count}};
}

int RunList(const std::vector<std::string>& args) {
  const std::string prog = std::string(kProgram) + " list";
  ArgParser p(prog, "List the runs of a run store, newest first.");
  p.Option("db", "FILE", "run store (SQLite)").Option("limit", "N", "at most N runs", "0")
      .Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  auto limit = p.GetInt("limit");
  if (!limit.ok() || *limit < 0) return UsageError(prog, "--limit must be >= 0");
  auto store = OpenStore(p);
  if (!store.ok()) return Failure(prog, store.status().message());
  auto runs = (*store)->ListRuns(static_cast<int>(*limit));
  if (!runs.ok()) return Failure(prog, runs.status().message());
  if (p.GetFlag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *runs) out.push_back(RunSummaryJson(r));
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  std::printf("%5s  %-16s  %-11s  %-24s  %4s  %-16s  %5s  %s\n", "id", "created", "state", "model",
              "tp", "transport/algo", "tests", "label");
  for (const auto& r : *runs) {
    const std::string ta = r.topology.transport +
                           (r.topology.algorithm.empty() ? "" : "/" + r.topology.algorithm);
    std::printf("%5lld  %-16s  %-11s  %-24s  %4d  %-16s  %5lld  %s%s\n",
                static_cast<long long>(r.id), When(r.created_unix_ms).c_str(), r.state.c_str(),
                r.topology.model.c_str(), r.topology.tp, ta.c_str(),
                static_cast<long long>(r.result_count), r.label.c_str(),
                r.source == "octet" ? "" : ("  [" + r.source + "]").c_str());
  }
  return kExitOk;
}

void PrintRunHeader(const app::BenchRun& r) {
  std::cout << "run " << r.id << (r.label.empty() ? "" : " (" + r.label + ")") << ", "
            << When(r.created_unix_ms) << ", " << r.state << (r.error.empty() ? "" : ": " + r.error)
            << "\n"
            << "  " << r.tool << " against " << (r.url.empty() ? "?" : r.url) << ", latency "
            << r.latency_ms << " ms, prompts: " << r.prompt_mode << "\n"
            << "  model " << r.topology.model << " (" << r.topology.dtype << "), "
            << r.topology.nodes << " node(s), TP " << r.topology.tp << ", " << r.topology.transport
            << "/" << r.topology.algorithm
            << (r.topology.cabling.empty() ? "" : ", " + r.topology.cabling)
            << (r.topology.backend.empty() ? "" : ", " + r.topology.backend)
            << (r.topology.engine.empty() ? "" : ", " + r.topology.engine)
            << (r.topology.speculative.empty() ? "" : ", speculative " + r.topology.speculative)
            << "\n\n";
}

int RunShow(const std::vector<std::string>& args) {
  const std::string prog = std::string(kProgram) + " show";
  ArgParser p(prog, "Show one stored run: its topology and every test.");
  p.Option("db", "FILE", "run store (SQLite)").Flag("json", "print one JSON document on stdout")
      .Flag("csv", "print CSV").Positional("RUN", "run id");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give one run id");
  auto id = RunId(p.positional()[0]);
  if (!id.ok()) return UsageError(prog, id.status().message());
  auto store = OpenStore(p);
  if (!store.ok()) return Failure(prog, store.status().message());
  auto run = (*store)->GetRun(*id);
  if (!run.ok()) return Failure(prog, run.status().message());
  if (p.GetFlag("json")) {
    std::cout << app::BenchRunToJson(*run) << "\n";
  } else if (p.GetFlag("csv")) {
    std::cout << app::FormatBenchCsv(*run);
  } else {
    PrintRunHeader(*run);
    std::cout << app::FormatBenchTable(*run);
  }
  return kExitOk;
}

int RunCompare(const std::vector<std::string>& args) {
  const std::string prog = std::string(kProgram) + " compare";
  ArgParser p(prog, "Two stored runs side by side, with the delta of every metric.");
  p.Option("db", "FILE", "run store (SQLite)").Flag("json", "print one JSON document on stdout")
      .Positional("RUN_A RUN_B", "run ids (B is compared with A)");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 2) return UsageError(prog, "give two run ids");
  auto ia = RunId(p.positional()[0]);
  auto ib = RunId(p.positional()[1]);
  if (!ia.ok()) return UsageError(prog, ia.status().message());
  if (!ib.ok()) return UsageError(prog, ib.status().message());
  auto store = OpenStore(p);
  if (!store.ok()) return Failure(prog, store.status().message());
  auto a = (*store)->GetRun(*ia);
  auto b = (*store)->GetRun(*ib);
  if (!a.ok()) return Failure(prog, a.status().message());
  if (!b.ok()) return Failure(prog, b.status().message());
  if (p.GetFlag("json")) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : app::CompareRuns(*a, *b)) {
      nlohmann::json metrics = nlohmann::json::array();
      for (const auto& m : row.metrics) {
        metrics.push_back({{"name", m.name}, {"a", m.a}, {"b", m.b}, {"delta_pct", m.delta_pct},
                           {"higher_is_better", m.higher_is_better}});
      }
      rows.push_back({{"test", row.test},
                      {"prompt_size", row.prompt_size},
                      {"response_size", row.response_size},
                      {"depth", row.depth},
                      {"concurrency", row.concurrency},
                      {"in_a", row.in_a},
                      {"in_b", row.in_b},
                      {"metrics", metrics}});
    }
    std::cout << nlohmann::json{{"a", RunSummaryJson(*a)}, {"b", RunSummaryJson(*b)}, {"rows", rows}}
                     .dump()
              << "\n";
  } else {
    std::cout << app::FormatComparison(*a, *b);
  }
  return kExitOk;
}

int RunImport(const std::vector<std::string>& args) {
  const std::string prog = std::string(kProgram) + " import";
  ArgParser p(prog, "Store a llama-benchy JSON report (or an octet bench --json output) as a run.");
  p.Option("db", "FILE", "run store (SQLite)").Option("label", "TEXT", "label for the run")
      .Option("url", "URL", "the endpoint it measured (for the record)")
      .Option("tp", "N", "topology: TP degree").Option("nodes", "N", "topology: nodes")
      .Option("engine", "TEXT", "topology: the server measured (\"vLLM 0.9\")")
      .Flag("json", "print the new run id as JSON").Positional("REPORT.json", "the report");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give one report file");
  const std::string file = p.positional()[0];
  auto text = ReadFileToString(file);
  if (!text.ok()) return Failure(prog, text.status().message());
  auto run = app::ParseLlamaBenchyJson(*text, file);
  if (!run.ok()) return Failure(prog, run.status().message());
  if (p.Given("label")) run->label = p.GetString("label");
  if (p.Given("url")) run->url = p.GetString("url");
  if (p.Given("engine")) run->topology.engine = p.GetString("engine");
  for (const char* k : {"tp", "nodes"}) {
    if (!p.Given(k)) continue;
    auto v = p.GetInt(k);
    if (!v.ok() || *v < 1) return UsageError(prog, std::string("--") + k + " must be >= 1");
    (std::string(k) == "tp" ? run->topology.tp : run->topology.nodes) = static_cast<int>(*v);
  }
  auto store = OpenStore(p);
  if (!store.ok()) return Failure(prog, store.status().message());
  auto id = (*store)->InsertRun(*run);
  if (!id.ok()) return Failure(prog, id.status().message());
  if (p.GetFlag("json")) {
    std::cout << nlohmann::json{{"id", *id}, {"results", run->results.size()}}.dump() << "\n";
  } else {
    std::cerr << prog << ": stored run " << *id << " (" << run->results.size() << " tests from "
              << run->tool << ")\n";
  }
  return kExitOk;
}

int RunDelete(const std::vector<std::string>& args) {
  const std::string prog = std::string(kProgram) + " delete";
  ArgParser p(prog, "Delete a stored run and its results.");
  p.Option("db", "FILE", "run store (SQLite)").Positional("RUN", "run id");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give one run id");
  auto id = RunId(p.positional()[0]);
  if (!id.ok()) return UsageError(prog, id.status().message());
  auto store = OpenStore(p);
  if (!store.ok()) return Failure(prog, store.status().message());
  if (auto r = (*store)->GetRun(*id); !r.ok()) return Failure(prog, r.status().message());
  if (Status s = (*store)->DeleteRun(*id); !s.ok()) return Failure(prog, s.message());
  return kExitOk;
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  if (!args.empty()) {
    const std::string& sub = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (const Subcommand* s = FindSubcommand(BenchSubcommands(), sub)) return s->run(rest);
  }
  ArgParser p(kProgram,
              "Measure an OpenAI-compatible endpoint like llama-benchy: prefill and decode t/s\n"
              "(total and per request), TTFR, estimated prompt time and TTFT at each concurrency,\n"
              "mean ± std over --runs. Also: octet bench list|show|compare|import|delete --help.");
  p.Option("url", "URL", "the endpoint, e.g. http://127.0.0.1:8000")
      .Option("model", "NAME", "model to ask for (default: the server's first)")
      .Option("api-key", "KEY", "bearer token")
      .Option("pp", "N,...", "prompt sizes in tokens", "512")
      .Option("tg", "N,...", "generated tokens per request", "128")
      .Option("depth", "N,...", "context tokens before the prompt", "0")
      .Option("concurrency", "C,...", "requests in flight together", "1")
      .Option("runs", "N", "repetitions of each test", "3")
      .Option("prompt-mode", "token-ids|text",
              "exact-length prompts as token ids (default) or text sized with the server's "
              "/tokenize",
              "token-ids")
      .Flag("no-warmup", "skip the unmeasured warm-up request")
      .Option("timeout", "SECONDS", "per request", "600")
      .Option("seed", "S", "seed of the prompt ids", "1")
      .Option("db", "FILE.sqlite", "store the run (created if missing)")
      .Option("label", "TEXT", "label for the stored run")
      .Option("nodes", "N", "topology snapshot: nodes (default: what the server says, else 1)")
      .Option("tp", "N", "topology snapshot: TP degree (default: what the server says)")
      .Option("transport", "NAME", "topology snapshot: shm|tcp|verbs|nccl")
      .Option("algo", "NAME", "topology snapshot: auto|oneshot|ring")
      .Option("cabling", "NAME", "topology snapshot: local|direct|ring|switch")
      .Flag("json", "print the run as one JSON document (llama-benchy's layout) on stdout")
      .Flag("csv", "print the run as CSV on stdout");
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("url")) return UsageError(kProgram, "--url URL is required");
  if (p.GetFlag("json") && p.GetFlag("csv")) return UsageError(kProgram, "--json or --csv, not both");
  app::BenchConfig c;
  c.url = p.GetString("url");
  c.model = p.GetString("model");
  c.api_key = p.GetString("api-key");
  c.label = p.GetString("label");
  c.prompt_mode = p.GetString("prompt-mode");
  c.warmup = !p.GetFlag("no-warmup");
  for (auto [flag, dst] : {std::pair<const char*, std::vector<int64_t>*>{"pp", &c.pp},
                           {"tg", &c.tg}, {"depth", &c.depth}, {"concurrency", &c.concurrency}}) {
    auto v = p.GetIntList(flag);
    if (!v.ok()) return UsageError(kProgram, v.status().message());
    if (v->empty()) return UsageError(kProgram, std::string("--") + flag + " is empty");
    const int64_t least = std::string(flag) == "depth" ? 0 : 1;
    for (int64_t x : *v) {
      if (x < least) {
        return UsageError(kProgram, std::string("--") + flag + " values must be >= " +
                                        std::to_string(least));
      }
    }
    *dst = *v;
  }
  auto runs = p.GetInt("runs");
  auto timeout = p.GetInt("timeout");
  auto seed = p.GetInt("seed");
  for (const Status& s : {runs.status(), timeout.status(), seed.status()}) {
    if (!s.ok()) return UsageError(kProgram, s.message());
  }
  if (*runs < 1) return UsageError(kProgram, "--runs must be at least 1");
  if (*timeout < 1) return UsageError(kProgram, "--timeout must be at least 1 second");
  c.runs = static_cast<int>(*runs);
  c.request_timeout_ms = static_cast<int>(std::min<int64_t>(*timeout, 86400) * 1000);
  c.seed = static_cast<uint64_t>(*seed);
  for (const char* k : {"nodes", "tp"}) {
    if (!p.Given(k)) continue;
    auto v = p.GetInt(k);
    if (!v.ok() || *v < 1) return UsageError(kProgram, std::string("--") + k + " must be >= 1");
    (std::string(k) == "tp" ? c.topology.tp : c.topology.nodes) = static_cast<int>(*v);
  }
  c.topology.transport = p.GetString("transport");
  c.topology.algorithm = p.GetString("algo");
  c.topology.cabling = p.GetString("cabling");
  // Validated before anything runs (the store is opened first so that a bad
  // --db fails fast).
  std::unique_ptr<app::BenchRunStore> store;
  if (p.Given("db")) {
    auto s = app::BenchRunStore::Open(p.GetString("db"));
    if (!s.ok()) return Failure(kProgram, s.status().message());
    store = std::move(*s);
  }
  const bool tty = isatty(STDERR_FILENO);
  auto progress = [&](const app::BenchProgress& pr) {
    if (!tty) return;
    if (pr.phase == "done") {
      std::fprintf(stderr, "\r%-72s\r", "");
    } else {
      std::fprintf(stderr, "\r[%d/%d] %-24s %-10s run %d/%d   ", pr.test_index + 1, pr.tests_total,
                   pr.test.c_str(), pr.phase.c_str(), pr.repetition + 1, pr.runs);
    }
    std::fflush(stderr);
  };
  auto run = app::RunBenchmark(c, store.get(), progress);
  if (!run.ok()) return Failure(kProgram, run.status().message());
  if (p.GetFlag("json")) {
    std::cout << app::BenchRunToJson(*run) << "\n";
  } else if (p.GetFlag("csv")) {
    std::cout << app::FormatBenchCsv(*run);
  } else {
    std::cout << app::FormatBenchTable(*run);
  }
  if (store && !run->store_error.empty()) {
    // The measurements survive a store that failed mid-run: in a side file
    // beside it, in the --json format; when its disk is the one that is full,
    // in the temporary folder ($TMPDIR, else /tmp) instead.
    const std::string stamp = std::to_string(::time(nullptr)) + "-" + std::to_string(::getpid());
    std::string side = store->path() + ".unsaved-" + stamp + ".json";
    const std::string doc = app::BenchRunToJson(*run) + "\n";
    std::cerr << kProgram << ": error: the run store " << store->path()
              << " refused the results: " << run->store_error << "\n";
    Status saved = WriteFileAtomic(side, doc);
    if (!saved.ok()) {
      std::cerr << kProgram << ": they could not be kept beside it (" << saved.message() << ")\n";
      const char* tmpdir = std::getenv("TMPDIR");
      side =
          JoinPath(tmpdir && *tmpdir ? tmpdir : "/tmp", "octet-bench-unsaved-" + stamp + ".json");
      saved = WriteFileAtomic(side, doc);
    }
    if (saved.ok()) {
      std::cerr << kProgram << ": the results are kept in " << side
                << " (octet bench import reads it once the store has room)\n";
    } else {
      std::cerr << kProgram << ": and they could not be kept anywhere: " << saved.message()
                << " (the table above is all there is)\n";
    }
    return kExitFailure;
  }
  if (store) std::cerr << kProgram << ": stored as run " << run->id << " in " << store->path() << "\n";
  return kExitOk;
}

const std::vector<Subcommand>& BenchSubcommands() {
  static const std::vector<Subcommand> table = {{"list", RunList},
                                                {"show", RunShow},
                                                {"compare", RunCompare},
                                                {"import", RunImport},
                                                {"delete", RunDelete}};
  return table;
}

}  // namespace octet::cli
