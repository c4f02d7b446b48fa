#include "generation_settings.h"

#include <iostream>
#include <sstream>

#include "command.h"

namespace octet::cli {

void AddGenerationDefaultFlags(ArgParser& p) {
  p.Option("repetition-penalty", "R",
           "divide (multiply, when negative) the logits of ids already seen by R; 1: none", "1")
      .Flag("show-defaults",
            "print each sampling setting, its value and where it came from (flag, "
            "generation_config.json, built-in), then exit");
}

namespace {
std::string Num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
}  // namespace

Result<std::vector<engine::ResolvedSetting>> ResolveGenerationSettings(
    const ArgParser& p, const engine::GenerationDefaults& d, engine::SamplingParams* s,
    int64_t* max_tokens) {
  using engine::SettingSource;
  std::vector<engine::ResolvedSetting> out;
  auto source = [&](const char* flag, bool in_config) {
    return p.Given(flag) ? SettingSource::kExplicit
           : in_config   ? SettingSource::kGenerationConfig
                         : SettingSource::kBuiltIn;
  };
  // ArgParser's message names the program and the flag already.
  auto flag_error = [](const char*, const Status& st) {
    return InvalidArgumentError(st.message());
  };
  // temperature (do_sample: false in the config is temperature 0)
  {
    const SettingSource src = source("temperature", d.temperature.has_value());
    auto v = p.GetDouble("temperature");
    if (!v.ok()) return flag_error("temperature", v.status());
    s->temperature =
        src == SettingSource::kGenerationConfig ? *d.temperature : static_cast<float>(*v);
    std::string shown = Num(s->temperature);
    if (src == SettingSource::kGenerationConfig && d.do_sample && !*d.do_sample) {
      shown += " (greedy: do_sample is false)";
    }
    out.push_back({"temperature", shown, src});
  }
  {
    const SettingSource src = source("top-k", d.top_k.has_value());
    auto v = p.GetInt("top-k");
    if (!v.ok()) return flag_error("top-k", v.status());
    s->top_k = src == SettingSource::kGenerationConfig ? *d.top_k : *v;
    out.push_back({"top_k", std::to_string(s->top_k), src});
  }
  {
    const SettingSource src = source("top-p", d.top_p.has_value());
    auto v = p.GetDouble("top-p");
    if (!v.ok()) return flag_error("top-p", v.status());
    s->top_p = src == SettingSource::kGenerationConfig ? *d.top_p : static_cast<float>(*v);
    out.push_back({"top_p", Num(s->top_p), src});
  }
  {
    const SettingSource src = source("repetition-penalty", d.repetition_penalty.has_value());
    auto v = p.GetDouble("repetition-penalty");
    if (!v.ok()) return flag_error("repetition-penalty", v.status());
    s->repetition_penalty =
        src == SettingSource::kGenerationConfig ? *d.repetition_penalty : static_cast<float>(*v);
    out.push_back({"repetition_penalty", Num(s->repetition_penalty), src});
  }
  {
    const SettingSource src = source("max-tokens", d.max_new_tokens.has_value());
    auto v = p.GetInt("max-tokens");
    if (!v.ok()) return flag_error("max-tokens", v.status());
    *max_tokens = src == SettingSource::kGenerationConfig ? *d.max_new_tokens : *v;
    out.push_back({"max_tokens", std::to_string(*max_tokens), src});
  }
  return out;
}

std::string DescribeGenerationSettings(const std::vector<engine::ResolvedSetting>& settings,
                                       const engine::GenerationDefaults& d) {
  return "Sampling settings (a flag wins, then generation_config.json, then the built-in "
         "default):\n" +
         engine::DescribeSettings(settings, "flag", d.path.empty() ? "(none)" : d.path);
}

int ShowGenerationSettings(const ArgParser& p, const std::string& model_dir,
                           const std::string& program) {
  auto d = engine::ReadGenerationDefaults(model_dir);
  if (!d.ok()) {
    std::cerr << program << ": error: " << d.status().message() << "\n";
    return kExitFailure;
  }
  engine::SamplingParams s;
  int64_t max_tokens = 0;
  auto settings = ResolveGenerationSettings(p, *d, &s, &max_tokens);
  if (!settings.ok()) {
    std::cerr << WithProgram(program, settings.status().message()) << "\n";
    return kExitUsage;
  }
  std::cout << DescribeGenerationSettings(*settings, *d);
  return kExitOk;
}

}  // namespace octet::cli
