// `octet plan` through the command line: the verdicts a user acts on (GLM 5.3
// 753B NVFP4 does not fit four 128 GB Sparks and fits eight), one JSON document
// with --json, a model folder as well as a catalog name, and the exit codes of
// the CLI contract (2 usage, 1 failure with a one-line reason).
#include <QtTest>
#include <nlohmann/json.hpp>

#include "octet/app/model_summary.h"
#include "octet/engine/random_checkpoint.h"
#include "octet_test.h"

using octet::test::RunProgram;

namespace {

nlohmann::json PlanJson(std::vector<std::string> args) {
  std::vector<std::string> argv = {"octet", "plan", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProgram(argv);
  if (r.exit_code != 0) qFatal("octet plan failed (%d): %s", r.exit_code, r.output.c_str());
  return nlohmann::json::parse(r.output);  // throws (test fails) if not exactly one document
}

}  // namespace

class TestCmdPlan : public QObject {
  Q_OBJECT
 private slots:
  void glmFitsEightSparksNotFour() {
    const auto four = PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "4",
                                "--node-memory", "128GiB"});
    QCOMPARE(four["fits"].get<bool>(), false);
    QCOMPARE(four["tp"].get<int>(), 4);
    QCOMPARE(four["min_nodes"].get<int>(), 8);
    QCOMPARE(four["per_node"].size(), size_t(4));
    const double weights_gb = four["model"]["weight_bytes"].get<double>() / 1e9;
    QVERIFY2(weights_gb > 460 && weights_gb < 480, std::to_string(weights_gb).c_str());
    const std::string verdict = four["verdict"];
    QVERIFY2(verdict.find("does not fit") == 0, verdict.c_str());

    const auto eight = PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "8"});
    QCOMPARE(eight["fits"].get<bool>(), true);
    for (const auto& n : eight["per_node"]) QVERIFY(n["free_bytes"].get<int64_t>() > 0);
  }

  void humanTableNamesTheVerdict() {
    auto r = RunProgram({"octet", "plan", "--model", "glm-5.3-753b-nvfp4", "--nodes", "4"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.output.find("does not fit 4 nodes") != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("fits on 8 nodes") != std::string::npos, r.output.c_str());
  }

  void modelFolder() {
    OCTET_REQUIRE_FIXTURES();
    const auto p = PlanJson({"--model", octet::test::FixturesDir() + "/qwen3-tiny", "--nodes",
                             "2", "--context", "1024", "--concurrency", "4"});
    QCOMPARE(p["fits"].get<bool>(), true);
    QCOMPARE(p["concurrency"].get<int>(), 4);
    bool tp3_invalid_with_reason = false;
    for (const auto& d : p["tp_degrees"]) {
      if (d["tp"] == 3) tp3_invalid_with_reason = !d["valid"].get<bool>() && d.contains("reason");
    }
    QVERIFY(tp3_invalid_with_reason);
  }

  void badInput() {
    auto unknown = RunProgram({"octet", "plan", "--model", "no-such-model", "--nodes", "2"});
    QCOMPARE(unknown.exit_code, 1);
    QVERIFY2(unknown.output.find("no-such-model") != std::string::npos, unknown.output.c_str());
    QVERIFY2(unknown.output.find("glm-5.3-753b-nvfp4") != std::string::npos,
             unknown.output.c_str());
    auto missing = RunProgram({"octet", "plan", "--nodes", "2"});
    QCOMPARE(missing.exit_code, 2);
    auto bad_nodes = RunProgram({"octet", "plan", "--model", "qwen3-8b", "--nodes", "0"});
    QCOMPARE(bad_nodes.exit_code, 2);
  }

  // The Launch panel's plan budgets the KV cache the workbench's `octet serve`
  // will allocate: float32 keys and values (its default --kv-dtype).
  void launchPlanBudgetsTheServedFloat32Cache() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    octet::engine::RandomModelShape shape;  // 2 layers, 2 kv heads of 16
    const std::string dir = tmp.path().toStdString() + "/m";
    QVERIFY(octet::engine::WriteRandomCheckpoint(shape, dir).ok());
    auto model = octet::app::SummarizeModel(dir);
    QVERIFY2(model.ok(), model.status().ToString().c_str());
    const int64_t context = 1000;
    auto plan = octet::app::PlanModelMemory(*model, 1, int64_t(1) << 30, context, 3);
    QVERIFY2(plan.ok(), plan.status().ToString().c_str());
    QCOMPARE(plan->per_node.size(), size_t(1));
    const int64_t float32_kv = context * 3 * shape.num_layers * 2 * shape.num_kv_heads *
                               shape.head_dim * int64_t(sizeof(float));
    QCOMPARE(plan->per_node[0].kv_cache_bytes, float32_kv);
  }
};

QTEST_APPLESS_MAIN(TestCmdPlan)
#include "test_cmd_plan.moc"
