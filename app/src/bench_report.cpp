// Benchmark runs as data, apart from the store (bench_store.h): MetricStats
// and BenchResult helpers, the JSON forms of metrics and topology (shared with
// the store through bench_json.h), the comparison of two runs, and
// llama-benchy's JSON report in and out.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_json.h"
#include "octet/app/bench_store.h"
#include "octet/base/json.h"

namespace octet::app {

using nlohmann::json;

namespace {

json MetricToJson(const MetricStats& m) {
  return {{"mean", m.mean}, {"std", m.std}, {"values", m.values}};
}

MetricStats MetricFromJson(const json& j) {
  MetricStats m;
  if (!j.is_object()) return m;
  m.mean = j.value("mean", 0.0);
  m.std = j.value("std", 0.0);
  if (j.contains("values") && j["values"].is_array()) {
    for (const auto& v : j["values"]) {
      if (v.is_number()) m.values.push_back(v.get<double>());
    }
  }
  return m;
}

}  // namespace

std::vector<std::pair<const char*, MetricStats BenchResult::*>> MetricFields() {
  return {{"pp_throughput", &BenchResult::pp_throughput},
          {"pp_req_throughput", &BenchResult::pp_req_throughput},
          {"tg_throughput", &BenchResult::tg_throughput},
          {"tg_req_throughput", &BenchResult::tg_req_throughput},
          {"ttfr", &BenchResult::ttfr},
          {"est_ppt", &BenchResult::est_ppt},
          {"e2e_ttft", &BenchResult::e2e_ttft},
          {"acceptance_rate", &BenchResult::acceptance_rate}};
}

json MetricsJson(const BenchResult& r) {
  json j = json::object();
  for (auto& [name, field] : MetricFields()) {
    if (!(r.*field).empty()) j[name] = MetricToJson(r.*field);
  }
  return j;
}

void MetricsFromJson(const json& j, BenchResult* r) {
  for (auto& [name, field] : MetricFields()) {
    if (j.contains(name)) r->*field = MetricFromJson(j[name]);
  }
}

json TopologyJson(const BenchTopology& t) {
  json j = {{"nodes", t.nodes},         {"tp", t.tp},           {"transport", t.transport},
            {"algorithm", t.algorithm}, {"cabling", t.cabling}, {"backend", t.backend},
            {"dtype", t.dtype},         {"model", t.model},     {"engine", t.engine},
            {"hosts", t.hosts}};
  if (!t.speculative.empty()) j["speculative"] = t.speculative;
  if (!t.extra_json.empty()) {
    json extra = json::parse(t.extra_json, nullptr, false);
    if (!extra.is_discarded()) j["extra"] = extra;
  }
  return j;
}

BenchTopology TopologyFromJson(const json& j) {
  BenchTopology t;
  if (!j.is_object()) return t;
  t.nodes = j.value("nodes", 1);
  t.tp = j.value("tp", 1);
  t.transport = j.value("transport", "");
  t.algorithm = j.value("algorithm", "");
  t.cabling = j.value("cabling", "");
  t.backend = j.value("backend", "");
  t.dtype = j.value("dtype", "");
  t.model = j.value("model", "");
  t.engine = j.value("engine", "");
  t.hosts = j.value("hosts", "");
  t.speculative = j.value("speculative", "");
  if (j.contains("extra")) t.extra_json = j["extra"].dump();
  return t;
}

// ---- the run's types -----------------------------------------------------------------

MetricStats MetricStats::Of(std::vector<double> values) {
  MetricStats m;
  m.values = std::move(values);
  if (m.values.empty()) return m;
  double sum = 0;
  for (double v : m.values) sum += v;
  m.mean = sum / double(m.values.size());
  double sq = 0;
  for (double v : m.values) sq += (v - m.mean) * (v - m.mean);
  m.std = std::sqrt(sq / double(m.values.size()));
  return m;
}

std::string BenchResult::Name() const {
  std::string s = "pp" + std::to_string(prompt_size) + " tg" + std::to_string(response_size);
  if (depth > 0) s += " @ d" + std::to_string(depth);
  return s + " (c" + std::to_string(concurrency) + ")";
}

// ---- comparison ----------------------------------------------------------------

std::vector<ComparisonRow> CompareRuns(const BenchRun& a, const BenchRun& b) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  auto key = [](const BenchResult& r) {
    return Key{r.prompt_size, r.response_size, r.depth, r.concurrency};
  };
  std::map<Key, std::pair<const BenchResult*, const BenchResult*>> m;
  std::vector<Key> order;
  for (const auto& r : a.results) {
    if (!m.count(key(r))) order.push_back(key(r));
    m[key(r)].first = &r;
  }
  for (const auto& r : b.results) {
    if (!m.count(key(r))) order.push_back(key(r));
    m[key(r)].second = &r;
  }
  std::vector<ComparisonRow> out;
  for (const Key& k : order) {
    const auto [ra, rb] = m[k];
    ComparisonRow row;
    std::tie(row.prompt_size, row.response_size, row.depth, row.concurrency) = k;
    row.in_a = ra != nullptr;
    row.in_b = rb != nullptr;
    row.test = (ra ? ra : rb)->Name();
    if (ra && rb) {
      for (auto& [name, field] : MetricFields()) {
        const MetricStats& x = ra->*field;
        const MetricStats& y = rb->*field;
        if (x.empty() || y.empty()) continue;
        ComparisonRow::Metric mt;
        mt.name = name;
        mt.a = x.mean;
        mt.b = y.mean;
        mt.delta_pct = x.mean != 0 ? (y.mean - x.mean) / x.mean * 100.0 : 0.0;
        const std::string n = name;
        mt.higher_is_better = n.find("throughput") != std::string::npos || n == "acceptance_rate";
        row.metrics.push_back(mt);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

// ---- llama-benchy JSON ---------------------------------------------------------------

namespace {

Result<BenchRun> ParseLlamaBenchyJsonOrThrow(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(where + ": not a JSON object");
  if (!j.contains("benchmarks") || !j["benchmarks"].is_array()) {
    return InvalidArgumentError(where +
                                ": 'benchmarks' (an array) is missing: not a llama-benchy "
                                "JSON report");
  }
  BenchRun run;
  run.source = "llama-benchy";
  run.state = "complete";
  run.tool = "llama-benchy " + j.value("version", std::string("?"));
  run.latency_ms = j.value("latency_ms", 0.0);
  run.topology.model = j.value("model", "");
  run.prompt_mode = j.contains("prompt_source") && j["prompt_source"].is_string()
                        ? j["prompt_source"].get<std::string>()
                        : "text";
  if (j.contains("octet") && j["octet"].is_object()) {
    // Our own output read back: keep what it knows.
    const json& o = j["octet"];
    run.source = o.value("source", std::string("octet"));
    run.tool = j.value("version", run.tool);
    run.label = o.value("label", "");
    run.url = o.value("url", "");
    if (o.contains("topology")) run.topology = TopologyFromJson(o["topology"]);
  }
  const std::string ts = j.value("timestamp", "");
  if (!ts.empty()) {
    std::tm tm{};
    if (strptime(ts.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) ||
        strptime(ts.c_str(), "%Y-%m-%d %H:%M:%S", &tm)) {
      run.created_unix_ms = static_cast<int64_t>(timegm(&tm)) * 1000;
    }
  }
  for (size_t i = 0; i < j["benchmarks"].size(); ++i) {
    const json& b = j["benchmarks"][i];
    const std::string path = where + ": benchmarks[" + std::to_string(i) + "]";
    if (!b.is_object()) return InvalidArgumentError(path + " is not an object");
    for (const char* k : {"concurrency", "prompt_size", "response_size"}) {
      if (!b.contains(k) || !b[k].is_number_integer()) {
        return InvalidArgumentError(path + "." + k + " is missing or not an integer");
      }
    }
    if (b.value("is_context_prefill_phase", false)) continue;  // a different measurement
    BenchResult r;
    r.concurrency = b["concurrency"].get<int64_t>();
    r.prompt_size = b["prompt_size"].get<int64_t>();
    r.response_size = b["response_size"].get<int64_t>();
    // Optional counts: absent is 0, anything but an integer is refused.
    for (auto [key, out] : {std::pair{"context_size", &r.depth},
                            {"drafted_tokens", &r.drafted_tokens},
                            {"accepted_tokens", &r.accepted_tokens}}) {
      const std::optional<int64_t> v = IntegerMember(b, key, 0);
      if (!v) return InvalidArgumentError(path + "." + key + " is not an integer");
      *out = *v;
    }
    MetricsFromJson(b, &r);
    r.runs = static_cast<int64_t>(
        std::max(r.tg_req_throughput.values.size(), r.tg_throughput.values.size()));
    r.test = r.Name();
    run.results.push_back(std::move(r));
  }
  return run;
}

}  // namespace

// A key of the right name but the wrong type (`"latency_ms": false`) makes
// nlohmann's value()/get() throw; the report is refused with what it said.
Result<BenchRun> ParseLlamaBenchyJson(const std::string& text, const std::string& where) {
  try {
    return ParseLlamaBenchyJsonOrThrow(text, where);
  } catch (const json::exception& e) {
    return InvalidArgumentError(where + ": not a llama-benchy JSON report: " + e.what());
  }
}

std::string BenchRunToJson(const BenchRun& run) {
  json benches = json::array();
  int64_t max_c = 0;
  for (const BenchResult& r : run.results) {
    json b = {{"concurrency", r.concurrency},
              {"context_size", r.depth},
              {"prompt_size", r.prompt_size},
              {"response_size", r.response_size},
              {"is_context_prefill_phase", false},
              {"test", r.test.empty() ? r.Name() : r.test},
              {"runs", r.runs},
              {"failed_requests", r.failed_requests}};
    b.update(MetricsJson(r));
    if (!r.acceptance_rate.empty()) {
      b["drafted_tokens"] = r.drafted_tokens;
      b["accepted_tokens"] = r.accepted_tokens;
    }
    benches.push_back(b);
    max_c = std::max(max_c, r.concurrency);
  }
  char ts[32] = "";
  const std::time_t t = static_cast<std::time_t>(run.created_unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  json out = {{"version", run.tool},
              {"timestamp", ts},
              {"latency_mode", "api"},
              {"latency_ms", run.latency_ms},
              {"model", run.topology.model},
              {"prefix_caching_enabled", false},
              {"max_concurrency", max_c},
              {"prompt_source", run.prompt_mode},
              {"benchmarks", benches},
              {"octet",
               {{"run_id", run.id},
                {"label", run.label},
                {"state", run.state},
                {"source", run.source},
                {"url", run.url},
                {"error", run.error},
                {"topology", TopologyJson(run.topology)}}}};
  return out.dump();
}

}  // namespace octet::app
