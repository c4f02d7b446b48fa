// Standalone (no Qt): every fixture model on the "auto" backend (NEON on arm64):
// logits within the README tolerance and greedy ids exact (run_under_qemu.sh).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
using namespace octet;
using namespace octet::engine;
int main(int argc, char** argv) {
  int fails = 0;
  for (const char* name :
       {"llama3-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-tiny-nvfp4", "llama3-tiny-sharded"}) {
    std::string dir = std::string(argv[1]) + "/" + name;
    auto j = nlohmann::json::parse(*ReadFileToString(dir + "/reference.json"));
    auto prompt = j["prompt_ids"].get<std::vector<int32_t>>();
    auto gen = j["generated_ids"].get<std::vector<int32_t>>();
    auto ref = ReadNpy(dir + "/logits.npy")->AsFloat();
    double atol = j["weight_storage"].get<std::string>() == "F32" ? 1e-3 : 2e-3;
    LoadOptions o;
    o.threads = 2;
    auto m = Model::Load(dir, o);
    if (!m.ok()) {
      std::printf("%s: %s\n", name, m.status().ToString().c_str());
      return 1;
    }
    GenerateOptions g;
    g.max_tokens = 8;
    g.stop_at_eos = false;
    g.collect_logits = true;
    auto r = Generate(**m, prompt, g);
    double d = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      d = std::max(d, std::fabs(double(r->logits[i]) - ref[i]));
    bool ok = r->ids == gen && d <= atol && r->logits.size() == ref.size();
    fails += !ok;
    std::printf("%-22s backend %s: max diff %.2e, ids %s -> %s\n", name,
                std::string((*m)->backend().name()).c_str(), d, r->ids == gen ? "match" : "DIFFER",
                ok ? "ok" : "FAIL");
  }
  return fails;
}
