// Speculative decoding against plain decoding of the same prompt, interleaved
// in one process: each round runs plain greedy generation and then n-gram
// speculation at every --draft-tokens K, so the machine's changing load hits
// all of them alike. The output ids must be identical (the program fails
// otherwise). The figure is the ratio to plain decoding: in each round the
// configuration's decode tokens/s over the plain run's just before it, the
// median of those over the rounds (a slow phase of the machine slows both
// runs of a round; a ratio of medians taken over different rounds carried
// it into the figure). The tok/s column is the median round's. Prints a
// table on stderr and one JSON document on stdout.
//
//   bench_speculative [--model DIR] [--prompt TEXT | --prompts FILE] [--max-tokens 80]
//                     [--draft-tokens 2,4] [--ngram-min N,...] [--ngram-max N,...]
//                     [--draft-length auto,fixed]
//                     [--threads 1] [--rounds 7] [--backend auto]
//
// --ngram-min: the shortest n-gram a draft may be looked up from
// (SpeculativeOptions::ngram_min), one set of runs per value (default: the
// engine's default); --ngram-max the longest (ngram_max), likewise.
// --draft-length: auto verifies as many of a step's
// drafts as pay for their rows here (SpeculativeOptions::adaptive), fixed all
// K; one set of runs per value. --prompts: one prompt a line, each run in
// every round; the table has a line per prompt and configuration and the
// summary the geometric mean of each configuration's ratios (one prompt
// favours one drafting rule; the answers of several show which is better).
//
// The default prompt repeats a sentence the trained demo model goes on to
// copy: the case prompt lookup is for (edits, summaries, retrieval).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
#include "octet/engine/tokenizer.h"

using namespace octet;
using namespace octet::engine;

namespace {

using bench::Median;

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_speculative",
              "n-gram speculative decoding vs plain decoding, interleaved in one process.");
  const std::string line = "The quick brown fox jumps over the lazy dog. ";
  p.Option("model", "DIR", "model folder with tokenizer.json",
           std::string(OCTET_SOURCE_DIR) + "/resources/models/nanochat-demo")
      .Option("prompt", "TEXT", "prompt text", line + line + "The quick brown fox")
      .Option("prompts", "FILE", "prompts, one a line (instead of --prompt)", "")
      .Option("max-tokens", "N", "tokens generated per run", "80")
      .Option("draft-tokens", "K,...", "draft lengths to measure", "2,4")
      .Option("ngram-min", "N,...", "shortest n-gram to draft from (default: the engine's)",
              std::to_string(SpeculativeOptions().ngram_min))
      .Option("ngram-max", "N,...", "longest n-gram to draft from (default: the engine's)",
              std::to_string(SpeculativeOptions().ngram_max))
      .Option("draft-length", "auto,fixed",
              "how many drafts a step verifies (each listed one is run)", "auto,fixed")
      .Flag("warm",
            "auto keeps the step times it measured from one round to the next (as chat's turns do)")
      .Option("threads", "N", "kernel threads", "1")
      .Option("backend", "NAME",
              "kernel backend: auto (this CPU's fastest) or a named table (avx2 on an AVX-512 CPU)",
              "auto")
      .Option("rounds", "N", "interleaved rounds (the median counts)", "7");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_speculative: " << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  auto max_tokens = p.GetInt("max-tokens");
  auto ks = p.GetIntList("draft-tokens");
  auto mins = p.GetIntList("ngram-min");
  auto maxes = p.GetIntList("ngram-max");
  auto threads = p.GetInt("threads");
  auto rounds = p.GetInt("rounds");
  if (!max_tokens.ok() || !ks.ok() || ks->empty() || !mins.ok() || mins->empty() || !maxes.ok() ||
      maxes->empty() || !threads.ok() || !rounds.ok() || *rounds < 1 || *max_tokens < 2) {
    std::cerr << "bench_speculative: bad "
                 "--max-tokens/--draft-tokens/--ngram-min/--ngram-max/--threads/--rounds\n";
    return 2;
  }
  std::vector<bool> lengths;  // adaptive?
  {
    std::string list = p.GetString("draft-length") + ",";
    for (size_t at; (at = list.find(',')) != std::string::npos; list.erase(0, at + 1)) {
      const std::string v = list.substr(0, at);
      if (v != "auto" && v != "fixed") {
        std::cerr << "bench_speculative: --draft-length takes auto and/or fixed (got '" << v
                  << "')\n";
        return 2;
      }
      lengths.push_back(v == "auto");
    }
  }
  const bool warm = p.GetFlag("warm");
  const std::string dir = p.GetString("model");
  LoadOptions lo;
  lo.threads = static_cast<int>(*threads);
  lo.backend = p.GetString("backend");
  auto model = Model::Load(dir, lo);
  auto tok = Tokenizer::Load(dir + "/tokenizer.json");
  if (!model.ok() || !tok.ok()) {
    std::cerr << "bench_speculative: "
              << (model.ok() ? tok.status() : model.status()).ToString() << "\n";
    return 1;
  }
  std::vector<std::string> texts;
  if (const std::string file = p.GetString("prompts"); !file.empty()) {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "bench_speculative: cannot read --prompts " << file << "\n";
      return 2;
    }
    for (std::string l; std::getline(in, l);) {
      if (l.find_first_not_of(" \t\r") != std::string::npos) texts.push_back(l);
    }
    if (texts.empty()) {
      std::cerr << "bench_speculative: --prompts " << file << " has no prompt\n";
      return 2;
    }
  } else {
    texts.push_back(p.GetString("prompt"));
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) prompts.push_back(tok->Encode(t, {}));

  struct Config {
    int k = 0;  // 0: plain decoding
    int ngram_min = 0, ngram_max = 0;
    bool adaptive = false;
    std::vector<StepCosts> costs;          // per prompt, kept across rounds with --warm
    std::vector<std::vector<double>> tps;  // per prompt, per round
    std::vector<GenerateResult> last;      // per prompt
  };
  // "min-max": the n-gram sizes a configuration drafts from.
  auto NgramRange = [](const Config& c) {
    return std::to_string(c.ngram_min) + "-" + std::to_string(c.ngram_max);
  };
  const size_t np = prompts.size();
  std::vector<Config> configs(1);
  for (bool adaptive : lengths) {
    for (int64_t n : *mins) {
      for (int64_t x : *maxes) {
        for (int64_t k : *ks) {
          configs.push_back({static_cast<int>(k),
                             static_cast<int>(n),
                             static_cast<int>(std::max(n, x)),
                             adaptive,
                             {},
                             {},
                             {}});
        }
      }
    }
  }
  for (Config& c : configs) {
    c.costs.resize(np);
    c.tps.resize(np);
    c.last.resize(np);
  }
  for (int64_t round = 0; round < *rounds; ++round) {
    for (size_t pi = 0; pi < np; ++pi) {
      for (Config& c : configs) {
        GenerateOptions o;
        o.max_tokens = *max_tokens;
        o.stop_at_eos = false;
        if (c.k > 0) {
          o.speculative.method = SpeculativeMethod::kNgram;
          o.speculative.draft_tokens = c.k;
          o.speculative.ngram_min = c.ngram_min;
          o.speculative.ngram_max = c.ngram_max;
          o.speculative.adaptive = c.adaptive;
          if (warm) o.step_costs = &c.costs[pi];
        }
        auto r = Generate(**model, prompts[pi], o);
        if (!r.ok()) {
          std::cerr << "bench_speculative: prompt " << pi + 1 << ": " << r.status().ToString()
                    << "\n";
          return 1;
        }
        if (c.k > 0 && r->ids != configs[0].last[pi].ids) {
          std::cerr << "bench_speculative: prompt " << pi + 1 << ", K=" << c.k
                    << ": other ids than plain decoding\n";
          return 1;
        }
        c.tps[pi].push_back(r->decode_tps());
        c.last[pi] = std::move(*r);
      }
    }
  }
  nlohmann::json j;
  j["model"] = dir;
  j["max_tokens"] = *max_tokens;
  j["threads"] = *threads;
  j["rounds"] = *rounds;
  j["backend"] = std::string((*model)->backend().name());
  std::fprintf(stderr, "%-6s %-8s %-7s %-9s %12s %10s %12s %8s %8s\n", "prompt", "drafts", "length",
               "n-grams", "decode tok/s", "vs plain", "acceptance", "steps", "drafted");
  std::vector<double> log_sum(configs.size(), 0.0);
  for (size_t pi = 0; pi < np; ++pi) {
    const double base = Median(configs[0].tps[pi]);
    nlohmann::json jp;
    jp["prompt_tokens"] = prompts[pi].size();
    jp["plain_decode_tps"] = base;
    std::fprintf(stderr, "%-6zu %-8s %-7s %-9s %12.1f %10s %12s %8lld %8s\n", pi + 1, "off", "-",
                 "-", base, "1.00x", "-", static_cast<long long>(configs[0].last[pi].decode_steps),
                 "-");
    for (size_t i = 1; i < configs.size(); ++i) {
      const Config& c = configs[i];
      const GenerateResult& last = c.last[pi];
      const double tps = Median(c.tps[pi]);
      std::vector<double> ratios;
      for (size_t r = 0; r < c.tps[pi].size(); ++r) {
        ratios.push_back(c.tps[pi][r] / configs[0].tps[pi][r]);
      }
      const double speedup = Median(ratios);
      log_sum[i] += std::log(speedup);
      std::fprintf(stderr, "%-6zu %-8d %-7s %-9s %12.1f %9.2fx %11.0f%% %8lld %8lld\n", pi + 1, c.k,
                   c.adaptive ? "auto" : "fixed", NgramRange(c).c_str(), tps, speedup,
                   last.acceptance_rate() * 100, static_cast<long long>(last.decode_steps),
                   static_cast<long long>(last.drafted_tokens));
      jp["ngram"].push_back({{"draft_tokens", c.k},
                             {"draft_length", c.adaptive ? "auto" : "fixed"},
                             {"drafted_tokens", last.drafted_tokens},
                             {"ngram_min", c.ngram_min},
                             {"ngram_max", c.ngram_max},
                             {"decode_tps", tps},
                             {"speedup", speedup},
                             {"acceptance_rate", last.acceptance_rate()},
                             {"decode_steps", last.decode_steps},
                             {"identical_output", true}});
    }
    if (np == 1) {
      // One prompt: its figures at the top level, as before --prompts.
      for (auto& [key, value] : jp.items()) j[key] = value;
    } else {
      j["prompts"].push_back(jp);
    }
  }
  if (np > 1) {
    std::fprintf(stderr, "\ngeometric mean over the %zu prompts:\n", np);
    for (size_t i = 1; i < configs.size(); ++i) {
      const Config& c = configs[i];
      const double g = std::exp(log_sum[i] / static_cast<double>(np));
      std::fprintf(stderr, "%-8d %-7s %-9s %9.2fx\n", c.k, c.adaptive ? "auto" : "fixed",
                   NgramRange(c).c_str(), g);
      j["geomean"].push_back({{"draft_tokens", c.k},
                              {"draft_length", c.adaptive ? "auto" : "fixed"},
                              {"ngram_min", c.ngram_min},
                              {"ngram_max", c.ngram_max},
                              {"speedup", g}});
    }
  }
  std::cout << j.dump() << "\n";
  return 0;
}
