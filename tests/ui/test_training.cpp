// A training run from the Launch panel, driven as a person would: type a
// folder of .txt files, an output folder, the tiny preset with a short
// sequence, a small batch and a few steps, press "Launch training"; the run
// prepares the data (step 1 of 2: `octet train prepare`), trains
// (`octet train --figures`), finishes, and its output folder becomes the
// chosen model; the Dashboard then shows its loss and tok/s curves against
// the step. A folder that holds no training data is refused with the reason,
// and a prepared folder that is broken fails the run with its failure line.
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>
#include <cmath>
#include <cstdint>

#include "octet/ui/dashboard_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/main_window.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::InstanceInfo;
using octet::ui::MainWindow;

namespace {

// Deterministic prose: document `d` of a small corpus (a few KB each).
QByteArray Document(int d) {
  static const char* kWords[] = {"the",   "cluster", "node",  "cable",  "memory", "token",
                                 "model", "rank",    "step",  "loss",   "switch", "ring",
                                 "spark", "train",   "serve", "router", "chat",   "batch",
                                 "layer", "weight",  "shard", "reduce", "quick",  "brown"};
  QByteArray text;
  uint32_t x = 2654435761u * static_cast<uint32_t>(d + 1);
  for (int sentence = 0; sentence < 60; ++sentence) {
    for (int w = 0; w < 9; ++w) {
      x = x * 1664525u + 1013904223u;
      text += kWords[(x >> 16) % (sizeof(kWords) / sizeof(kWords[0]))];
      text += w == 8 ? ". " : " ";
    }
    if (sentence % 6 == 5) text += "\n";
  }
  return text;
}

void TypeInto(QLineEdit* edit, const QString& text) {
  edit->selectAll();
  QTest::keyClick(edit, Qt::Key_Delete);
  QTest::keyClicks(edit, text);
}

void TypeInto(QSpinBox* spin, int value) {
  spin->selectAll();
  QTest::keyClicks(spin, QString::number(value));
  QTest::keyClick(spin, Qt::Key_Tab);
}

}  // namespace

class TestTraining : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;

  ui::WorkbenchOptions Offline() { return test::OfflineWorkbench(dir_); }

  // Fills the training form and presses "Launch training".
  static void Launch(ui::LaunchPanel* launch, const QString& data, const QString& out) {
    TypeInto(launch->findChild<QLineEdit*>(QStringLiteral("trainingData")), data);
    TypeInto(launch->findChild<QLineEdit*>(QStringLiteral("trainingOut")), out);
    auto* config = launch->findChild<QComboBox*>(QStringLiteral("trainingConfig"));
    TypeInto(config->lineEdit(), QStringLiteral("tiny"));
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingSteps")), 4);
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingSeqLen")), 32);
    TypeInto(launch->findChild<QSpinBox*>(QStringLiteral("trainingBatch")), 2);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchTraining")),
                      Qt::LeftButton);
  }

  static bool Ended(const ui::InstanceManager* m, int id) {
    const InstanceInfo* info = m->find(id);
    return info && (info->state == InstanceInfo::State::kFinished ||
                    info->state == InstanceInfo::State::kFailed ||
                    info->state == InstanceInfo::State::kExited);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
    QVERIFY(QDir().mkpath(dir_.path() + "/text/more"));
    for (int d = 0; d < 5; ++d) {
      QFile f(dir_.path() +
              QString::fromLatin1(d < 3 ? "/text/doc%1.txt" : "/text/more/doc%1.txt").arg(d));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(Document(d));
    }
  }

  void trainFromTextThenDashboardCurves() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.showPanel(MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    QVERIFY(launch);
    QSignalSpy finished(launch, &ui::LaunchPanel::trainingFinished);
    QSignalSpy shown(launch, &ui::LaunchPanel::modelSummaryShown);
    const QString out = dir_.path() + "/run";
    Launch(launch, dir_.path() + "/text", out);
    const int id = launch->lastTraining();
    auto* state = launch->findChild<QLabel*>(QStringLiteral("trainingState"));
    QVERIFY2(id > 0, qPrintable(state->text()));
    const InstanceInfo* info = w.instances()->find(id);
    QVERIFY(info);
    QVERIFY(info->kind == app::InstanceSpec::Kind::kTraining);
    QCOMPARE(info->stage_count, 2);  // text: prepare, then train
    QVERIFY(QTest::qWaitFor([&] { return Ended(w.instances(), id); }, 100'000));
    info = w.instances()->find(id);
    QVERIFY2(info->state == InstanceInfo::State::kFinished,
             qPrintable(info->detail + "\n" + info->log.join('\n')));
    const QString log = info->log.join('\n');
    QVERIFY2(log.contains(QStringLiteral("octet train prepare:")), qPrintable(log));
    QVERIFY2(log.contains(QStringLiteral("step 4/4")), qPrintable(log));
    QVERIFY2(!log.contains(QStringLiteral("@octet-figures")), "figures are parsed, not logged");
    QVERIFY2(state->text().contains(QStringLiteral("Finished")), qPrintable(state->text()));
    QCOMPARE(finished.count(), 1);
    QCOMPARE(finished.first().first().toString(), out);
    QVERIFY(QFile::exists(out + "/config.json"));
    // The output folder is now the chosen model, ready to serve.
    QVERIFY(shown.count() > 0 || shown.wait(10'000));
    QVERIFY(shown.last().first().toBool());
    QVERIFY(launch->findChild<QPushButton*>(QStringLiteral("launchInference"))->isEnabled());

    // The curves on the Dashboard, one point per step.
    QCOMPARE(info->training.train_loss().size(), size_t{4});
    w.showPanel(MainWindow::Panel::kDashboard);
    auto* dash = qobject_cast<ui::DashboardPanel*>(w.panel(MainWindow::Panel::kDashboard));
    QVERIFY(dash);
    QCOMPARE(dash->shownTrainingRun(), id);
    QTRY_VERIFY(dash->trainingRunLossChart()->points(QStringLiteral("train")).size() >= 2);
    const QList<QPointF> loss = dash->trainingRunLossChart()->points(QStringLiteral("train"));
    QCOMPARE(loss.size(), 4);
    for (int i = 0; i < loss.size(); ++i) {
      QCOMPARE(loss[i].x(), double(i + 1));
      QVERIFY(std::isfinite(loss[i].y()) && loss[i].y() > 0);
    }
    QVERIFY(!dash->trainingRunLossChart()->points(QStringLiteral("val")).isEmpty());
    QCOMPARE(dash->trainingRunTpsChart()->points(QStringLiteral("tps")).size(), 4);
    auto* figures = dash->findChild<QLabel*>(QStringLiteral("trainingRunFigures"));
    QVERIFY2(figures->text().contains(QStringLiteral("step 4/4")), qPrintable(figures->text()));
  }

  void badDataFolderShowsTheFailure() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.showPanel(MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    auto* state = launch->findChild<QLabel*>(QStringLiteral("trainingState"));
    QSignalSpy failed(launch, &ui::LaunchPanel::trainingFailed);

    // A folder with neither prepared data nor text: refused, with the reason.
    QVERIFY(QDir().mkpath(dir_.path() + "/nothing"));
    Launch(launch, dir_.path() + "/nothing", dir_.path() + "/run-nothing");
    QCOMPARE(failed.count(), 1);
    QVERIFY2(state->text().contains(QStringLiteral("neither")), qPrintable(state->text()));
    QCOMPARE(launch->lastTraining(), -1);

    // A prepared folder whose meta.json is broken: the run fails, its line shows.
    QVERIFY(QDir().mkpath(dir_.path() + "/broken"));
    QFile meta(dir_.path() + "/broken/meta.json");
    QVERIFY(meta.open(QIODevice::WriteOnly));
    meta.write("{ this is not json");
    meta.close();
    Launch(launch, dir_.path() + "/broken", dir_.path() + "/run-broken");
    const int id = launch->lastTraining();
    QVERIFY2(id > 0, qPrintable(state->text()));
    QVERIFY(QTest::qWaitFor([&] { return Ended(w.instances(), id); }, 60'000));
    const InstanceInfo* info = w.instances()->find(id);
    QVERIFY2(info->state == InstanceInfo::State::kFailed, qPrintable(info->log.join('\n')));
    QVERIFY2(info->detail.contains(QStringLiteral("meta.json")), qPrintable(info->detail));
    QVERIFY2(state->text().contains(QStringLiteral("failed")), qPrintable(state->text()));
    QVERIFY2(state->text().contains(QStringLiteral("meta.json")), qPrintable(state->text()));
    QCOMPARE(failed.count(), 2);
    QVERIFY(!QFile::exists(dir_.path() + "/run-broken/config.json"));
  }
};

QTEST_MAIN(TestTraining)
#include "test_training.moc"
