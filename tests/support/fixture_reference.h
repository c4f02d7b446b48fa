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

// The chained MTP drafts of a glm4_moe fixture (drafts 2..k, which the
// fixture's `mtp` section does not cover), per prefix of its sequence
// (prompt + generated ids): the head fed positions 0..fed-1, then chained.
// From tests/unit/engine/data/mtp_chain_references.json, which
// mtp_chain_reference.py beside it computes with NumPy after checking itself
// against the fixture's logits and first-step MTP logits. The file names the
// fixture's weights by sha256; a fixture that changed since ends the program
// saying to regenerate it (the fixture's SHA256SUMS is the witness).
struct MtpChainCase {
  std::vector<int32_t> drafts;              // k: the first step's and the chain's
  std::vector<std::vector<float>> chained;  // k - 1 rows of V logits
};
struct MtpChainReference {
  int k = 0;
  std::vector<MtpChainCase> by_fed;  // [fed], fed = 1..T (by_fed[0] empty)
};

inline MtpChainReference LoadMtpChainReference(const std::string& source_dir,
                                               const std::string& fixtures_dir,
                                               const std::string& model) {
  const std::string file = source_dir + "/tests/unit/engine/data/mtp_chain_references.json";
  auto text = ReadFileToString(file);
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  const auto j = nlohmann::json::parse(*text);
  auto sums = ReadFileToString(fixtures_dir + "/SHA256SUMS");
  if (!sums.ok()) qFatal("%s", sums.status().ToString().c_str());
  for (const auto& m : j["models"]) {
    if (m["model"].get<std::string>() != model) continue;
    const std::string line =
        m["safetensors_sha256"].get<std::string>() + "  " + model + "/model.safetensors";
    if (sums->find(line) == std::string::npos) {
      qFatal(
          "%s: %s/model.safetensors is not the file the chain reference was computed from; "
          "regenerate it with mtp_chain_reference.py",
          file.c_str(), model.c_str());
    }
    MtpChainReference r;
    r.k = j["k"].get<int>();
    for (const auto& c : m["cases"]) {
      const size_t fed = c["fed"].get<size_t>();
      if (r.by_fed.size() <= fed) r.by_fed.resize(fed + 1);
      r.by_fed[fed].drafts = c["drafts"].get<std::vector<int32_t>>();
      r.by_fed[fed].chained = c["chain_logits"].get<std::vector<std::vector<float>>>();
    }
    return r;
  }
  qFatal("%s has no chain reference for %s", file.c_str(), model.c_str());
}

}  // namespace octet::test
