// The memory planner and the model catalog: every catalog entry reproduces
// the figures it claims (parameters, checkpoint size); the verdicts the product
// promises (GLM 5.3 753B NVFP4 does not fit 4 x 128 GB Sparks and fits 8;
// Llama-3.3-70B BF16 needs two; Qwen3.8-27B NVFP4 fits one); invalid TP
// degrees come with their reason; KV arithmetic by hand; a model folder's
// bytes are exactly its safetensors tensors'.
#include <QtTest>
#include <cmath>
#include <nlohmann/json.hpp>

#include "octet/base/file_util.h"
#include "octet/engine/memory_plan.h"
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
      // A quarter of ~470 GB of weights on each node.
      QVERIFY(std::fabs(n.weights_bytes / 1e9 - 117.5) < 1.0);
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
      if (d.valid) valid.push_back(d.tp);
      else QVERIFY2(!d.reason.empty(), std::to_string(d.tp).c_str());
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
