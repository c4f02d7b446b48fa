// The JSON forms of a benchmark run's metrics and topology, shared by the run
// store (bench_store.cpp: its metrics_json and topology_json columns) and the
// llama-benchy report and comparison (bench_report.cpp, which defines them).
// Internal to app/.
#pragma once

#include <utility>
#include <vector>

#include "octet/app/bench_store.h"
#include "octet/base/json.h"

namespace octet::app {

// The metrics of a result, by their llama-benchy names.
std::vector<std::pair<const char*, MetricStats BenchResult::*>> MetricFields();

// A result's non-empty metrics as {name: {mean, std, values}}, and back (a
// metric the object lacks is left as it is).
nlohmann::json MetricsJson(const BenchResult& r);
void MetricsFromJson(const nlohmann::json& j, BenchResult* r);

// A topology as a JSON object (extra_json under "extra"), and back (defaults
// for what is missing or when `j` is not an object).
nlohmann::json TopologyJson(const BenchTopology& t);
BenchTopology TopologyFromJson(const nlohmann::json& j);

}  // namespace octet::app
