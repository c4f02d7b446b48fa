// The deployment file and placement (octet/app/deployment.h), without a
// cluster: malformed files give FILE:LINE:COL errors, unknown keys the nearest
// known one, an alias bomb is refused before it expands; the seed's layout
// (3 x TP 2 + 2 x TP 1) on an 8-node ring puts each TP group on neighbours
// and every replica on nodes of its own; 9 nodes' worth is refused with the
// count; a TP group that needs any-to-any links on a ring is refused with the
// reason (switch cabling places it); a replica that does not fit a node's
// memory (as `octet plan` counts it, from a fixture model's own files) names
// the instance, the node and the shortfall. The capacity `octet route plan`
// predicts: per-replica rates from a stored bench run of the model at its TP
// degree, else the policy's capacity; more than two instances; a node that is
// not up is named with why.
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <set>

#include "octet/app/bench_store.h"
#include "octet/app/deployment.h"
#include "octet/base/json.h"
#include "octet/engine/memory_plan.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;

namespace {

const char* kLayout = R"(version: 1
name: demo
instances:
  - name: large
    model: /models/large
    tp: 2
    replicas: 3
  - name: small
    model: /models/small
    tp: 1
    replicas: 2
router:
  policy: policy.yaml
)";

PlacementInput Cluster(int n, const std::string& cabling, int64_t memory = int64_t{128} << 30) {
  PlacementInput in;
  for (int i = 1; i <= n; ++i) {
    in.nodes.push_back({"spark" + std::to_string(i), memory, true});
    if (cabling == "ring") in.ring_order.push_back("spark" + std::to_string(i));
  }
  in.cabling = cabling;
  return in;
}

std::shared_ptr<const Deployment> Parse(const std::string& yaml) {
  auto r = ParseDeployment(yaml, "/srv/octet/d.yaml");
  if (!r.ok()) qWarning("%s", r.status().message().c_str());
  return r.deployment;
}

std::string AllErrors(const DeploymentParseResult& r) {
  std::string s;
  for (const auto& e : r.errors) s += e.ToString() + "\n";
  return s;
}

}  // namespace

class TestDeployment : public QObject {
  Q_OBJECT
 private slots:
  void parsesTheSeedLayout() {
    auto d = Parse(kLayout);
    QVERIFY(d);
    QCOMPARE(d->name, std::string("demo"));
    QCOMPARE(d->instances.size(), size_t(2));
    QCOMPARE(d->instances[0].tp, 2);
    QCOMPARE(d->instances[0].replicas, 3);
    QCOMPARE(d->node_count(), 8);
    QCOMPARE(d->replica_count(), 5);
    QVERIFY(d->router.present);
    // A relative policy path is the deployment file's folder's.
    QCOMPARE(d->router.policy, std::string("/srv/octet/policy.yaml"));
  }

  void everyErrorHasFileLineColumn() {
    const std::string yaml = R"(version: 1
name: demo
instances:
  - name: large
    model: /m
    tp: two
    replics: 3
  - name: large
    model: /m
    transport: carrier-pigeon
rooter:
  policy: p.yaml
)";
    auto r = ParseDeployment(yaml, "d.yaml");
    QVERIFY(!r.ok());
    const std::string all = AllErrors(r);
    QVERIFY2(r.errors.size() >= 5, all.c_str());
    for (const auto& e : r.errors) {
      QCOMPARE(e.file, std::string("d.yaml"));
      QVERIFY2(e.line > 0 && e.column > 0, e.ToString().c_str());
    }
    // The lines and columns of the mistakes, and the nearest known keys.
    QVERIFY2(all.find("d.yaml:6:9: 'tp' must be an integer") != std::string::npos, all.c_str());
    QVERIFY2(all.find("d.yaml:7:5: unknown key 'replics' in instance 'large' (did you mean "
                      "'replicas'?)") != std::string::npos,
             all.c_str());
    QVERIFY2(
        all.find("d.yaml:10:16: 'transport' must be one of tcp, verbs, shm") != std::string::npos,
        all.c_str());
    QVERIFY2(all.find("d.yaml:11:1: unknown key 'rooter' in the deployment (did you mean "
                      "'router'?)") != std::string::npos,
             all.c_str());
    QVERIFY2(all.find("instance name 'large' is used twice (first at line 4)") != std::string::npos,
             all.c_str());
  }

  void structuralErrors() {
    struct Case {
      const char* yaml;
      const char* where;
      const char* words;
    } cases[] = {
        {"", "f.yaml:1:1:", "empty"},
        {"version: 1\nname: x\n", "f.yaml:1:1:", "missing required key 'instances'"},
        {"version: 2\nname: x\ninstances: [{name: a, model: /m}]\n",
         "f.yaml:1:10:", "version 1 is"},
        {"version: 1\nname: 'a b'\ninstances: [{name: a, model: /m}]\n",
         "f.yaml:2:7:", "only letters"},
        {"version: 1\nname: x\ninstances: []\n", "f.yaml:3:12:", "non-empty list"},
        // A value that is not a short token is described, never echoed back
        // (a path pointed at some other file must not print its lines).
        {"version: 1\nname: 'root:x:0:0:root /root /bin/bash'\ninstances: [{name: a, model: "
         "/m}]\n",
         "f.yaml:2:7:", "got a value of 31 characters"},
        {"version: 1\nname: x\ninstances: [{name: a, model: /m, kv_dtype: 'secret text'}]\n",
         "f.yaml:3:", "got a value of 11 characters"},
        {"version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\n    tp: 2\n    nodes: "
         "[n1]\n",
         "f.yaml:7:12:", "lists 1 nodes, but 1 replica x TP 2 need 2"},
        {"version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\n    nodes: [n1]\n  - "
         "name: b\n    model: /m\n    nodes: [n1]\n",
         "f.yaml:7:5:", "node 'n1' is given to instance 'a' and to instance 'b'"},
        {"version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\n    kv_memory: lots\n",
         "f.yaml:6:16:", "a size like 4GiB"},
        {"version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\nrouter:\n  node: n1\n",
         "f.yaml:7:3:", "missing required key 'policy' in 'router'"},
        {"version: 1\nname: x\ninstances:\n  - name: a\n    tp: 9\n",
         "f.yaml:4:5:", "missing required key 'model'"},
        {"version: 1\nname: x\ninstances: [{name: a, model: /m}\n", "f.yaml:", "YAML syntax"},
    };
    for (const auto& c : cases) {
      auto r = ParseDeployment(c.yaml, "f.yaml");
      QVERIFY2(!r.ok(), c.yaml);
      const std::string all = AllErrors(r);
      QVERIFY2(all.find(c.where) != std::string::npos,
               (std::string(c.where) + " in\n" + all).c_str());
      QVERIFY2(all.find(c.words) != std::string::npos,
               (std::string(c.words) + " in\n" + all).c_str());
    }
  }

  void aliasBombIsRefusedBeforeExpanding() {
    std::string yaml = "version: 1\nname: x\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 9; ++i) {
      yaml += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int k = 0; k < 10; ++k)
        yaml += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
      yaml += "]\n";
    }
    yaml += "instances: [{name: a, model: /m}]\n";
    auto r = ParseDeployment(yaml, "bomb.yaml");
    QVERIFY(!r.ok());
    QCOMPARE(r.errors.size(), size_t(1));
    QVERIFY2(r.errors[0].ToString().rfind("bomb.yaml:", 0) == 0, r.errors[0].ToString().c_str());
    QVERIFY2(r.errors[0].line > 0, r.errors[0].ToString().c_str());
  }

  // What `deploy watch` and the workbench's watch act on: every replica the
  // file asks for that is not ready or starting, and the router.
  void whatIsAmissNamesEachReplicaNotRunning() {
    auto d = Parse(kLayout);
    QVERIFY(d);
    auto replica = [](const std::string& name, const std::string& state,
                      const std::string& error = "") {
      DeployedReplica r;
      r.replica = name;
      r.state = state;
      r.error = error;
      return r;
    };
    DeploymentStatus st;
    st.name = "demo";
    for (const char* n : {"large-0", "large-1", "large-2", "small-0", "small-1"})
      st.instances.push_back(replica(n, "ready"));
    st.has_router = true;
    st.router = replica("router", "starting");
    st.router.router = true;
    QCOMPARE(WhatIsAmiss(*d, {st}), std::string());
    // Another deployment's replicas do not count.
    DeploymentStatus other = st;
    other.name = "other";
    QCOMPARE(
        WhatIsAmiss(*d, {other}),
        std::string("large-0 is not running; large-1 is not running; large-2 is not running; "
                    "small-0 is not running; small-1 is not running; the router is not running"));
    st.instances[1] = replica("large-1", "failed", "rank 0 on node spark3: killed by signal 9");
    st.instances.pop_back();  // small-1 missing
    st.router.state = "stopped";
    QCOMPARE(WhatIsAmiss(*d, {other, st}),
             std::string("large-1 failed (rank 0 on node spark3: killed by signal 9); small-1 is "
                         "not running; the router stopped"));
    // Replicas beyond the file's count (left by an older version) are not its concern.
    d = Parse(
        std::string(kLayout).replace(std::string(kLayout).find("replicas: 3"), 11, "replicas: 1"));
    QVERIFY(d);
    QCOMPARE(WhatIsAmiss(*d, {st}), std::string("small-1 is not running; the router stopped"));
  }

  void seedLayoutOnAnEightNodeRing() {
    auto d = Parse(kLayout);
    QVERIFY(d);
    const Placement p = PlaceDeployment(*d, Cluster(8, "ring"));
    QVERIFY2(p.ok(), p.errors.empty() ? "" : p.errors[0].c_str());
    QCOMPARE(p.replicas.size(), size_t(5));
    std::set<std::string> used;
    for (const auto& r : p.replicas) {
      for (const auto& n : r.nodes) QVERIFY2(used.insert(n).second, ("twice: " + n).c_str());
      if (r.instance == "large") {
        QCOMPARE(r.nodes.size(), size_t(2));
        // Neighbours on the ring spark1-spark2-...-spark8-spark1.
        const int a = std::stoi(r.nodes[0].substr(5)), b = std::stoi(r.nodes[1].substr(5));
        QVERIFY2(std::abs(a - b) == 1 || std::abs(a - b) == 7,
                 (r.nodes[0] + " " + r.nodes[1]).c_str());
      } else {
        QCOMPARE(r.nodes.size(), size_t(1));
      }
    }
    QCOMPARE(used.size(), size_t(8));
    QCOMPARE(p.replicas[0].replica, std::string("large-0"));
    QCOMPARE(p.replicas[4].replica, std::string("small-1"));
    QVERIFY(!p.router_node.empty());
  }

  void nineNodesAreRefused() {
    auto d = Parse(
        std::string(kLayout).replace(std::string(kLayout).find("replicas: 2"), 11, "replicas: 3"));
    QVERIFY(d);
    const Placement p = PlaceDeployment(*d, Cluster(8, "switch"));
    QVERIFY(!p.ok());
    QVERIFY2(p.errors[0].find("needs 9 nodes") != std::string::npos, p.errors[0].c_str());
    QVERIFY2(p.errors[0].find("the cluster has 8") != std::string::npos, p.errors[0].c_str());
  }

  void ringRefusesASplitThatNeedsASwitch() {
    const std::string yaml =
        "version: 1\nname: x\ninstances:\n  - name: big\n    model: /m\n    tp: 3\n    "
        "replicas: 2\n";
    auto d = Parse(yaml);
    QVERIFY(d);
    const Placement ring = PlaceDeployment(*d, Cluster(8, "ring"));
    QVERIFY(!ring.ok());
    QVERIFY2(ring.errors[0].find("any-to-any") != std::string::npos, ring.errors[0].c_str());
    QVERIFY2(ring.errors[0].find("switch") != std::string::npos, ring.errors[0].c_str());
    // A switch carries it.
    const Placement sw = PlaceDeployment(*d, Cluster(8, "switch"));
    QVERIFY2(sw.ok(), sw.errors.empty() ? "" : sw.errors[0].c_str());
    // TP 2 on nodes that are not neighbours on the ring, named in the file.
    auto named = Parse(
        "version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\n    tp: 2\n    nodes: "
        "[spark1, spark3]\n");
    QVERIFY(named);
    const Placement far = PlaceDeployment(*named, Cluster(8, "ring"));
    QVERIFY(!far.ok());
    QVERIFY2(far.errors[0].find("not neighbours") != std::string::npos, far.errors[0].c_str());
    QVERIFY(PlaceDeployment(*named, Cluster(8, "switch")).ok());
    // A name that is not a node of the cluster.
    auto unknown =
        Parse("version: 1\nname: x\ninstances:\n  - name: a\n    model: /m\n    nodes: [spark9]\n");
    const Placement u = PlaceDeployment(*unknown, Cluster(8, "ring"));
    QVERIFY(!u.ok());
    QVERIFY2(u.errors[0].find("'spark9', which is not in the cluster") != std::string::npos,
             u.errors[0].c_str());
  }

  void keptReplicasKeepTheirNodes() {
    auto d = Parse(kLayout);
    PlacementInput in = Cluster(8, "ring");
    in.fixed["large-1"] = {"spark7", "spark8"};
    in.fixed["small-0"] = {"spark1"};
    const Placement p = PlaceDeployment(*d, in);
    QVERIFY2(p.ok(), p.errors.empty() ? "" : p.errors[0].c_str());
    for (const auto& r : p.replicas) {
      if (r.replica == "large-1") QCOMPARE(r.nodes, (std::vector<std::string>{"spark7", "spark8"}));
      if (r.replica == "small-0") QCOMPARE(r.nodes, (std::vector<std::string>{"spark1"}));
    }
  }

  void memoryAsThePlannerCountsIt() {
    OCTET_REQUIRE_FIXTURES();
    const std::string model = test::FixturesDir() + "/qwen3-tiny";
    const std::string yaml = "version: 1\nname: x\ninstances:\n  - name: q\n    model: " + model +
                             "\n    tp: 2\n    slots: 2\n    context: 256\n";
    auto d = Parse(yaml);
    QVERIFY(d);
    // What `octet plan` counts for this model at TP 2 on 4 GiB nodes.
    auto fp = engine::LoadFolderModel(model);
    QVERIFY2(fp.ok(), fp.status().ToString().c_str());
    engine::PlanRequest req;
    req.nodes = 2;
    req.node_memory = int64_t{4} << 30;
    req.context = 256;
    req.concurrency = 2;
    req.kv_dtype = "f32";
    req.activation_dtype = "f32";
    auto plan = engine::PlanMemory(*fp, req);
    QVERIFY2(plan.ok(), plan.status().ToString().c_str());
    PlacementInput in = Cluster(4, "switch", int64_t{4} << 30);
    in.memory = PlannerMemoryEstimator("");
    const Placement p = PlaceDeployment(*d, in);
    QVERIFY2(p.ok(), p.errors.empty() ? "" : p.errors[0].c_str());
    QCOMPARE(p.replicas[0].memory_bytes[0], plan->per_node[0].total_bytes);
    QCOMPARE(p.replicas[0].memory_bytes[1], plan->per_node[1].total_bytes);
    // Nodes of 1 GiB: the reserve alone (at least 2 GiB) does not fit.
    PlacementInput small = Cluster(4, "switch", int64_t{1} << 30);
    small.memory = PlannerMemoryEstimator("");
    const Placement no = PlaceDeployment(*d, small);
    QVERIFY(!no.ok());
    QVERIFY2(no.errors[0].find("instance 'q'") != std::string::npos, no.errors[0].c_str());
    QVERIFY2(no.errors[0].find("does not fit node spark1") != std::string::npos,
             no.errors[0].c_str());
    QVERIFY2(no.errors[0].find("short by") != std::string::npos, no.errors[0].c_str());
    // A TP degree the model's heads do not divide into.
    auto bad = Parse("version: 1\nname: x\ninstances:\n  - name: q\n    model: " + model +
                     "\n    tp: 3\n");
    PlacementInput sw = Cluster(4, "switch", int64_t{4} << 30);
    sw.memory = PlannerMemoryEstimator("");
    const Placement b = PlaceDeployment(*bad, sw);
    QVERIFY(!b.ok());
    QVERIFY2(b.errors[0].find("instance 'q': TP 3") != std::string::npos, b.errors[0].c_str());
    // A folder that is not on this machine (nor in the catalog): unchecked, said so.
    auto away = Parse("version: 1\nname: x\ninstances:\n  - name: q\n    model: /nowhere/m\n");
    const Placement a = PlaceDeployment(*away, sw);
    QVERIFY(a.ok());
    QVERIFY(!a.warnings.empty());
    QVERIFY2(a.warnings[0].find("memory not checked") != std::string::npos, a.warnings[0].c_str());
  }

  void aNodeNotUpIsNamedWithWhy() {
    auto d = Parse(kLayout);
    PlacementInput in = Cluster(8, "ring");
    in.nodes[1].up = false;
    in.nodes[1].down_reason = "lost: no telemetry for 3200 ms";
    const Placement p = PlaceDeployment(*d, in);
    QVERIFY(!p.ok());
    QVERIFY2(p.errors[0].find("node spark2 is not up (lost: no telemetry for 3200 ms)") !=
                 std::string::npos,
             p.errors[0].c_str());
  }

  // Three instances, rates from the policy: the largest TP is the large
  // pool, the other two together the small one, against 8 nodes of large.
  void capacityOfThreeInstancesFromThePolicy() {
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    std::ofstream(root + "/policy.yaml") << R"(version: 1
pools:
  - name: big
    instance: large
    capacity: {nodes_per_replica: 2, requests_per_s: 0.5}
  - name: mid
    instance: medium
    capacity: {nodes_per_replica: 1, requests_per_s: 1.0}
  - name: tiny
    instance: small
    capacity: {nodes_per_replica: 1, requests_per_s: 2.0}
routes:
  - name: rest
    pool: big
)";
    auto r = ParseDeployment(R"(version: 1
name: three
instances:
  - {name: medium, model: /m/medium, tp: 1, replicas: 1}
  - {name: large, model: /m/large, tp: 2, replicas: 2}
  - {name: small, model: /m/small, tp: 1, replicas: 2}
router:
  policy: policy.yaml
)",
                             root + "/d.yaml");
    QVERIFY2(r.ok(), r.status().message().c_str());
    const DeploymentCapacity c = PlanDeploymentCapacity(*r.deployment, 8, "", {0.25, 0.5});
    QVERIFY2(c.available, c.reason.c_str());
    QCOMPARE(c.large, std::string("large"));
    QCOMPARE(c.rates.size(), size_t(3));
    QCOMPARE(c.rates[1].requests_per_s, 0.5);
    QVERIFY2(c.rates[1].source.find("pool 'big'") != std::string::npos, c.rates[1].source.c_str());
    const auto j = nlohmann::json::parse(c.json);
    // By hand: C_large = 2 x 0.5 = 1; C_rest = 1 x 1 + 2 x 2 = 5; baseline
    // 8 / 2 = 4 replicas x 0.5 = 2 req/s.
    QCOMPARE(j["baseline"]["rps"].get<double>(), 2.0);
    QCOMPARE(j["small"]["capacity_rps"].get<double>(), 5.0);
    // f = 0.25: min(1 / 0.25, 5 / 0.75) = 4 (large bound): gain 2.
    QCOMPARE(j["points"][0]["lambda_max_rps"].get<double>(), 4.0);
    QCOMPARE(j["points"][0]["bottleneck"].get<std::string>(), std::string("large"));
    QCOMPARE(j["points"][0]["gain"].get<double>(), 2.0);
    // f = 0.5: min(2, 10) = 2.
    QCOMPARE(j["points"][1]["lambda_max_rps"].get<double>(), 2.0);
    QVERIFY2(c.text.find("medium+small") != std::string::npos, c.text.c_str());
    // One instance alone: its capacity against the cluster serving it.
    auto one = ParseDeployment(
        "version: 1\nname: one\ninstances:\n  - {name: large, model: "
        "/m/large, tp: 2, replicas: 2}\nrouter:\n  policy: policy.yaml\n",
        root + "/one.yaml");
    QVERIFY(one.ok());
    const DeploymentCapacity c1 = PlanDeploymentCapacity(*one.deployment, 8, "");
    QVERIFY2(c1.available, c1.reason.c_str());
    const auto j1 = nlohmann::json::parse(c1.json);
    QCOMPARE(j1["points"][0]["lambda_max_rps"].get<double>(), 1.0);
    QCOMPARE(j1["points"][0]["gain"].get<double>(), 0.5);
    // No rate anywhere: unavailable, naming the instance.
    auto bare = ParseDeployment("version: 1\nname: b\ninstances:\n  - {name: q, model: /m/q}\n",
                                root + "/b.yaml");
    const DeploymentCapacity cb = PlanDeploymentCapacity(*bare.deployment, 8, "");
    QVERIFY(!cb.available);
    QVERIFY2(cb.reason.find("instance 'q'") != std::string::npos, cb.reason.c_str());
  }

  // A stored bench run of the model at the instance's TP degree gives the
  // rate; a run at another TP degree does not.
  void capacityFromAStoredBenchRun() {
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const std::string db = root + "/runs.sqlite";
    {
      auto store = BenchRunStore::Open(db);
      QVERIFY2(store.ok(), store.status().ToString().c_str());
      BenchRun run;
      run.label = "large at tp2";
      run.state = "complete";
      run.topology.tp = 2;
      run.topology.nodes = 2;
      run.topology.model = "large";
      run.provenance.model_path = "/models/large";
      BenchResult low;  // concurrency 1: not the one used
      low.prompt_size = 512;
      low.response_size = 64;
      low.concurrency = 1;
      low.runs = 1;
      low.e2e_ttft = MetricStats::Of({100});
      low.tg_req_throughput = MetricStats::Of({40});
      BenchResult high = low;
      high.concurrency = 4;
      high.e2e_ttft = MetricStats::Of({400, 600});         // mean 500 ms
      high.tg_req_throughput = MetricStats::Of({20, 12});  // mean 16 tok/s
      run.results = {low, high};
      QVERIFY((*store)->InsertRun(run).ok());
      BenchRun other = run;  // the same model at TP 1: not this instance's
      other.label = "tp1";
      other.topology.tp = 1;
      other.results[1].tg_req_throughput = MetricStats::Of({1000});
      QVERIFY((*store)->InsertRun(other).ok());
      // The small model, whose test has only the aggregate decode rate.
      BenchRun small;
      small.state = "complete";
      small.topology.tp = 1;
      small.provenance.model_path = "/models/small";
      BenchResult t;
      t.response_size = 10;
      t.concurrency = 2;
      t.runs = 1;
      t.e2e_ttft = MetricStats::Of({1000});
      t.tg_throughput = MetricStats::Of({30});
      small.results = {t};
      QVERIFY((*store)->InsertRun(small).ok());
    }
    std::ofstream(root + "/policy.yaml") << R"(version: 1
pools:
  - name: big
    instance: large
    capacity: {nodes_per_replica: 2, requests_per_s: 9}
  - name: little
    instance: small
    capacity: {nodes_per_replica: 1, requests_per_s: 1.5}
routes:
  - name: rest
    pool: big
)";
    auto r = ParseDeployment(kLayout, root + "/d.yaml");
    QVERIFY(r.ok());
    Deployment d = *r.deployment;
    d.router.policy = root + "/policy.yaml";
    const DeploymentCapacity c = PlanDeploymentCapacity(d, 8, db, {0.5});
    QVERIFY2(c.available, c.reason.c_str());
    // 4 requests / (0.5 s + 64 tok / 16 tok/s) = 4 / 4.5 req/s per replica.
    QVERIFY2(std::abs(c.rates[0].requests_per_s - 4.0 / 4.5) < 1e-9,
             (std::to_string(c.rates[0].requests_per_s) + " " + c.rates[0].source).c_str());
    QVERIFY(c.rates[0].bench_run > 0);
    QVERIFY2(c.rates[0].source.find("'large at tp2'") != std::string::npos,
             c.rates[0].source.c_str());
    // The small one: 2 / (1 s + 10 tok / (30 / 2 tok/s)) = 1.2 req/s.
    QVERIFY2(std::abs(c.rates[1].requests_per_s - 1.2) < 1e-9, c.rates[1].source.c_str());
    QVERIFY2(c.rates[1].source.find("aggregate") != std::string::npos, c.rates[1].source.c_str());
    // A store path that does not exist is not created, and the policy is used.
    const DeploymentCapacity none = PlanDeploymentCapacity(d, 8, root + "/absent.sqlite", {0.5});
    QVERIFY(none.available);
    QCOMPARE(none.rates[0].requests_per_s, 9.0);
    QCOMPARE(none.rates[1].requests_per_s, 1.5);
    QVERIFY2(none.rates[1].source.find("policy") != std::string::npos,
             none.rates[1].source.c_str());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(root + "/absent.sqlite")));
  }
};

QTEST_GUILESS_MAIN(TestDeployment)
#include "test_deployment.moc"
