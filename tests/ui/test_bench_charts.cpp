// The Benchmarks panel's comparison model and its charts: the bar and line
// series follow the model (ui::BenchComparisonModel) when a run is added or
// removed and when another metric is chosen — values, sets, lines, axes —
// with hand-made runs whose figures are known. A test a run lacks is no point
// on its line (not a point at 0) and a zero bar; deltas are against the first
// run, as app::CompareRuns computes them.
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QComboBox>
#include <QLineSeries>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QtTest>

#include "octet/app/bench_store.h"
#include "octet/ui/bench_comparison_model.h"
#include "octet/ui/bench_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/widgets.h"

using namespace octet;

namespace {

app::BenchResult MakeResult(int64_t concurrency, double tg, double pp) {
  app::BenchResult r;
  r.prompt_size = 16;
  r.response_size = 8;
  r.concurrency = concurrency;
  r.runs = 2;
  r.test = r.Name();
  r.tg_throughput = app::MetricStats::Of({tg - 1, tg + 1});  // mean tg
  r.pp_throughput = app::MetricStats::Of({pp, pp});
  return r;
}

app::BenchRun Run(int64_t id, const std::string& label, std::vector<app::BenchResult> results) {
  app::BenchRun run;
  run.id = id;
  run.label = label;
  run.state = "complete";
  run.results = std::move(results);
  run.result_count = static_cast<int64_t>(run.results.size());
  return run;
}

QList<qreal> Values(const QBarSet* set) {
  QList<qreal> v;
  for (int i = 0; i < set->count(); ++i) v << set->at(i);
  return v;
}

QList<QPointF> Points(const QLineSeries* s) { return s->points(); }

double AxisMax(QChart* chart) {
  return qobject_cast<QValueAxis*>(chart->axes(Qt::Vertical).first())->max();
}

}  // namespace

class TestBenchCharts : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QStandardPaths::setTestModeEnabled(true);
  }

  // Value axes end on a round number and tick at round steps: the lowest
  // 0..top of 4-7 steps of 1, 2, 2.5 or 5 x 10^k that holds the maximum.
  void axesTakeRoundSteps() {
    struct Case {
      double max;
      int min_intervals, max_intervals;
      double top;
      int intervals;
    };
    for (const Case& c : std::vector<Case>{
             {189, 4, 7, 200, 4},      // by 50
             {315, 4, 7, 350, 7},      // by 50 (not 400 by 100)
             {2441.8, 4, 7, 2500, 5},  // by 500 (it read 651, 1302, 1953, 2605)
             {3150, 4, 7, 3500, 7},    // by 500
             {0.977, 4, 7, 1, 4},      // by 0.25
             {0.3, 4, 7, 0.3, 6},      // by 0.05
             {1e-4, 4, 6, 1e-4, 4},    // by 2.5e-5
             {250, 4, 4, 400, 4},      // four steps forced (a two-axis chart): by 100
             {0, 4, 7, 1, 4},          // nothing yet: 0..1
             {-3, 4, 7, 1, 4},
             {std::nan(""), 4, 7, 1, 4},
         }) {
      const ui::NiceScale s = ui::NiceScaleFor(c.max, c.min_intervals, c.max_intervals);
      const QString what =
          QStringLiteral("max %1: top %2 in %3").arg(c.max).arg(s.top).arg(s.intervals);
      QVERIFY2(std::abs(s.top - c.top) <= 1e-9 * c.top && s.intervals == c.intervals,
               qPrintable(what));
      if (c.max > 0) QVERIFY2(s.top >= c.max, qPrintable(what));
      QVERIFY2(s.intervals >= c.min_intervals && s.intervals <= c.max_intervals, qPrintable(what));
      // The step is 1, 2, 2.5 or 5 times a power of ten.
      const double m = s.step() / std::pow(10.0, std::floor(std::log10(s.step()) + 1e-12));
      QVERIFY2(std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 2.5) < 1e-9 ||
                   std::abs(m - 5) < 1e-9,
               qPrintable(what));
    }
  }

  void chartsFollowTheModel() {
    ui::InstanceManager instances;
    ui::BenchPanel panel(&instances);
    panel.setStorePath(dir_.path() + "/runs.sqlite");
    ui::BenchComparisonModel* model = panel.comparison();
    QVERIFY(model);
    // The comparison table shows the model the charts map.
    QCOMPARE(panel.findChild<QTableView*>(QStringLiteral("benchDeltas"))->model(), model);
    QVERIFY(panel.barChart()->series().isEmpty());

    // One run: one bar set of its decode throughput per test, one line.
    const app::BenchRun base = Run(1, "base", {MakeResult(1, 100, 1000), MakeResult(2, 180, 1900)});
    model->setRuns({base});
    QCOMPARE(panel.barChart()->series().size(), 1);
    auto* bars = qobject_cast<QBarSeries*>(panel.barChart()->series().first());
    QVERIFY(bars);
    QCOMPARE(bars->count(), 1);
    QCOMPARE(bars->barSets()[0]->label(), QStringLiteral("#1 base"));
    QCOMPARE(Values(bars->barSets()[0]), (QList<qreal>{100, 180}));
    QCOMPARE(panel.lineChart()->series().size(), 1);
    auto* line = qobject_cast<QLineSeries*>(panel.lineChart()->series().first());
    QCOMPARE(Points(line), (QList<QPointF>{{1, 100}, {2, 180}}));
    QCOMPARE(AxisMax(panel.barChart()), 200.0);  // 0..200 by 50

    // A run added: a second set and line; its extra test (c4) is a new
    // category where the first run has a zero bar and no point.
    model->addRun(Run(
        2, "new", {MakeResult(1, 110, 900), MakeResult(2, 200, 2000), MakeResult(4, 300, 3000)}));
    QCOMPARE(panel.barChart()->series().size(), 1);
    bars = qobject_cast<QBarSeries*>(panel.barChart()->series().first());
    QCOMPARE(bars->count(), 2);
    QCOMPARE(bars->barSets()[1]->label(), QStringLiteral("#2 new"));
    QCOMPARE(Values(bars->barSets()[0]), (QList<qreal>{100, 180, 0}));
    QCOMPARE(Values(bars->barSets()[1]), (QList<qreal>{110, 200, 300}));
    auto* categories =
        qobject_cast<QBarCategoryAxis*>(panel.barChart()->axes(Qt::Horizontal).first());
    QCOMPARE(categories->categories(),
             (QStringList{QStringLiteral("c1"), QStringLiteral("c2"), QStringLiteral("c4")}));
    QCOMPARE(panel.lineChart()->series().size(), 2);
    auto* first = qobject_cast<QLineSeries*>(panel.lineChart()->series()[0]);
    auto* second = qobject_cast<QLineSeries*>(panel.lineChart()->series()[1]);
    QCOMPARE(Points(first), (QList<QPointF>{{1, 100}, {2, 180}}));
    QCOMPARE(Points(second), (QList<QPointF>{{1, 110}, {2, 200}, {4, 300}}));
    QCOMPARE(AxisMax(panel.lineChart()), 350.0);  // 0..350 by 50
    // Deltas against the first run: +10 % at c1; none where it has no value.
    QCOMPARE(model->columnCount(), 5);
    QCOMPARE(model->index(0, model->deltaColumn(1)).data().toString(), QStringLiteral("+10.0 %"));
    QVERIFY(!model->index(2, model->deltaColumn(1)).data().isValid());

    // Another metric: the same series take the new values through the mapping.
    auto* metric = panel.findChild<QComboBox*>(QStringLiteral("benchMetric"));
    metric->setCurrentIndex(metric->findData(QStringLiteral("pp_throughput")));
    QCOMPARE(bars, qobject_cast<QBarSeries*>(panel.barChart()->series().first()));
    QCOMPARE(Values(bars->barSets()[0]), (QList<qreal>{1000, 1900, 0}));
    QCOMPARE(Values(bars->barSets()[1]), (QList<qreal>{900, 2000, 3000}));
    QCOMPARE(Points(second), (QList<QPointF>{{1, 900}, {2, 2000}, {4, 3000}}));
    QCOMPARE(AxisMax(panel.barChart()), 3500.0);  // 0..3500 by 500
    QVERIFY(panel.barChart()->title().contains(QStringLiteral("prefill")));
    QCOMPARE(model->index(0, model->deltaColumn(1)).data().toString(), QStringLiteral("-10.0 %"));

    // The first run removed: the second is alone (and the baseline).
    QVERIFY(model->removeRun(1));
    QVERIFY(!model->removeRun(1));
    bars = qobject_cast<QBarSeries*>(panel.barChart()->series().first());
    QCOMPARE(bars->count(), 1);
    QCOMPARE(bars->barSets()[0]->label(), QStringLiteral("#2 new"));
    QCOMPARE(Values(bars->barSets()[0]), (QList<qreal>{900, 2000, 3000}));
    QCOMPARE(panel.lineChart()->series().size(), 1);
    QCOMPARE(Points(qobject_cast<QLineSeries*>(panel.lineChart()->series().first())),
             (QList<QPointF>{{1, 900}, {2, 2000}, {4, 3000}}));
    QCOMPARE(model->columnCount(), 3);  // no delta column without a baseline to compare with

    // The last removed: empty charts.
    QVERIFY(model->removeRun(2));
    QVERIFY(panel.barChart()->series().isEmpty());
    QVERIFY(panel.lineChart()->series().isEmpty());
    QCOMPARE(model->rowCount(), 0);
  }

  // Two shapes (pp16 tg8 and pp64 tg8): a line per run and shape, each over
  // its own rows; categories name the tests.
  void linesPerShape() {
    ui::InstanceManager instances;
    ui::BenchPanel panel(&instances);
    panel.setStorePath(dir_.path() + "/runs2.sqlite");
    app::BenchResult big = MakeResult(1, 50, 5000);
    big.prompt_size = 64;
    big.test = big.Name();
    panel.comparison()->setRuns(
        {Run(7, "", {MakeResult(1, 100, 1000), MakeResult(2, 180, 1900), big})});
    QCOMPARE(panel.comparison()->shapes().size(), size_t{2});
    QCOMPARE(panel.lineChart()->series().size(), 2);
    auto* small = qobject_cast<QLineSeries*>(panel.lineChart()->series()[0]);
    auto* large = qobject_cast<QLineSeries*>(panel.lineChart()->series()[1]);
    QCOMPARE(small->name(), QStringLiteral("#7 pp16 tg8"));
    QCOMPARE(Points(small), (QList<QPointF>{{1, 100}, {2, 180}}));
    QCOMPARE(Points(large), (QList<QPointF>{{1, 50}}));
    auto* categories =
        qobject_cast<QBarCategoryAxis*>(panel.barChart()->axes(Qt::Horizontal).first());
    QCOMPARE(categories->categories().size(), 3);
    QCOMPARE(categories->categories()[2], QString::fromStdString(big.test));
  }
};

QTEST_MAIN(TestBenchCharts)
#include "test_bench_charts.moc"
