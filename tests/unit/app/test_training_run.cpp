// The workbench's view of a training run, without Qt widgets: the
// "@octet-figures" lines `octet train --figures` prints (the line format is
// the one in trainer/README.md), the curves built from them (one point per
// step even when every rank reports), what a data folder holds, and the
// processes a training launch runs (prepare first for text).
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>

#include "octet/app/local_instance.h"
#include "octet/app/training_run.h"
#include "octet/base/file_util.h"

using namespace octet;
using namespace octet::app;

class TestTrainingRun : public QObject {
  Q_OBJECT
 private slots:
  void parsesTheReadmeLine() {
    auto f = ParseTrainingFigures(
        R"(@octet-figures {"kind":"training","state":"running","train_step":12,)"
        R"("train_total_steps":450,"train_loss":4.13,"train_tps":1301.2,"step_ms":1575.1,)"
        R"("compute_ms":1444.0,"allreduce_ms":0.0,"allreduce_share":0.0,"mfu":0.084,)"
        R"("val_step":400,"val_loss":4.88,"val_bpb":1.857})");
    QVERIFY2(f.ok(), f.status().ToString().c_str());
    QVERIFY(f->state == "running");
    QVERIFY(f->has_step && f->has_val);
    QCOMPARE(f->train_step, int64_t{12});
    QCOMPARE(f->train_total_steps, int64_t{450});
    QCOMPARE(f->train_loss, 4.13);
    QCOMPARE(f->train_tps, 1301.2);
    QCOMPARE(f->step_ms, 1575.1);
    QCOMPARE(f->mfu, 0.084);
    QCOMPARE(f->val_step, int64_t{400});
    QCOMPARE(f->val_loss, 4.88);
    QCOMPARE(f->val_bpb, 1.857);

    auto starting =
        ParseTrainingFigures(R"(@octet-figures {"kind":"training","state":"starting"})");
    QVERIFY(starting.ok());
    QVERIFY(!starting->has_step && !starting->has_val);
  }

  void refusesOtherLines() {
    QVERIFY(!IsFiguresLine("step 1/2 | loss 8.3"));
    QVERIFY(!ParseTrainingFigures("step 1/2 | loss 8.3").ok());
    QVERIFY(!ParseTrainingFigures("@octet-figures {not json").ok());
    QVERIFY(!ParseTrainingFigures(R"(@octet-figures {"kind":"inference","decode_tps":3})").ok());
    QVERIFY(!ParseTrainingFigures(R"(@octet-figures {"kind":"training","train_step":"x"})").ok());
    // Step counts that are not integers are refused, never cast (1e70 is past
    // int64: casting it is undefined), and the error names the field.
    for (const char* bad : {R"("train_step":1e70)", R"("train_step":2.5)", R"("train_step":-1)",
                            R"("train_step":3,"train_total_steps":9.5)", R"("val_step":1e70)"}) {
      auto f =
          ParseTrainingFigures(std::string(R"(@octet-figures {"kind":"training",)") + bad + "}");
      QVERIFY2(!f.ok(), bad);
      QVERIFY2(f.status().message().find("must be a non-negative integer") != std::string::npos,
               f.status().ToString().c_str());
    }
    QVERIFY(!ParseTrainingFigures("@octet-figures [1,2]").ok());
  }

  // Rank 0's progress lines as an agent's job log holds them (the printf
  // formats of cmd_train.cpp), folded into the figures the curves take.
  void foldsRankZerosLogLines() {
    TrainingFigures f;
    QVERIFY(!FoldTrainingLogLine("octet train: tiny, 1234 parameters (0.1 MFLOP/token)", &f));
    QVERIFY(!FoldTrainingLogLine("steps 3", &f));
    QVERIFY(!f.has_step && !f.has_val && f.state.empty());
    QVERIFY(FoldTrainingLogLine(
        "step 3/40 | loss 7.2153 | lr x1.000 | grad norm 2.406 | 5123 tok/s | 25 ms (compute 20, "
        "all-reduce wait 5.0, busy 6.1) | mfu 0.4%",
        &f));
    QVERIFY(f.state == "running");
    QVERIFY(f.has_step && !f.has_val);
    QCOMPARE(f.train_step, int64_t{3});
    QCOMPARE(f.train_total_steps, int64_t{40});
    QCOMPARE(f.train_loss, 7.2153);
    QCOMPARE(f.train_tps, 5123.0);
    QCOMPARE(f.step_ms, 25.0);
    QCOMPARE(f.compute_ms, 20.0);
    QCOMPARE(f.allreduce_ms, 5.0);
    QCOMPARE(f.allreduce_share, 0.2);
    QCOMPARE(f.mfu, 0.004);
    // An evaluation keeps the step figures; the next step keeps the evaluation.
    QVERIFY(FoldTrainingLogLine("eval at step 4 | val loss 6.9000 | 2.5000 bits/byte", &f));
    QVERIFY(f.has_val);
    QCOMPARE(f.val_step, int64_t{4});
    QCOMPARE(f.val_loss, 6.9);
    QCOMPARE(f.val_bpb, 2.5);
    QCOMPARE(f.train_step, int64_t{3});
    QVERIFY(FoldTrainingLogLine("eval at step 8 | val loss 6.5000", &f));
    QCOMPARE(f.val_bpb, -1.0);  // a run without token_bytes.npy
    QVERIFY(FoldTrainingLogLine(
        "step 9/40 | loss nan | lr x0.500 | grad norm nan | 4000 tok/s | 30 ms (compute 30, "
        "all-reduce wait 0.0, busy 0.0) | mfu 0.3%",
        &f));
    QCOMPARE(f.train_step, int64_t{9});
    QVERIFY(std::isnan(f.train_loss));
    QCOMPARE(f.val_step, int64_t{8});
    // Folded figures make the same curves as figures lines do.
    TrainingCurves c;
    c.Add(f);
    QCOMPARE(c.train_loss().size(), size_t{1});
    QCOMPARE(c.val_loss().size(), size_t{1});
    QCOMPARE(c.total_steps(), int64_t{40});
  }

  void curvesKeepOnePointPerStep() {
    TrainingCurves c;
    auto add = [&c](int64_t step, double loss, int64_t val_step = -1) {
      TrainingFigures f;
      f.state = "running";
      f.has_step = true;
      f.train_step = step;
      f.train_total_steps = 5;
      f.train_loss = loss;
      f.train_tps = 100.0 * step;
      if (val_step >= 0) {
        f.has_val = true;
        f.val_step = val_step;
        f.val_loss = loss + 1;
      }
      c.Add(f);
    };
    add(1, 8.0);
    add(1, 7.9);  // rank 1's report of step 1: ignored
    add(2, 7.5, 2);
    add(2, 7.4, 2);  // rank 1 again, same evaluation
    add(3, 7.0, 2);  // a step line repeating the last evaluation
    QCOMPARE(c.train_loss().size(), size_t{3});
    QCOMPARE(c.train_loss()[0].value, 8.0);
    QCOMPARE(c.train_loss()[1].value, 7.5);
    QCOMPARE(c.train_tps()[2].value, 300.0);
    QCOMPARE(c.val_loss().size(), size_t{1});
    QCOMPARE(c.val_loss()[0].step, int64_t{2});
    QCOMPARE(c.total_steps(), int64_t{5});
    QCOMPARE(c.latest()->train_step, int64_t{3});
  }

  void classifiesDataFolders() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    QVERIFY(!ClassifyTrainingData(root + "/missing").ok());
    QVERIFY(MakeDirs(root + "/empty").ok());
    auto empty = ClassifyTrainingData(root + "/empty");
    QVERIFY(!empty.ok());
    QVERIFY2(empty.status().message().find("neither") != std::string::npos,
             empty.status().message().c_str());
    QVERIFY(MakeDirs(root + "/text/sub").ok());
    QVERIFY(WriteFileAtomic(root + "/text/sub/a.txt", "hello").ok());
    QVERIFY(*ClassifyTrainingData(root + "/text") == TrainingDataKind::kText);
    QVERIFY(MakeDirs(root + "/prepared").ok());
    QVERIFY(WriteFileAtomic(root + "/prepared/meta.json", "{}").ok());
    QVERIFY(*ClassifyTrainingData(root + "/prepared") == TrainingDataKind::kPrepared);

    // Text: prepare into the scratch folder, then train on it with --figures.
    InstanceSpec spec;
    spec.kind = InstanceSpec::Kind::kTraining;
    spec.octet_binary = "/bin/true";  // any program that exists
    spec.train_data_dir = root + "/text";
    spec.train_prepared_dir = root + "/scratch/data";
    spec.train_out_dir = root + "/run";
    spec.train_steps = 7;
    spec.train_ranks = 2;
    auto stages = spec.Stages();
    QVERIFY2(stages.ok(), stages.status().ToString().c_str());
    QCOMPARE(stages->size(), size_t{2});
    const std::vector<std::string> prepare = {
        "/bin/true",    "train", "prepare",     "--out", root + "/scratch/data",
        "--vocab-size", "4096",  root + "/text"};
    QVERIFY((*stages)[0].argv == prepare);
    const auto& train = (*stages)[1].argv;
    auto after = [&train](const std::string& flag) {
      for (size_t i = 0; i + 1 < train.size(); ++i) {
        if (train[i] == flag) return train[i + 1];
      }
      return std::string();
    };
    QVERIFY(after("--data") == root + "/scratch/data");
    QVERIFY(after("--ranks") == "2");
    QVERIFY(after("--steps") == "7");
    QVERIFY(std::find(train.begin(), train.end(), "--figures") != train.end());

    spec.train_data_dir = root + "/prepared";
    stages = spec.Stages();
    QVERIFY(stages.ok());
    QCOMPARE(stages->size(), size_t{1});
    spec.train_data_dir = root + "/empty";
    QVERIFY(!spec.Stages().ok());
  }
};

QTEST_GUILESS_MAIN(TestTrainingRun)
#include "test_training_run.moc"
