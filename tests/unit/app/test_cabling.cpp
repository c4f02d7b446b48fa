// Cabling classification from what each agent hears: the shapes the issue
// names (direct pair, ring, switch, mixed, partial), the edges drawn, and the
// mis-cabling flags (missing ring link, node reachable only through another,
// one-way links, silent nodes, duplicate ids, unknown peers).
#include <QtTest>
#include <map>

#include "octet/app/cabling.h"

using namespace octet::app;

namespace {

// A made-up cluster: nodes n0..n(N-1) with ids "id-nK", and the cables between them.
struct Lab {
  std::vector<CablingNodeInput> nodes;
  explicit Lab(int n) {
    for (int i = 0; i < n; ++i) {
      CablingNodeInput in;
      in.name = "n" + std::to_string(i);
      in.reachable = true;
      in.links.node_id = "id-n" + std::to_string(i);
      in.links.beacon_port = 47101;
      in.links.probe_port = 40000 + static_cast<uint32_t>(i);
      nodes.push_back(in);
    }
  }
  // b hears a's beacons on b_if (a sent them on a_if).
  void Hear(int b, const std::string& b_if, int a, const std::string& a_if) {
    LinkObservation o;
    o.local_interface = b_if;
    o.peer_node_id = nodes[static_cast<size_t>(a)].links.node_id;
    o.peer_interface = a_if;
    o.peer_address = "10.0." + std::to_string(a) + ".1";
    o.peer_probe_port = 40000 + static_cast<uint32_t>(a);
    nodes[static_cast<size_t>(b)].links.observations.push_back(o);
  }
  void Cable(int a, const std::string& a_if, int b, const std::string& b_if) {
    Hear(a, a_if, b, b_if);
    Hear(b, b_if, a, a_if);
  }
  void Switch(const std::vector<std::pair<int, std::string>>& ports) {
    for (const auto& [a, ai] : ports) {
      for (const auto& [b, bi] : ports) {
        if (a != b) Hear(a, ai, b, bi);
      }
    }
  }
  void Ring() {
    const int n = static_cast<int>(nodes.size());
    for (int i = 0; i < n; ++i) Cable(i, "r1", (i + 1) % n, "r0");
  }
  CablingReport Analyze(const std::string& expected = "") const {
    return AnalyzeCabling(nodes, expected);
  }
};

bool HasProblem(const CablingReport& r, const std::string& kind, const std::string& text = "") {
  for (const auto& p : r.problems) {
    if (p.kind == kind && p.message.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string Problems(const CablingReport& r) {
  std::string s = r.summary;
  for (const auto& p : r.problems) s += "\n  [" + p.kind + "] " + p.message;
  return s;
}

bool HasEdge(const CablingReport& r, const std::string& a, const std::string& ai,
             const std::string& b, const std::string& bi) {
  for (const auto& e : r.edges) {
    if (e.a_node == a && e.a_interface == ai && e.b_node == b && e.b_interface == bi) return true;
    if (e.a_node == b && e.a_interface == bi && e.b_node == a && e.b_interface == ai) return true;
  }
  return false;
}

}  // namespace

class TestCabling : public QObject {
  Q_OBJECT
 private slots:
  void ringOfFour() {
    Lab lab(4);
    lab.Ring();
    const CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kRing);
    QVERIFY2(r.problems.empty(), Problems(r).c_str());
    QCOMPARE(r.edges.size(), size_t{4});
    QVERIFY(HasEdge(r, "n0", "r1", "n1", "r0"));
    QVERIFY(HasEdge(r, "n1", "r1", "n2", "r0"));
    QVERIFY(HasEdge(r, "n2", "r1", "n3", "r0"));
    QVERIFY(HasEdge(r, "n3", "r1", "n0", "r0"));
    QCOMPARE(r.ring_order, (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
    QCOMPARE(r.summary, std::string("ring of 4: n0-n1-n2-n3-n0"));
    for (const auto& e : r.edges) {
      QVERIFY(e.bidirectional);
      QVERIFY(!e.a_address.empty() && !e.b_address.empty() && e.b_probe_port != 0);
    }
  }
  void ringOfThree() {
    Lab lab(3);
    lab.Ring();
    QCOMPARE(lab.Analyze().kind, CablingKind::kRing);
  }
  void switchOfFour() {
    Lab lab(4);
    lab.Switch({{0, "eth0"}, {1, "eth0"}, {2, "eth0"}, {3, "eth0"}});
    const CablingReport r = lab.Analyze("switch");
    QCOMPARE(r.kind, CablingKind::kSwitch);
    QVERIFY2(r.problems.empty(), Problems(r).c_str());
    QCOMPARE(r.segments.size(), size_t{1});
    QVERIFY(r.segments[0].shared);
    QCOMPARE(r.segments[0].endpoints.size(), size_t{4});
    QCOMPARE(r.edges.size(), size_t{6});
  }
  void directPair() {
    Lab lab(2);
    lab.Cable(0, "p0", 1, "p0");
    lab.Cable(0, "p1", 1, "p1");
    const CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kDirectPair);
    QVERIFY(r.summary.find("2 cables") != std::string::npos);
    QCOMPARE(r.edges.size(), size_t{2});
  }
  void singleNode() {
    Lab lab(1);
    QCOMPARE(lab.Analyze().kind, CablingKind::kSingleNode);
    QVERIFY(lab.Analyze().problems.empty());
  }
  void ringMissingOneLinkNamesIt() {
    Lab lab(4);
    lab.Cable(0, "r1", 1, "r0");
    lab.Cable(1, "r1", 2, "r0");
    lab.Cable(2, "r1", 3, "r0");  // n3-n0 pulled
    const CablingReport r = lab.Analyze("ring");
    QCOMPARE(r.kind, CablingKind::kPartial);
    QVERIFY2(HasProblem(r, "missing-ring-link", "between n0 and n3"), Problems(r).c_str());
    QVERIFY(!HasProblem(r, "only-through"));  // the ends of a chain are not detours
    // Without being told it is a ring, a chain through every node still reads as a broken ring.
    QVERIFY(HasProblem(lab.Analyze(), "missing-ring-link"));
  }
  void nodeReachableOnlyThroughAnother() {
    Lab lab(4);
    lab.Switch({{0, "eth0"}, {1, "eth0"}, {2, "eth0"}});
    lab.Cable(2, "eth1", 3, "eth0");  // n3 plugged into n2 instead of the switch
    const CablingReport r = lab.Analyze("switch");
    QCOMPARE(r.kind, CablingKind::kMixed);
    QVERIFY2(HasProblem(r, "only-through", "n3 is reachable only through n2"), Problems(r).c_str());
    QVERIFY(HasProblem(r, "not-on-switch", "n3"));
  }
  void oneWayLinkIsFlagged() {
    Lab lab(3);
    lab.Cable(0, "r1", 1, "r0");
    lab.Cable(1, "r1", 2, "r0");
    lab.Hear(0, "r0", 2, "r1");  // n0 hears n2, n2 never hears n0
    const CablingReport r = lab.Analyze();
    QVERIFY2(HasProblem(r, "one-way", "n0 (r0) hears n2 (r1) but not the reverse"),
             Problems(r).c_str());
    bool found = false;
    for (const auto& e : r.edges) {
      if (!e.bidirectional) found = true;
    }
    QVERIFY(found);
  }
  void mixedSwitchPlusDirectCable() {
    Lab lab(4);
    lab.Switch({{0, "eth0"}, {1, "eth0"}, {2, "eth0"}, {3, "eth0"}});
    lab.Cable(0, "cx0", 1, "cx0");
    const CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kMixed);
    QVERIFY(HasEdge(r, "n0", "cx0", "n1", "cx0"));
  }
  void silentNodeAndUnreachableNode() {
    Lab lab(4);
    lab.Cable(0, "r1", 1, "r0");
    lab.Cable(1, "r1", 2, "r0");
    lab.Cable(2, "r1", 0, "r0");
    lab.nodes[3].links.beacon_interfaces = {"r0", "r1"};
    CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kPartial);
    QVERIFY2(HasProblem(r, "no-links", "n3 hears no peer and no peer hears it (beacons on r0, r1)"),
             Problems(r).c_str());
    lab.nodes[2].reachable = false;
    lab.nodes[2].error = "connection refused";
    r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kPartial);
    QVERIFY(HasProblem(r, "unreachable", "n2: agent unreachable (connection refused)"));
  }
  void duplicateNodeIdsAreFlagged() {
    Lab lab(3);
    lab.Ring();
    lab.nodes[2].links.node_id = lab.nodes[1].links.node_id;
    const CablingReport r = lab.Analyze();
    QVERIFY2(HasProblem(r, "duplicate-node-id", "n1 and n2 report the same node id"),
             Problems(r).c_str());
  }
  void peersOutsideTheClusterAreReported() {
    Lab lab(2);
    lab.Cable(0, "p0", 1, "p0");
    LinkObservation o{"p1", "id-stranger", "eth9", "10.9.9.9", 1, 0};
    lab.nodes[0].links.observations.push_back(o);
    const CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kDirectPair);
    QVERIFY(HasProblem(r, "unknown-peer", "id-stranger"));
  }
  void declaredRingAndSwitch() {
    Lab lab(4);
    for (auto& n : lab.nodes) n.links.declared_cabling = "ring";
    CablingReport r = lab.Analyze();
    QVERIFY(r.declared);
    QCOMPARE(r.kind, CablingKind::kRing);
    QCOMPARE(r.summary, std::string("declared ring of 4: n0-n1-n2-n3-n0"));
    QVERIFY(HasEdge(r, "n3", "sim1", "n0", "sim0"));
    QCOMPARE(r.edges[0].a_address, std::string("127.0.0.1"));
    // A lost node breaks the declared ring.
    lab.nodes[3].reachable = false;
    r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kPartial);
    QVERIFY(HasProblem(r, "unreachable", "n3"));
    QVERIFY2(HasProblem(r, "ring-link-count", "ring broken at n0"), Problems(r).c_str());

    Lab sw(3);
    for (auto& n : sw.nodes) n.links.declared_cabling = "switch";
    r = sw.Analyze();
    QCOMPARE(r.kind, CablingKind::kSwitch);
    QCOMPARE(r.edges.size(), size_t{3});
    sw.nodes[1].reachable = false;
    QCOMPARE(sw.Analyze().kind, CablingKind::kPartial);
  }
  void nobodyReachable() {
    Lab lab(2);
    lab.nodes[0].reachable = lab.nodes[1].reachable = false;
    const CablingReport r = lab.Analyze();
    QCOMPARE(r.kind, CablingKind::kUnknown);
    QCOMPARE(r.problems.size(), size_t{2});
  }
};

QTEST_APPLESS_MAIN(TestCabling)
#include "test_cabling.moc"
