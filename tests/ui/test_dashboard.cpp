// The live dashboard from telemetry: a TP instance's tok/s come from its rank
// 0, its all-reduce share is the mean over ranks and its memory the sum; a
// training run plots loss and tok/s; repeated samples are not plotted twice;
// old points leave the window; the charts and headline figures show it.
#include <QChart>
#include <QLabel>
#include <QLineSeries>
#include <QtTest>

#include "octet/ui/dashboard_panel.h"
#include "octet/ui/telemetry_history.h"

using namespace octet;

namespace {

app::WorkerFigures Worker(const std::string& job, uint32_t rank, const std::string& kind) {
  app::WorkerFigures w;
  w.job_id = job;
  w.rank = rank;
  w.kind = kind;
  w.state = "serving";
  return w;
}

// Two nodes: "qwen" (TP 2: rank 0 on n0, rank 1 on n1) and "gpt" training (rank 0 on n1).
app::ClusterSnapshot Step(int k) {
  app::ClusterSnapshot s;
  s.cabling.summary = "declared switch";
  for (int n = 0; n < 2; ++n) {
    app::NodeView v;
    v.name = "n" + std::to_string(n);
    v.state = app::NodeState::kUp;
    v.has_telemetry = true;
    v.telemetry.unix_ms = 10'000 + k * 100 + n;  // 10 Hz
    v.telemetry.mem_total_bytes = 16ull << 30;
    v.telemetry.mem_used_bytes = (2ull + n) << 30;
    s.nodes.push_back(v);
  }
  auto q0 = Worker("qwen", 0, "inference");
  q0.decode_tps = 10 + k;
  q0.prefill_tps = 500 + k;
  q0.running_requests = 2;
  q0.queued_requests = 1;
  q0.allreduce_share = 0.2;
  q0.memory_bytes = 1ull << 30;
  q0.spec_drafted_tokens = 10ull * k;  // speculating: 7 of every 10 drafts kept
  q0.spec_accepted_tokens = 7ull * k;
  auto q1 = Worker("qwen", 1, "inference");
  q1.decode_tps = 999;  // a non-zero rank's own view is not the job's figure
  q1.allreduce_share = 0.4;
  q1.memory_bytes = 1ull << 30;
  auto g0 = Worker("gpt", 0, "training");
  g0.train_step = static_cast<uint64_t>(k);
  g0.train_loss = 5.0 - 0.1 * k;
  g0.train_tps = 2000;
  s.nodes[0].telemetry.workers = {q0};
  s.nodes[1].telemetry.workers = {q1, g0};
  return s;
}

}  // namespace

class TestDashboard : public QObject {
  Q_OBJECT
 private slots:
  void historyTakesRankZeroMeansSharesAndSumsMemory() {
    ui::TelemetryHistory h(120);
    for (int k = 0; k < 5; ++k) QVERIFY(h.Add(Step(k)));
    QVERIFY(!h.Add(Step(4)));  // the same samples again: nothing new
    const ui::JobHistory& q = h.jobs().at("qwen");
    QCOMPARE(q.decode_tps.size(), 5);
    QCOMPARE(q.decode_tps.back().y(), 14.0);
    QCOMPARE(q.prefill_tps.back().y(), 504.0);
    QCOMPARE(q.running_requests.back().y(), 2.0);
    QCOMPARE(q.allreduce_percent.back().y(), 30.0);  // mean of 20% and 40%
    QCOMPARE(q.memory_gib.back().y(), 2.0);          // both ranks
    QCOMPARE(q.decode_tps.back().x(), 0.4);          // seconds since the first sample
    const ui::JobHistory& g = h.jobs().at("gpt");
    QCOMPARE(g.kind, QStringLiteral("training"));
    QCOMPARE(g.train_loss.size(), 4);  // step 0 has no loss yet
    QCOMPARE(g.train_loss.back().y(), 4.6);
    QVERIFY(g.decode_tps.isEmpty());
    QCOMPARE(h.nodeMemory().at("n1").back().y(), 3.0);
  }

  // A job no agent reports (an instance started on this machine) on the same
  // time axis as the agents' samples; a repeated sample is not plotted twice.
  void aLocalInstanceJoinsTheAgentsTimeline() {
    ui::TelemetryHistory h(120);
    QVERIFY(h.Add(Step(0)));  // the first agent sample: unix ms 10'000
    app::WorkerFigures w;
    w.state = "serving";
    w.decode_tps = 12.5;
    w.prefill_tps = 300;
    w.running_requests = 2;
    w.queued_requests = 1;
    w.memory_bytes = 1ull << 30;
    QVERIFY(h.AddWorker(QStringLiteral("local qwen"), w, 10'500));
    QVERIFY(!h.AddWorker(QStringLiteral("local qwen"), w, 10'500));
    w.decode_tps = 20;
    QVERIFY(h.AddWorker(QStringLiteral("local qwen"), w, 11'000));
    const ui::JobHistory& j = h.jobs().at(QStringLiteral("local qwen"));
    QCOMPARE(j.kind, QStringLiteral("inference"));
    QCOMPARE(j.decode_tps.size(), 2);
    QCOMPARE(j.decode_tps.front(), QPointF(0.5, 12.5));
    QCOMPARE(j.decode_tps.back(), QPointF(1.0, 20.0));
    QCOMPARE(j.prefill_tps.back().y(), 300.0);
    QCOMPARE(j.running_requests.back().y(), 2.0);
    QCOMPARE(j.queued_requests.back().y(), 1.0);
    QCOMPARE(j.memory_gib.back().y(), 1.0);
    QCOMPARE(h.now(), 1.0);
    QVERIFY(h.jobs().count("qwen") == 1);  // the agents' jobs stay
  }

  void oldPointsAndEndedJobsLeaveTheWindow() {
    ui::TelemetryHistory h(1.0);  // one second
    for (int k = 0; k < 30; ++k) h.Add(Step(k));
    const auto& q = h.jobs().at("qwen");
    QVERIFY(q.decode_tps.size() <= 11);
    QVERIFY(q.decode_tps.front().x() >= h.now() - 1.0);
    // The job ends: its figures stop; after a window it is gone.
    for (int k = 30; k < 50; ++k) {
      app::ClusterSnapshot s = Step(k);
      for (auto& n : s.nodes) n.telemetry.workers.clear();
      h.Add(s);
    }
    QVERIFY(h.jobs().empty());
    QVERIFY(!h.nodeMemory().empty());
  }

  void chartsAndFiguresShowTheJobs() {
    ui::ClusterController controller({});
    ui::DashboardPanel panel(&controller);
    panel.resize(1200, 800);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    for (int k = 0; k < 20; ++k) panel.addSnapshot(Step(k));
    using C = ui::DashboardPanel::Chart;
    QCOMPARE(panel.chart(C::kDecode)->seriesCount(), 1);
    QCOMPARE(panel.chart(C::kPrefill)->seriesCount(), 1);
    QCOMPARE(panel.chart(C::kConcurrency)->seriesCount(), 2);  // running and queued
    QCOMPARE(panel.chart(C::kAllReduce)->seriesCount(), 2);    // both jobs
    QCOMPARE(panel.chart(C::kMemory)->seriesCount(), 2);       // both nodes
    QCOMPARE(panel.chart(C::kTraining)->seriesCount(), 2);     // loss and tok/s
    auto* decode = qobject_cast<QLineSeries*>(panel.chart(C::kDecode)->chart()->series().at(0));
    QVERIFY(decode);
    QCOMPARE(decode->name(), QStringLiteral("qwen"));
    QCOMPARE(decode->count(), 20);
    QCOMPARE(decode->at(19).y(), 29.0);
    // A legend elides a long label at its end: what a series shows comes
    // first, so one job's two series stay apart.
    QStringList concurrency;
    for (auto* s : panel.chart(C::kConcurrency)->chart()->series()) concurrency << s->name();
    concurrency.sort();
    QCOMPARE(concurrency,
             (QStringList{QStringLiteral("queued · qwen"), QStringLiteral("running · qwen")}));
    QStringList training;
    for (auto* s : panel.chart(C::kTraining)->chart()->series()) training << s->name();
    QVERIFY2(training.size() == 2 && training[0].startsWith(QStringLiteral("loss · ")) !=
                                         training[1].startsWith(QStringLiteral("loss · ")),
             qPrintable(training.join(QStringLiteral(" | "))));
    // More samples append; the series follows the history exactly.
    for (int k = 20; k < 25; ++k) panel.addSnapshot(Step(k));
    QCOMPARE(decode->count(), 25);
    QCOMPARE(decode->at(24).y(), 34.0);
    // The headline figures (the latest snapshot; the KPIs show live values).
    auto* kpi = panel.findChild<QLabel*>(QStringLiteral("kpiDecode"));
    QVERIFY(kpi);
    QCOMPARE(kpi->text(), QStringLiteral("34.0 tok/s"));
    QCOMPARE(panel.findChild<QLabel*>(QStringLiteral("kpiRequests"))->text(), QStringLiteral("2"));
  }

  void draftAcceptanceIsTheShareOfDraftsKept() {
    ui::ClusterController controller({});
    ui::DashboardPanel panel(&controller);
    panel.show();  // the headline figures follow snapshots while the panel is shown
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    auto* kpi = panel.findChild<QLabel*>(QStringLiteral("kpiAcceptance"));
    QVERIFY(kpi);
    panel.addSnapshot(Step(0));  // nothing drafted yet: no rate to show
    QCOMPARE(kpi->text(), QStringLiteral("—"));
    panel.addSnapshot(Step(3));
    QCOMPARE(kpi->text(), QStringLiteral("70.0 %"));
    // A second speculating instance counts by its drafts, not as a mean of rates.
    app::ClusterSnapshot s = Step(4);  // qwen: 40 drafted, 28 kept
    auto m0 = Worker("mtp", 0, "inference");
    m0.spec_drafted_tokens = 60;
    m0.spec_accepted_tokens = 57;
    s.nodes[1].telemetry.workers.push_back(m0);
    panel.addSnapshot(s);
    QCOMPARE(kpi->text(), QStringLiteral("85.0 %"));  // (28 + 57) / (40 + 60)
  }

  void everyChartAppearsEachTimeThePanelIsShown() {
    // The charts are drawn one per event-loop turn after the panel shows; all
    // of them are there soon after, and again after the panel was away.
    ui::ClusterController controller({});
    ui::DashboardPanel panel(&controller);
    panel.resize(1200, 800);
    for (int k = 0; k < 10; ++k) panel.addSnapshot(Step(k));
    using C = ui::DashboardPanel::Chart;
    const C all[] = {C::kDecode,    C::kPrefill, C::kConcurrency,
                     C::kAllReduce, C::kMemory,  C::kTraining};
    auto all_visible = [&] {
      for (C c : all) {
        if (!panel.chart(c)->isVisible()) return false;
      }
      return true;
    };
    for (int round = 0; round < 2; ++round) {
      panel.show();
      QVERIFY(QTest::qWaitForWindowExposed(&panel));
      QTRY_VERIFY_WITH_TIMEOUT(all_visible(), 10'000);
      // What arrived while the panel was hidden is drawn.
      auto* decode = qobject_cast<QLineSeries*>(panel.chart(C::kDecode)->chart()->series().at(0));
      QVERIFY(decode);
      QCOMPARE(decode->count(), 10 + 5 * round);
      panel.hide();
      for (int k = 10 + 5 * round; k < 15 + 5 * round; ++k) panel.addSnapshot(Step(k));
    }
  }
};

QTEST_MAIN(TestDashboard)
#include "test_dashboard.moc"
