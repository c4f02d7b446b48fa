// Prompt lookup's cost per decoding step as the history grows: NgramDraft
// (a scan of the whole history for each n-gram size) against NgramDrafter
// (each token's positions indexed as the history grows), on the same
// histories, with the drafts checked equal. Two kinds of history: random ids
// over a 151,936-id vocabulary (no n-gram recurs, so the scan reads it all:
// the worst case) and a text-like one (ids drawn from a Zipf law over 4,096,
// a quarter of them copies of earlier stretches). Prints a table on stderr
// and one JSON document on stdout.
//
//   bench_ngram [--lengths 4096,32768,131072] [--steps 200]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/engine/generate.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::vector<int32_t> History(bool text, int64_t length, std::mt19937& rng) {
  std::vector<int32_t> h;
  h.reserve(static_cast<size_t>(length));
  if (!text) {
    std::uniform_int_distribution<int32_t> id(0, 151935);
    while (static_cast<int64_t>(h.size()) < length) h.push_back(id(rng));
    return h;
  }
  std::vector<double> weights(4096);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  std::discrete_distribution<int32_t> zipf(weights.begin(), weights.end());
  while (static_cast<int64_t>(h.size()) < length) {
    if (h.size() > 64 && rng() % 4 == 0) {  // copy an earlier stretch of 4-32 ids
      const size_t n = 4 + rng() % 29, from = rng() % (h.size() - n);
      for (size_t i = 0; i < n; ++i) h.push_back(h[from + i]);
    } else {
      h.push_back(zipf(rng));
    }
  }
  h.resize(static_cast<size_t>(length));
  return h;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_ngram", "Prompt lookup per decoding step: the scan against the index.");
  p.Option("lengths", "N,...", "history lengths (tokens)", "4096,32768,131072")
      .Option("steps", "N", "decoding steps timed at each length (one token each)", "200");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_ngram: " << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  auto lengths = p.GetIntList("lengths");
  auto steps = p.GetInt("steps");
  if (!lengths.ok() || lengths->empty() || !steps.ok() || *steps < 1) {
    std::cerr << "bench_ngram: bad --lengths/--steps\n";
    return 2;
  }
  constexpr int kDraft = 4, kMaxN = 3, kMinN = 1;  // the engine's defaults
  nlohmann::json j;
  std::fprintf(stderr, "%-7s %9s %14s %14s %8s\n", "history", "tokens", "scan us/step",
               "index us/step", "ratio");
  for (bool text : {false, true}) {
    for (int64_t length : *lengths) {
      std::mt19937 rng(1);
      std::vector<int32_t> h = History(text, length + *steps, rng);
      // The index is built over the first `length` tokens as decoding would
      // have built it, then both are timed over the next `steps` tokens.
      std::vector<int32_t> grown(h.begin(), h.begin() + length);
      NgramDrafter drafter(kMaxN, kMinN);
      drafter.Draft(grown, kDraft);
      std::vector<std::vector<int32_t>> by_scan, by_index;
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < *steps; ++s) {
        grown.push_back(h[static_cast<size_t>(length + s)]);
        by_index.push_back(drafter.Draft(grown, kDraft));
      }
      const double index_s = Seconds(t0);
      grown.resize(static_cast<size_t>(length));
      t0 = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < *steps; ++s) {
        grown.push_back(h[static_cast<size_t>(length + s)]);
        by_scan.push_back(NgramDraft(grown, kDraft, kMaxN, kMinN));
      }
      const double scan_s = Seconds(t0);
      for (int64_t s = 0; s < *steps; ++s) {
        if (by_scan[static_cast<size_t>(s)] != by_index[static_cast<size_t>(s)]) {
          std::cerr << "bench_ngram: " << (text ? "text" : "random") << " history at "
                    << length + s + 1 << " tokens: the index drafted otherwise than the scan\n";
          return 1;
        }
      }
      const double scan_us = scan_s * 1e6 / static_cast<double>(*steps);
      const double index_us = index_s * 1e6 / static_cast<double>(*steps);
      const char* kind = text ? "text" : "random";
      std::fprintf(stderr, "%-7s %9lld %14.1f %14.2f %7.0fx\n", kind,
                   static_cast<long long>(length), scan_us, index_us, scan_us / index_us);
      j["runs"].push_back({{"history", kind},
                           {"tokens", length},
                           {"scan_us_per_step", scan_us},
                           {"index_us_per_step", index_us},
                           {"identical_drafts", true}});
    }
  }
  std::cout << j.dump() << "\n";
  return 0;
}
