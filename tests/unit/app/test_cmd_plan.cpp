// `octet plan` through the command line: the verdicts a user acts on (GLM 5.3
// 753B NVFP4 does not fit four 128 GB Sparks and fits eight), one JSON document
// with --json, a model folder as well as a catalog name, and the exit codes of
// the CLI contract (2 usage, 1 failure with a one-line reason). A mixture-of-
// experts model shows both its total weight memory and the active bytes one
// decode step reads, in the text and in the JSON.
#include <QtTest>
#include <cmath>
#include <cstdio>

#include "octet/app/model_summary.h"
#include "octet/base/json.h"
#include "octet_test.h"
#include "random_checkpoint.h"

using octet::test::RunProgram;

namespace {

nlohmann::json PlanJson(std::vector<std::string> args) {
  std::vector<std::string> argv = {"octet", "plan", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProgram(argv);
  if (r.exit_code != 0) qFatal("octet plan failed (%d): %s", r.exit_code, r.output.c_str());
  return nlohmann::json::parse(r.output);  // throws (test fails) if not exactly one document
}

// "469.9 GB": how the text output quotes decimal gigabytes.
std::string Gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
  return buf;
}

}  // namespace

class TestCmdPlan : public QObject {
  Q_OBJECT
 private slots:
  void glmFitsEightSparksNotFour() {
    const auto four =
        PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "4", "--node-memory", "128GiB"});
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
    const auto p = PlanJson({"--model", octet::test::FixturesDir() + "/qwen3-tiny", "--nodes", "2",
                             "--context", "1024", "--concurrency", "4"});
    QCOMPARE(p["fits"].get<bool>(), true);
    QCOMPARE(p["concurrency"].get<int>(), 4);
    bool tp3_invalid_with_reason = false;
    for (const auto& d : p["tp_degrees"]) {
      if (d["tp"] == 3) tp3_invalid_with_reason = !d["valid"].get<bool>() && d.contains("reason");
    }
    QVERIFY(tp3_invalid_with_reason);
  }

  // GLM 5.3: ~470 GB in the checkpoint, 8 of 208 routed experts read per
  // token; the MTP layers count toward memory only with --speculative mtp.
  void moeTotalAndActiveBytes() {
    const auto p = PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "8"});
    const auto& m = p["model"];
    const int64_t total = m["weight_bytes"], mtp = m["mtp_weight_bytes"];
    const int64_t active = m["active_weight_bytes_per_token"];
    QCOMPARE(m["num_experts"].get<int>(), 208);
    QCOMPARE(m["experts_per_token"].get<int>(), 8);
    QCOMPARE(m["num_mtp_layers"].get<int>(), 3);
    QCOMPARE(m["num_layers"].get<int>(), 96);
    QVERIFY2(active > 40e9 && active < 80e9, std::to_string(active).c_str());
    QVERIFY(active * 5 < total);
    QVERIFY(m["active_params"].get<int64_t>() * 10 < m["params"].get<int64_t>());
    QCOMPARE(p["active_weight_bytes_per_token"].get<int64_t>(), active);
    QCOMPARE(p["load_mtp"].get<bool>(), false);
    QCOMPARE(p["weight_bytes"].get<int64_t>(), total - mtp);
    int64_t held = 0;
    for (const auto& n : p["per_node"]) {
      held += n["weights_bytes"].get<int64_t>();
      const int64_t a = n["active_weight_bytes_per_token"];
      QVERIFY(a > active / 8 && a < active / 4);
    }
    QVERIFY(held >= total - mtp);
    const double tps = p["decode_tokens_per_s"];
    QVERIFY2(tps > 20 && tps < 60, std::to_string(tps).c_str());
    QCOMPARE(p["node_bandwidth_bytes_per_s"].get<double>(), 273e9);
    // Twice the bandwidth, twice the roofline.
    const auto fast =
        PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "8", "--node-bandwidth", "546"});
    QVERIFY(std::fabs(fast["decode_tokens_per_s"].get<double>() - 2 * tps) < 1e-6 * tps);

    const auto with_mtp =
        PlanJson({"--model", "glm-5.3-753b-nvfp4", "--nodes", "8", "--speculative", "mtp"});
    QCOMPARE(with_mtp["load_mtp"].get<bool>(), true);
    QCOMPARE(with_mtp["weight_bytes"].get<int64_t>(), total);
    QCOMPARE(with_mtp["active_weight_bytes_per_token"].get<int64_t>(), active);

    // The text says both figures, as the JSON has them.
    auto r = RunProgram({"octet", "plan", "--model", "glm-5.3-753b-nvfp4", "--nodes", "8"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.output.find("weights " + Gb(total)) != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("active weights per token " + Gb(active) +
                           " (8 of 208 routed experts") != std::string::npos,
             r.output.c_str());
    QVERIFY2(r.output.find("3 MTP layers " + Gb(mtp) + " (not loaded)") != std::string::npos,
             r.output.c_str());
    char decode[64];
    std::snprintf(decode, sizeof decode, "decode: at most %.1f tok/s", tps);
    QVERIFY2(r.output.find(decode) != std::string::npos, r.output.c_str());

    auto bad =
        RunProgram({"octet", "plan", "--model", "glm-5.3-753b-nvfp4", "--speculative", "eagle"});
    QCOMPARE(bad.exit_code, 2);
  }

  // A model folder with routed experts and an MTP layer: both figures, from
  // its safetensors headers.
  void moeFolder() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/glm4-moe-tiny-nvfp4";
    const auto p = PlanJson({"--model", dir, "--nodes", "1"});
    const auto& m = p["model"];
    const int64_t total = m["weight_bytes"], mtp = m["mtp_weight_bytes"];
    const int64_t active = m["active_weight_bytes_per_token"];
    QVERIFY(mtp > 0 && active > 0 && active < total - mtp);
    QCOMPARE(m["num_mtp_layers"].get<int>(), 1);
    QCOMPARE(p["per_node"][0]["weights_bytes"].get<int64_t>(), total - mtp);
    QCOMPARE(p["per_node"][0]["active_weight_bytes_per_token"].get<int64_t>(), active);
    auto r = RunProgram({"octet", "plan", "--model", dir});
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.output.find("active weights per token ") != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("2 of 8 routed experts") != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("in memory " + Gb(total - mtp)) != std::string::npos, r.output.c_str());
  }

  // What the Launch panel shows: total and active bytes, and the estimate.
  void launchSummaryAndPlanCarryActiveBytes() {
    const std::string entry =
        octet::test::SourceDir() + "/resources/models/glm-5.3-753b-nvfp4.json";
    auto s = octet::app::SummarizeCatalogEntry(entry);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    QCOMPARE(s->num_experts, int64_t(208));
    QCOMPARE(s->experts_per_token, int64_t(8));
    QCOMPARE(s->num_mtp_layers, int64_t(3));
    QVERIFY(s->mtp_weight_bytes > 0);
    QVERIFY(s->active_weight_bytes_per_token > 0 &&
            s->active_weight_bytes_per_token * 5 < s->weight_bytes);
    auto plan = octet::app::PlanModelMemory(*s, 8, int64_t(128) << 30);
    QVERIFY2(plan.ok(), plan.status().ToString().c_str());
    QVERIFY(plan->fits);
    QCOMPARE(plan->active_weight_bytes_per_token, s->active_weight_bytes_per_token);
    QCOMPARE(plan->weight_bytes, s->weight_bytes - s->mtp_weight_bytes);  // serve loads no MTP
    QVERIFY(plan->decode_tokens_per_s > 0);
    QCOMPARE(plan->node_bandwidth, 273e9);
    for (const auto& n : plan->per_node) QVERIFY(n.active_weight_bytes_per_token > 0);
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
