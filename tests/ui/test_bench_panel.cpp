// The Benchmarks panel driven as a person would, against an `octet serve`
// instance of a small random checkpoint: run a tiny sweep (progress, then the
// run in the table from the SQLite store), run a second one, select both and
// compare — a grouped bar chart with two sets, lines vs concurrency with two
// series, a table of the metric per test and run with its change against the
// first run — and export CSV and PNG. Bad sweep
// input is refused with the reason.
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QComboBox>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QtTest>

#include "octet/ui/bench_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/main_window.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::MainWindow;

class TestBenchPanel : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  ui::WorkbenchOptions Offline() { return test::OfflineWorkbench(dir_); }

  void RunSweep(ui::BenchPanel* panel, const QString& label) {
    panel->findChild<QLineEdit*>(QStringLiteral("benchLabel"))->clear();
    QTest::keyClicks(panel->findChild<QLineEdit*>(QStringLiteral("benchLabel")), label);
    QSignalSpy finished(panel, &ui::BenchPanel::sweepFinished);
    QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("benchRun")), Qt::LeftButton);
    QVERIFY(panel->running());
    QVERIFY(finished.wait(60'000));
    QVERIFY2(finished.first().first().toBool(), qPrintable(finished.first().at(1).toString()));
    auto* progress = panel->findChild<QProgressBar*>(QStringLiteral("benchProgress"));
    QCOMPARE(progress->value(), progress->maximum());
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
    OCTET_REQUIRE_FIXTURES();
    // Text comes back (the real tokenizer), so first tokens are seen.
    const Status st = test::WriteChatModel(dir_.path().toStdString() + "/tiny");
    QVERIFY2(st.ok(), st.ToString().c_str());
  }

  void sweepStoreCompareExport() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* panel = qobject_cast<ui::BenchPanel*>(w.panel(MainWindow::Panel::kBenchmarks));
    QVERIFY(panel);
    QSignalSpy loaded(panel, &ui::BenchPanel::runsLoaded);
    panel->setStorePath(dir_.path() + "/runs.sqlite");
    QVERIFY(loaded.wait(10'000));
    QCOMPARE(loaded.last().first().toInt(), 0);

    app::InstanceSpec spec;
    spec.model_dir = (dir_.path() + "/tiny").toStdString();
    spec.context = 1024;
    QSignalSpy ready(w.instances(), &ui::InstanceManager::ready);
    QString error;
    QVERIFY2(w.instances()->start(spec, QStringLiteral("tiny"), &error) > 0, qPrintable(error));
    QVERIFY(ready.wait(60'000));
    QTest::keyClick(&w, Qt::Key_6, Qt::ControlModifier);
    QCOMPARE(panel->findChild<QComboBox*>(QStringLiteral("benchEndpoint"))->currentText(),
             ready.first().at(1).toString());

    // Bad input says why and starts nothing.
    auto* concurrency = panel->findChild<QLineEdit*>(QStringLiteral("benchConcurrency"));
    concurrency->clear();
    QTest::keyClicks(concurrency, QStringLiteral("1,two"));
    QSignalSpy refused(panel, &ui::BenchPanel::sweepFinished);
    QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("benchRun")), Qt::LeftButton);
    QCOMPARE(refused.count(), 1);
    QCOMPARE(refused.first().first().toBool(), false);
    QVERIFY(!panel->running());

    for (auto [name, text] : {std::pair{"benchPp", "16"}, {"benchTg", "8"}, {"benchConcurrency", "1,2"}}) {
      auto* e = panel->findChild<QLineEdit*>(QString::fromLatin1(name));
      e->clear();
      QTest::keyClicks(e, QString::fromLatin1(text));
    }
    panel->findChild<QSpinBox*>(QStringLiteral("benchRuns"))->setValue(1);
    RunSweep(panel, QStringLiteral("first"));
    auto* table = panel->findChild<QTableView*>(QStringLiteral("benchRunsTable"));
    auto cell = [&](int row, int col) { return table->model()->index(row, col).data().toString(); };
    QVERIFY(QTest::qWaitFor(
        [&] { return table->model()->rowCount() == 1 && cell(0, 5) == "complete"; }, 10'000));
    QCOMPARE(cell(0, 6), QStringLiteral("2"));  // c1 and c2
    RunSweep(panel, QStringLiteral("second"));
    QVERIFY(QTest::qWaitFor(
        [&] { return table->model()->rowCount() == 2 && cell(0, 5) == "complete"; }, 10'000));
    QVERIFY(cell(0, 0).contains(QStringLiteral("second")));  // newest first

    // Select both (click, ctrl+click) and compare.
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {},
                      table->visualRect(table->model()->index(0, 0)).center());
    QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::ControlModifier,
                      table->visualRect(table->model()->index(1, 0)).center());
    // Prefill tok/s: every request has one. A decode rate needs the tokens to
    // arrive over time, and this tiny model's 8 can come in one read (the
    // runner then rightly reports none: no bar, no point).
    auto* metric = panel->findChild<QComboBox*>(QStringLiteral("benchMetric"));
    metric->setCurrentIndex(1);
    auto* compare = panel->findChild<QPushButton*>(QStringLiteral("benchCompare"));
    QVERIFY(compare->isEnabled());
    QSignalSpy shown(panel, &ui::BenchPanel::comparisonShown);
    QTest::mouseClick(compare, Qt::LeftButton);
    QVERIFY(shown.wait(10'000));
    QCOMPARE(shown.first().first().toInt(), 2);
    QCOMPARE(panel->barChart()->series().size(), 1);
    auto* bars = qobject_cast<QBarSeries*>(panel->barChart()->series().first());
    QVERIFY(bars);
    QCOMPARE(bars->count(), 2);  // one set per run
    QVERIFY(bars->barSets()[0]->label().contains(QStringLiteral("first")));
    QCOMPARE(bars->barSets()[0]->count(), 2);  // two tests
    QVERIFY(bars->barSets()[0]->at(0) > 0);
    QVERIFY(bars->barSets()[1]->at(0) > 0);
    QCOMPARE(panel->lineChart()->series().size(), 2);
    auto* line = qobject_cast<QLineSeries*>(panel->lineChart()->series().first());
    QCOMPARE(line->count(), 2);  // concurrency 1 and 2
    QCOMPARE(line->at(0).x(), 1.0);
    QCOMPARE(line->at(1).x(), 2.0);
    // The table: a row per test, the metric per run, the change against the first.
    auto* deltas = panel->findChild<QTableView*>(QStringLiteral("benchDeltas"));
    QCOMPARE(deltas->model()->rowCount(), 2);
    QCOMPARE(deltas->model()->columnCount(), 5);  // test, concurrency, 2 runs, 1 delta
    QVERIFY(deltas->model()->index(0, 4).data().toString().endsWith(QStringLiteral("%")));

    // Switching the metric redraws with the other metric.
    QVERIFY(panel->barChart()->title().contains(QStringLiteral("prefill")));
    metric->setCurrentIndex(0);
    QVERIFY(panel->barChart()->title().contains(QStringLiteral("decode")));

    const QString csv = dir_.path() + "/cmp.csv";
    QVERIFY(panel->exportCsv(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY(text.startsWith(QStringLiteral("run_id,label,test,")));
    QVERIFY(text.contains(QStringLiteral(",first,")));
    QVERIFY(text.contains(QStringLiteral(",second,")));
    QVERIFY(text.contains(QStringLiteral("pp_throughput")));
    const QString png = dir_.path() + "/cmp.png";
    QVERIFY(panel->exportPng(png));
    QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() > 200);
  }
};

QTEST_MAIN(TestBenchPanel)
#include "test_bench_panel.moc"
