// `octet train --init/--batch` (docs/CLI.md) against the PyTorch reference in
// ../shared/fixtures/trainer: the printed loss trajectory and the gradients
// written with --grads-out; and the one-line usage errors.
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/trainer/model_io.h"
#include "octet_test.h"
#include "trainer_test_util.h"

using namespace octet;
using octet::test::RunProgram;

class TestTrainCli : public QObject {
  Q_OBJECT
 private slots:
  void fixedBatchMatchesReferenceTrajectoryAndGradients() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/trainer";
    QTemporaryDir tmp;
    const std::string grads = tmp.path().toStdString() + "/grads.safetensors";
    auto r =
        RunProgram({"octet",       "train",    "--init",      dir,     "--batch",        dir,
                    "--steps",     "10",       "--optimizer", "adamw", "--lr",           "1e-3",
                    "--betas",     "0.9,0.95", "--eps",       "1e-8",  "--weight-decay", "0",
                    "--grads-out", grads,      "--threads",   "1",     "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    // stdout is exactly one JSON document (no human text mixed in).
    QJsonParseError err;
    auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.output), &err);
    QVERIFY2(err.error == QJsonParseError::NoError, r.output.c_str());
    const QJsonArray losses = doc.object()["losses"].toArray();
    auto expected = ReadFileToString(dir + "/expected.json");
    QVERIFY(expected.ok());
    const QJsonArray ref = QJsonDocument::fromJson(QByteArray::fromStdString(*expected))
                               .object()["adamw"]
                               .toObject()["losses"]
                               .toArray();
    QCOMPARE(losses.size(), ref.size());
    double worst = 0;
    for (int i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(losses[i].toDouble() - ref[i].toDouble()));
    }
    qInfo("CLI trajectory worst |diff| %.2e", worst);
    QVERIFY(worst <= 1e-3);

    auto be = kernels::CreateBackend("scalar", {.threads = 1});
    QVERIFY(be.ok());
    auto mine = trainer::LoadModelDir(dir, be->get());
    auto ref_grads = trainer::LoadModelDir(dir, be->get());
    QVERIFY(mine.ok() && ref_grads.ok());
    QVERIFY2(trainer::LoadWeights(**mine, grads).ok(), "the written gradients load by name");
    QVERIFY(trainer::LoadWeights(**ref_grads, dir + "/grads.safetensors").ok());
    for (const auto& t : (*mine)->tensors()) {
      double gmax = 0, dmax = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        const float g = (*mine)->param(t)[i], ref_g = (*ref_grads)->param(t)[i];
        gmax = std::max(gmax, double(std::abs(ref_g)));
        dmax = std::max(dmax, double(std::abs(g - ref_g)));
      }
      QVERIFY2(dmax <= 1e-4 * gmax, t.name.c_str());
    }
  }

  // The pre-training mode end to end on a tiny synthetic corpus: JSON report,
  // checkpoints, the final model folder, refusal to clobber, and --resume.
  void pretrainWritesModelAndResumes() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    trainer::testing::WriteSyntheticData(root + "/data", 48, 30, 80);
    QVERIFY(WriteFileAtomic(root + "/small.json",
                            R"({"model_type":"nanochat","n_layer":2,"n_head":2,"n_embd":32,)"
                            R"("vocab_size":48,"sequence_len":16})")
                .ok());
    const std::vector<std::string> base = {"octet",          "train",
                                           "--config",       root + "/small.json",
                                           "--data",         root + "/data",
                                           "--out",          root + "/out",
                                           "--seq-len",      "16",
                                           "--batch-size",   "2",
                                           "--threads",      "1",
                                           "--eval-batches", "1",
                                           "--json"};
    auto args = base;
    args.insert(args.end(), {"--steps", "3"});
    auto r = RunProgram(args, 120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const size_t brace = r.output.rfind("\n{");
    QVERIFY2(brace != std::string::npos, r.output.c_str());
    auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.output.substr(brace + 1)));
    const QJsonObject o = doc.object();
    QCOMPARE(o["steps"].toArray().size(), 3);
    QCOMPARE(o["evals"].toArray().size(), 1);
    QVERIFY(o["evals"].toArray()[0].toObject().contains("val_bpb"));
    QVERIFY(o["tokens_per_second"].toDouble() > 0);
    for (const char* f : {"config.json", "model.safetensors", "checkpoints/latest",
                          "checkpoints/step-000003/optimizer.safetensors"}) {
      QVERIFY2(PathExists(root + "/out/" + f), f);
    }
    r = RunProgram(args, 120'000);
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("--resume") != std::string::npos, r.output.c_str());
    args = base;
    args.insert(args.end(), {"--steps", "5", "--resume", "--figures"});
    r = RunProgram(args, 120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY(r.output.find("resuming from") != std::string::npos);
    const QJsonArray steps =
        QJsonDocument::fromJson(
            QByteArray::fromStdString(r.output.substr(r.output.rfind("\n{") + 1)))
            .object()["steps"]
            .toArray();
    QCOMPARE(steps.size(), 2);
    QCOMPARE(steps[0].toObject()["step"].toInt(), 4);
    // Worker telemetry lines for the agent: "starting", one "running" per
    // step, one more after the (final) evaluation carrying its validation
    // loss and bits per byte, then "finished".
    std::vector<QJsonObject> figures;
    for (size_t fig = r.output.find("@octet-figures {"); fig != std::string::npos;
         fig = r.output.find("@octet-figures {", fig + 1)) {
      const std::string line = r.output.substr(fig + 15, r.output.find('\n', fig) - fig - 15);
      figures.push_back(QJsonDocument::fromJson(QByteArray::fromStdString(line)).object());
    }
    QCOMPARE(figures.size(), size_t{5});
    QCOMPARE(figures[0]["state"].toString(), QString("starting"));
    QCOMPARE(figures[1]["state"].toString(), QString("running"));
    QCOMPARE(figures[1]["train_step"].toInt(), 4);
    QCOMPARE(figures[1]["train_total_steps"].toInt(), 5);
    QVERIFY(figures[1]["train_loss"].toDouble() > 0);
    QVERIFY(figures[1]["train_tps"].toDouble() > 0);
    QVERIFY(figures[1]["compute_ms"].toDouble() > 0);
    QVERIFY(figures[1]["compute_ms"].toDouble() <= figures[1]["step_ms"].toDouble());
    QVERIFY(figures[1].contains("allreduce_ms"));
    QVERIFY(figures[1]["mfu"].toDouble() > 0);
    QVERIFY(!figures[1].contains("val_loss"));
    QCOMPARE(figures[3]["train_step"].toInt(), 5);
    QCOMPARE(figures[3]["val_step"].toInt(), 5);
    QVERIFY(figures[3]["val_loss"].toDouble() > 0);
    QVERIFY(figures[3]["val_bpb"].toDouble() > 0);
    QCOMPARE(figures[4]["state"].toString(), QString("finished"));
    QCOMPARE(figures[4]["train_step"].toInt(), 5);
    QCOMPARE(figures[4]["val_loss"].toDouble(), figures[3]["val_loss"].toDouble());
    // Data of another vocabulary than the config's is refused with the reason.
    QVERIFY(
        WriteFileAtomic(root + "/cfg.json",
                        R"({"n_layer":1,"n_head":1,"n_embd":8,"vocab_size":99,"sequence_len":16})")
            .ok());
    r = RunProgram({"octet", "train", "--config", root + "/cfg.json", "--data", root + "/data",
                    "--out", root + "/o2", "--steps", "1"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("vocabulary") != std::string::npos, r.output.c_str());
  }

  // prepare -> train end to end through the CLI: text files in, a trained
  // model folder with the tokenizer out.
  void prepareThenTrainFromTextFiles() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    QVERIFY(MakeDirs(root + "/text").ok());
    for (int i = 0; i < 12; ++i) {
      std::string t;
      for (int k = 0; k < 40; ++k) t += "It was the best of times, it was the worst of times. ";
      QVERIFY(WriteFileAtomic(root + "/text/" + std::to_string(100 + i) + ".txt", t).ok());
    }
    auto r = RunProgram({"octet", "train", "prepare", "--out", root + "/data", "--vocab-size",
                         "300", "--val-fraction", "0.2", root + "/text", "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const auto doc = QJsonDocument::fromJson(
        QByteArray::fromStdString(r.output.substr(r.output.rfind("\n{") + 1)));
    QCOMPARE(doc.object()["documents"].toInt(), 12);
    QCOMPARE(doc.object()["val_documents"].toInt(), 2);
    // At most 300: the BPE stops early when no pair repeats any more.
    const int vocab = doc.object()["vocab_size"].toInt();
    QVERIFY(vocab > 256 && vocab <= 300);
    QVERIFY(
        WriteFileAtomic(root + "/m.json", R"({"n_layer":1,"n_head":2,"n_embd":32,"vocab_size":)" +
                                              std::to_string(vocab) + R"(,"sequence_len":32})")
            .ok());
    r = RunProgram({"octet", "train", "--config", root + "/m.json", "--data", root + "/data",
                    "--out", root + "/out", "--steps", "2", "--batch-size", "2", "--threads", "1"},
                   120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY(PathExists(root + "/out/tokenizer.json"));  // the model folder carries its tokenizer
    QVERIFY(PathExists(root + "/out/model.safetensors"));
    r = RunProgram({"octet", "train", "prepare", "--out", root + "/data", root + "/text"});
    QCOMPARE(r.exit_code, 2);  // already prepared
    r = RunProgram({"octet", "train", "prepare", "--out", root + "/d2"});
    QCOMPARE(r.exit_code, 2);  // no inputs
    r = RunProgram({"octet", "train", "prepare", "--help"});
    QCOMPARE(r.exit_code, 0);
  }

  void badInputIsAOneLineError() {
    auto r = RunProgram({"octet", "train", "--init", "/nonexistent", "--json"});
    QCOMPARE(r.exit_code, 2);  // --batch missing: usage
    QVERIFY2(r.output.find("--batch") != std::string::npos, r.output.c_str());
    QTemporaryDir tmp;
    const std::string d = tmp.path().toStdString();
    r = RunProgram({"octet", "train", "--init", d, "--batch", d, "--steps", "1"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("x.npy") != std::string::npos, r.output.c_str());
    QCOMPARE(std::count(r.output.begin(), r.output.end(), '\n'), 1);
    r = RunProgram({"octet", "train", "--init", d, "--batch", d, "--optimizer", "sgd"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "train", "--config", "tiny", "--data", d});
    QCOMPARE(r.exit_code, 2);  // --out missing
    r = RunProgram({"octet", "train", "--frobnicate"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "train", "--help"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.output.find("--grads-out") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestTrainCli)
#include "test_train_cli.moc"
