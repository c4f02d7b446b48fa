// The engine's recorded decode steps (Model::RecordedStep, the path CUDA
// graphs take) on a machine without a GPU: the fixture models on
// RecordingBackend (tests/support/recording_backend.h: the CPU backend behind
// the recording rules of a device), against the same CPU backend op by op.
// A recording that runs again for a later step reuses every argument it was
// recorded with, so a step key that misses something the ops depend on, or an
// op that takes a value of the step as an argument, shows as logits that
// differ from the op-by-op model's from the second step on; the logits must
// be equal bit for bit (the same kernels in the same order), and the
// reference's where the fixtures have them. The mixture-of-experts fixtures
// run twice: routed on the host (nothing recorded), and routed by the backend
// (PrepareExperts / MoeDecode, as CUDA's OCTET_CUDA_MOE_ROUTING=device),
// whose steps are recorded and run again like a dense model's.
#include <QtTest>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fixture_decode.h"
#include "fixture_reference.h"
#include "octet/base/file_util.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"
#include "octet_test.h"
#include "recording_backend.h"

using namespace octet;
using namespace octet::engine;

namespace {

const char* kModels[] = {"llama3-tiny",      "qwen2-tiny",          "qwen3-tiny",
                         "qwen3-tiny-nvfp4", "llama3-tiny-sharded", "qwen3-moe-tiny",
                         "glm4-moe-tiny",    "glm4-moe-tiny-nvfp4", "minicpm-tiny"};

bool IsMoe(const std::string& model) {
  for (const char* m : test::kMoeFixtures) {
    if (model == m) return true;
  }
  return false;
}

}  // namespace

class TestRecordedSteps : public QObject {
  Q_OBJECT

  std::unique_ptr<Model> Load(const std::string& dir, test::RecordingBackend** recorder,
                              bool route_experts = false) {
    LoadOptions o;
    o.backend = "auto";
    o.threads = 2;
    if (recorder) {
      o.make_backend = [recorder,
                        route_experts]() -> Result<std::unique_ptr<kernels::KernelBackend>> {
        OCTET_ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> inner,
                               kernels::CreateBackend("auto", {2}));
        auto b = std::make_unique<test::RecordingBackend>(
            std::move(inner), test::RecordingBackend::Options{route_experts});
        *recorder = b.get();
        return std::unique_ptr<kernels::KernelBackend>(std::move(b));
      };
    }
    auto m = Model::Load(dir, o);
    if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
    return std::move(*m);
  }

 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  // Three sequences decoding together, then one (another step key), on the
  // recording backend; with `aborts`, the run's first recordings end unrun,
  // as a device's do when its scratch grows, and the engine issues those
  // steps op by op; with `moves`, every so many runs of a recording find the
  // scratch moved since it was made, and the engine records the step anew in
  // its place. (Every fixture's prompt is over 8 tokens: its prefill is not
  // recorded.)
  void sameLogitsAsOpByOp_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("aborts");
    QTest::addColumn<int>("moves");
    QTest::addColumn<bool>("route_experts");
    for (const char* m : kModels) {
      for (bool route : {false, true}) {
        if (route && !IsMoe(m)) continue;
        const std::string row = std::string(m) + (route ? "/device-routing" : "");
        QTest::newRow(row.c_str()) << QString(m) << 0 << 0 << route;
        QTest::newRow((row + "/aborts").c_str()) << QString(m) << 2 << 0 << route;
        if (route || !IsMoe(m)) {
          QTest::newRow((row + "/scratch-moves").c_str()) << QString(m) << 0 << 3 << route;
        }
      }
    }
  }
  void sameLogitsAsOpByOp() {
    QFETCH(QString, model);
    QFETCH(int, aborts);
    QFETCH(int, moves);
    QFETCH(bool, route_experts);
    const std::string name = model.toStdString();
    const std::string dir = test::FixturesDir() + "/" + name;
    if (!PathExists(dir)) QSKIP("fixture not present");
    const test::FixtureReference ref = test::LoadFixtureReference(dir);
    test::RecordingBackend* recorder = nullptr;
    auto op_by_op = Load(dir, nullptr);
    auto recorded = Load(dir, &recorder, route_experts);
    QVERIFY(recorder);
    recorder->AbortNextRecordings(aborts);
    recorder->MoveScratchEveryNthRun(moves);

    const auto want = test::BatchedFixtureDecode(*op_by_op, ref, std::nullopt);
    const auto got = test::BatchedFixtureDecode(*recorded, ref, std::nullopt);
    QCOMPARE(got.size(), ref.generated.size() - 1);
    for (size_t j = 0; j < got.size(); ++j) {
      QVERIFY2(got[j] == want[j], ("batched step " + std::to_string(j)).c_str());
      const int64_t row = static_cast<int64_t>(ref.prompt.size() - 1 + j);
      QVERIFY2(test::FixtureRowDiff(got[j].data(), row, ref) <= ref.atol,
               ("batched step " + std::to_string(j) + " against the reference").c_str());
    }
    const auto want1 = test::SingleFixtureDecode(*op_by_op, ref);
    const auto got1 = test::SingleFixtureDecode(*recorded, ref);
    for (size_t j = 0; j < got1.size(); ++j) {
      QVERIFY2(got1[j] == want1[j], ("single step " + std::to_string(j)).c_str());
    }

    const auto n = recorded->backend().recording_counts();
    const std::string counts = std::to_string(n.recorded) + " recorded, " +
                               std::to_string(n.replayed) + " run again, " +
                               std::to_string(n.aborted) + " aborted";
    if (IsMoe(name) && !route_experts) {
      // Experts routed on the host: the engine never records.
      QVERIFY2(n.recorded + n.replayed + n.aborted == 0, counts.c_str());
      return;
    }
    // Each batch size's first decode step is recorded (after `aborts`
    // attempts); every decode step after it runs the recording again, or,
    // where the scratch moved, records it anew.
    const int64_t decode_steps = static_cast<int64_t>(got.size() - 1 + got1.size() - 1);
    if (moves > 0) {
      QVERIFY2(n.aborted == 0 && n.recorded > 2 && n.replayed > 0, counts.c_str());
      QVERIFY2(n.recorded + n.replayed == decode_steps, counts.c_str());
      return;
    }
    QVERIFY2(n.aborted == aborts, counts.c_str());
    QVERIFY2(n.recorded == 2, counts.c_str());
    QVERIFY2(n.replayed == decode_steps - 2 - aborts, counts.c_str());
  }

  // Three sequences decoding in turn, one a step: two in slots 0 and 1 of
  // one cache, one in slot 0 of another. Their steps differ only in the
  // cache memory they name, so each must get its own recording: one run
  // again for another sequence would attend to that sequence's keys.
  void sequencesInTurn_data() {
    QTest::addColumn<QString>("model");
    for (const char* m : {"qwen3-tiny", "llama3-tiny-sharded", "minicpm-tiny"}) {
      QTest::newRow(m) << QString(m);
    }
  }
  void sequencesInTurn() {
    QFETCH(QString, model);
    const std::string dir = test::FixturesDir() + "/" + model.toStdString();
    if (!PathExists(dir)) QSKIP("fixture not present");
    const test::FixtureReference ref = test::LoadFixtureReference(dir);
    QVERIFY(ref.prompt.size() >= 3);
    const auto run = [&](Model& m) {
      KvCache a = *m.NewKvCache(2, ref.T + 8), b = *m.NewKvCache(1, ref.T + 8);
      struct Seq {
        KvCache* cache;
        int slot;
        SequenceChunk next;
      };
      std::vector<Seq> seqs = {{&a, 0, {}}, {&a, 1, {}}, {&b, 0, {}}};
      std::vector<std::vector<float>> logits;
      ForwardOutput out;
      for (int step = 0; step < 8; ++step) {
        for (size_t i = 0; i < seqs.size(); ++i) {
          Seq& q = seqs[i];
          if (step == 0) q.next.tokens.assign(ref.prompt.begin(), ref.prompt.end() - i);
          q.next.slot = q.slot;
          const Status s = m.Forward({q.next}, *q.cache, &out);
          if (!s.ok()) qFatal("%s", s.ToString().c_str());
          const float* row = out.Last(0);
          logits.emplace_back(row, row + ref.V);
          q.next.start_pos = q.cache->length(q.slot);
          q.next.tokens = {static_cast<int32_t>(std::max_element(row, row + ref.V) - row)};
        }
      }
      return logits;
    };
    test::RecordingBackend* recorder = nullptr;
    auto op_by_op = Load(dir, nullptr);
    auto recorded = Load(dir, &recorder);
    const auto want = run(*op_by_op);
    const auto got = run(*recorded);
    QCOMPARE(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      QVERIFY2(got[j] == want[j],
               ("step " + std::to_string(j / 3) + ", sequence " + std::to_string(j % 3)).c_str());
    }
    const auto n = recorded->backend().recording_counts();
    const std::string counts =
        std::to_string(n.recorded) + " recorded, " + std::to_string(n.replayed) + " run again";
    // A decode step's recording per sequence, run again from its third step
    // on; and a prompt of at most 8 tokens is recorded too (run once).
    int64_t short_prompts = 0;
    for (size_t i = 0; i < 3; ++i) short_prompts += ref.prompt.size() - i <= 8;
    QVERIFY2(n.recorded == 3 + short_prompts && n.replayed == 3 * 6, counts.c_str());
  }
};

QTEST_APPLESS_MAIN(TestRecordedSteps)

#include "test_recorded_steps.moc"
