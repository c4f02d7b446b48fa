// The MTP head's drafting under continuous batching. A random-weight
// checkpoint of GLM-4.5's architecture at Qwen3-30B-A3B's layer shape (hidden
// 2048, 128 NVFP4 experts of 768, top-8, one shared expert, 32/4 heads, vocab
// 151936, untied lm_head; --layers decoder layers, then one MTP layer: the
// drafting cost does not depend on the decoder layers) with c sequences
// decoding, each --context tokens into its cache. For each c and K (drafts a
// sequence asks for), every round times
//   verify:  the step the drafts go into (c sequences of 1 + K rows),
//   alone:   c calls of the head, one per sequence (ModelRunner::MtpDraft:
//            how the serving scheduler drafted before it batched them),
//   batched: one call for all c (ModelRunner::MtpDraftBatch: how it drafts now),
// alone and batched in alternating order. Figures are medians over --rounds;
// the ratios are medians of each round's ratio. "step alone / batched" is
// (verify + alone) / (verify + batched): the speed-up of MTP serving's steps
// at that c (the drafts of random weights are never accepted; accepted ones
// add the same tokens to both). The drafts of the two ways are compared
// (they differ only where the kernels' sums for different row counts round
// two near-equal logits apart). Table on stderr, one JSON document on stdout.
//
//   bench_mtp [--dir /tmp/octet-bench-mtp] [--layers 2] [--threads 2] [--backend auto]
//             [--concurrency 1,2,4,8] [--draft-tokens 1,3] [--rounds 7] [--context 64]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/xorshift_rng.h"
#include "octet/engine/model.h"
#include "octet/engine/model_runner.h"
#include "octet/kernels/backends.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::engine;

namespace {

using bench::Median;

double NowMs() { return static_cast<double>(NowNs()) * 1e-6; }

struct Figures {
  int64_t c = 0;
  int k = 0;
  double verify_ms = 0, alone_ms = 0, batched_ms = 0, draft_ratio = 0, step_ratio = 0;
  int64_t drafts_differ = 0;
};

// One (c, K) configuration over `rounds` rounds; the slots hold `context`
// cached positions each.
Result<Figures> Measure(ModelRunner& runner, int64_t c, int k, int rounds, int64_t context,
                        XorShiftRng& rng) {
  const int64_t vocab = runner.config().vocab_size;
  auto id = [&] { return static_cast<int32_t>((rng.Next() * 0.5f + 0.5f) * float(vocab - 1)); };
  Figures f;
  f.c = c;
  f.k = k;
  std::vector<double> verify, alone, batched, draft_ratio, step_ratio;
  for (int round = 0; round < rounds; ++round) {
    // The verify step: each sequence's last token and K drafts, at the same
    // positions every round (overwritten; every draft rejected keeps one row).
    std::vector<SequenceChunk> batch(static_cast<size_t>(c));
    std::vector<MtpDraftRequest> requests(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) {
      SequenceChunk& ch = batch[static_cast<size_t>(j)];
      ch.slot = static_cast<int>(j);
      ch.start_pos = context;
      for (int t = 0; t <= k; ++t) ch.tokens.push_back(id());
      ch.all_logits = true;
      ch.verify = true;
      requests[static_cast<size_t>(j)] = {static_cast<size_t>(j), ch.slot, context, {id()}, k};
    }
    ForwardOutput out;
    const double t0 = NowMs();
    OCTET_RETURN_IF_ERROR(runner.Step(batch, &out));
    verify.push_back(NowMs() - t0);
    std::vector<std::vector<int32_t>> one_by_one(static_cast<size_t>(c)), together;
    double a = 0, b = 0;
    for (int order = 0; order < 2; ++order) {
      if ((order == 0) == (round % 2 == 0)) {
        const double s = NowMs();
        for (int64_t j = 0; j < c; ++j) {
          const MtpDraftRequest& q = requests[static_cast<size_t>(j)];
          OCTET_RETURN_IF_ERROR(runner.MtpDraft(q.chunk, q.slot, q.start_pos, q.next, q.k,
                                                &one_by_one[static_cast<size_t>(j)]));
        }
        a = NowMs() - s;
      } else {
        const double s = NowMs();
        OCTET_RETURN_IF_ERROR(runner.MtpDraftBatch(requests, &together));
        b = NowMs() - s;
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      if (one_by_one[static_cast<size_t>(j)] != together[static_cast<size_t>(j)]) ++f.drafts_differ;
    }
    alone.push_back(a);
    batched.push_back(b);
    draft_ratio.push_back(a / b);
    step_ratio.push_back((verify.back() + a) / (verify.back() + b));
  }
  f.verify_ms = Median(verify);
  f.alone_ms = Median(alone);
  f.batched_ms = Median(batched);
  f.draft_ratio = Median(draft_ratio);
  f.step_ratio = Median(step_ratio);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_mtp", "The MTP head's drafting for c sequences: one call each or one batch.");
  p.Option("dir", "DIR", "where the random checkpoint is written (kept for the next run)",
           "/tmp/octet-bench-mtp")
      .Option("layers", "N", "decoder layers before the MTP layer", "2")
      .Option("threads", "N", "CPU threads", "2")
      .Option("backend", "NAME", "kernel backend: " + kernels::BackendNamesForHelp(), "auto")
      .Option("concurrency", "N,...", "sequences decoding together", "1,2,4,8")
      .Option("draft-tokens", "K,...", "drafts each sequence asks for (1-3)", "1,3")
      .Option("rounds", "N", "rounds per configuration (medians)", "7")
      .Option("context", "N", "cached tokens of each sequence", "64");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  const auto concurrency = p.GetIntList("concurrency");
  const auto ks = p.GetIntList("draft-tokens");
  const auto layers = p.GetInt("layers");
  const auto threads = p.GetInt("threads");
  const auto rounds = p.GetInt("rounds");
  const auto context = p.GetInt("context");
  if (!concurrency.ok() || !ks.ok() || !layers.ok() || !threads.ok() || !rounds.ok() ||
      !context.ok() || concurrency->empty() || ks->empty() || *layers < 1 || *rounds < 1 ||
      *context < 1) {
    std::cerr << "bench_mtp: bad --concurrency, --draft-tokens, --layers, --threads, --rounds or "
                 "--context\n";
    return 2;
  }
  int64_t slots = 0;
  for (int64_t c : *concurrency) {
    if (c < 1 || c > 64) {
      std::cerr << "bench_mtp: --concurrency values are 1..64\n";
      return 2;
    }
    slots = std::max(slots, c);
  }
  for (int64_t k : *ks) {
    if (k < 1 || k > 3) {
      std::cerr << "bench_mtp: --draft-tokens values are 1..3\n";
      return 2;
    }
  }
  // The checkpoint: reused when one of this layer count is there.
  const std::string dir = p.GetString("dir");
  RandomModelShape shape = RandomModelShape::Glm4MoeAtQwen3_30B_A3B(*layers);
  int64_t existing = 0;
  if (auto text = ReadFileToString(JoinPath(dir, "config.json")); text.ok()) {
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.value("model_type", "") == "glm4_moe") {
      existing = j.value("num_hidden_layers", int64_t{0});
    }
  }
  if (existing != *layers) {
    std::remove(JoinPath(dir, "config.json").c_str());  // marks a complete checkpoint
    std::fprintf(stderr, "writing %s (%lld layers and the MTP layer) ...\n", dir.c_str(),
                 static_cast<long long>(*layers));
    if (Status s = WriteRandomCheckpoint(shape, dir); !s.ok()) {
      std::cerr << "bench_mtp: " << s.ToString() << "\n";
      return 1;
    }
  }
  LoadOptions lo;
  lo.threads = static_cast<int>(*threads);
  lo.load_mtp = true;
  lo.backend = p.GetString("backend");
  auto model = Model::Load(dir, lo);
  if (!model.ok()) {
    std::cerr << "bench_mtp: " << model.status().ToString() << "\n";
    return 1;
  }
  LocalRunner runner(**model);
  if (Status s = runner.ResetCache(static_cast<int>(slots), *context + 8, kernels::KvDtype::kF32);
      !s.ok()) {
    std::cerr << "bench_mtp: " << s.ToString() << "\n";
    return 1;
  }
  // Every slot's context: one prefill step, and the head's cache after it.
  XorShiftRng rng(7);
  const int64_t vocab = runner.config().vocab_size;
  auto id = [&] { return static_cast<int32_t>((rng.Next() * 0.5f + 0.5f) * float(vocab - 1)); };
  {
    std::vector<SequenceChunk> prefill(static_cast<size_t>(slots));
    std::vector<MtpDraftRequest> requests(static_cast<size_t>(slots));
    for (int64_t s = 0; s < slots; ++s) {
      SequenceChunk& ch = prefill[static_cast<size_t>(s)];
      ch.slot = static_cast<int>(s);
      for (int64_t t = 0; t < *context; ++t) ch.tokens.push_back(id());
      std::vector<int32_t> next(ch.tokens.begin() + 1, ch.tokens.end());
      next.push_back(id());
      requests[static_cast<size_t>(s)] = {static_cast<size_t>(s), ch.slot, 0, next, 1};
    }
    ForwardOutput out;
    std::vector<std::vector<int32_t>> drafts;
    Status st = runner.Step(prefill, &out);
    if (st.ok()) st = runner.MtpDraftBatch(requests, &drafts);
    if (!st.ok()) {
      std::cerr << "bench_mtp: prefill: " << st.ToString() << "\n";
      return 1;
    }
  }
  nlohmann::json j;
  j["model"] = {{"shape", "glm4_moe at Qwen3-30B-A3B's layer shape, NVFP4 experts"},
                {"layers", *layers},
                {"mtp_layers", 1},
                {"weights", (*model)->WeightFormatSummary()}};
  j["threads"] = *threads;
  j["backend"] = std::string((*model)->backend().name());
  j["context"] = *context;
  j["rounds"] = *rounds;
  j["results"] = nlohmann::json::array();
  std::fprintf(stderr, "%4s %2s %11s %10s %12s %14s %20s %7s\n", "c", "K", "verify ms", "alone ms",
               "batched ms", "alone/batched", "step alone/batched", "differ");
  for (int64_t c : *concurrency) {
    for (int64_t k : *ks) {
      auto f = Measure(runner, c, static_cast<int>(k), static_cast<int>(*rounds), *context, rng);
      if (!f.ok()) {
        std::cerr << "bench_mtp: c " << c << " K " << k << ": " << f.status().ToString() << "\n";
        return 1;
      }
      std::fprintf(stderr, "%4lld %2d %11.1f %10.1f %12.1f %13.2fx %19.2fx %7lld\n",
                   static_cast<long long>(c), f->k, f->verify_ms, f->alone_ms, f->batched_ms,
                   f->draft_ratio, f->step_ratio, static_cast<long long>(f->drafts_differ));
      j["results"].push_back({{"concurrency", c},
                              {"draft_tokens", f->k},
                              {"verify_ms", f->verify_ms},
                              {"alone_ms", f->alone_ms},
                              {"batched_ms", f->batched_ms},
                              {"drafting_ratio", f->draft_ratio},
                              {"step_ratio", f->step_ratio},
                              {"drafts_differ", f->drafts_differ}});
    }
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}
