#include "octet/wire/figures_line.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "octet/base/json.h"

namespace octet::wire {
namespace {

double Num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A count: negative values read as 0 and values past 2^53 (where doubles stop
// being exact, far beyond any real count) as 2^53, so the conversion to an
// integer is always defined.
uint64_t Count(const nlohmann::json& j, const char* key) {
  constexpr double kMax = 9007199254740992.0;  // 2^53
  return static_cast<uint64_t>(std::clamp(Num(j, key), 0.0, kMax));
}

uint32_t Count32(const nlohmann::json& j, const char* key) {
  return static_cast<uint32_t>(std::min<uint64_t>(Count(j, key), UINT32_MAX));
}

// A backend's name as a worker says it: a short word of [A-Za-z0-9._+-], else
// nothing (the line comes from a process's output and ends up in a window).
std::string BackendName(const nlohmann::json& j) {
  auto it = j.find("backend");
  if (it == j.end() || !it->is_string()) return {};
  const std::string s = it->get<std::string>();
  if (s.empty() || s.size() > 32) return {};
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '+' || c == '-';
    if (!ok) return {};
  }
  return s;
}

}  // namespace

bool IsFiguresLine(std::string_view line) {
  return line.substr(0, kFiguresPrefix.size()) == kFiguresPrefix;
}

std::string FormatFiguresLine(const nlohmann::json& figures) {
  return std::string(kFiguresPrefix) + figures.dump();
}

std::string FormatFiguresLine(const nlohmann::ordered_json& figures) {
  return std::string(kFiguresPrefix) + figures.dump();
}

Status ParseFiguresJson(std::string_view json, WorkerFigures* f) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError("figures: not a JSON object");
  if (auto it = j.find("state"); it != j.end() && it->is_string()) {
    f->state = it->get<std::string>();
  }
  f->prefill_tps = Num(j, "prefill_tps");
  f->decode_tps = Num(j, "decode_tps");
  f->step_ms = Num(j, "step_ms");
  f->allreduce_share = std::clamp(Num(j, "allreduce_share"), 0.0, 1.0);
  f->kv_used_fraction = std::clamp(Num(j, "kv_used_fraction"), 0.0, 1.0);
  f->running_requests = Count32(j, "running_requests");
  f->queued_requests = Count32(j, "queued_requests");
  f->train_loss = Num(j, "train_loss");
  f->train_tps = Num(j, "train_tps");
  f->train_step = Count(j, "train_step");
  f->spec_drafted_tokens = Count(j, "spec_drafted_tokens_total");
  f->spec_accepted_tokens =
      std::min(f->spec_drafted_tokens, Count(j, "spec_accepted_tokens_total"));
  // Said once known and kept: a line without it (a follower's, a final one)
  // does not take it away.
  if (std::string b = BackendName(j); !b.empty()) f->backend = std::move(b);
  return Status::Ok();
}

}  // namespace octet::wire
