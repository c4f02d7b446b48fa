// The engine on the CUDA backend against the reference fixtures
// (../shared/fixtures, made by an independent PyTorch implementation), as
// tests/unit/engine/test_engine_fixtures checks the CPU backends: every
// model's logits within the README's tolerance (1e-3 for F32 weights, 2e-3
// for BF16 and NVFP4) and its greedy ids exactly, as one full-sequence pass
// (prefill: the cuBLAS matmuls and the prefill attention) and as prefill +
// token-by-token decode through the KV cache (the GEMV kernels and decode
// attention), with f32 and f16 KV caches.
//
// Without a usable CUDA device the program prints one line
// "no usable CUDA device: <why>" and exits 77 (skipped); without the fixtures
// it skips the way the other fixture tests do.
#include <QtTest>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cuda_test_main.h"
#include "fixture_decode.h"
#include "fixture_reference.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

using Reference = test::FixtureReference;
Reference LoadReference(const std::string& dir) { return test::LoadFixtureReference(dir); }

// The largest difference over the reference's first n_rows rows.
double MaxDiff(const float* got, const Reference& ref, int64_t n_rows) {
  double m = 0;
  for (int64_t r = 0; r < n_rows; ++r)
    m = std::max(m, test::FixtureRowDiff(got + r * ref.V, r, ref));
  return m;
}

// First index of the largest logit (the logits are host memory).
int32_t HostArgmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// An environment variable set (or, with null, unset) for a scope: the CUDA
// backend reads its switches when it is made.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

const char* kModels[] = {"llama3-tiny",      "qwen2-tiny",          "qwen3-tiny",
                         "qwen3-tiny-nvfp4", "llama3-tiny-sharded", "qwen3-moe-tiny",
                         "glm4-moe-tiny",    "glm4-moe-tiny-nvfp4", "minicpm-tiny"};

}  // namespace

class TestCudaEngine : public QObject {
  Q_OBJECT

  std::unique_ptr<Model> Load(const std::string& dir) {
    LoadOptions o;
    o.backend = "cuda";
    auto m = Model::Load(dir, o);
    if (!m.ok()) {
      QTest::qFail(m.status().ToString().c_str(), __FILE__, __LINE__);
      return nullptr;
    }
    return std::move(*m);
  }

 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  void fullSequence_data() {
    QTest::addColumn<QString>("model");
    for (const char* m : kModels) QTest::newRow(m) << QString(m);
  }
  void fullSequence() {
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    auto m = Load(dir);
    QVERIFY(m);
    QCOMPARE(m->backend().name(), std::string_view("cuda"));
    KvCache cache = *m->NewKvCache(1, ref.T);
    SequenceChunk ch;
    ch.tokens = ref.prompt;
    ch.tokens.insert(ch.tokens.end(), ref.generated.begin(), ref.generated.end() - 1);
    ch.all_logits = true;
    ForwardOutput out;
    Status s = m->Forward({ch}, cache, &out);
    QVERIFY2(s.ok(), s.ToString().c_str());
    QCOMPARE(int64_t(out.logits.size()), ref.T * ref.V);
    const double d = MaxDiff(out.logits.data(), ref, ref.T);
    QVERIFY2(d <= ref.atol, ("max |logits - ref| = " + std::to_string(d)).c_str());
    for (size_t j = 0; j < ref.generated.size(); ++j) {
      const int64_t row = ref.prompt.size() - 1 + j;
      QCOMPARE(HostArgmax(out.Row(row), ref.V), ref.generated[j]);
    }
  }

  void prefillThenDecode_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("kv");
    for (const char* m : kModels) {
      QTest::newRow((std::string(m) + "/f32").c_str()) << QString(m) << QString("f32");
      QTest::newRow((std::string(m) + "/f16").c_str()) << QString(m) << QString("f16");
    }
  }
  void prefillThenDecode() {
    QFETCH(QString, model);
    QFETCH(QString, kv);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    LoadOptions o;
    o.backend = "cuda";
    auto dtype = kernels::ParseKvDtype(kv.toStdString());
    QVERIFY(dtype.ok());
    auto loaded = Model::Load(dir, o);
    QVERIFY2(loaded.ok(), loaded.status().ToString().c_str());
    Model& m = **loaded;
    // Prefill the prompt, then one token at a time through the cache, greedy.
    KvCache cache = *m.NewKvCache(1, ref.T + 1, *dtype);
    SequenceChunk ch;
    ch.tokens = ref.prompt;
    ForwardOutput out;
    Status s = m.Forward({ch}, cache, &out);
    QVERIFY2(s.ok(), s.ToString().c_str());
    std::vector<int32_t> ids;
    // The f16 cache moves the logits by up to ~6e-3 on these models
    // (backend.h, KvDtype): ids are compared exactly, logits only for f32.
    const double atol = *dtype == kernels::KvDtype::kF32 ? ref.atol : 1e-2;
    for (size_t j = 0; j < ref.generated.size(); ++j) {
      const int64_t row = ref.prompt.size() - 1 + j;
      const float* logits = out.Last(0);
      const double d = test::FixtureRowDiff(logits, row, ref);
      QVERIFY2(
          d <= atol,
          ("row " + std::to_string(row) + ": max |logits - ref| = " + std::to_string(d)).c_str());
      ids.push_back(HostArgmax(logits, ref.V));
      if (j + 1 == ref.generated.size()) break;
      SequenceChunk next;
      next.start_pos = cache.length(0);
      next.tokens = {ids.back()};
      s = m.Forward({next}, cache, &out);
      QVERIFY2(s.ok(), s.ToString().c_str());
    }
    QCOMPARE(ids, ref.generated);
  }

  // The mixture-of-experts models at batched decode (three sequences, the
  // first the reference's prompt fed its generated ids, the others shorter
  // prefixes): the backend's grouped expert ops (its default at these steps)
  // and a matmul call per expert give the same logits bit for bit, and the
  // first sequence's are the reference's.
  void groupedExpertsInBatchedDecode_data() {
    QTest::addColumn<QString>("model");
    for (const char* m : test::kMoeFixtures) QTest::newRow(m) << QString(m);
  }
  void groupedExpertsInBatchedDecode() {
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    QVERIFY(ref.prompt.size() >= 3);
    std::unique_ptr<Model> m;
    {
      ScopedEnv host("OCTET_CUDA_MOE_ROUTING", nullptr);  // the host routes (the default)
      m = Load(dir);
    }
    QVERIFY(m);
    QVERIFY(m->backend().grouped_experts_max_tokens() >= 3);
    QVERIFY(!m->routes_experts_on_device());
    const auto by_default = test::BatchedFixtureDecode(*m, ref, std::nullopt);
    const auto per_expert = test::BatchedFixtureDecode(*m, ref, false);
    QCOMPARE(by_default.size(), ref.generated.size() - 1);
    QVERIFY(by_default == per_expert);
    for (size_t j = 0; j < by_default.size(); ++j) {
      const int64_t row = static_cast<int64_t>(ref.prompt.size() - 1 + j);
      QVERIFY2(test::FixtureRowDiff(by_default[j].data(), row, ref) <= ref.atol,
               ("step " + std::to_string(j)).c_str());
    }
  }

  // The same with the routing on the device (OCTET_CUDA_MOE_ROUTING=device:
  // MoeDecode, the routing kernel running the engine's MoeRouteToken): the
  // reference's logits for the first sequence at every step, and every
  // sequence's within the same tolerance of the host-routed per-expert
  // calls (the routers' exponentials are the host's and the device's expf,
  // so the weights may differ in their last bits).
  void deviceRoutedExperts_data() { groupedExpertsInBatchedDecode_data(); }
  void deviceRoutedExperts() {
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    std::unique_ptr<Model> m;
    {
      ScopedEnv device("OCTET_CUDA_MOE_ROUTING", "device");
      m = Load(dir);
    }
    QVERIFY(m);
    QVERIFY(m->routes_experts_on_device());
    const auto on_device = test::BatchedFixtureDecode(*m, ref, std::nullopt);
    const auto on_host = test::BatchedFixtureDecode(*m, ref, false);
    QCOMPARE(on_device.size(), ref.generated.size() - 1);
    for (size_t j = 0; j < on_device.size(); ++j) {
      const int64_t row = static_cast<int64_t>(ref.prompt.size() - 1 + j);
      QVERIFY2(test::FixtureRowDiff(on_device[j].data(), row, ref) <= ref.atol,
               ("step " + std::to_string(j) + " against the reference").c_str());
      double d = 0;  // over every sequence's row; NaN anywhere fails
      for (size_t i = 0; i < on_device[j].size(); ++i) {
        const double diff = std::fabs(double(on_device[j][i]) - on_host[j][i]);
        d = std::isnan(diff) ? INFINITY : std::max(d, diff);
        if (std::isinf(d)) break;
      }
      QVERIFY2(d <= ref.atol,
               ("step " + std::to_string(j) + ": device against host routing " + std::to_string(d))
                   .c_str());
    }
  }

  // Decode steps as CUDA graphs, in both modes of OCTET_CUDA_GRAPHS: "on"
  // (a step recorded once, its recording run again for the steps after it:
  // the kernels must read each step's tokens, positions and KV lengths from
  // device memory, or the logits drift from the second step on) and
  // "update" (every step recorded). The mixture-of-experts models with their
  // routing on the device, which a graph can hold. Three sequences decoding
  // together, then one (another batch size, so another recording), give the
  // same logits bit for bit as the same model run op by op, and the
  // reference's where it has them. llama3-tiny's F32 weights go to cuBLAS,
  // which is not recorded: its steps run op by op, with the same results.
  void graphsInDecode_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("mode");
    for (const char* m : kModels) {
      for (const char* mode : {"on", "update"}) {
        QTest::newRow((std::string(m) + "/" + mode).c_str()) << QString(m) << QString(mode);
      }
    }
  }
  void graphsInDecode() {
    QFETCH(QString, model);
    QFETCH(QString, mode);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    std::unique_ptr<Model> op_by_op, graphs;
    {
      ScopedEnv routing("OCTET_CUDA_MOE_ROUTING", "device");
      {
        ScopedEnv off("OCTET_CUDA_GRAPHS", nullptr);
        op_by_op = Load(dir);
      }
      ScopedEnv on("OCTET_CUDA_GRAPHS", mode.toStdString().c_str());
      graphs = Load(dir);
    }
    QVERIFY(op_by_op && graphs);
    const auto want = test::BatchedFixtureDecode(*op_by_op, ref, std::nullopt);
    const auto got = test::BatchedFixtureDecode(*graphs, ref, std::nullopt);
    QCOMPARE(got.size(), ref.generated.size() - 1);
    QVERIFY2(got == want, "batched decode: graphs against op by op");
    for (size_t j = 0; j < got.size(); ++j) {
      const int64_t row = static_cast<int64_t>(ref.prompt.size() - 1 + j);
      QVERIFY2(test::FixtureRowDiff(got[j].data(), row, ref) <= ref.atol,
               ("batched step " + std::to_string(j) + " against the reference").c_str());
    }
    // One sequence: the prompt, then the reference's ids one at a time.
    const auto want1 = test::SingleFixtureDecode(*op_by_op, ref);
    const auto got1 = test::SingleFixtureDecode(*graphs, ref);
    QVERIFY2(got1 == want1, "single-sequence decode: graphs against op by op");
    for (size_t j = 0; j < got1.size(); ++j) {
      QCOMPARE(HostArgmax(got1[j].data(), ref.V), ref.generated[j]);
    }
    const auto none = op_by_op->backend().recording_counts();
    QCOMPARE(none.recorded + none.replayed + none.aborted, int64_t{0});
    if (model == "llama3-tiny") return;
    // Every decode step but the first of each batch size (its scratch grows
    // while it is recorded) ran as a graph; with "on", most of them as the
    // step's recording run again.
    const auto n = graphs->backend().recording_counts();
    const int64_t decode_steps = static_cast<int64_t>(got.size() - 1 + got1.size() - 1);
    const std::string counts = std::to_string(n.recorded) + " recorded, " +
                               std::to_string(n.replayed) + " run again, " +
                               std::to_string(n.aborted) + " aborted, of " +
                               std::to_string(decode_steps) + " decode steps";
    QVERIFY2(n.recorded + n.replayed >= decode_steps - 2, counts.c_str());
    if (mode == "on") {
      QVERIFY2(n.replayed >= decode_steps - 6, counts.c_str());
    } else {
      QVERIFY2(n.replayed == 0, counts.c_str());
    }
  }

  // Generate() end to end: the sampler reads host logits with a CPU backend.
  void generateGreedy() {
    const std::string dir = test::FixturesDir() + "/qwen3-tiny";
    if (!PathExists(dir)) QSKIP("fixture not present");
    Reference ref = LoadReference(dir);
    auto m = Load(dir);
    QVERIFY(m);
    GenerateOptions o;
    o.max_tokens = static_cast<int64_t>(ref.generated.size());
    o.stop_at_eos = false;
    auto r = Generate(*m, ref.prompt, o);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->ids, ref.generated);
  }
};

int main(int argc, char** argv) {
  if (!octet::test::CudaDeviceOrSkip()) return 77;
  TestCudaEngine t;
  return octet::test::ProgramVerdict(QTest::qExec(&t, argc, argv));
}

#include "test_cuda_engine.moc"
