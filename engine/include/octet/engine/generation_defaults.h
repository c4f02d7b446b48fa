// The sampling defaults a checkpoint ships in generation_config.json
// (temperature, top_p, top_k, repetition_penalty, max_new_tokens, do_sample),
// and how they combine with a command's flags or a request's fields: an
// explicit value wins, then generation_config.json, then the built-in default.
//
//   OCTET_ASSIGN_OR_RETURN(GenerationDefaults d, ReadGenerationDefaults(model_dir));
//   if (!flag_given) temperature = d.temperature.value_or(builtin);
//
// `do_sample: false` makes the model's default greedy (temperature 0), as
// transformers' generate does; without do_sample the sampling keys apply as
// given (vLLM's reading: a config that lists a temperature means it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

struct GenerationDefaults {
  std::string path;                  // the file read; empty when the folder has none
  std::optional<float> temperature;  // 0 when do_sample is false
  std::optional<float> top_p;
  std::optional<int64_t> top_k;
  std::optional<float> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<bool> do_sample;
  bool empty() const {
    return !temperature && !top_p && !top_k && !repetition_penalty && !max_new_tokens;
  }
};

// Reads DIR/generation_config.json (absent: no defaults). A value of the
// wrong type or out of range is InvalidArgument naming the file and the key.
Result<GenerationDefaults> ReadGenerationDefaults(const std::string& model_dir);
// The same from the file's text (`path` names it in errors).
Result<GenerationDefaults> ParseGenerationDefaults(std::string_view text, const std::string& path);

// Where one setting's value came from.
enum class SettingSource { kExplicit, kGenerationConfig, kBuiltIn };

struct ResolvedSetting {
  std::string name;   // "temperature", "top_p", ...
  std::string value;  // as printed
  SettingSource source = SettingSource::kBuiltIn;
};

// One line per setting: "temperature = 0.6 (generation_config.json: DIR/...)".
std::string DescribeSettings(const std::vector<ResolvedSetting>& settings,
                             const std::string& explicit_label, const std::string& config_path);

}  // namespace octet::engine
