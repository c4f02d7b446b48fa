// The memory planner and the model catalog: every catalog entry reproduces
// the figures it claims (parameters, checkpoint size); the verdicts the product
// promises (GLM 5.3 753B NVFP4 does not fit 4 x 128 GB Sparks and fits 8;
// Llama-3.3-70B BF16 needs two; Qwen3.8-27B NVFP4 fits one); invalid TP
// degrees come with their reason; KV arithmetic by hand; a model folder's
// bytes are exactly its safetensors tensors'. Mixture-of-experts models: memory
// holds every expert, a decode step reads the active ones — by hand from the
// config for the GLM catalog entry and the MoE fixtures, and against what the
// engine itself counts (Model::WeightBytesPerToken) for the fixtures; MTP
// layers count toward memory only when loaded.
#include <dirent.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstdio>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/memory_plan.h"
#include "octet/engine/model.h"
#include "octet/engine/model_config.h"
#include "octet/engine/safetensors.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::string Catalog() { return test::SourceDir() + "/resources/models"; }

ModelFootprint Entry(const std::string& name) {
  auto m = LoadCatalogModel(Catalog(), name);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  return *m;
}

MemoryPlan Plan(const ModelFootprint& m, int nodes) {
  PlanRequest r;
  r.nodes = nodes;
  auto p = PlanMemory(m, r);
  if (!p.ok()) qFatal("%s", p.status().ToString().c_str());
  return *p;
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

nlohmann::json ReadJson(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  return nlohmann::json::parse(*text);
}

// Tensor data bytes of every *.safetensors file in `dir`, from the files
// themselves: file size - 8 - header length (the header's first 8 bytes).
int64_t SafetensorsDataBytes(const std::string& dir) {
  int64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) qFatal("cannot list %s", dir.c_str());
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 12 || name.compare(name.size() - 12, 12, ".safetensors") != 0) continue;
    std::FILE* f = std::fopen((dir + "/" + name).c_str(), "rb");
    if (!f) qFatal("cannot open %s", name.c_str());
    unsigned char len[8];
    if (std::fread(len, 1, 8, f) != 8) qFatal("short %s", name.c_str());
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | len[i];
    std::fseek(f, 0, SEEK_END);
    total += std::ftell(f) - 8 - int64_t(header);
    std::fclose(f);
  }
  ::closedir(d);
  return total;
}

// The weight bytes one decode step reads, by hand from a glm4_moe /
// qwen3_moe config.json (or a catalog entry in its key names): matrices at
// their stored size (BF16 2 bytes; NVFP4 half a byte plus one e4m3 scale per
// 16), norms and biases as the f32 the engine holds, top-k routed experts,
// no embedding row, no MTP layer. `routed_nvfp4`: the routed experts are NVFP4.
struct ActiveByHand {
  int64_t bytes = 0;       // what the planner counts
  int64_t score_bias = 0;  // of which the GLM routers' F32 score-correction bias
  int64_t total_routed_params = 0;
};
ActiveByHand ActiveBytesByHand(const nlohmann::json& c, bool routed_nvfp4) {
  const bool glm = c.value("model_type", "") == "glm4_moe";
  const int64_t V = c["vocab_size"], H = c["hidden_size"], L = c["num_hidden_layers"];
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  const int64_t hd = c["head_dim"], inter = c["intermediate_size"];
  const int64_t E = glm ? c["n_routed_experts"] : c["num_experts"];
  const int64_t k = c["num_experts_per_tok"], F = c["moe_intermediate_size"];
  const int64_t shared = glm ? c.value("n_shared_experts", 1) * F : 0;
  const bool bias = glm && c.value("attention_bias", false);
  const bool qk_norm = glm ? c.value("use_qk_norm", false) : true;
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < L; ++i) {
    bool moe = false;
    if (glm) {
      moe = i >= c.value("first_k_dense_replace", 1);
    } else {
      const auto only = c.value("mlp_only_layers", std::vector<int64_t>{});
      moe = std::find(only.begin(), only.end(), i) == only.end() &&
            (i + 1) % c.value("decoder_sparse_step", 1) == 0;
    }
    moe_layers += moe ? 1 : 0;
  }
  const int64_t bf16 = 2, f32 = 4;
  auto nvfp4 = [](int64_t rows, int64_t cols) { return rows * cols / 2 + rows * cols / 16; };
  ActiveByHand r;
  int64_t per_layer = (heads * hd * H + 2 * kv * hd * H + H * heads * hd) * bf16  // q, k, v, o
                      + 2 * H * f32;                                              // two norms
  if (bias) per_layer += (heads * hd + 2 * kv * hd) * f32;
  if (qk_norm) per_layer += 2 * hd * f32;
  r.bytes = L * per_layer;
  r.bytes += (L - moe_layers) * 3 * inter * H * bf16;  // dense MLPs
  const int64_t expert = routed_nvfp4 ? 3 * nvfp4(F, H) : 3 * F * H * bf16;
  r.bytes += moe_layers * (E * H * bf16             // router
                           + 3 * shared * H * bf16  // shared expert
                           + k * expert);           // top-k routed experts
  if (glm) r.score_bias = moe_layers * E * f32;
  r.bytes += r.score_bias;
  r.bytes += H * f32 + V * H * bf16;  // final norm, lm_head (untied in these models)
  r.total_routed_params = moe_layers * E * 3 * F * H;
  return r;
}

}  // namespace

class TestMemoryPlan : public QObject {
  Q_OBJECT
 private slots:
  void catalogReproducesItsPublishedFigures() {
    auto all = LoadCatalog(Catalog());
    QVERIFY2(all.ok(), all.status().ToString().c_str());
    QVERIFY(all->size() >= 7);
    for (const ModelFootprint& m : *all) {
      auto text = ReadFileToString(m.source);
      QVERIFY(text.ok());
      const auto j = nlohmann::json::parse(*text);
      const auto pub = j.value("published", nlohmann::json::object());
      if (pub.contains("params_b")) {
        const double want = pub["params_b"].get<double>();
        const double got = double(m.params) / 1e9;
        // Small models round their names (Qwen3-0.6B is 0.75B with embeddings).
        const double tol = want < 1.0 ? 0.2 : 0.02 * want;
        QVERIFY2(std::fabs(got - want) <= tol,
                 (m.id + ": " + std::to_string(got) + "B vs " + std::to_string(want)).c_str());
      }
      if (pub.contains("checkpoint_gb")) {
        const double want = pub["checkpoint_gb"].get<double>();
        const double got = double(m.TotalWeightBytes()) / 1e9;
        QVERIFY2(std::fabs(got - want) <= 0.01 * want,
                 (m.id + ": " + std::to_string(got) + " GB vs " + std::to_string(want)).c_str());
      }
      if (m.fictional) QVERIFY2(!m.note.empty(), m.id.c_str());
      // A released model names its Hub repo; a fictional one has none.
      QVERIFY2(m.fictional == m.hub_repo.empty(), m.id.c_str());
    }
    // A fictional entry that names a repo, or a malformed repo id, is refused.
    QTemporaryDir dir;
    for (const char* bad :
         {R"({"name":"x","fictional":true,"hub_repo":"a/b","model_type":"llama"})",
          R"({"name":"x","hub_repo":"not a repo","model_type":"llama"})"}) {
      const std::string path = dir.path().toStdString() + "/x.json";
      QVERIFY(WriteFileAtomic(path, bad).ok());
      auto r = LoadCatalogFile(path);
      QVERIFY2(!r.ok() && r.status().message().find("hub_repo") != std::string::npos, bad);
    }
  }

  void glmNeedsEightSparks() {
    const ModelFootprint glm = Entry("glm-5.3-753b-nvfp4");
    const MemoryPlan four = Plan(glm, 4);
    QVERIFY(four.tp_valid);
    QVERIFY(!four.fits);
    QCOMPARE(four.per_node.size(), size_t(4));
    for (const auto& n : four.per_node) {
      QVERIFY(!n.fits);
      // A quarter of ~470 GB of weights on each node, less the MTP layers
      // (not loaded without MTP speculation).
      const double gb = (glm.TotalWeightBytes() - glm.MtpWeightBytes()) / 4 / 1e9;
      QVERIFY(gb > 110 && gb < 117.5);
      QVERIFY(std::fabs(n.weights_bytes / 1e9 - gb) < 1.0);
      QCOMPARE(n.total_bytes, n.weights_bytes + n.kv_cache_bytes + n.workspace_bytes +
                                  n.reserve_bytes + n.headroom_bytes);
    }
    QVERIFY2(four.verdict.find("does not fit 4 nodes") == 0, four.verdict.c_str());
    QVERIFY2(four.verdict.find("fits on 8 nodes") != std::string::npos, four.verdict.c_str());
    QCOMPARE(four.min_nodes, 8);
    const MemoryPlan eight = Plan(glm, 8);
    QVERIFY2(eight.fits, eight.verdict.c_str());
    QVERIFY(eight.verdict.find("fits 8 nodes") == 0);
    for (const auto& n : eight.per_node) QVERIFY(n.free_bytes > 0);
    // Degrees: 96 heads, 8 kv heads, 2048-wide experts.
    std::vector<int> valid;
    for (const auto& d : eight.degrees) {
      if (d.valid)
        valid.push_back(d.tp);
      else
        QVERIFY2(!d.reason.empty(), std::to_string(d.tp).c_str());
    }
    QCOMPARE(valid, (std::vector<int>{1, 2, 4, 8}));
    const MemoryPlan three = Plan(glm, 3);
    QVERIFY(!three.tp_valid && !three.fits);
    QVERIFY2(three.verdict.find("kv heads") != std::string::npos, three.verdict.c_str());
    QVERIFY2(three.verdict.find("valid degrees: 1, 2, 4, 8") != std::string::npos,
             three.verdict.c_str());
  }

  void otherVerdicts() {
    QVERIFY(!Plan(Entry("llama-3.3-70b"), 1).fits);
    QVERIFY(Plan(Entry("llama-3.3-70b"), 2).fits);
    QVERIFY(Plan(Entry("qwen3.8-27b-nvfp4"), 1).fits);
    QVERIFY(Plan(Entry("minicpm5-2b"), 1).fits);
    // A node far too small says so.
    PlanRequest r;
    r.nodes = 1;
    r.node_memory = int64_t(8) << 30;
    auto p = PlanMemory(Entry("llama-3.1-8b"), r);
    QVERIFY(p.ok() && !p->fits);
  }

  // Qwen3-0.6B: 28 layers x 2 x 8 kv heads x 128 x 2 bytes per token.
  void kvByHand() {
    PlanRequest r;
    r.nodes = 1;
    r.context = 8192;
    r.concurrency = 3;
    auto p = PlanMemory(Entry("qwen3-0.6b"), r);
    QVERIFY(p.ok());
    QCOMPARE(p->kv_bytes_per_token, int64_t(28 * 2 * 8 * 128 * 2));
    QCOMPARE(p->per_node[0].kv_cache_bytes, int64_t(28 * 2 * 8 * 128 * 2) * 8192 * 3);
    // TP 16 > 8 kv heads: each rank keeps one kv head (replicated).
    r.nodes = 16;
    r.max_tp = 16;
    p = PlanMemory(Entry("qwen3-0.6b"), r);
    QVERIFY(p.ok());
    QCOMPARE(p->per_node[0].kv_cache_bytes, int64_t(28 * 2 * 1 * 128 * 2) * 8192 * 3);
    QCOMPARE(p->per_node[0].reserve_bytes, DefaultReserve(r.node_memory));
    QCOMPARE(DefaultReserve(int64_t(128) << 30), int64_t(16) << 30);
  }

  void folderBytesAreTheTensors() {
    OCTET_REQUIRE_FIXTURES();
    for (const char* name : {"qwen3-tiny", "qwen3-tiny-nvfp4", "llama3-tiny-sharded"}) {
      const std::string dir = test::FixturesDir() + "/" + name;
      auto m = LoadFolderModel(dir);
      QVERIFY2(m.ok(), m.status().ToString().c_str());
      auto store = CheckpointStore::Open(dir);
      QVERIFY(store.ok());
      QCOMPARE(m->TotalWeightBytes(), (*store)->total_bytes());
      PlanRequest r;
      r.nodes = 1;
      auto one = PlanMemory(*m, r);
      QVERIFY(one.ok());
      QCOMPARE(one->per_node[0].weights_bytes, (*store)->total_bytes());
    }
    // TP 2 of the NVFP4 model: each rank holds about half (norms and scalars whole).
    auto m = LoadFolderModel(test::FixturesDir() + "/qwen3-tiny-nvfp4");
    QVERIFY(m.ok());
    PlanRequest r;
    r.nodes = 2;
    auto two = PlanMemory(*m, r);
    QVERIFY(two.ok());
    QVERIFY(two->tp_valid);
    const double total = double(m->TotalWeightBytes());
    for (const auto& n : two->per_node) {
      QVERIFY(n.weights_bytes > total / 2 && n.weights_bytes < total * 0.6);
    }
    QVERIFY(m->weight_format.find("NVFP4") != std::string::npos);
  }

  // The GLM 5.3 entry as the engine would load it (its own config parser),
  // and MiniCPM 5 with its scales.
  void catalogEntriesAreWhatTheEngineLoads() {
    const ModelFootprint glm = Entry("glm-5.3-753b-nvfp4");
    auto text = ReadFileToString(glm.source);
    QVERIFY(text.ok());
    auto c = ParseModelConfig(*text, glm.source);
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    QCOMPARE(int(c->arch), int(Architecture::kGlm4Moe));
    QCOMPARE(glm.architecture, std::string("Glm4MoeForCausalLM"));
    QCOMPARE(c->moe.num_experts, int64_t(208));
    QCOMPARE(c->moe.experts_per_token, int64_t(8));
    QCOMPARE(c->moe.expert_intermediate_size, int64_t(2048));
    QCOMPARE(c->moe.shared_intermediate_size, int64_t(2048));
    QCOMPARE(c->moe.n_group, int64_t(1));
    QCOMPARE(c->moe.topk_group, int64_t(1));
    QVERIFY(c->moe.score_correction_bias);
    QCOMPARE(c->num_mtp_layers, int64_t(3));
    QCOMPARE(c->rotary_dim, int64_t(64));  // partial_rotary_factor 0.5 of 128
    QCOMPARE(std::count(c->moe.moe_layer.begin(), c->moe.moe_layer.end(), true), 93);
    QVERIFY(!c->moe.moe_layer[2] && c->moe.moe_layer[3]);  // 3 dense layers first
    // The footprint says the same.
    QCOMPARE(glm.num_layers, int64_t(96));
    QCOMPARE(glm.num_mtp_layers, int64_t(3));
    QCOMPARE(glm.num_experts, int64_t(208));
    QCOMPARE(glm.experts_per_token, int64_t(8));
    QCOMPARE(glm.num_moe_layers, int64_t(93));
    QCOMPARE(glm.shared_intermediate_size, int64_t(2048));

    const ModelFootprint cpm = Entry("minicpm5-2b");
    text = ReadFileToString(cpm.source);
    QVERIFY(text.ok());
    c = ParseModelConfig(*text, cpm.source);
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    QCOMPARE(int(c->arch), int(Architecture::kMiniCpm));
    QCOMPARE(c->head_dim, int64_t(64));
    QCOMPARE(c->embedding_scale, 12.0f);
    QCOMPARE(c->residual_scale, float(1.4 / std::sqrt(40.0)));
    QCOMPARE(c->logit_scale, 1.0f / float(2048.0 / 256.0));
    QCOMPARE(cpm.num_experts, int64_t(0));
    QCOMPARE(cpm.ActiveBytesPerToken(), cpm.ActiveBytesPerToken(1, 0));

    // An entry the engine would not load is refused, naming what it supports.
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const std::string bad = tmp.path().toStdString() + "/bad.json";
    nlohmann::json j = ReadJson(glm.source);
    j["model_type"] = "glm_moe_dsa";
    j.erase("architecture");
    QVERIFY(WriteFileAtomic(bad, j.dump()).ok());
    auto refused = LoadCatalogFile(bad);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.status().message().find("glm4_moe") != std::string::npos,
             refused.status().ToString().c_str());
    j["model_type"] = "glm4_moe";
    j["architecture"] = "Qwen3MoeForCausalLM";  // disagrees with model_type
    QVERIFY(WriteFileAtomic(bad, j.dump()).ok());
    QVERIFY(!LoadCatalogFile(bad).ok());
  }

  // GLM 5.3: ~470 GB hold all 208 experts of 93 layers; a token reads 8 of
  // them plus the shared expert, attention, routers, dense layers and lm_head.
  void glmTotalVersusActive() {
    const ModelFootprint glm = Entry("glm-5.3-753b-nvfp4");
    const nlohmann::json j = ReadJson(glm.source);
    const ActiveByHand hand = ActiveBytesByHand(j, /*routed_nvfp4=*/true);
    QCOMPARE(glm.ActiveBytesPerToken(), hand.bytes);
    // Active parameters: all but the 200 routed experts not chosen per layer.
    QCOMPARE(glm.active_params, glm.params - hand.total_routed_params / 208 * (208 - 8));
    const double total_gb = glm.TotalWeightBytes() / 1e9;
    const double active_gb = glm.ActiveBytesPerToken() / 1e9;
    QVERIFY2(total_gb > 465 && total_gb < 475, std::to_string(total_gb).c_str());
    QVERIFY2(active_gb > 40 && active_gb < 80, std::to_string(active_gb).c_str());
    QVERIFY2(glm.active_params > 40e9 && glm.active_params < 60e9,
             std::to_string(glm.active_params).c_str());
    // The MTP layers: in the checkpoint, in memory only when loaded, never
    // read by a plain decode step.
    QVERIFY(glm.MtpWeightBytes() > 0);
    PlanRequest r;
    r.nodes = 8;
    auto plain = PlanMemory(glm, r);
    r.load_mtp = true;
    auto mtp = PlanMemory(glm, r);
    QVERIFY(plain.ok() && mtp.ok());
    QCOMPARE(plain->weight_bytes, glm.TotalWeightBytes() - glm.MtpWeightBytes());
    QCOMPARE(mtp->weight_bytes, glm.TotalWeightBytes());
    QVERIFY(mtp->per_node[0].weights_bytes > plain->per_node[0].weights_bytes);
    QCOMPARE(mtp->kv_bytes_per_token, int64_t(99 * 2 * 8 * 128 * 2));
    QCOMPARE(plain->kv_bytes_per_token, int64_t(96 * 2 * 8 * 128 * 2));
    QCOMPARE(plain->active_weight_bytes_per_token, hand.bytes);
    QCOMPARE(mtp->active_weight_bytes_per_token, hand.bytes);
    QVERIFY(mtp->fits && plain->fits);  // 8 Sparks with MTP3, as published
    // Each of 8 ranks reads an eighth, plus what every rank holds whole: the
    // routers (93 x 208 x 6144 BF16), norms and score-correction biases.
    const int64_t whole =
        93 * (208 * 6144 * 2 + 208 * 4) + 96 * (2 * 6144 + 2 * 128) * 4 + 6144 * 4;
    for (const auto& n : plain->per_node) {
      const double want = double(hand.bytes - whole) / 8 + double(whole);
      QVERIFY2(std::fabs(n.active_weight_bytes_per_token - want) < 1e-4 * want,
               (std::to_string(n.active_weight_bytes_per_token) + " vs " + std::to_string(want))
                   .c_str());
    }
    // The decode estimate: 273 GB/s over the busiest rank's weights and its
    // KV cache of one sequence at 8192 positions (one kv head per rank).
    const int64_t kv_read = int64_t(8192) * 96 * 2 * 1 * 128 * 2;
    int64_t busiest = 0;
    for (const auto& n : plain->per_node) {
      busiest = std::max(busiest, n.active_weight_bytes_per_token + kv_read);
    }
    QCOMPARE(plain->decode_tokens_per_s, 273e9 / double(busiest));
    // The published 31 tok/s (8 nodes, MTP3) is within reach of the roofline.
    QVERIFY2(plain->decode_tokens_per_s > 31 && plain->decode_tokens_per_s < 60,
             std::to_string(plain->decode_tokens_per_s).c_str());
  }

  // The MoE fixtures: total = the safetensors files' tensor bytes; active =
  // by hand from config.json and what the engine counts for the loaded model.
  void moeFoldersActiveVersusTotal() {
    OCTET_REQUIRE_FIXTURES();
    for (const char* name : {"qwen3-moe-tiny", "glm4-moe-tiny", "glm4-moe-tiny-nvfp4"}) {
      const std::string dir = test::FixturesDir() + "/" + name;
      auto m = LoadFolderModel(dir);
      QVERIFY2(m.ok(), m.status().ToString().c_str());
      const nlohmann::json c = ReadJson(dir + "/config.json");
      QCOMPARE(m->TotalWeightBytes(), SafetensorsDataBytes(dir));
      const bool nvfp4 = std::string(name).find("nvfp4") != std::string::npos;
      const ActiveByHand hand = ActiveBytesByHand(c, nvfp4);
      QCOMPARE(m->ActiveBytesPerToken(), hand.bytes);
      QVERIFY(m->ActiveBytesPerToken() < m->TotalWeightBytes());
      QCOMPARE(m->num_experts,
               int64_t(c.contains("n_routed_experts") ? c["n_routed_experts"] : c["num_experts"]));
      QCOMPARE(m->experts_per_token, int64_t(c["num_experts_per_tok"]));
      QCOMPARE(m->active_params, m->params - hand.total_routed_params / m->num_experts *
                                                 (m->num_experts - m->experts_per_token));

      // The engine counts the same bytes for the loaded model (the GLM
      // routers' F32 score-correction bias included: routing reads it every step).
      LoadOptions o;
      o.threads = 1;
      o.nvfp4_tiles = false;
      auto model = Model::Load(dir, o);
      QVERIFY2(model.ok(), model.status().ToString().c_str());
      QCOMPARE((*model)->WeightBytesPerToken(), m->ActiveBytesPerToken());

      // MTP layers (model.layers.{L}.*): stored, in memory only when loaded.
      const int64_t L = c["num_hidden_layers"];
      QCOMPARE(m->num_layers, L);
      QCOMPARE(m->num_mtp_layers, int64_t(c.value("num_nextn_predict_layers", 0)));
      auto store = CheckpointStore::Open(dir);
      QVERIFY(store.ok());
      int64_t mtp_bytes = 0;
      const std::string mtp_prefix = "model.layers." + std::to_string(L) + ".";
      for (const TensorInfo* t : (*store)->tensors()) {
        if (t->name.rfind(mtp_prefix, 0) == 0) mtp_bytes += t->size_bytes;
      }
      QCOMPARE(m->MtpWeightBytes(), mtp_bytes);
      QCOMPARE(mtp_bytes > 0, m->num_mtp_layers > 0);
      PlanRequest r;
      r.nodes = 1;
      auto plain = PlanMemory(*m, r);
      r.load_mtp = true;
      auto with_mtp = PlanMemory(*m, r);
      QVERIFY(plain.ok() && with_mtp.ok());
      QCOMPARE(plain->per_node[0].weights_bytes, m->TotalWeightBytes() - mtp_bytes);
      QCOMPARE(with_mtp->per_node[0].weights_bytes, m->TotalWeightBytes());
      QCOMPARE(plain->per_node[0].active_weight_bytes_per_token, hand.bytes);
      QVERIFY(plain->decode_tokens_per_s > 0);

      // TP 2: each rank reads its slice of every active expert — more than
      // half of the whole (routers, norms and kv heads are whole), far less
      // than all of it.
      r.nodes = 2;
      r.load_mtp = false;
      auto two = PlanMemory(*m, r);
      QVERIFY(two.ok() && two->tp_valid);
      for (const auto& n : two->per_node) {
        QVERIFY(n.active_weight_bytes_per_token >= hand.bytes / 2);
        QVERIFY(n.active_weight_bytes_per_token < hand.bytes * 0.75);
      }
    }
  }

  void badInputIsAnError() {
    QVERIFY(!LoadCatalogModel(Catalog(), "no-such-model").ok());
    QVERIFY(LoadCatalogModel(Catalog(), "no-such-model").status().message().find("qwen3-8b") !=
            std::string::npos);
    PlanRequest r;
    r.nodes = 0;
    QVERIFY(!PlanMemory(Entry("qwen3-8b"), r).ok());
    r.nodes = 1;
    r.kv_dtype = "int3";
    QVERIFY(!PlanMemory(Entry("qwen3-8b"), r).ok());
    QVERIFY(!TensorBytes("int3", 2, 2).ok());
    QCOMPARE(*TensorBytes("nvfp4", 4, 32), int64_t(4 * 32 / 2 + 4 * 32 / 16 + 8));
  }
};

QTEST_GUILESS_MAIN(TestMemoryPlan)
#include "test_memory_plan.moc"
