// The benchmark runner: measures an OpenAI-compatible endpoint the way
// llama-benchy does, so Octet's numbers mean what the community's DGX Spark
// numbers mean, and stores each run (with its topology) in a BenchRunStore.
//
//   BenchConfig c;  c.url = "http://127.0.0.1:8000";  c.pp = {512};  c.tg = {128};
//   c.concurrency = {1, 2, 4, 8};  c.runs = 3;
//   auto run = RunBenchmark(c, store.get(), [](const BenchProgress& p) { ... });
//
// For every (pp, tg, depth, concurrency) and every repetition, `concurrency`
// streamed requests start together; each has a prompt of exactly depth + pp
// tokens and asks for exactly tg tokens (ignore_eos, min_tokens). Per request:
//   ttfr       request sent -> first response bytes (ms)
//   e2e_ttft   request sent -> first generated token (ms)
//   est_ppt    ttfr - latency (the estimated prompt processing time, ms)
//   pp_req     prompt tokens / est_ppt (tokens/s)
//   tg_req     (tokens - 1) / (last token - first token) (tokens/s)
// and per batch of concurrent requests (the "total" figures):
//   pp_throughput  all prompt tokens / (last first-token - first start)
//   tg_throughput  (all tokens - requests) / (last end - first first-token)
//   acceptance_rate  drafted tokens kept / drafted (speculative decoding, from
//                  the server's per-request "timings" where it reports them)
// `latency` is the median round trip of GET /v1/models measured first. Each
// metric is kept as mean, population std and values over the repetitions.
//
// Prompts of exact length: "token-ids" (default) sends `prompt` as an array of
// token ids to /v1/completions (the OpenAI API allows it; vLLM, llama.cpp and
// `octet serve` accept it), random ids below the server's vocabulary size
// (/v1/models "vocab_size" when it says, else 32000), different per request so
// that no prefix cache can help. "text" builds text from a word list and uses
// the server's /tokenize to make it exactly the wanted number of tokens.
//
// Thread-safety: RunBenchmark blocks its caller (a GUI runs it on a worker
// thread); `progress` is called on that thread; `cancel` may be set from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "octet/app/bench_store.h"
#include "octet/base/status.h"

namespace octet::app {

struct BenchConfig {
  std::string url;    // "http://HOST:PORT" (a path prefix like /v1 is allowed and ignored)
  std::string model;  // "" : the first model of GET /v1/models
  std::string api_key;
  std::vector<int64_t> pp = {512};
  std::vector<int64_t> tg = {128};
  std::vector<int64_t> depth = {0};
  std::vector<int64_t> concurrency = {1};
  int runs = 3;
  bool warmup = true;                    // one small request first, not measured
  std::string prompt_mode = "token-ids"; // or "text"
  int request_timeout_ms = 600'000;
  uint64_t seed = 1;
  std::string label;
  // What the endpoint cannot tell (filled in from /v1/models when it can: an
  // octet server reports tp, transport, algorithm, backend, dtype).
  BenchTopology topology;
};

struct BenchProgress {
  int test_index = 0;  // 0-based, of tests_total
  int tests_total = 0;
  int repetition = 0;  // 0-based, of runs
  int runs = 0;
  std::string test;    // "pp512 tg128 (c4)"
  std::string phase;   // "latency", "warmup", "measuring", "done"
  int64_t run_id = 0;  // in the store, once begun
};
using BenchProgressFn = std::function<void(const BenchProgress&)>;

// One request's timestamps (seconds on a monotonic clock) and token counts.
struct RequestSample {
  double start_s = 0;
  double first_response_s = 0;  // 0: none
  double first_token_s = 0;     // 0: none
  double end_s = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Speculative decoding as the server reported it (timings.drafted_tokens,
  // timings.accepted_tokens); drafted < 0: not reported.
  int64_t drafted_tokens = -1;
  int64_t accepted_tokens = 0;
  std::string error;  // non-empty: failed
};

// The llama-benchy arithmetic over repetitions (`batches[r]` = the concurrent
// requests of repetition r). Pure: no I/O (tests feed it synthetic times).
BenchResult SummarizeTest(const std::vector<std::vector<RequestSample>>& batches,
                          double latency_ms, int64_t pp, int64_t tg, int64_t depth,
                          int64_t concurrency);

// Runs every test. With a store, the run is begun there first and every test's
// result is committed as soon as it is measured (state "complete" at the end,
// "failed" when the server or the store fails it, "interrupted" when `cancel`
// was set, even mid-request: the test in progress is then dropped and
// CancelledError returned). The returned run holds all results.
Result<BenchRun> RunBenchmark(const BenchConfig& config, BenchRunStore* store,
                              const BenchProgressFn& progress = {},
                              const std::atomic<bool>* cancel = nullptr);

// Output formats of a run: a table like llama-benchy's (mean ± std), CSV (one
// row per test, mean and std columns).
std::string FormatBenchTable(const BenchRun& run);
std::string FormatBenchCsv(const BenchRun& run);
// Two runs side by side with deltas (from CompareRuns).
std::string FormatComparison(const BenchRun& a, const BenchRun& b);

}  // namespace octet::app
