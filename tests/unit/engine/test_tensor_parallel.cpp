// Tensor parallelism: the layout's verdicts on TP degrees, the vocab split,
// and TpRuntime groups (ranks as threads of this process, joined through real
// communicators over shm and TCP, one-shot and ring) whose logits equal the
// single-rank logits within 1e-4 relative (max |diff| <= 1e-4 * max |logit|)
// with identical greedy ids, on the fixture models and on random checkpoints
// whose shapes the fixtures lack (6 heads for TP 3, an uneven vocab split,
// NVFP4 with TP 3, Qwen2 biases over replicated kv heads).
//
// The matrix covers each axis (TP 2/3/4, shm/tcp, one-shot/ring, F32/BF16/
// NVFP4, tied/untied, kv heads split/replicated) without multiplying them.
// The process-level path (octet generate --tp N spawning octet worker ranks)
// is tests/integration/serving/test_tp_cli.
#include <unistd.h>

#include <QtTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "fixture_reference.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/collectives/communicator.h"
#include "octet/engine/generate.h"
#include "octet/engine/scheduler.h"
#include "octet/engine/tensor_parallel.h"
#include "octet/engine/tp_runtime.h"
#include "octet_test.h"
#include "random_checkpoint.h"
#include "tp_group.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::vector<int32_t> FixturePrompt(const std::string& dir) {
  auto text = ReadFileToString(dir + "/reference.json");
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  return nlohmann::json::parse(*text)["prompt_ids"].get<std::vector<int32_t>>();
}

// A prompt of n ids in [0, vocab) (deterministic).
std::vector<int32_t> SyntheticPrompt(int64_t vocab, int n) {
  std::vector<int32_t> ids;
  uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    ids.push_back(static_cast<int32_t>((x >> 8) % vocab));
  }
  return ids;
}

GenerateResult RunSingle(const std::string& dir, const std::vector<int32_t>& prompt, int tokens) {
  LoadOptions lo;
  lo.threads = 1;
  auto m = Model::Load(dir, lo);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  GenerateOptions g;
  g.max_tokens = tokens;
  g.stop_at_eos = false;
  g.collect_logits = true;
  auto r = Generate(**m, prompt, g);
  if (!r.ok()) qFatal("%s", r.status().ToString().c_str());
  return *r;
}

// Runs a TP group of `tp` threads (the MTP head loaded on every rank when
// `load_mtp`); rank 0 runs `lead` on its runtime while the others follow.
// The first error of any rank, or OK.
Status RunTpGroup(const std::string& dir, int tp, collectives::TransportKind transport,
                  collectives::AlgorithmKind algo, bool load_mtp,
                  const std::function<Status(TpRuntime&)>& lead) {
  return test::RunTpGroup(
      dir, {.tp = tp, .transport = transport, .algorithm = algo, .load_mtp = load_mtp}, lead);
}

// Runs a TP group of `tp` threads; returns rank 0's result (or the first error).
Result<GenerateResult> RunGroup(const std::string& dir, const std::vector<int32_t>& prompt,
                                int tokens, int tp, collectives::TransportKind transport,
                                collectives::AlgorithmKind algo) {
  Result<GenerateResult> result = InternalError("rank 0 did not run");
  OCTET_RETURN_IF_ERROR(
      RunTpGroup(dir, tp, transport, algo, /*load_mtp=*/false, [&](TpRuntime& rt) -> Status {
        GenerateOptions g;
        g.max_tokens = tokens;
        g.stop_at_eos = false;
        g.collect_logits = true;
        result = Generate(rt, prompt, g);
        return result.status();
      }));
  return result;
}

// The same with the MTP head loaded on every rank.
Status RunMtpGroup(const std::string& dir, int tp, collectives::TransportKind transport,
                   collectives::AlgorithmKind algo, const std::function<Status(TpRuntime&)>& lead) {
  return RunTpGroup(dir, tp, transport, algo, /*load_mtp=*/true, lead);
}

std::string ScratchDir() {
  static std::string dir = [] {
    std::string d = "/tmp/octet-test-tp-" + std::to_string(::getpid());
    return d;
  }();
  return dir;
}

// Random checkpoints with shapes the fixtures lack.
std::string RandomModel(const std::string& name) {
  const std::string dir = ScratchDir() + "/" + name;
  if (PathExists(dir + "/config.json")) return dir;
  RandomModelShape s;
  if (name == "qwen3-6h") {  // 6 heads / 3 kv: TP 3; vocab 301 splits unevenly (101+101+99)
    s.architecture = "Qwen3ForCausalLM";
    s.vocab_size = 301;
    s.hidden_size = 48;
    s.intermediate_size = 96;
    s.num_heads = 6;
    s.num_kv_heads = 3;
    s.head_dim = 16;
    s.tie_word_embeddings = true;
  } else if (name == "qwen3-6h-nvfp4") {  // NVFP4 with TP 3: 32-column slices of o/down
    s.architecture = "Qwen3ForCausalLM";
    s.vocab_size = 300;
    s.hidden_size = 64;
    s.intermediate_size = 96;
    s.num_heads = 6;
    s.num_kv_heads = 3;
    s.head_dim = 16;
    s.nvfp4 = true;
    s.tie_word_embeddings = false;
  } else if (name == "qwen2-bias") {  // Qwen2 biases, 2 kv heads replicated over TP 4
    s.architecture = "Qwen2ForCausalLM";
    s.vocab_size = 257;
    s.hidden_size = 64;
    s.intermediate_size = 128;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 16;
    s.tie_word_embeddings = false;
  } else {
    qFatal("unknown random model %s", name.c_str());
  }
  Status st = WriteRandomCheckpoint(s, dir);
  if (!st.ok()) qFatal("%s", st.ToString().c_str());
  return dir;
}

}  // namespace

class TestTensorParallel : public QObject {
  Q_OBJECT
 private slots:
  void cleanupTestCase() {
    std::error_code ec;
    std::filesystem::remove_all(ScratchDir(), ec);
  }

  void layoutExplainsInvalidDegrees() {
    TpModelShape s;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_dim = 128;
    s.hidden_size = 4096;
    s.intermediate_size = 14336;
    s.vocab_size = 128256;
    QVERIFY(CheckTpDegree(s, 1).ok());
    QVERIFY(CheckTpDegree(s, 2).ok());
    QVERIFY(CheckTpDegree(s, 4).ok());
    QVERIFY(CheckTpDegree(s, 8).ok());
    Status three = CheckTpDegree(s, 3);
    QVERIFY(!three.ok());
    QVERIFY2(three.message().find("32 query heads are not divisible by 3") != std::string::npos,
             three.message().c_str());
    QVERIFY2(three.message().find("8 kv heads") != std::string::npos, three.message().c_str());
    // 16 ranks: more ranks than kv heads, replicated (16 % 8 == 0), but 32 heads / 16 fine.
    QVERIFY(CheckTpDegree(s, 16).ok());
    QCOMPARE(ValidTpDegrees(s, 8), (std::vector<int>{1, 2, 4, 8}));
    // kv heads that ranks cannot share evenly.
    s.num_kv_heads = 4;
    s.num_heads = 24;
    Status six = CheckTpDegree(s, 6);
    QVERIFY2(six.message().find("cannot share 4 kv heads") != std::string::npos,
             six.message().c_str());
    // NVFP4: a row-parallel slice that is not whole 16-column blocks.
    TpModelShape q;
    q.num_heads = 4;
    q.num_kv_heads = 4;
    q.head_dim = 8;
    q.intermediate_size = 96;
    q.vocab_size = 100;
    q.nvfp4 = true;
    Status n4 = CheckTpDegree(q, 4);
    QVERIFY2(n4.message().find("NVFP4 o_proj slices of 8 columns") != std::string::npos,
             n4.message().c_str());
    QVERIFY(!CheckTpDegree(q, 0).ok());
    // Mixture of experts: the expert and shared-expert widths split too, and
    // NVFP4 expert slices must be whole scale blocks.
    TpModelShape m = s;
    m.num_heads = 32;
    m.num_kv_heads = 4;
    m.expert_intermediate_size = 768;
    m.shared_intermediate_size = 0;
    QVERIFY(CheckTpDegree(m, 8).ok());
    m.expert_intermediate_size = 1100;
    Status e8 = CheckTpDegree(m, 8);
    QVERIFY2(e8.message().find("expert intermediate size 1100 is not divisible by 8") !=
                 std::string::npos,
             e8.message().c_str());
    m.expert_intermediate_size = 96;
    m.nvfp4 = true;
    QVERIFY(CheckTpDegree(m, 2).ok());
    Status e4 = CheckTpDegree(m, 4);
    QVERIFY2(e4.message().find("NVFP4 expert down_proj slices of 24 columns") != std::string::npos,
             e4.message().c_str());
  }

  void vocabShardsCoverTheVocabulary() {
    for (int64_t vocab : {256, 301, 151936, 7}) {
      for (int tp = 1; tp <= 8; ++tp) {
        if (!CheckTpDegree({840, 840, 1, 840, 840, vocab, false}, tp).ok()) continue;
        int64_t next = 0;
        for (int r = 0; r < tp; ++r) {
          const VocabRange v = VocabShard(vocab, tp, r);
          QCOMPARE(v.begin, next);
          QVERIFY(v.count >= 1 && v.count <= v.padded);
          next += v.count;
        }
        QCOMPARE(next, vocab);
      }
    }
    // 7 rows over 5 ranks: blocks of 2 leave the fifth rank nothing.
    QVERIFY(CheckTpDegree({840, 840, 1, 840, 840, 7, false}, 4).ok());
    QVERIFY(!CheckTpDegree({840, 840, 1, 840, 840, 7, false}, 5).ok());
  }

  void groupMatchesSingleRank_data() {
    QTest::addColumn<QString>("model");  // fixture name, or "random:<name>"
    QTest::addColumn<int>("tp");
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    QTest::newRow("qwen3-tiny tp2 shm oneshot") << "qwen3-tiny" << 2 << "shm"
                                                << "oneshot";
    QTest::newRow("llama3-tiny tp4 tcp ring") << "llama3-tiny" << 4 << "tcp"
                                              << "ring";
    QTest::newRow("qwen2-tiny tp2 tcp oneshot") << "qwen2-tiny" << 2 << "tcp"
                                                << "oneshot";
    QTest::newRow("qwen2-tiny tp4 shm ring") << "qwen2-tiny" << 4 << "shm"
                                             << "ring";
    QTest::newRow("qwen3-tiny-nvfp4 tp2 shm ring") << "qwen3-tiny-nvfp4" << 2 << "shm"
                                                   << "ring";
    QTest::newRow("qwen3-tiny-nvfp4 tp4 tcp oneshot") << "qwen3-tiny-nvfp4" << 4 << "tcp"
                                                      << "oneshot";
    QTest::newRow("random qwen3-6h tp3 shm oneshot") << "random:qwen3-6h" << 3 << "shm"
                                                     << "oneshot";
    QTest::newRow("random qwen3-6h tp3 tcp ring") << "random:qwen3-6h" << 3 << "tcp"
                                                  << "ring";
    QTest::newRow("random qwen3-6h-nvfp4 tp3 shm ring") << "random:qwen3-6h-nvfp4" << 3 << "shm"
                                                        << "ring";
    // Mixture of experts (and MiniCPM's scales) over real rank processes.
    QTest::newRow("qwen3-moe-tiny tp2 tcp ring") << "qwen3-moe-tiny" << 2 << "tcp"
                                                 << "ring";
    QTest::newRow("glm4-moe-tiny tp4 shm oneshot") << "glm4-moe-tiny" << 4 << "shm"
                                                   << "oneshot";
    QTest::newRow("glm4-moe-tiny-nvfp4 tp2 tcp oneshot") << "glm4-moe-tiny-nvfp4" << 2 << "tcp"
                                                         << "oneshot";
    QTest::newRow("minicpm-tiny tp2 shm ring") << "minicpm-tiny" << 2 << "shm"
                                               << "ring";
    QTest::newRow("random qwen2-bias tp4 tcp oneshot") << "random:qwen2-bias" << 4 << "tcp"
                                                       << "oneshot";
  }
  void groupMatchesSingleRank() {
    QFETCH(QString, model);
    QFETCH(int, tp);
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    std::string dir;
    std::vector<int32_t> prompt;
    const std::string name = model.toStdString();
    if (name.rfind("random:", 0) == 0) {
      dir = RandomModel(name.substr(7));
      auto config = LoadModelConfig(dir);
      QVERIFY(config.ok());
      prompt = SyntheticPrompt(config->vocab_size, 11);
    } else {
      OCTET_REQUIRE_FIXTURES();
      dir = test::FixturesDir() + "/" + name;
      prompt = FixturePrompt(dir);
    }
    const int tokens = 8;
    GenerateResult single = RunSingle(dir, prompt, tokens);
    auto tr = collectives::ParseTransport(transport.toStdString());
    auto al = collectives::ParseAlgorithm(algo.toStdString());
    QVERIFY(tr.ok() && al.ok());
    auto group = RunGroup(dir, prompt, tokens, tp, *tr, *al);
    QVERIFY2(group.ok(), group.status().ToString().c_str());
    QCOMPARE(group->ids, single.ids);
    QCOMPARE(group->vocab, single.vocab);
    QCOMPARE(group->logits.size(), single.logits.size());
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < single.logits.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(double(single.logits[i])));
      max_diff = std::max(max_diff, std::fabs(double(group->logits[i]) - single.logits[i]));
    }
    QVERIFY(max_ref > 0);
    QVERIFY2(max_diff <= 1e-4 * max_ref, ("max |tp - single| = " + std::to_string(max_diff) +
                                          ", max |logit| = " + std::to_string(max_ref))
                                             .c_str());
  }

  // The MTP head sharded over a group (its attention heads and expert widths
  // split, the vocabulary-parallel embedding and logits gathered): its draft
  // logits over the whole reference sequence match the fixture's `mtp`
  // section (vLLM's first draft step), and speculative decoding with it
  // gives the fixture's greedy ids and logits (the drafts change nothing),
  // K = 1..3, over shm and TCP.
  void mtpGroupMatchesTheReference_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("tp");
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    QTest::addColumn<int>("k");
    QTest::newRow("glm4-moe-tiny tp2 shm ring k1") << "glm4-moe-tiny" << 2 << "shm"
                                                   << "ring" << 1;
    QTest::newRow("glm4-moe-tiny tp2 tcp oneshot k3") << "glm4-moe-tiny" << 2 << "tcp"
                                                      << "oneshot" << 3;
    QTest::newRow("glm4-moe-tiny tp4 shm oneshot k2") << "glm4-moe-tiny" << 4 << "shm"
                                                      << "oneshot" << 2;
    QTest::newRow("glm4-moe-tiny-nvfp4 tp2 tcp ring k2") << "glm4-moe-tiny-nvfp4" << 2 << "tcp"
                                                         << "ring" << 2;
  }
  void mtpGroupMatchesTheReference() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    QFETCH(int, tp);
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    QFETCH(int, k);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    auto text = ReadFileToString(dir + "/reference.json");
    QVERIFY(text.ok());
    const auto ref = nlohmann::json::parse(*text);
    const auto& mtp = ref["mtp"];
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto generated = ref["generated_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end());
    const int64_t T = static_cast<int64_t>(seq.size()) - 1;
    auto want_mtp = ReadNpy(dir + "/" + mtp["logits_file"].get<std::string>());
    auto want_logits = ReadNpy(dir + "/logits.npy");
    QVERIFY(want_mtp.ok() && want_logits.ok());
    const int64_t V = want_mtp->shape.back();

    std::vector<float> mtp_logits, batch_logits;
    std::vector<int32_t> drafts;
    std::vector<std::vector<int32_t>> batch_drafts;
    GenerateResult spec;
    auto tr = collectives::ParseTransport(transport.toStdString());
    auto al = collectives::ParseAlgorithm(algo.toStdString());
    QVERIFY(tr.ok() && al.ok());
    Status s = RunMtpGroup(dir, tp, *tr, *al, [&](TpRuntime& rt) -> Status {
      if (rt.mtp_layers() != 1) return InternalError("the MTP layer is not loaded");
      OCTET_RETURN_IF_ERROR(rt.ResetCache(1, T, kernels::KvDtype::kF32));
      SequenceChunk ch;
      ch.tokens.assign(seq.begin(), seq.end() - 1);
      ch.all_logits = true;
      ForwardOutput out;
      OCTET_RETURN_IF_ERROR(rt.Step({ch}, &out));
      const std::vector<int32_t> next(seq.begin() + 1, seq.end());
      OCTET_RETURN_IF_ERROR(rt.MtpDraft(0, 0, 0, next, 1, &drafts, &mtp_logits));
      // Two sequences drafted in one call (the scheduler's): the whole
      // sequence and its first half, in two slots, k drafts each.
      OCTET_RETURN_IF_ERROR(rt.ResetCache(2, T, kernels::KvDtype::kF32));
      SequenceChunk half = ch;
      half.slot = 1;
      half.tokens.resize(static_cast<size_t>(T / 2));
      OCTET_RETURN_IF_ERROR(rt.Step({ch, half}, &out));
      OCTET_RETURN_IF_ERROR(rt.MtpDraftBatch(
          {MtpDraftRequest{0, 0, 0, next, k},
           MtpDraftRequest{1, 1, 0, std::vector<int32_t>(next.begin(), next.begin() + T / 2), k}},
          &batch_drafts, &batch_logits));
      GenerateOptions o;
      o.max_tokens = static_cast<int64_t>(generated.size());
      o.stop_at_eos = false;
      o.collect_logits = true;
      o.speculative.method = SpeculativeMethod::kMtp;
      o.speculative.draft_tokens = k;
      o.speculative.adaptive = false;  // every step verifies the head's drafts
      OCTET_ASSIGN_OR_RETURN(spec, Generate(rt, prompt, o));
      return Status::Ok();
    });
    QVERIFY2(s.ok(), s.ToString().c_str());
    // The draft head's logits and drafts against the reference.
    QCOMPARE(int64_t(mtp_logits.size()), T * V);
    const std::vector<float> want = want_mtp->AsFloat();
    double d = 0;
    for (size_t i = 0; i < mtp_logits.size(); ++i) {
      d = std::max(d, std::fabs(double(mtp_logits[i]) - want[i]));
    }
    QVERIFY2(d <= mtp["suggested_logits_atol"].get<double>(),
             ("max |mtp logits - ref| = " + std::to_string(d)).c_str());
    const auto want_drafts = mtp["draft_ids"].get<std::vector<int32_t>>();
    QCOMPARE(drafts, std::vector<int32_t>{want_drafts.back()});
    // The batched call: each sequence's fed rows are the reference's rows at
    // their positions, then each chained step's rows (the whole sequence's,
    // the half's) the chain reference's; each makes the reference's k drafts.
    QCOMPARE(int64_t(batch_logits.size()), (T + T / 2 + 2 * (k - 1)) * V);
    const test::MtpChainReference chain =
        test::LoadMtpChainReference(test::SourceDir(), test::FixturesDir(), model.toStdString());
    const int64_t fed[2] = {T, T / 2};
    double db = 0;
    for (size_t i = 0; i < batch_logits.size(); ++i) {
      const int64_t row = int64_t(i) / V, col = int64_t(i) % V;
      double want_i;
      if (row < T + T / 2) {
        want_i = want[size_t((row < T ? row : row - T) * V + col)];
      } else {
        const int64_t c = row - T - T / 2;  // chain step c / 2, sequence c % 2
        want_i = chain.by_fed.at(size_t(fed[c % 2])).chained.at(size_t(c / 2))[size_t(col)];
      }
      db = std::max(db, std::fabs(double(batch_logits[i]) - want_i));
    }
    QVERIFY2(db <= mtp["suggested_logits_atol"].get<double>(),
             ("max |batched mtp logits - ref| = " + std::to_string(db)).c_str());
    QCOMPARE(batch_drafts.size(), size_t(2));
    for (int r = 0; r < 2; ++r) {
      const auto& ref = chain.by_fed.at(size_t(fed[r])).drafts;
      QCOMPARE(batch_drafts[r], std::vector<int32_t>(ref.begin(), ref.begin() + k));
    }
    QCOMPARE(batch_drafts[0].front(), want_drafts.back());
    QCOMPARE(batch_drafts[1].front(), want_drafts[static_cast<size_t>(T / 2 - 1)]);
    // Speculative decoding: the reference's greedy ids and logits.
    QCOMPARE(spec.ids, generated);
    const std::vector<float> wl = want_logits->AsFloat();
    QCOMPARE(spec.logits.size(), wl.size());
    double dl = 0;
    for (size_t i = 0; i < wl.size(); ++i) {
      dl = std::max(dl, std::fabs(double(spec.logits[i]) - wl[i]));
    }
    QVERIFY2(dl <= 2e-3, ("max |logits - ref| = " + std::to_string(dl)).c_str());
    QVERIFY2(spec.drafted_tokens >= spec.decode_steps - 1,
             (std::to_string(spec.drafted_tokens) + " drafted in " +
              std::to_string(spec.decode_steps) + " steps")
                 .c_str());
  }

  // Speculation across a group keeps plain decoding's logits bit for bit: the
  // verify flag of a step (SequenceChunk::verify) reaches every rank, whose
  // shards of a 9-row verify step then run the one-row kernels rather than
  // the GEMM. The prompt holds every id, so every step drafts 8. NVFP4
  // weights: on AVX2, dense matmuls of 9 rows take the one-row kernels anyway
  // (IsaKernels::decode_batch_rows), NVFP4 ones the GEMM.
  void verifyStepsAreBatchInvariantOnEveryRank() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/qwen3-tiny-nvfp4";
    GenerateResult plain, spec;
    Status s =
        RunTpGroup(dir, 2, collectives::TransportKind::kShm, collectives::AlgorithmKind::kRing,
                   /*load_mtp=*/false, [&](TpRuntime& rt) -> Status {
                     const int64_t V = rt.config().vocab_size;
                     std::vector<int32_t> prompt;
                     for (int64_t i = 0; i < V; ++i) {
                       prompt.push_back(static_cast<int32_t>((i * 7919) % V));
                     }
                     GenerateOptions o;
                     o.max_tokens = 10;
                     o.stop_at_eos = false;
                     o.collect_logits = true;
                     OCTET_ASSIGN_OR_RETURN(plain, Generate(rt, prompt, o));
                     o.speculative.method = SpeculativeMethod::kNgram;
                     o.speculative.draft_tokens = 8;
                     o.speculative.ngram_min = 1;
                     o.speculative.adaptive = false;  // every step 9 rows
                     OCTET_ASSIGN_OR_RETURN(spec, Generate(rt, prompt, o));
                     return Status::Ok();
                   });
    QVERIFY2(s.ok(), s.ToString().c_str());
    QCOMPARE(spec.ids, plain.ids);
    QVERIFY(spec.drafted_tokens >= 8);
    QCOMPARE(spec.logits.size(), plain.logits.size());
    QVERIFY(std::memcmp(spec.logits.data(), plain.logits.data(),
                        plain.logits.size() * sizeof(float)) == 0);
  }

  void nSequencesShareOnePrefillAcrossTheGroup_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<bool>("mtp");
    QTest::newRow("qwen3-tiny") << "qwen3-tiny" << false;
    QTest::newRow("glm4-moe-tiny, MTP drafts") << "glm4-moe-tiny" << true;
  }
  // n > 1 across a group: a prefilled slot copied on every rank (a step plan)
  // continues exactly as the slot it was copied from (with the MTP head, its
  // cache too: the copy drafts what the original drafts, bit for bit); a
  // copy naming a slot the cache lacks is refused before any rank moves; and
  // the scheduler's n = 3 greedy sequences of one request prefill the prompt
  // once and each give the reference's greedy ids.
  void nSequencesShareOnePrefillAcrossTheGroup() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, model);
    QFETCH(bool, mtp);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    auto text = ReadFileToString(dir + "/reference.json");
    QVERIFY(text.ok());
    const auto ref = nlohmann::json::parse(*text);
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto generated = ref["generated_ids"].get<std::vector<int32_t>>();
    std::vector<float> copied, original;
    std::vector<std::vector<int32_t>> ids;
    SchedulerMetrics metrics;
    std::vector<std::vector<int32_t>> drafts;
    std::vector<float> draft_logits;
    Status bad_copy;
    Status s = RunTpGroup(
        dir, 2, collectives::TransportKind::kShm, collectives::AlgorithmKind::kOneShot, mtp,
        [&](TpRuntime& rt) -> Status {
          OCTET_RETURN_IF_ERROR(rt.ResetCache(2, 64, kernels::KvDtype::kF32));
          const int64_t n = static_cast<int64_t>(prompt.size());
          SequenceChunk first;
          first.tokens = prompt;
          ForwardOutput out;
          OCTET_RETURN_IF_ERROR(rt.Step({first}, &out));
          if (mtp) {  // the head's cache of the prompt, in slot 0
            std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
            next.push_back(generated[0]);
            std::vector<int32_t> unused;
            OCTET_RETURN_IF_ERROR(rt.MtpDraft(0, 0, 0, next, 1, &unused));
          }
          OCTET_RETURN_IF_ERROR(rt.CopySlot(0, 1, n));
          bad_copy = rt.CopySlot(0, 2, n);
          SequenceChunk a{0, n, {generated[0]}, false}, b{1, n, {generated[0]}, false};
          OCTET_RETURN_IF_ERROR(rt.Step({a, b}, &out));
          original.assign(out.Last(0), out.Last(0) + out.vocab);
          copied.assign(out.Last(1), out.Last(1) + out.vocab);
          if (mtp) {
            OCTET_RETURN_IF_ERROR(rt.MtpDraftBatch({MtpDraftRequest{0, 0, n, {generated[1]}, 3},
                                                    MtpDraftRequest{1, 1, n, {generated[1]}, 3}},
                                                   &drafts, &draft_logits));
          }

          SchedulerOptions so;
          so.num_slots = 4;
          so.context = 64;
          so.max_batch_tokens = 64;
          if (mtp) {
            so.speculative.method = SpeculativeMethod::kMtp;
            so.speculative.draft_tokens = 2;
          }
          Scheduler sched(rt, so);
          OCTET_RETURN_IF_ERROR(sched.Start());
          GenerationParams p;
          p.prompt = prompt;
          p.max_tokens = static_cast<int64_t>(generated.size());
          p.ignore_eos = true;
          OCTET_ASSIGN_OR_RETURN(auto streams, sched.SubmitN(p, 3));
          for (auto& stream : streams) {
            std::vector<int32_t> got;
            RequestUpdate u;
            for (const Deadline d = Deadline::AfterMs(60'000); !d.expired();) {
              if (!stream->Next(Deadline::AfterMs(1000), &u)) continue;
              got.insert(got.end(), u.ids.begin(), u.ids.end());
              if (u.done) break;
            }
            ids.push_back(got);
          }
          metrics = sched.Metrics();
          sched.Stop(CancelledError("the test is done"));
          return Status::Ok();
        });
    QVERIFY2(s.ok(), s.ToString().c_str());
    QCOMPARE(bad_copy.code(), StatusCode::kInvalidArgument);
    QVERIFY(!original.empty());
    QVERIFY(copied == original);  // the same cache, the same step: bit for bit
    if (mtp) {
      QCOMPARE(drafts.size(), size_t(2));
      QCOMPARE(drafts[0].size(), size_t(3));
      QCOMPARE(drafts[1], drafts[0]);
      // Each step's rows, the original's then the copy's: equal, chained ones too.
      const size_t V = draft_logits.size() / 6;
      QVERIFY(V > 0 && draft_logits.size() == 6 * V);
      for (size_t step = 0; step < 3; ++step) {
        const auto row = draft_logits.begin() + static_cast<std::ptrdiff_t>(2 * step * V);
        QVERIFY(std::equal(row, row + static_cast<std::ptrdiff_t>(V),
                           row + static_cast<std::ptrdiff_t>(V)));
      }
    }
    QCOMPARE(ids.size(), size_t(3));
    for (const auto& got : ids) QCOMPARE(got, generated);
    QCOMPARE(metrics.prompt_tokens_total, uint64_t(prompt.size()));  // one prefill
  }

  // A degree the model cannot take fails on every rank with the reason.
  void groupRefusesAnInvalidDegree() {
    const std::string dir = RandomModel("qwen3-6h");
    auto group = RunGroup(dir, {1, 2, 3}, 2, 4, collectives::TransportKind::kShm,
                          collectives::AlgorithmKind::kAuto);
    QVERIFY(!group.ok());
    QVERIFY2(
        group.status().message().find("6 query heads are not divisible by 4") != std::string::npos,
        group.status().ToString().c_str());
  }

  // NVFP4 experts of 32 columns cannot split four ways into 16-column blocks:
  // every rank refuses with the reason.
  void groupRefusesNvfp4ExpertSlices() {
    OCTET_REQUIRE_FIXTURES();
    const std::string moe = test::FixturesDir() + "/glm4-moe-tiny-nvfp4";
    auto g4 = RunGroup(moe, FixturePrompt(moe), 2, 4, collectives::TransportKind::kShm,
                       collectives::AlgorithmKind::kAuto);
    QVERIFY(!g4.ok());
    QVERIFY2(g4.status().message().find("NVFP4 expert down_proj slices of 8 columns") !=
                 std::string::npos,
             g4.status().ToString().c_str());
  }
};

QTEST_GUILESS_MAIN(TestTensorParallel)
#include "test_tensor_parallel.moc"
