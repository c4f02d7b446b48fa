#include "octet/app/bench_runner.h"

#include <httplib.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

#include "octet/base/build_info.h"
#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/http/client_error.h"
#include "octet/base/json.h"
#include "octet/base/sse.h"

namespace octet::app {

using nlohmann::json;

namespace {

double Now() { return NowSeconds(); }

// "http://h:p/v1" -> ("http://h:p", "")
std::string BaseUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? url : url.substr(0, slash);
}

std::unique_ptr<httplib::Client> MakeClient(const BenchConfig& c, int timeout_ms) {
  auto cli = std::make_unique<httplib::Client>(BaseUrl(c.url));
  cli->set_connection_timeout(10, 0);
  cli->set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  cli->set_write_timeout(60, 0);
  cli->set_keep_alive(false);
  if (!c.api_key.empty()) cli->set_bearer_token_auth(c.api_key);
  return cli;
}

std::string HttpError(const httplib::Result& r, const std::string& what) {
  if (!r) return what + ": " + http::ClientErrorText(r.error());
  std::string msg = what + ": HTTP " + std::to_string(r->status);
  json j = json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    msg += ": " + j["error"].value("message", std::string());
  } else if (!r->body.empty()) {
    msg += ": " + r->body.substr(0, 200);
  }
  return msg;
}

// What the endpoint says about itself.
struct ServerInfo {
  std::string model;
  int64_t vocab_size = 0;
  json entry;
};

Result<ServerInfo> QueryServer(const BenchConfig& c, double* latency_ms) {
  auto cli = MakeClient(c, 30'000);
  std::vector<double> rtts;
  ServerInfo info;
  for (int i = 0; i < 5; ++i) {
    const double t0 = Now();
    auto r = cli->Get("/v1/models");
    const double t1 = Now();
    if (!r || r->status != 200) return UnavailableError(HttpError(r, "GET " + c.url + "/v1/models"));
    rtts.push_back((t1 - t0) * 1e3);
    if (i == 0) {
      json j = json::parse(r->body, nullptr, false);
      if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) {
        return UnavailableError(c.url + "/v1/models lists no model");
      }
      for (const json& m : j["data"]) {
        if (!m.is_object()) continue;
        const std::string id = m.value("id", std::string());
        if (c.model.empty() || id == c.model) {
          info.model = id;
          info.entry = m;
          info.vocab_size = m.value("vocab_size", int64_t{0});
          break;
        }
      }
      if (info.model.empty()) {
        return NotFoundError("the server at " + c.url + " does not serve '" + c.model + "'");
      }
    }
  }
  std::sort(rtts.begin(), rtts.end());
  *latency_ms = rtts[rtts.size() / 2];
  return info;
}

// ---- prompts ---------------------------------------------------------------------

class PromptMaker {
 public:
  PromptMaker(const BenchConfig& c, const ServerInfo& info) : c_(c), rng_(c.seed) {
    vocab_ = info.vocab_size > 0 ? std::min<int64_t>(info.vocab_size, 32000) : 32000;
  }
  // A request body's "prompt" of exactly n tokens.
  Result<json> Make(int64_t n) {
    if (c_.prompt_mode == "text") return MakeText(n);
    std::uniform_int_distribution<int64_t> d(std::min<int64_t>(10, vocab_ - 1), vocab_ - 1);
    json ids = json::array();
    for (int64_t i = 0; i < n; ++i) ids.push_back(d(rng_));
    return ids;
  }

 private:
  Result<int64_t> Count(httplib::Client& cli, const std::string& text) {
    auto r = cli.Post("/tokenize", json{{"content", text}, {"prompt", text}}.dump(),
                      "application/json");
    if (!r || r->status != 200) {
      return UnavailableError(HttpError(r, "the text prompt mode needs POST /tokenize"));
    }
    json j = json::parse(r->body, nullptr, false);
    if (j.is_object() && j.contains("count")) {
      const std::optional<int64_t> count = IntegerMember(j, "count", -1);
      if (!count || *count < 0) {
        return UnavailableError("POST /tokenize answered a \"count\" that is not a count: " +
                                j["count"].dump());
      }
      return *count;
    }
    if (j.is_object() && j.contains("tokens") && j["tokens"].is_array()) {
      return static_cast<int64_t>(j["tokens"].size());
    }
    return UnavailableError("POST /tokenize answered without tokens");
  }
  Result<json> MakeText(int64_t n) {
    static const char* kWords[] = {"the",   "quick", "brown", "fox",    "jumps", "over",
                                   "lazy",  "dog",   "while", "a",      "cluster", "of",
                                   "small", "nodes", "reads", "weights", "from",  "memory",
                                   "and",   "sums",  "partial", "results", "across", "ranks"};
    auto cli = MakeClient(c_, 30'000);
    std::uniform_int_distribution<size_t> d(0, std::size(kWords) - 1);
    std::string text;
    // Grow by words while below n; then pad with " a" (one token in BPE
    // vocabularies) and check; give up after a few corrections.
    std::vector<std::string> words;
    int64_t count = 0;
    while (true) {
      const std::string w = std::string(text.empty() ? "" : " ") + kWords[d(rng_)];
      OCTET_ASSIGN_OR_RETURN(int64_t c, Count(*cli, text + w));
      if (c > n) break;
      text += w;
      count = c;
      if (count == n) return json(text);
      if (n - count > 64) {  // bulk: add many words at once, checked next round
        for (int i = 0; i < 32; ++i) text += std::string(" ") + kWords[d(rng_)];
        OCTET_ASSIGN_OR_RETURN(count, Count(*cli, text));
        if (count > n) return InvalidArgumentError("text prompt overshot; use --prompt-mode token-ids");
      }
    }
    for (int i = 0; i < 8 && count < n; ++i) {
      OCTET_ASSIGN_OR_RETURN(int64_t c, Count(*cli, text + " a"));
      if (c > n) break;
      text += " a";
      count = c;
    }
    if (count != n) {
      return UnavailableError("could not build a text prompt of exactly " + std::to_string(n) +
                              " tokens with this tokenizer (got " + std::to_string(count) +
                              "); use --prompt-mode token-ids");
    }
    return json(text);
  }

  const BenchConfig& c_;
  std::mt19937_64 rng_;
  int64_t vocab_ = 32000;
};

// ---- one streamed request -----------------------------------------------------------

RequestSample SendRequest(const BenchConfig& c, const std::string& model, const json& prompt,
                          int64_t tg, const std::atomic<bool>* cancel) {
  RequestSample s;
  auto cli = MakeClient(c, c.request_timeout_ms);
  json body = {{"model", model},
               {"prompt", prompt},
               {"max_tokens", tg},
               {"min_tokens", tg},
               {"ignore_eos", true},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"return_token_ids", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!c.api_key.empty()) req.set_header("Authorization", "Bearer " + c.api_key);
  req.body = body.dump();
  std::string error_body;  // the body's start, for an answer other than 200
  int64_t chunks_with_tokens = 0;
  bool done = false;
  auto on_event = [&](const std::string& payload, double now) {
    if (payload == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(payload, nullptr, false);
    if (!j.is_object()) return;
    if (j.contains("error")) {
      s.error = j["error"].is_object() ? j["error"].value("message", payload) : payload;
      return;
    }
    if (j.contains("timings") && j["timings"].is_object()) {
      // An octet server's per-request figures: speculative decoding's counts.
      const json& t = j["timings"];
      // Counts only where they are integers (a float or a string is left
      // out, never cast: IntegerMember).
      const std::optional<int64_t> drafted = IntegerMember(t, "drafted_tokens", -1);
      const std::optional<int64_t> accepted = IntegerMember(t, "accepted_tokens", 0);
      if (drafted && *drafted >= 0 && accepted) {
        s.drafted_tokens = *drafted;
        s.accepted_tokens = *accepted;
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      if (auto v = IntegerMember(u, "completion_tokens", s.completion_tokens)) {
        s.completion_tokens = *v;
      }
      if (auto v = IntegerMember(u, "prompt_tokens", s.prompt_tokens)) s.prompt_tokens = *v;
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& ch = j["choices"][0];
    bool has_token = false;
    if (ch.contains("text") && ch["text"].is_string() && !ch["text"].get<std::string>().empty()) {
      has_token = true;
    }
    int64_t ids_in_chunk = 0;
    if (ch.contains("token_ids") && ch["token_ids"].is_array() && !ch["token_ids"].empty()) {
      has_token = true;
      ids_in_chunk = static_cast<int64_t>(ch["token_ids"].size());
    }
    if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") &&
        ch["delta"]["content"].is_string() && !ch["delta"]["content"].get<std::string>().empty()) {
      has_token = true;
    }
    if (has_token) {
      if (s.first_token_s == 0) s.first_token_s = now;
      s.end_s = now;
      // A chunk may carry several tokens (a server that coalesces a fast
      // stream); without token_ids a chunk counts as one.
      chunks_with_tokens += std::max<int64_t>(1, ids_in_chunk);
    }
  };
  SseReader sse;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    const double now = Now();
    if (s.first_response_s == 0) s.first_response_s = now;
    constexpr size_t kKeep = 64 * 1024;
    if (error_body.size() < kKeep)
      error_body.append(data, std::min(len, kKeep - error_body.size()));
    sse.Feed(std::string_view(data, len),
             [&](const SseReader::Event& e) { on_event(e.data, now); });
    return !(cancel && cancel->load());
  };
  s.start_s = Now();
  auto r = cli->send(req);
  if (!r) {
    if (s.error.empty()) s.error = "request failed: " + http::ClientErrorText(r.error());
  } else if (r->status != 200) {
    json j = json::parse(error_body, nullptr, false);
    s.error = "HTTP " + std::to_string(r->status) +
              (j.is_object() && j.contains("error") ? ": " + j["error"].value("message", error_body)
                                                    : "");
  } else if (!done && s.error.empty()) {
    s.error = "the stream ended without [DONE]";
  }
  if (s.completion_tokens == 0) s.completion_tokens = chunks_with_tokens;
  if (s.end_s == 0) s.end_s = Now();
  return s;
}

std::string Pm(const MetricStats& m) {
  if (m.empty()) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f ± %.2f", m.mean, m.std);
  return buf;
}

}  // namespace

BenchResult SummarizeTest(const std::vector<std::vector<RequestSample>>& batches, double latency_ms,
                          int64_t pp, int64_t tg, int64_t depth, int64_t concurrency) {
  BenchResult r;
  r.prompt_size = pp;
  r.response_size = tg;
  r.depth = depth;
  r.concurrency = concurrency;
  r.runs = static_cast<int64_t>(batches.size());
  r.test = r.Name();
  const double latency = latency_ms * 1e-3;
  const int64_t expected_prompt = depth + pp;
  std::vector<double> pp_req, tg_req, ttfr, est_ppt, e2e, pp_total, tg_total, acceptance;
  for (const auto& batch : batches) {
    double min_start = 1e300, max_end = 0, min_first = 1e300, max_first = 0;
    int64_t prompt_sum = 0, gen_sum = 0, valid = 0;
    int64_t drafted = 0, accepted = 0;
    bool spec_reported = false;
    for (const RequestSample& s : batch) {
      if (!s.error.empty()) {
        ++r.failed_requests;
        continue;
      }
      ++valid;
      if (s.drafted_tokens >= 0) {
        spec_reported = true;
        drafted += s.drafted_tokens;
        accepted += s.accepted_tokens;
      }
      // The server's prompt count when it reports a plausible one (within 20%).
      int64_t prompt = expected_prompt;
      if (s.prompt_tokens > 0 &&
          std::llabs(s.prompt_tokens - expected_prompt) < expected_prompt * 0.2) {
        prompt = s.prompt_tokens;
      }
      prompt_sum += prompt;
      gen_sum += s.completion_tokens;
      min_start = std::min(min_start, s.start_s);
      max_end = std::max(max_end, s.end_s);
      double est = 0;
      if (s.first_response_s > 0) {
        ttfr.push_back((s.first_response_s - s.start_s) * 1e3);
        est = std::max(0.0, s.first_response_s - s.start_s - latency);
      }
      if (s.first_token_s > 0) {
        e2e.push_back((s.first_token_s - s.start_s) * 1e3);
        est_ppt.push_back(est * 1e3);
        min_first = std::min(min_first, s.first_token_s);
        max_first = std::max(max_first, s.first_token_s);
        if (est > 0) pp_req.push_back(prompt / est);
        const double decode = s.end_s - s.first_token_s;
        if (s.completion_tokens > 1 && decode > 0) tg_req.push_back((s.completion_tokens - 1) / decode);
      }
    }
    if (spec_reported) {
      r.drafted_tokens += drafted;
      r.accepted_tokens += accepted;
      acceptance.push_back(drafted > 0 ? double(accepted) / double(drafted) : 0.0);
    }
    if (valid == 0 || max_first == 0) continue;
    if (max_first - min_start > 0) pp_total.push_back(prompt_sum / (max_first - min_start));
    if (max_end - min_first > 0 && gen_sum > valid) {
      tg_total.push_back((gen_sum - valid) / (max_end - min_first));
    }
  }
  r.pp_req_throughput = MetricStats::Of(pp_req);
  r.tg_req_throughput = MetricStats::Of(tg_req);
  r.pp_throughput = MetricStats::Of(pp_total);
  r.tg_throughput = MetricStats::Of(tg_total);
  r.ttfr = MetricStats::Of(ttfr);
  r.est_ppt = MetricStats::Of(est_ppt);
  r.e2e_ttft = MetricStats::Of(e2e);
  r.acceptance_rate = MetricStats::Of(acceptance);
  return r;
}

Result<BenchRun> RunBenchmark(const BenchConfig& c, BenchRunStore* store,
                              const BenchProgressFn& progress, const std::atomic<bool>* cancel) {
  if (c.url.empty()) return InvalidArgumentError("the endpoint URL is empty");
  if (c.runs < 1) return InvalidArgumentError("runs must be at least 1");
  if (c.prompt_mode != "token-ids" && c.prompt_mode != "text") {
    return InvalidArgumentError("prompt mode must be token-ids or text");
  }
  for (const auto* list : {&c.pp, &c.tg, &c.concurrency}) {
    if (list->empty()) return InvalidArgumentError("pp, tg and concurrency need at least one value");
    for (int64_t v : *list) {
      if (v < 1) return InvalidArgumentError("pp, tg and concurrency values must be >= 1");
    }
  }
  for (int64_t d : c.depth) {
    if (d < 0) return InvalidArgumentError("depth must be >= 0");
  }
  BenchProgress p;
  p.runs = c.runs;
  p.tests_total = static_cast<int>(c.pp.size() * c.tg.size() * c.depth.size() * c.concurrency.size());
  auto report = [&](const std::string& phase) {
    p.phase = phase;
    if (progress) progress(p);
  };
  report("latency");
  BenchRun run;
  OCTET_ASSIGN_OR_RETURN(ServerInfo info, QueryServer(c, &run.latency_ms));
  run.created_unix_ms = UnixMs();
  run.label = c.label;
  run.url = c.url;
  run.source = "octet";
  run.tool = "octet bench " + std::string(OCTET_VERSION);
  run.prompt_mode = c.prompt_mode;
  run.topology = c.topology;
  run.topology.model = info.model;
  // An octet server describes itself; flags given by the user win.
  const json& e = info.entry;
  auto fill = [&](std::string& field, const char* key) {
    if (field.empty() && e.contains(key) && e[key].is_string()) field = e[key].get<std::string>();
  };
  fill(run.topology.transport, "transport");
  fill(run.topology.algorithm, "algorithm");
  fill(run.topology.backend, "backend");
  fill(run.topology.dtype, "dtype");
  fill(run.topology.engine, "engine");
  fill(run.topology.hosts, "hosts");
  if (run.topology.speculative.empty() && e.contains("speculative") &&
      e["speculative"].is_string() && e["speculative"] != "off") {
    run.topology.speculative = e["speculative"].get<std::string>();
    if (e.contains("draft_tokens") && e["draft_tokens"].is_number_integer()) {
      run.topology.speculative += " K=" + std::to_string(e["draft_tokens"].get<int>());
    }
  }
  if (c.topology.tp <= 1 && e.contains("tp") && e["tp"].is_number_integer()) {
    run.topology.tp = e["tp"].get<int>();
  }
  if (c.topology.nodes <= 1 && e.contains("nodes") && e["nodes"].is_number_integer()) {
    run.topology.nodes = e["nodes"].get<int>();
  }
  {
    // Provenance (store schema v4): what an octet server says about itself.
    BenchProvenance& v = run.provenance;
    auto text = [&](const char* key) {
      return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : std::string();
    };
    auto number = [&](const char* key) {
      return e.contains(key) && e[key].is_number_integer() ? e[key].get<int64_t>() : int64_t(0);
    };
    v.model_path = text("model_path");
    v.model_hash = text("model_hash");
    v.serve_slots = number("slots");
    v.kv_dtype = text("kv_dtype");
    v.context = number("context");
    v.threads = number("threads");
    v.backend = text("backend");
    v.cpu_model = text("cpu_model");
    v.gpu_model = text("gpu_model");
    v.server_commit = text("commit");
    v.commit = GetBuildInfo().commit;
  }
  if (store) {
    OCTET_ASSIGN_OR_RETURN(run.id, store->BeginRun(run));
    p.run_id = run.id;
  }
  auto fail = [&](const Status& s, const std::string& state) -> Status {
    run.state = state;
    run.error = s.message();
    if (store) store->FinishRun(run.id, state, s.message()).IgnoreError();
    return s;
  };
  // A cancel cuts the requests in flight: they come back failed, but the run
  // was stopped, not broken, so it is stored "interrupted" (with the tests
  // finished before) and the half-measured test is dropped.
  auto cancelled = [&] { return cancel && cancel->load(); };
  auto interrupt = [&] { return fail(CancelledError("cancelled"), "interrupted"); };
  PromptMaker prompts(c, info);
  if (c.warmup) {
    report("warmup");
    auto wp = prompts.Make(16);
    if (!wp.ok()) return fail(wp.status(), "failed");
    RequestSample w = SendRequest(c, info.model, *wp, 4, cancel);
    if (cancelled()) return interrupt();
    if (!w.error.empty()) return fail(UnavailableError("warm-up request: " + w.error), "failed");
  }
  for (int64_t depth : c.depth) {
    for (int64_t pp : c.pp) {
      for (int64_t tg : c.tg) {
        for (int64_t conc : c.concurrency) {
          BenchResult probe;
          probe.prompt_size = pp;
          probe.response_size = tg;
          probe.depth = depth;
          probe.concurrency = conc;
          p.test = probe.Name();
          std::vector<std::vector<RequestSample>> batches;
          for (int rep = 0; rep < c.runs; ++rep) {
            if (cancelled()) return interrupt();
            p.repetition = rep;
            report("measuring");
            std::vector<json> bodies;
            for (int64_t i = 0; i < conc; ++i) {
              auto pr = prompts.Make(depth + pp);
              if (!pr.ok()) return fail(pr.status(), "failed");
              bodies.push_back(*pr);
            }
            std::vector<RequestSample> batch(static_cast<size_t>(conc));
            std::barrier start(static_cast<std::ptrdiff_t>(conc));
            std::vector<std::thread> threads;
            for (int64_t i = 0; i < conc; ++i) {
              threads.emplace_back([&, i] {
                start.arrive_and_wait();
                batch[i] = SendRequest(c, info.model, bodies[i], tg, cancel);
              });
            }
            for (auto& t : threads) t.join();
            if (cancelled()) return interrupt();
            size_t failed = 0;
            std::string first_error;
            for (const auto& s : batch) {
              if (!s.error.empty()) {
                ++failed;
                if (first_error.empty()) first_error = s.error;
              }
            }
            if (failed == batch.size()) {
              return fail(UnavailableError(p.test + ": every request failed: " + first_error),
                          "failed");
            }
            batches.push_back(std::move(batch));
          }
          BenchResult r = SummarizeTest(batches, run.latency_ms, pp, tg, depth, conc);
          if (store) {
            // A store that refuses a write (a full disk, a damaged file) does
            // not cost the measurements: they go on, kept in `run` only.
            if (Status s = store->AddResult(run.id, r); !s.ok()) {
              run.store_error = s.message();
              store = nullptr;
            }
          }
          run.results.push_back(std::move(r));
          ++p.test_index;
        }
      }
    }
  }
  run.state = "complete";
  run.result_count = static_cast<int64_t>(run.results.size());
  if (store) {
    if (Status s = store->FinishRun(run.id, "complete", ""); !s.ok()) run.store_error = s.message();
  }
  report("done");
  return run;
}

std::string FormatBenchTable(const BenchRun& run) {
  std::ostringstream o;
  // Speculative decoding's acceptance gets a column when some test has it.
  bool spec = false;
  for (const BenchResult& r : run.results) spec = spec || !r.acceptance_rate.empty();
  o << "| model | test | t/s pp (total) | t/s pp (req) | t/s tg (total) | t/s tg (req) | "
       "ttfr (ms) | est_ppt (ms) | e2e_ttft (ms) |"
    << (spec ? " accepted (%) |" : "") << "\n|:--|--:|--:|--:|--:|--:|--:|--:|--:|"
    << (spec ? "--:|" : "") << "\n";
  for (const BenchResult& r : run.results) {
    o << "| " << run.topology.model << " | " << (r.test.empty() ? r.Name() : r.test) << " | "
      << Pm(r.pp_throughput) << " | " << Pm(r.pp_req_throughput) << " | " << Pm(r.tg_throughput)
      << " | " << Pm(r.tg_req_throughput) << " | " << Pm(r.ttfr) << " | " << Pm(r.est_ppt) << " | "
      << Pm(r.e2e_ttft) << " |";
    if (spec) {
      MetricStats pct = r.acceptance_rate;
      pct.mean *= 100;
      pct.std *= 100;
      o << " " << Pm(pct) << " |";
    }
    o << "\n";
  }
  return o.str();
}

std::string FormatBenchCsv(const BenchRun& run) {
  std::ostringstream o;
  o << "run_id,model,test,prompt_size,response_size,depth,concurrency,runs,failed_requests";
  const char* names[] = {"pp_throughput", "pp_req_throughput", "tg_throughput",
                         "tg_req_throughput", "ttfr_ms", "est_ppt_ms", "e2e_ttft_ms"};
  for (const char* n : names) o << "," << n << "_mean," << n << "_std";
  o << ",tp,nodes,transport,algorithm,acceptance_rate_mean,acceptance_rate_std,drafted_tokens,"
       "accepted_tokens\n";
  for (const BenchResult& r : run.results) {
    o << run.id << "," << run.topology.model << "," << (r.test.empty() ? r.Name() : r.test) << ","
      << r.prompt_size << "," << r.response_size << "," << r.depth << "," << r.concurrency << ","
      << r.runs << "," << r.failed_requests;
    for (const MetricStats* m : {&r.pp_throughput, &r.pp_req_throughput, &r.tg_throughput,
                                 &r.tg_req_throughput, &r.ttfr, &r.est_ppt, &r.e2e_ttft}) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ",%.4f,%.4f", m->mean, m->std);
      o << buf;
    }
    o << "," << run.topology.tp << "," << run.topology.nodes << "," << run.topology.transport << ","
      << run.topology.algorithm;
    if (r.acceptance_rate.empty()) {
      o << ",,,,\n";  // not measured (no speculative decoding reported)
    } else {
      char buf[96];
      std::snprintf(buf, sizeof buf, ",%.4f,%.4f,%lld,%lld\n", r.acceptance_rate.mean,
                    r.acceptance_rate.std, static_cast<long long>(r.drafted_tokens),
                    static_cast<long long>(r.accepted_tokens));
      o << buf;
    }
  }
  return o.str();
}

std::string FormatComparison(const BenchRun& a, const BenchRun& b) {
  std::ostringstream o;
  auto who = [](const BenchRun& r) {
    return "run " + std::to_string(r.id) + (r.label.empty() ? "" : " (" + r.label + ")") + ": " +
           r.topology.model + ", TP " + std::to_string(r.topology.tp) + " " + r.topology.transport +
           (r.topology.algorithm.empty() ? "" : "/" + r.topology.algorithm) +
           (r.source == "octet" ? "" : ", from " + r.source);
  };
  o << "A = " << who(a) << "\nB = " << who(b) << "\n\n";
  o << "| test | metric | A | B | delta |\n|:--|:--|--:|--:|--:|\n";
  for (const ComparisonRow& row : CompareRuns(a, b)) {
    if (!row.in_a || !row.in_b) {
      o << "| " << row.test << " | (only in " << (row.in_a ? "A" : "B") << ") | | | |\n";
      continue;
    }
    for (const auto& m : row.metrics) {
      char buf[160];
      const bool better = m.higher_is_better ? m.delta_pct > 0 : m.delta_pct < 0;
      std::snprintf(buf, sizeof buf, "| %s | %s | %.2f | %.2f | %+.1f%%%s |\n", row.test.c_str(),
                    m.name.c_str(), m.a, m.b, m.delta_pct,
                    std::fabs(m.delta_pct) < 0.05 ? "" : (better ? " better" : " worse"));
      o << buf;
    }
  }
  return o.str();
}

}  // namespace octet::app
