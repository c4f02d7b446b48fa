// Benchmark runs and the SQLite file that keeps them (BenchRunStore), shared
// by `octet bench` and the workbench's benchmark views.
//
// A run is one `octet bench` invocation (or one imported llama-benchy report):
// what was measured (model, endpoint), where (a topology snapshot: nodes, TP,
// transport, algorithm, cabling, dtype, versions) and one BenchResult per
// combination of prompt size, generation size, context depth and concurrency.
// Metrics use llama-benchy's names and meanings (pp/tg throughput total and per
// request, ttfr, est_ppt, e2e_ttft; see bench_runner.h), each as mean, std and
// the raw values, so runs from either tool compare side by side.
//
//   OCTET_ASSIGN_OR_RETURN(auto store, BenchRunStore::Open("runs.sqlite"));
//   OCTET_ASSIGN_OR_RETURN(int64_t id, store->BeginRun(run));   // state "running"
//   store->AddResult(id, result);                                // one per test, committed
//   store->FinishRun(id, "complete", "");
//   auto runs = store->ListRuns();  auto one = store->GetRun(id);
//   auto rows = CompareRuns(*a, *b);                             // deltas per metric
//
// Schema (version 4; PRAGMA application_id marks an Octet run store):
//   runs     one row per run
//     id, created_unix_ms, label, state ("running", "complete", "interrupted",
//     "failed"), error, url, model (served id), topology_json (BenchTopology
//     as JSON), latency_ms, pid and host (of the writing process; a "running"
//     row whose process is gone is marked "interrupted" by Open), source
//     ("octet", "llama-benchy"), tool, prompt_mode, nodes, tp, transport,
//     algorithm;
//     v4, what was measured and with what (empty/0 where unknown, e.g. a
//     server that does not describe itself, or rows from before v4):
//     model_path (the served folder), model_hash ("sha256:<hex>" over
//     config.json, the safetensors index and every safetensors header:
//     ModelContentHash), serve_slots, serve_kv_dtype, serve_context,
//     serve_threads, serve_backend, cpu_model and gpu_model (of the serving
//     host), commit (the git commit of the `octet bench` build) and
//     server_commit (of the server's build).
//   results  one row per test of a run (run_id -> runs.id, cascading)
//     test, prompt_size, response_size, depth, concurrency, runs,
//     metrics_json (every MetricStats: mean, std, values), failed_requests,
//     pp_throughput and tg_throughput (means, as columns for queries),
//     drafted_tokens, accepted_tokens, acceptance_rate (v3).
// Migrations: 1 -> 2 adds columns (backfilled from the JSON blobs), 2 -> 3 and
// 3 -> 4 add columns with defaults; every existing row is kept.
//
// The file: schema version in PRAGMA user_version, migrated forward on Open
// (a newer file than this build knows is refused, never rewritten); WAL
// journal with synchronous=FULL, every result its own transaction. A crash
// (power, SIGKILL) loses at most the test in progress: the run keeps its
// committed results and the next Open marks it "interrupted" (its process is
// gone). Readers (the workbench) may open the file while `octet bench` writes.
//
// Thread-safety: one BenchRunStore per thread (SQLite serialises writers
// across processes; a busy file is retried for up to 5 s).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::app {

struct MetricStats {
  double mean = 0;
  double std = 0;  // population standard deviation (numpy's default, as llama-benchy)
  std::vector<double> values;
  bool empty() const { return values.empty(); }
  static MetricStats Of(std::vector<double> values);
};

// Where a run was measured.
struct BenchTopology {
  int nodes = 1;
  int tp = 1;
  std::string transport;  // "shm", "tcp", "verbs", "nccl"
  std::string algorithm;  // "auto", "oneshot", "ring"
  std::string cabling;    // "local", "direct", "ring", "switch"
  std::string backend;    // kernel backend / device ("avx2 x2", "cuda sm_121")
  std::string dtype;      // weight format ("BF16", "NVFP4+BF16")
  std::string model;      // model id as served
  std::string engine;     // server software and version ("octet 0.1.0", "vLLM 0.9")
  std::string hosts;      // free text: host names or node ids
  std::string speculative;  // speculative decoding as served ("ngram K=3"; "" : none)
  std::string extra_json; // anything else, a JSON object ("" if none)
};

// One combination of sizes at one concurrency, over `runs` repetitions.
struct BenchResult {
  std::string test;        // "pp512 tg128 (c4)", "pp2048 tg32 @ d4096 (c1)"
  int64_t prompt_size = 0;    // pp: prompt tokens
  int64_t response_size = 0;  // tg: generated tokens
  int64_t depth = 0;          // context tokens before the prompt
  int64_t concurrency = 1;
  int64_t runs = 0;
  int64_t failed_requests = 0;
  MetricStats pp_throughput;      // prompt tokens / s, all requests of a batch together
  MetricStats pp_req_throughput;  // prompt tokens / s, per request
  MetricStats tg_throughput;      // generated tokens / s, all requests together
  MetricStats tg_req_throughput;  // generated tokens / s, per request
  MetricStats ttfr;               // ms, request sent -> first response bytes
  MetricStats est_ppt;            // ms, ttfr - latency (estimated prompt processing)
  MetricStats e2e_ttft;           // ms, request sent -> first token
  // Speculative decoding, where the server reports it per request (an octet
  // server's "timings"): tokens drafted and kept over all repetitions, and
  // the acceptance rate (kept / drafted) of each repetition.
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  MetricStats acceptance_rate;
  std::string Name() const;       // the canonical test name for these sizes
};

// What a run measured and with which settings and machine (schema v4).
struct BenchProvenance {
  std::string model_path;  // the served model folder
  std::string model_hash;  // ModelContentHash of it
  int64_t serve_slots = 0;  // serve settings (not "slots": a Qt macro)
  std::string kv_dtype;
  int64_t context = 0;
  int64_t threads = 0;
  std::string backend;
  std::string cpu_model;  // of the serving host
  std::string gpu_model;
  std::string commit;         // the `octet bench` build's git commit
  std::string server_commit;  // the server build's, when it says
};

// "sha256:<hex>" of DIR/config.json, DIR/model.safetensors.index.json (when
// present) and the header (length + JSON) of every *.safetensors file, in
// name order: it changes with the weights' layout, dtypes or config, and costs
// a few kilobytes of reading, not the weights.
Result<std::string> ModelContentHash(const std::string& model_dir);

struct BenchRun {
  int64_t id = 0;
  int64_t created_unix_ms = 0;
  std::string label;
  std::string state = "running";  // "running", "complete", "interrupted", "failed"
  std::string error;              // why it failed / was interrupted
  // Set by RunBenchmark when the run store refused a write mid-run: the
  // measuring went on, and `results` holds what the store does not.
  std::string store_error;
  std::string source = "octet";   // "octet" or "llama-benchy" (imported)
  std::string tool;               // "octet bench 0.1.0", "llama-benchy 0.3.1"
  std::string url;                // endpoint measured
  double latency_ms = 0;          // the measured round trip subtracted from ttfr
  std::string prompt_mode;        // "token-ids", "text"
  BenchTopology topology;
  BenchProvenance provenance;
  std::vector<BenchResult> results;  // ListRuns leaves this empty (result_count says how many)
  int64_t result_count = 0;
};

class BenchRunStore {
 public:
  static constexpr int kSchemaVersion = 4;

  // Opens (creating) the file, migrates it to kSchemaVersion and marks runs
  // whose process died "interrupted". FailedPrecondition for a file written
  // by a newer Octet; DataLoss for a file that is not an Octet run store.
  static Result<std::unique_ptr<BenchRunStore>> Open(const std::string& path);
  ~BenchRunStore();
  BenchRunStore(const BenchRunStore&) = delete;
  BenchRunStore& operator=(const BenchRunStore&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;

  // A new run in state "running" (its results come with AddResult).
  Result<int64_t> BeginRun(const BenchRun& run);
  Status AddResult(int64_t run_id, const BenchResult& result);
  // state: "complete", "failed" or "interrupted".
  Status FinishRun(int64_t run_id, const std::string& state, const std::string& error);
  // A whole run at once (imports), in one transaction; stored "complete"
  // unless run.state says "failed" or "interrupted".
  Result<int64_t> InsertRun(const BenchRun& run);
  Status DeleteRun(int64_t run_id);

  // Newest first, without results (result_count is set). limit 0: all.
  Result<std::vector<BenchRun>> ListRuns(int limit = 0);
  Result<BenchRun> GetRun(int64_t run_id);

 private:
  BenchRunStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

// Two runs side by side: tests matched by (prompt, response, depth,
// concurrency); a test only one side has gets a row with the other empty.
struct ComparisonRow {
  std::string test;
  int64_t prompt_size = 0, response_size = 0, depth = 0, concurrency = 0;
  bool in_a = false, in_b = false;
  struct Metric {
    std::string name;   // "pp_throughput", ...
    double a = 0, b = 0;
    double delta_pct = 0;  // (b - a) / a * 100; 0 when a is 0
    bool higher_is_better = true;
  };
  std::vector<Metric> metrics;  // only metrics both sides have
};
std::vector<ComparisonRow> CompareRuns(const BenchRun& a, const BenchRun& b);

// llama-benchy's JSON report (its --save-result / --format json output) as a
// run with source "llama-benchy", so vLLM/SGLang/llama.cpp measurements can be
// compared with Octet's. Errors name the JSON path that is wrong.
Result<BenchRun> ParseLlamaBenchyJson(const std::string& json_text, const std::string& where);
// The same document for a run (what `octet bench --json` prints), with an
// "octet" object holding the topology, label and run id.
std::string BenchRunToJson(const BenchRun& run);

}  // namespace octet::app
