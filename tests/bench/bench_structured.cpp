// Structured output's cost at decode (issue 25: at most 10% slower at c1):
// one request at a time through the Scheduler on a random-weight checkpoint
// with the real Qwen3 tokenizer (151,669 ids; default shape Qwen3-0.6B, BF16),
// sampled, interleaved: a json_schema request (until its JSON is complete),
// then an unconstrained one of the same number of tokens (ignore_eos). Prints
// each pair's decode tokens/s, the time spent in the constraint (one-token
// checks, whole masks, accept) per token, how many tokens needed a whole mask,
// and the ratio as JSON. A random model's choices are mostly refused outside
// strings, so whole masks are far more frequent here than with a trained one.
//
//   bench_structured [--model DIR] [--pairs N] [--layers L] [--threads T]
//                    [--max-tokens N] [--temperature T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "octet/base/deadline.h"
#include "octet/base/json.h"
#include "octet/engine/generate.h"
#include "octet/engine/model_runner.h"
#include "octet/engine/scheduler.h"
#include "octet/engine/structured_output.h"
#include "octet/engine/tokenizer.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::engine;
using nlohmann::json;

namespace {

// What the constraint cost: its calls' time, and how many whole masks.
struct ConstraintCost {
  double ns = 0;
  int64_t masks = 0;
};

// Times the wrapped constraint's calls.
class TimedConstraint final : public TokenConstraint {
 public:
  TimedConstraint(std::unique_ptr<TokenConstraint> inner, std::shared_ptr<ConstraintCost> cost)
      : inner_(std::move(inner)), cost_(std::move(cost)) {}
  void Mask(float* logits, int64_t vocab, std::span<const int32_t> stop_ids) override {
    const int64_t t0 = NowNs();
    inner_->Mask(logits, vocab, stop_ids);
    cost_->ns += double(NowNs() - t0);
    cost_->masks += 1;
  }
  bool Allows(int32_t id, std::span<const int32_t> stop_ids) override {
    const int64_t t0 = NowNs();
    const bool ok = inner_->Allows(id, stop_ids);
    cost_->ns += double(NowNs() - t0);
    return ok;
  }
  void Accept(int32_t id) override {
    const int64_t t0 = NowNs();
    inner_->Accept(id);
    cost_->ns += double(NowNs() - t0);
  }
  std::unique_ptr<TokenConstraint> Clone() const override {
    return std::make_unique<TimedConstraint>(inner_->Clone(), cost_);
  }

 private:
  std::unique_ptr<TokenConstraint> inner_;
  std::shared_ptr<ConstraintCost> cost_;
};

struct Run {
  int64_t tokens = 0;
  double decode_tps = 0;
  std::string text;
};

Run Serve(Scheduler& sched, const Tokenizer& tok, GenerationParams p) {
  auto s = sched.Submit(std::move(p));
  if (!s.ok()) {
    std::fprintf(stderr, "bench_structured: %s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  Run r;
  std::vector<int32_t> ids;
  RequestUpdate u;
  const Deadline d = Deadline::AfterMs(600'000);
  while (!d.expired()) {
    if (!(*s)->Next(Deadline::AfterMs(1000), &u)) continue;
    ids.insert(ids.end(), u.ids.begin(), u.ids.end());
    if (u.done) break;
  }
  r.tokens = u.completion_tokens;
  r.decode_tps = u.timing.decode_tps(u.completion_tokens);
  DecodeOptions o;
  o.skip_special_tokens = true;
  r.text = tok.Decode(ids, o).value_or("");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, fixtures = OCTET_FIXTURES_DIR_DEFAULT;
  int pairs = 5, layers = 28, threads = 2, max_tokens = 256;
  float temperature = 0.7f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      model_dir = argv[i + 1];
    else if (a == "--pairs")
      pairs = std::atoi(argv[i + 1]);
    else if (a == "--layers")
      layers = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--fixtures")
      fixtures = argv[i + 1];
    else if (a == "--max-tokens")
      max_tokens = std::max(2, std::atoi(argv[i + 1]));
    else if (a == "--temperature")
      temperature = static_cast<float>(std::atof(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "usage: bench_structured [--model DIR] [--pairs N] [--layers L] "
                   "[--threads T] [--fixtures DIR] [--max-tokens N] [--temperature T]\n");
      return 2;
    }
  }
  std::string tmp;
  if (model_dir.empty()) {
    tmp = (std::filesystem::temp_directory_path() / "octet_bench_structured").string();
    RandomModelShape shape = RandomModelShape::Qwen3_0_6B();
    shape.num_layers = layers;
    if (Status s = WriteRandomCheckpoint(shape, tmp); !s.ok()) {
      std::fprintf(stderr, "bench_structured: %s\n", s.ToString().c_str());
      return 1;
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(fixtures + "/tokenizers/qwen3/" + f, tmp + "/" + f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    model_dir = tmp;
  }
  LoadOptions lo;
  lo.threads = threads;
  auto model = Model::Load(model_dir, lo);
  auto tok = Tokenizer::Load(model_dir);
  if (!model.ok() || !tok.ok()) {
    std::fprintf(stderr, "bench_structured: %s %s\n", model.status().ToString().c_str(),
                 tok.status().ToString().c_str());
    return 1;
  }
  LocalRunner runner(**model);
  Scheduler sched(runner, {.num_slots = 1, .context = 1024, .max_batch_tokens = 256});
  if (Status s = sched.Start(); !s.ok()) {
    std::fprintf(stderr, "bench_structured: %s\n", s.ToString().c_str());
    return 1;
  }
  const char* schema = R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"city":{"enum":["Paris","Oslo","Lima"]},
      "tags":{"type":"array","items":{"type":"string"},"maxItems":3},"ok":{"type":"boolean"}},
      "required":["name","age","city","tags","ok"],"additionalProperties":false})";
  auto grammar = CompileJsonSchema(schema);
  auto trie = TokenTrie::Build(*tok);
  const std::vector<int32_t> prompt =
      tok->Encode("<|im_start|>user\nA person as JSON.<|im_end|>\n<|im_start|>assistant\n");
  json out = json::array();
  double sum_c = 0, sum_u = 0, mask_ns = 0, plain_ms = 0;
  std::vector<double> ratios;
  int64_t constrained_tokens = 0, masks = 0;
  for (int i = 0; i < pairs; ++i) {
    auto cost = std::make_shared<ConstraintCost>();
    GenerationParams c;
    c.prompt = prompt;
    c.max_tokens = max_tokens;
    c.sampling.temperature = temperature;
    c.sampling.seed = 100 + i;
    c.stop_ids = tok->StopIds();
    c.constraint = std::make_shared<TimedConstraint>(MakeGrammarConstraint(*grammar, trie), cost);
    const Run rc = Serve(sched, *tok, c);
    GenerationParams u = c;
    u.constraint = nullptr;
    u.ignore_eos = true;
    u.max_tokens = std::max<int64_t>(2, rc.tokens);
    const Run ru = Serve(sched, *tok, u);
    sum_c += rc.decode_tps;
    sum_u += ru.decode_tps;
    if (ru.decode_tps > 0) {
      ratios.push_back(rc.decode_tps / ru.decode_tps);
      plain_ms += 1e3 / ru.decode_tps;
    }
    mask_ns += cost->ns;
    masks += cost->masks;
    constrained_tokens += rc.tokens;
    out.push_back(
        {{"tokens", rc.tokens},
         {"schema_decode_tps", rc.decode_tps},
         {"plain_decode_tps", ru.decode_tps},
         {"constraint_ms_per_token", rc.tokens ? cost->ns * 1e-6 / double(rc.tokens) : 0.0},
         {"whole_masks", cost->masks},
         {"valid_json", json::accept(rc.text)}});
    std::fprintf(stderr, "pair %d: %lld tokens, schema %.2f tok/s, plain %.2f tok/s\n", i,
                 static_cast<long long>(rc.tokens), rc.decode_tps, ru.decode_tps);
  }
  sched.Stop(Status::Ok());
  std::sort(ratios.begin(), ratios.end());
  const double median = ratios.empty() ? 0.0
                        : ratios.size() % 2
                            ? ratios[ratios.size() / 2]
                            : (ratios[ratios.size() / 2 - 1] + ratios[ratios.size() / 2]) / 2;
  json summary = {{"model", tmp.empty() ? model_dir
                                        : "random Qwen3-0.6B shape, " + std::to_string(layers) +
                                              " layers, Qwen3 tokenizer"},
                  {"threads", threads},
                  {"pairs", out},
                  {"schema_over_plain_decode_tps", sum_u > 0 ? sum_c / sum_u : 0.0},
                  {"median_pair_ratio", median},
                  {"temperature", temperature},
                  {"plain_decode_ms_per_token", ratios.empty() ? 0.0 : plain_ms / ratios.size()},
                  {"constraint_ms_per_token",
                   constrained_tokens ? mask_ns * 1e-6 / double(constrained_tokens) : 0.0},
                  {"whole_masks_per_token",
                   constrained_tokens ? double(masks) / double(constrained_tokens) : 0.0}};
  std::printf("%s\n", summary.dump(1).c_str());
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return 0;
}
