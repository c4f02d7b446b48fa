// A fixture model's reference.json and logits.npy (../shared/fixtures, see its
// README): the prompt, the 8 greedy ids and the logits [T, V] the generator
// computed, with the README's tolerance for the model's weight storage. A
// fixture that cannot be read ends the test program (qFatal): the fixtures are
// the premise, checked to exist before this is called.
#pragma once

#include <QtGlobal>
#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"

namespace octet::test {

struct FixtureReference {
  std::vector<int32_t> prompt, generated;
  std::vector<float> logits;  // [T, V]
  int64_t T = 0, V = 0;
  double atol = 0;  // the README's: 1e-3 for the F32 model, 2e-3 for BF16 and NVFP4
};

inline FixtureReference LoadFixtureReference(const std::string& dir) {
  FixtureReference r;
  auto text = ReadFileToString(dir + "/reference.json");
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  const auto j = nlohmann::json::parse(*text);
  r.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  r.generated = j["generated_ids"].get<std::vector<int32_t>>();
  auto npy = ReadNpy(dir + "/" + j["logits_file"].get<std::string>());
  if (!npy.ok()) qFatal("%s", npy.status().ToString().c_str());
  r.logits = npy->AsFloat();
  r.T = npy->shape[0];
  r.V = npy->shape[1];
  r.atol = j["weight_storage"].get<std::string>() == "F32" ? 1e-3 : 2e-3;
  return r;
}

}  // namespace octet::test
