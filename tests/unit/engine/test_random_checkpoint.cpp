// Random-weight checkpoints (random_checkpoint.h) of a mixture of experts: a
// Qwen3-MoE folder with NVFP4 experts the way ModelOpt exports one (BF16
// attention and routers listed in exclude_modules) loads, holds the formats it
// says, counts only the routed experts in its bytes per token, and computes
// what the same weights in BF16 compute, within NVFP4's rounding.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/model.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::engine;

namespace {

RandomModelShape TinyMoe() {
  RandomModelShape s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.vocab_size = 320;
  s.hidden_size = 64;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.tie_word_embeddings = false;
  s.num_experts = 8;
  s.experts_per_token = 2;
  s.moe_intermediate_size = 32;
  return s;
}

// Logits of the last token of a short prompt.
std::vector<float> LastLogits(Model& m) {
  KvCache cache = *m.NewKvCache(1, 16);
  std::vector<SequenceChunk> batch(1);
  batch[0].tokens = {3, 141, 59, 26, 5};
  ForwardOutput out;
  if (!m.Forward(batch, cache, &out).ok()) return {};
  return std::vector<float>(out.Last(0), out.Last(0) + out.vocab);
}

}  // namespace

class TestRandomCheckpoint : public QObject {
  Q_OBJECT
 private slots:
  void moeWithNvfp4ExpertsLoadsAsModelOptWritesIt() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/moe";
    RandomModelShape s = TinyMoe();
    s.nvfp4_experts = true;
    QVERIFY(WriteRandomCheckpoint(s, dir).ok());

    auto q = ReadFileToString(dir + "/hf_quant_config.json");
    QVERIFY(q.ok());
    const auto exclude = nlohmann::json::parse(*q)["quantization"]["exclude_modules"];
    const nlohmann::json expected = {"lm_head", "model.layers.0.self_attn*",
                                     "model.layers.0.mlp.gate", "model.layers.1.self_attn*",
                                     "model.layers.1.mlp.gate"};
    QCOMPARE(exclude.dump(), expected.dump());

    auto m = Model::Load(dir, {});
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    const ModelConfig& c = (*m)->config();
    QCOMPARE(c.moe.num_experts, int64_t{8});
    QCOMPARE(c.moe.experts_per_token, int64_t{2});
    QVERIFY(c.moe.norm_topk_prob);
    for (int64_t l = 0; l < 2; ++l) {
      const LayerWeights& L = (*m)->layer(l);
      QVERIFY(L.is_moe());
      QCOMPARE(L.q.weight.format, kernels::WeightFormat::kBF16);
      QCOMPARE(L.o.weight.format, kernels::WeightFormat::kBF16);
      QCOMPARE(L.moe.router.weight.format, kernels::WeightFormat::kBF16);
      QCOMPARE(L.moe.experts.size(), size_t{8});
      for (const GatedMlp& g : L.moe.experts) {
        QCOMPARE(g.gate.weight.format, kernels::WeightFormat::kNvfp4);
        QCOMPARE(g.down.weight.format, kernels::WeightFormat::kNvfp4);
        QCOMPARE(g.down.weight.rows, int64_t{64});
        QCOMPARE(g.down.weight.cols, int64_t{32});
      }
    }
    // Bytes per token, counted here from the shapes: BF16 attention (q, k, v,
    // o), norms and router, 2 of the 8 experts (NVFP4: half a byte per weight
    // and one scale byte per 16), final norm and the BF16 lm_head.
    const int64_t H = 64, hd = 16, F = 32;
    const int64_t attention = (4 * hd * H + 2 * (2 * hd * H) + H * 4 * hd) * 2;
    const int64_t norms = (2 * H + 2 * hd) * 4;
    const int64_t router = 8 * H * 2;
    const int64_t expert = 3 * (H * F / 2 + H * F / 16);
    const int64_t layer = attention + norms + router + 2 * expert;
    QCOMPARE((*m)->WeightBytesPerToken(), 2 * layer + H * 4 + 320 * H * 2);
  }

  // The same seed writes the same random weights; NVFP4 experts round them to
  // 4 bits with a scale per 16, so the logits stay close to the BF16 model's.
  void nvfp4ExpertsComputeWhatTheirBf16WeightsDo() {
    QTemporaryDir tmp;
    RandomModelShape s = TinyMoe();
    const std::string bf16 = tmp.path().toStdString() + "/bf16";
    const std::string fp4 = tmp.path().toStdString() + "/fp4";
    QVERIFY(WriteRandomCheckpoint(s, bf16).ok());
    s.nvfp4_experts = true;
    QVERIFY(WriteRandomCheckpoint(s, fp4).ok());
    auto a = Model::Load(bf16, {});
    auto b = Model::Load(fp4, {});
    QVERIFY(a.ok() && b.ok());
    QVERIFY(!PathExists(bf16 + "/hf_quant_config.json"));
    const std::vector<float> la = LastLogits(**a), lb = LastLogits(**b);
    QCOMPARE(la.size(), size_t{320});
    QCOMPARE(lb.size(), size_t{320});
    double diff = 0, norm = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      diff += (la[i] - lb[i]) * double(la[i] - lb[i]);
      norm += la[i] * double(la[i]);
    }
    QVERIFY(norm > 0);
    // NVFP4 of uniform weights: ~9% RMS error per weight; through two layers
    // the logits move by a fraction of that. Unrelated weights would be ~140%.
    QVERIFY2(std::sqrt(diff / norm) < 0.15, std::to_string(std::sqrt(diff / norm)).c_str());
  }

  // GLM-4.5's architecture with an MTP layer (bench_mtp's checkpoint, in
  // small): the layer after the decoder layers loads only when asked for,
  // with the shared expert, the score-correction bias, QK norms and half-rotary
  // heads the config says, and drafts; its eh_proj and shared experts stay
  // BF16 when only the routed experts are NVFP4.
  void glmMoeWithAnMtpLayerLoadsAndDrafts() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/glm";
    RandomModelShape s = TinyMoe();
    s.architecture = "Glm4MoeForCausalLM";
    s.head_dim = 32;
    s.nvfp4_experts = true;
    s.mtp_layers = 1;
    QVERIFY(WriteRandomCheckpoint(s, dir).ok());
    LoadOptions lo;
    lo.load_mtp = true;
    auto m = Model::Load(dir, lo);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    const ModelConfig& c = (*m)->config();
    QCOMPARE(c.num_layers, int64_t{2});
    QCOMPARE(c.num_mtp_layers, int64_t{1});
    QCOMPARE((*m)->mtp_layers(), int64_t{1});
    QVERIFY(c.qk_norm);
    QCOMPARE(c.rotary_dim, int64_t{16});
    for (int64_t l = 0; l < 2; ++l) {
      const LayerWeights& L = (*m)->layer(l);
      QVERIFY(L.is_moe());
      QCOMPARE(L.moe.score_bias, std::vector<float>(8, 0.0f));
      QCOMPARE(L.moe.shared.gate.weight.format, kernels::WeightFormat::kBF16);
      QCOMPARE(L.moe.shared.down.weight.cols, int64_t{32});
      QCOMPARE(L.moe.experts[0].gate.weight.format, kernels::WeightFormat::kNvfp4);
    }
    KvCache cache = *(*m)->NewKvCache(1, 16);
    std::vector<SequenceChunk> batch(1);
    batch[0].tokens = {3, 141, 59, 26, 5};
    ForwardOutput out;
    QVERIFY((*m)->Forward(batch, cache, &out).ok());
    QVERIFY((*m)->ResetMtpCache(1, 24, kernels::KvDtype::kF32).ok());
    std::vector<int32_t> drafts;
    Status d = (*m)->MtpDraft(0, 0, 0, {141, 59, 26, 5, 7}, 3, &drafts);
    QVERIFY2(d.ok(), d.ToString().c_str());
    QCOMPARE(drafts.size(), size_t{3});
    auto plain = Model::Load(dir, {});
    QVERIFY(plain.ok());
    QCOMPARE((*plain)->mtp_layers(), int64_t{0});
    // Only GLM-4.5's layout has MTP layers here.
    s.architecture = "Qwen3MoeForCausalLM";
    QVERIFY(!WriteRandomCheckpoint(s, tmp.path().toStdString() + "/qwen").ok());
  }

  void aMoeShapeWithoutExpertsIsRefused() {
    QTemporaryDir tmp;
    RandomModelShape s = TinyMoe();
    s.experts_per_token = 9;
    QVERIFY(!WriteRandomCheckpoint(s, tmp.path().toStdString() + "/x").ok());
    s = TinyMoe();
    s.num_experts = 0;
    QVERIFY(!WriteRandomCheckpoint(s, tmp.path().toStdString() + "/y").ok());
  }

  void qwen3_30bA3bShape() {
    const RandomModelShape s = RandomModelShape::Qwen3_30B_A3B(3);
    QCOMPARE(s.num_layers, int64_t{3});
    QCOMPARE(s.hidden_size, int64_t{2048});
    QCOMPARE(s.num_experts, int64_t{128});
    QCOMPARE(s.experts_per_token, int64_t{8});
    QCOMPARE(s.moe_intermediate_size, int64_t{768});
    QCOMPARE(s.num_heads, int64_t{32});
    QCOMPARE(s.num_kv_heads, int64_t{4});
    QCOMPARE(s.vocab_size, int64_t{151936});
    QVERIFY(s.nvfp4_experts && !s.nvfp4 && !s.tie_word_embeddings);
  }
};

QTEST_APPLESS_MAIN(TestRandomCheckpoint)
#include "test_random_checkpoint.moc"
