// The capacity model behind `octet route plan`: lambda_max(f) =
// min(C_large / f, C_small / (1 - f)) against a large-only baseline on the same
// nodes, with the seed's setup (8 nodes: 3 two-node large replicas + 2 one-node
// small replicas, baseline 4 large replicas).
#include <QtTest>

#include "octet/router/capacity.h"

using namespace octet;
using namespace octet::router;

namespace {
CapacityPool Pool(const char* name, int replicas, int nodes, double rate) {
  CapacityPool p;
  p.name = name;
  p.replicas = replicas;
  p.nodes_per_replica = nodes;
  p.requests_per_s = rate;
  return p;
}
}  // namespace

class TestRouterCapacity : public QObject {
  Q_OBJECT
 private slots:
  void seedSetupWithFastSmallReplicas() {
    // Small replicas 4.5x a large replica's request rate: the threshold at f = 1/4.
    auto plan = PlanCapacity(Pool("large", 3, 2, 1.0), Pool("small", 2, 1, 4.5), {0.5, 0.25});
    QVERIFY2(plan.ok(), plan.status().ToString().c_str());
    QCOMPARE(plan->total_nodes, 8);
    QCOMPARE(plan->baseline_replicas, 4);
    QCOMPARE(plan->baseline_rps, 4.0);
    QVERIFY(std::abs(plan->points[0].gain - 1.5) < 1e-12);
    QVERIFY(std::abs(plan->points[1].gain - 3.0) < 1e-12);
    QCOMPARE(plan->points[0].bottleneck, std::string("large"));
    QCOMPARE(plan->points[1].bottleneck, std::string("large"));
    QVERIFY(std::abs(plan->points[1].small_speed_needed - 4.5) < 1e-12);
    QVERIFY(std::abs(plan->points[0].small_speed_needed - 1.5) < 1e-12);
    const std::string text = plan->ToText();
    QVERIFY(text.find("1.50x") != std::string::npos);
    QVERIFY(text.find("3.00x") != std::string::npos);
    QCOMPARE(plan->ToJson()["points"][1]["gain"].get<double>(), 3.0);
  }

  void slowSmallReplicasBecomeTheBottleneck() {
    auto plan =
        PlanCapacity(Pool("large", 3, 2, 1.0), Pool("small", 2, 1, 2.0), {0.25, 0.5, 0.0, 1.0});
    QVERIFY(plan.ok());
    // f = 1/4: min(3/0.25, 4/0.75) = 5.33 req/s over a 4 req/s baseline.
    QVERIFY(std::abs(plan->points[0].gain - (4.0 / 0.75) / 4.0) < 1e-12);
    QCOMPARE(plan->points[0].bottleneck, std::string("small"));
    QCOMPARE(plan->points[1].bottleneck, std::string("large"));  // 6 vs 8
    QCOMPARE(plan->points[2].bottleneck, std::string("small"));  // everything small
    QCOMPARE(plan->points[2].lambda_max, 4.0);
    QCOMPARE(plan->points[3].bottleneck, std::string("large"));  // everything large
    QCOMPARE(plan->points[3].gain, 0.75);                        // 3 replicas of the baseline's 4
  }

  void badInputsSayWhat() {
    auto no_rate = PlanCapacity(Pool("large", 3, 2, 0), Pool("small", 2, 1, 1), {0.5});
    QVERIFY(!no_rate.ok());
    QVERIFY(no_rate.status().message().find("--rate large=R") != std::string::npos);
    QVERIFY(!PlanCapacity(Pool("large", 3, 2, 1), Pool("small", 2, 1, 1), {1.5}).ok());
    QVERIFY(!PlanCapacity(Pool("large", 3, 2, 1), Pool("small", 2, 1, 1), {0.5}, 4).ok());
    auto bigger = PlanCapacity(Pool("large", 3, 2, 1), Pool("small", 2, 1, 4.5), {0.5}, 10);
    QVERIFY(bigger.ok());
    QCOMPARE(bigger->baseline_replicas, 5);
  }
};

QTEST_APPLESS_MAIN(TestRouterCapacity)
#include "test_router_capacity.moc"
