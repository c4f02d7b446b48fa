// Sampling settings of `octet generate` and `octet chat` from three places:
// a flag given on the command line wins, then the model's
// generation_config.json, then the flag's built-in default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/status.h"
#include "octet/engine/generate.h"
#include "octet/engine/generation_defaults.h"

namespace octet::cli {

// --repetition-penalty and --show-defaults (generate and chat; the other
// sampling flags are each command's own).
void AddGenerationDefaultFlags(ArgParser& p);

// Reads --temperature, --top-k, --top-p, --repetition-penalty and
// --max-tokens into `sampling` and `max_tokens` as above; returns where each
// came from. A bad flag value is InvalidArgument naming the flag.
Result<std::vector<engine::ResolvedSetting>> ResolveGenerationSettings(
    const ArgParser& p, const engine::GenerationDefaults& defaults,
    engine::SamplingParams* sampling, int64_t* max_tokens);

// Prints the settings for `model_dir` (--show-defaults); the exit code.
int ShowGenerationSettings(const ArgParser& p, const std::string& model_dir,
                           const std::string& program);

// The table --show-defaults and --help --model DIR print.
std::string DescribeGenerationSettings(const std::vector<engine::ResolvedSetting>& settings,
                                       const engine::GenerationDefaults& defaults);

}  // namespace octet::cli
