// `octet train --init/--batch` (docs/CLI.md) against the PyTorch reference in
// ../shared/fixtures/trainer: the printed loss trajectory and the gradients
// written with --grads-out; and the one-line usage errors.
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/trainer/model_io.h"
#include "octet_test.h"

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
    r = RunProgram({"octet", "train", "--frobnicate"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "train", "--help"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.output.find("--grads-out") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestTrainCli)
#include "test_train_cli.moc"
