// The training loop: the loss falls on learnable data; data-parallel
// gradients (ranks as threads, several bucket sizes) equal one rank's on the
// whole batch; gradient accumulation equals one big micro-batch; a run
// resumed from a step-k checkpoint continues bit-exactly; checkpoints are
// complete HF-style folders.
#include <QtTest>
#include <cmath>
#include <filesystem>
#include <thread>

#include "octet/base/file_util.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/model_io.h"
#include "octet/trainer/trainer.h"
#include "octet_test.h"
#include "trainer_test_util.h"

using namespace octet;
using namespace octet::trainer;
using namespace octet::trainer::testing;

namespace {

constexpr int kVocab = 48;

TrainOptions SmallRun(const std::string& data, const std::string& out) {
  TrainOptions o;
  o.data_dir = data;
  o.out_dir = out;
  o.model = GptConfig{.n_layer = 2,
                      .n_head = 2,
                      .n_kv_head = 2,
                      .n_embd = 32,
                      .vocab_size = kVocab,
                      .sequence_len = 16};
  o.optimizer.kind = "muon";
  o.batch_size = 4;
  o.steps = 20;
  o.eval_batches = 2;
  o.seed = 5;
  return o;
}

double MaxRelativeDiff(std::span<const float> a, std::span<const float> b,
                       const std::vector<ParamTensor>& tensors, std::string* where) {
  double worst = 0;
  for (const auto& t : tensors) {
    double m = 0, d = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      m = std::max(m, double(std::abs(b[i])));
      d = std::max(d, double(std::abs(a[i] - b[i])));
    }
    const double rel = m > 0 ? d / m : d;
    if (rel > worst) {
      worst = rel;
      *where = t.name;
    }
  }
  return worst;
}

}  // namespace

class TestTrainer : public QObject {
  Q_OBJECT
 private slots:
  void lossFallsAndValidationReportsBitsPerByte() {
    QTemporaryDir tmp;
    const std::string data = tmp.path().toStdString() + "/data";
    WriteSyntheticData(data, kVocab, 40, 100);
    auto be = TestBackend();
    auto o = SmallRun(data, tmp.path().toStdString() + "/out");
    o.steps = 30;
    auto t = Trainer::Create(o, be.get(), nullptr, nullptr);
    QVERIFY2(t.ok(), t.status().ToString().c_str());
    std::vector<float> losses;
    std::vector<EvalReport> evals;
    QVERIFY((*t)->Run([&](const StepReport& r) { losses.push_back(r.loss); },
                      [&](const EvalReport& e) { evals.push_back(e); })
                .ok());
    QCOMPARE(losses.size(), size_t{30});
    qInfo("loss %.3f -> %.3f; val loss %.3f, %.3f bits/byte", losses.front(), losses.back(),
          evals.back().val_loss, evals.back().val_bpb);
    QVERIFY(std::abs(losses.front() - std::log(float(kVocab))) < 0.2f);  // zero-init head
    QVERIFY(losses.back() < losses.front() - 1.0f);
    QCOMPARE(evals.size(), size_t{1});
    // Every non-BOS token is one byte here, so bpb = loss over those tokens / ln 2.
    QVERIFY(evals.back().val_bpb > 0);
    QVERIFY(std::abs(evals.back().val_bpb - evals.back().val_loss / std::log(2.0f)) < 0.5f);
    // The final model folder is what the engine loads.
    const std::string out = o.out_dir;
    for (const char* f : {"config.json", "model.safetensors"}) {
      QVERIFY2(PathExists(JoinPath(out, f)), f);
    }
    auto reloaded = LoadModelDir(out, be.get());
    QVERIFY(reloaded.ok());
    QVERIFY(std::equal((*reloaded)->params().begin(), (*reloaded)->params().end(),
                       (*t)->model().params().begin()));
    auto latest = LatestCheckpoint(out);
    QVERIFY(latest.ok());
    QVERIFY(latest->ends_with("step-000030"));
    QVERIFY(PathExists(JoinPath(*latest, "optimizer.safetensors")));
    QVERIFY(PathExists(JoinPath(*latest, "trainer_state.json")));
    // A second run into the same folder refuses to clobber it.
    auto again = Trainer::Create(o, be.get(), nullptr, nullptr);
    QVERIFY(!again.ok());
    QVERIFY(again.status().message().find("--resume") != std::string::npos);
  }

  void dataParallelGradientsEqualOneRankOnTheWholeBatch_data() {
    QTest::addColumn<int>("world");
    QTest::addColumn<qint64>("bucket_bytes");
    QTest::newRow("2 ranks, one tensor per bucket") << 2 << qint64(1);
    QTest::newRow("2 ranks, 16 KB buckets") << 2 << qint64(16 << 10);
    QTest::newRow("4 ranks, 64 KB buckets") << 4 << qint64(64 << 10);
    QTest::newRow("4 ranks, one 25 MB bucket") << 4 << qint64(25 << 20);
  }
  void dataParallelGradientsEqualOneRankOnTheWholeBatch() {
    QFETCH(int, world);
    QFETCH(qint64, bucket_bytes);
    QTemporaryDir tmp;
    const std::string data = tmp.path().toStdString() + "/data";
    WriteSyntheticData(data, kVocab, 40, 100);
    const int B = 2;

    // One rank, world·B rows in one micro-batch.
    auto be = TestBackend();
    auto single_opts = SmallRun(data, tmp.path().toStdString() + "/single");
    single_opts.batch_size = B * world;
    auto single = Trainer::Create(single_opts, be.get(), nullptr, nullptr);
    QVERIFY2(single.ok(), single.status().ToString().c_str());
    RandomizeParams((*single)->model(), 77);
    StepReport single_report;
    QVERIFY((*single)->ComputeGradients(&single_report).ok());

    // `world` ranks on threads, B rows each.
    ThreadGroup main_group(world), bucket_group(world);
    std::vector<std::vector<float>> grads(world);
    std::vector<float> losses(world);
    std::vector<std::string> errors(world);
    std::vector<int> buckets(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        ThreadCollective main(&main_group, r), background(&bucket_group, r);
        auto rbe = TestBackend();
        auto o = SmallRun(data, tmp.path().toStdString() + "/dp" + std::to_string(r));
        o.batch_size = B;
        o.bucket_bytes = bucket_bytes;
        auto t = Trainer::Create(o, rbe.get(), &main, &background);
        if (!t.ok()) {
          errors[r] = t.status().ToString();
          return;
        }
        RandomizeParams((*t)->model(), 77);
        StepReport rep;
        Status s = (*t)->ComputeGradients(&rep);
        if (!s.ok()) errors[r] = s.ToString();
        grads[r].assign((*t)->model().grads().begin(), (*t)->model().grads().end());
        losses[r] = rep.loss;
      });
    }
    for (auto& th : threads) th.join();
    for (int r = 0; r < world; ++r) QVERIFY2(errors[r].empty(), errors[r].c_str());
    for (int r = 1; r < world; ++r) {
      QVERIFY2(grads[r] == grads[0], "every rank holds bit-identical averaged gradients");
      QCOMPARE(losses[r], losses[0]);
    }
    std::string where;
    const double rel =
        MaxRelativeDiff(grads[0], (*single)->model().grads(), (*single)->model().tensors(), &where);
    qInfo("%d ranks vs 1: worst gradient difference %.2e relative (%s); loss %.7f vs %.7f", world,
          rel, where.c_str(), losses[0], single_report.loss);
    QVERIFY(rel <= 1e-5);
    QVERIFY(std::abs(losses[0] - single_report.loss) <= 1e-5f);
  }

  void bucketsCoverTheBufferInBackwardOrder() {
    auto be = TestBackend();
    GptConfig c{.n_layer = 3,
                .n_head = 2,
                .n_kv_head = 1,
                .n_embd = 16,
                .vocab_size = 40,
                .sequence_len = 8};
    auto m = GptModel::Create(c, be.get());
    QVERIFY(m.ok());
    for (int64_t bytes : {int64_t{1}, int64_t{3000}, int64_t{1} << 30}) {
      auto buckets = PlanBuckets((*m)->tensors(), bytes);
      QVERIFY(!buckets.empty());
      QCOMPARE(buckets.front().end, (*m)->num_params());
      QCOMPARE(buckets.back().begin, int64_t{0});
      for (size_t i = 1; i < buckets.size(); ++i) QCOMPARE(buckets[i].end, buckets[i - 1].begin);
      for (size_t i = 0; i + 1 < buckets.size(); ++i) {
        QVERIFY((buckets[i].end - buckets[i].begin) * 4 >= bytes);
      }
      if (bytes == 1) QCOMPARE(buckets.size(), (*m)->tensors().size());
      if (bytes == int64_t{1} << 30) QCOMPARE(buckets.size(), size_t{1});
    }
  }

  // A bucket goes to the background thread as soon as its gradients are
  // final: it is reduced while the rest of backward has not reported yet.
  void completeBucketIsReducedBeforeBackwardEnds() {
    struct Recorder : GradientCollective {
      std::atomic<int> calls{0};
      int rank() const override { return 0; }
      int world_size() const override { return 2; }
      Status AllReduceSum(float* data, size_t n) override {
        for (size_t i = 0; i < n; ++i) data[i] *= 2;  // as if the peer held the same values
        ++calls;
        return Status::Ok();
      }
      Status Barrier() override { return Status::Ok(); }
    } rec;
    std::vector<float> grads(100, 1.0f);
    GradientBucketer b(grads.data(), 100, {{60, 100}, {20, 60}, {0, 20}}, &rec);
    b.Begin();
    b.OnReady(70, 100);  // not yet the whole first bucket
    b.OnReady(60, 70);   // first bucket complete
    const auto deadline = Deadline::AfterMs(10'000);
    while (rec.calls.load() < 1 && !deadline.expired()) std::this_thread::yield();
    QCOMPARE(rec.calls.load(), 1);
    QCOMPARE(grads[99], 1.0f);  // summed (x2) and averaged (/2)
    b.OnReady(0, 60);
    QVERIFY(b.Finish(Deadline::AfterMs(10'000)).ok());
    QCOMPARE(rec.calls.load(), 3);
    // A failing peer fails Finish with its error and poisons later steps.
    struct Failing : Recorder {
      Status AllReduceSum(float*, size_t) override { return UnavailableError("rank 1 is gone"); }
    } failing;
    GradientBucketer f(grads.data(), 100, {{0, 100}}, &failing);
    f.Begin();
    f.OnReady(0, 100);
    Status s = f.Finish(Deadline::AfterMs(10'000));
    QVERIFY(!s.ok());
    QVERIFY(s.message().find("rank 1") != std::string::npos);
  }

  void gradientAccumulationEqualsOneBigMicroBatch() {
    QTemporaryDir tmp;
    const std::string data = tmp.path().toStdString() + "/data";
    WriteSyntheticData(data, kVocab, 40, 100);
    auto be = TestBackend();
    auto big = SmallRun(data, tmp.path().toStdString() + "/a");
    big.batch_size = 4;
    auto acc = SmallRun(data, tmp.path().toStdString() + "/b");
    acc.batch_size = 1;
    acc.total_batch_tokens = 4 * 16;  // 4 micro-batches of one sequence
    auto tb = Trainer::Create(big, be.get(), nullptr, nullptr);
    auto ta = Trainer::Create(acc, be.get(), nullptr, nullptr);
    QVERIFY(tb.ok() && ta.ok());
    QCOMPARE((*ta)->grad_accum(), 4);
    RandomizeParams((*ta)->model(), 3);
    RandomizeParams((*tb)->model(), 3);
    StepReport rb, ra;
    QVERIFY((*tb)->ComputeGradients(&rb).ok());
    QVERIFY((*ta)->ComputeGradients(&ra).ok());
    std::string where;
    const double rel = MaxRelativeDiff((*ta)->model().grads(), (*tb)->model().grads(),
                                       (*tb)->model().tensors(), &where);
    qInfo("accumulation vs one micro-batch: %.2e relative (%s)", rel, where.c_str());
    QVERIFY(rel <= 1e-5);
    QVERIFY(std::abs(ra.loss - rb.loss) <= 1e-5f);
    auto bad = SmallRun(data, tmp.path().toStdString() + "/c");
    bad.total_batch_tokens = 100;
    QVERIFY(!Trainer::Create(bad, be.get(), nullptr, nullptr).ok());
  }

  // Save at step k, resume from that checkpoint, continue to 2k: the same
  // losses and the same final weights, bit for bit, as the uninterrupted run.
  void resumeFromCheckpointIsBitExact_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::newRow("muon") << "muon";
    QTest::newRow("adamw") << "adamw";
  }
  void resumeFromCheckpointIsBitExact() {
    QFETCH(QString, optimizer);
    namespace fs = std::filesystem;
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    const std::string data = root + "/data";
    WriteSyntheticData(data, kVocab, 40, 100);
    const int k = 6;
    auto be = TestBackend();
    auto o = SmallRun(data, root + "/full");
    o.optimizer.kind = optimizer.toStdString();
    o.steps = 2 * k;
    o.warmup_steps = 2;
    o.checkpoint_every = k;
    o.keep_checkpoints = 5;
    auto full = Trainer::Create(o, be.get(), nullptr, nullptr);
    QVERIFY(full.ok());
    std::vector<float> full_losses;
    QVERIFY((*full)->Run([&](const StepReport& r) { full_losses.push_back(r.loss); }, {}).ok());

    // A fresh folder holding only the step-k checkpoint.
    const std::string resumed_out = root + "/resumed";
    fs::create_directories(resumed_out + "/checkpoints");
    fs::copy(root + "/full/checkpoints/step-000006", resumed_out + "/checkpoints/step-000006",
             fs::copy_options::recursive);
    QVERIFY(WriteFileAtomic(resumed_out + "/checkpoints/latest", "step-000006\n").ok());
    auto r = o;
    r.out_dir = resumed_out;
    r.resume = true;
    auto resumed = Trainer::Create(r, be.get(), nullptr, nullptr);
    QVERIFY2(resumed.ok(), resumed.status().ToString().c_str());
    QCOMPARE((*resumed)->step(), int64_t{k});
    std::vector<float> resumed_losses;
    QVERIFY(
        (*resumed)->Run([&](const StepReport& s) { resumed_losses.push_back(s.loss); }, {}).ok());
    QCOMPARE(resumed_losses.size(), size_t{k});
    for (int i = 0; i < k; ++i) QCOMPARE(resumed_losses[i], full_losses[k + i]);
    QVERIFY(std::equal((*resumed)->model().params().begin(), (*resumed)->model().params().end(),
                       (*full)->model().params().begin()));
    auto a = ReadFileToString(root + "/full/model.safetensors");
    auto b = ReadFileToString(resumed_out + "/model.safetensors");
    QVERIFY(a.ok() && b.ok() && *a == *b);

    // A mismatched run is refused with the reason.
    auto mismatch = r;
    mismatch.model.sequence_len = 8;
    auto bad = Trainer::Create(mismatch, be.get(), nullptr, nullptr);
    QVERIFY(!bad.ok());
    QVERIFY2(bad.status().message().find("sequence_len") != std::string::npos,
             bad.status().ToString().c_str());

    // A state file whose step is not an integer is refused by name (a float
    // was cast: 1e70 to an integer is undefined behaviour).
    auto newest = LatestCheckpoint(resumed_out);  // the resumed run's last
    QVERIFY(newest.ok());
    const std::string state = JoinPath(*newest, "trainer_state.json");
    auto text = ReadFileToString(state);
    QVERIFY(text.ok());
    const size_t at = text->find("\"step\"");
    QVERIFY(at != std::string::npos);
    const size_t end = text->find_first_of(",}", at);
    QVERIFY(
        WriteFileAtomic(state, text->substr(0, at) + "\"step\": 1e70" + text->substr(end)).ok());
    auto odd = Trainer::Create(r, be.get(), nullptr, nullptr);
    QVERIFY(!odd.ok());
    QVERIFY2(odd.status().message().find("trainer_state.json: step is missing or not an integer") !=
                 std::string::npos,
             odd.status().ToString().c_str());
  }

  void interruptedCheckpointWriteLeavesTheLastOneIntact() {
    namespace fs = std::filesystem;
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    const std::string data = root + "/data";
    WriteSyntheticData(data, kVocab, 40, 100);
    auto be = TestBackend();
    auto o = SmallRun(data, root + "/out");
    o.steps = 4;
    o.checkpoint_every = 2;
    auto t = Trainer::Create(o, be.get(), nullptr, nullptr);
    QVERIFY(t.ok());
    QVERIFY((*t)->Run({}, {}).ok());
    // A crash mid-write leaves a temporary folder; `latest` still names step 4.
    fs::create_directories(root + "/out/checkpoints/.step-000006.tmp.123");
    QVERIFY(
        WriteFileAtomic(root + "/out/checkpoints/.step-000006.tmp.123/model.safetensors", "torn")
            .ok());
    auto latest = LatestCheckpoint(root + "/out");
    QVERIFY(latest.ok());
    QVERIFY(latest->ends_with("step-000004"));
    auto m = LoadModelDir(*latest, be.get());
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    // keep_checkpoints = 2: steps 2 and 4 remain.
    QVERIFY(fs::exists(root + "/out/checkpoints/step-000002"));

    // Damaged checkpoints are refused on --resume with the file named.
    auto r = o;
    r.resume = true;
    QVERIFY(WriteFileAtomic(root + "/out/checkpoints/latest", "step-000099\n").ok());
    auto t2 = Trainer::Create(r, be.get(), nullptr, nullptr);
    QVERIFY(!t2.ok());
    QVERIFY2(t2.status().message().find("step-000099") != std::string::npos,
             t2.status().ToString().c_str());
    QVERIFY(WriteFileAtomic(root + "/out/checkpoints/latest", "step-000004\n").ok());
    QVERIFY(
        WriteFileAtomic(root + "/out/checkpoints/step-000004/optimizer.safetensors", "junk").ok());
    auto t3 = Trainer::Create(r, be.get(), nullptr, nullptr);
    QVERIFY(!t3.ok());
    QVERIFY2(t3.status().message().find("optimizer.safetensors") != std::string::npos,
             t3.status().ToString().c_str());
    fs::remove_all(root + "/fresh");
    // A write killed at the very first save leaves a temporary and no
    // `latest`: --resume says what happened and what to do, and the next save
    // clears it (its writer, pid 999999999, no longer runs).
    const std::string first = root + "/first";
    fs::create_directories(first + "/checkpoints/.step-000002.tmp.999999999");
    auto interrupted = LatestCheckpoint(first);
    QVERIFY(!interrupted.ok());
    QVERIFY2(interrupted.status().message().find("interrupted") != std::string::npos &&
                 interrupted.status().message().find("without --resume") != std::string::npos,
             interrupted.status().ToString().c_str());
    auto f = o;
    f.out_dir = first;
    f.steps = 2;
    auto t5 = Trainer::Create(f, be.get(), nullptr, nullptr);
    QVERIFY(t5.ok());
    QVERIFY((*t5)->Run({}, {}).ok());
    QVERIFY(!fs::exists(first + "/checkpoints/.step-000002.tmp.999999999"));
    QVERIFY(LatestCheckpoint(first).ok());
    auto none = o;
    none.out_dir = root + "/fresh";
    none.resume = true;
    auto t4 = Trainer::Create(none, be.get(), nullptr, nullptr);
    QVERIFY(!t4.ok());
    QCOMPARE(t4.status().code(), StatusCode::kNotFound);
  }
};

QTEST_APPLESS_MAIN(TestTrainer)
#include "test_trainer.moc"
