#include "octet/engine/generation_defaults.h"

#include <cmath>
#include <sstream>

#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::engine {

using nlohmann::json;

Result<GenerationDefaults> ParseGenerationDefaults(std::string_view text, const std::string& path) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(path + ": must be a JSON object");
  GenerationDefaults d;
  d.path = path;
  auto bad = [&](const char* key, const std::string& what) {
    return InvalidArgumentError(path + ": \"" + key + "\" " + what + " (got " + j[key].dump() +
                                ")");
  };
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto number = [&](const char* key, double lo, double hi, bool lo_open,
                    const char* range) -> Result<std::optional<double>> {
    if (!present(key)) return std::optional<double>();
    if (!j[key].is_number()) return bad(key, std::string("must be a number ") + range);
    const double v = j[key].get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
      return bad(key, std::string("must be ") + range);
    }
    return std::optional<double>(v);
  };
  OCTET_ASSIGN_OR_RETURN(auto temperature, number("temperature", 0, 1e6, false, ">= 0"));
  OCTET_ASSIGN_OR_RETURN(auto top_p, number("top_p", 0, 1, true, "in (0, 1]"));
  OCTET_ASSIGN_OR_RETURN(auto rep, number("repetition_penalty", 0, 1e6, true, "> 0"));
  if (temperature) d.temperature = static_cast<float>(*temperature);
  if (top_p) d.top_p = static_cast<float>(*top_p);
  if (rep) d.repetition_penalty = static_cast<float>(*rep);
  for (const char* key : {"top_k", "max_new_tokens"}) {
    if (!present(key)) continue;
    if (!j[key].is_number_integer()) return bad(key, "must be an integer");
    const int64_t v = j[key].get<int64_t>();
    if (std::string(key) == "top_k") {
      if (v < 0) return bad(key, "must be >= 0 (0: no limit)");
      d.top_k = v;
    } else {
      if (v < 1) return bad(key, "must be >= 1");
      d.max_new_tokens = v;
    }
  }
  if (present("do_sample")) {
    if (!j["do_sample"].is_boolean()) return bad("do_sample", "must be true or false");
    d.do_sample = j["do_sample"].get<bool>();
    if (!*d.do_sample) d.temperature = 0.0f;  // greedy whatever else it lists
  }
  return d;
}

Result<GenerationDefaults> ReadGenerationDefaults(const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, "generation_config.json");
  if (!PathExists(path)) return GenerationDefaults();
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseGenerationDefaults(text, path);
}

std::string DescribeSettings(const std::vector<ResolvedSetting>& settings,
                             const std::string& explicit_label, const std::string& config_path) {
  std::ostringstream o;
  for (const ResolvedSetting& s : settings) {
    o << "  " << s.name << " = " << s.value << "  (";
    switch (s.source) {
      case SettingSource::kExplicit:
        o << explicit_label;
        break;
      case SettingSource::kGenerationConfig:
        o << "generation_config.json: " << config_path;
        break;
      case SettingSource::kBuiltIn:
        o << "built-in default";
        break;
    }
    o << ")\n";
  }
  return o.str();
}

}  // namespace octet::engine
