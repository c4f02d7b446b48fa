// Tensor parallelism through the command line, ranks as processes:
// `octet generate --tp N` (this process rank 0, `octet worker` followers) and
// `octet worker` ranks started by hand with exactly the flags octet-agent
// uses. The reference is the same command at TP 1: identical ids, logits
// within 1e-4 relative (max |diff| <= 1e-4 * max |logit|). Also: a degree
// the model cannot take is refused with the reason; workers report
// @octet-figures and end cleanly on SIGTERM.
#include <signal.h>

#include <QtTest>
#include <cmath>

#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/collectives/local_rendezvous.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;
using octet::collectives::LocalRendezvous;

namespace {

std::string ScratchDir() {
  static const std::string d = "/tmp/octet-test-tpcli-" + std::to_string(::getpid());
  return d;
}

std::string Random6Heads() {
  const std::string dir = ScratchDir() + "/qwen3-6h";
  if (PathExists(dir + "/config.json")) return dir;
  engine::RandomModelShape s;
  s.vocab_size = 301;
  s.hidden_size = 48;
  s.intermediate_size = 96;
  s.num_heads = 6;
  s.num_kv_heads = 3;
  s.head_dim = 16;
  Status st = engine::WriteRandomCheckpoint(s, dir);
  if (!st.ok()) qFatal("%s", st.ToString().c_str());
  return dir;
}

std::string ModelDir(const QString& name) {
  if (name == "random-6h") return Random6Heads();
  return FixturesDir() + "/" + name.toStdString();
}

// The JSON document of a run (the last line starting with '{').
json LastJson(const std::string& output) {
  size_t p = output.rfind("\n{");
  p = p == std::string::npos ? (output.rfind('{', 0) == 0 ? 0 : std::string::npos) : p + 1;
  if (p == std::string::npos) return json();
  return json::parse(output.substr(p, output.find('\n', p) - p), nullptr, false);
}

std::pair<double, double> MaxDiff(const std::string& a, const std::string& b) {
  auto x = ReadNpy(a);
  auto y = ReadNpy(b);
  if (!x.ok() || !y.ok() || x->shape != y->shape) return {1e30, 1};
  const auto fa = x->AsFloat(), fb = y->AsFloat();
  double d = 0, m = 0;
  for (size_t i = 0; i < fa.size(); ++i) {
    d = std::max(d, std::fabs(double(fa[i]) - fb[i]));
    m = std::max(m, std::fabs(double(fb[i])));
  }
  return {d, m};
}

const char* kPrompt = "3,141,59,26,53,58,97,93,23,84";

}  // namespace

class TestTpCli : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }
  void cleanupTestCase() {
    std::error_code ec;
    std::filesystem::remove_all(ScratchDir(), ec);
  }

  void generateMatchesTp1_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("tp");
    QTest::addColumn<QString>("transport");
    QTest::addColumn<QString>("algo");
    QTest::addColumn<QString>("kv");  // --kv-dtype of both runs
    QTest::newRow("qwen3-tiny-nvfp4 tp2 tcp ring") << "qwen3-tiny-nvfp4" << 2 << "tcp"
                                                   << "ring"
                                                   << "f32";
    QTest::newRow("llama3-tiny tp4 shm oneshot") << "llama3-tiny" << 4 << "shm"
                                                 << "oneshot"
                                                 << "f32";
    QTest::newRow("random-6h tp3 tcp oneshot") << "random-6h" << 3 << "tcp"
                                               << "oneshot"
                                               << "f32";
    // The followers take rank 0's KV cache type from the reset plan.
    QTest::newRow("qwen2-tiny tp2 shm auto, f16 KV cache") << "qwen2-tiny" << 2 << "shm"
                                                           << "auto"
                                                           << "f16";
  }
  void generateMatchesTp1() {
    QFETCH(QString, model);
    QFETCH(int, tp);
    QFETCH(QString, transport);
    QFETCH(QString, algo);
    QFETCH(QString, kv);
    MakeDirs(ScratchDir()).IgnoreError();
    const std::string dir = ModelDir(model);
    const std::string l1 = ScratchDir() + "/l1.npy", ln = ScratchDir() + "/ln.npy";
    auto one = RunProgram(
        {"octet", "generate", "--model", dir, "--prompt-ids", kPrompt, "--max-tokens", "8",
         "--ignore-eos", "--json", "--logits-out", l1, "--kv-dtype", kv.toStdString()},
        60'000);
    QVERIFY2(one.exit_code == 0, one.output.c_str());
    auto many = RunProgram({"octet",        "generate",
                            "--model",      dir,
                            "--prompt-ids", kPrompt,
                            "--max-tokens", "8",
                            "--ignore-eos", "--json",
                            "--logits-out", ln,
                            "--tp",         std::to_string(tp),
                            "--transport",  transport.toStdString(),
                            "--algo",       algo.toStdString(),
                            "--kv-dtype",   kv.toStdString()},
                           60'000);
    QVERIFY2(many.exit_code == 0, many.output.c_str());
    json a = LastJson(one.output), b = LastJson(many.output);
    QVERIFY2(a.is_object() && b.is_object(), (one.output + many.output).c_str());
    QCOMPARE(b["tp"].get<int>(), tp);
    QCOMPARE(b["ids"], a["ids"]);
    auto [d, m] = MaxDiff(ln, l1);
    QVERIFY2(d <= 1e-4 * m,
             ("max |diff| " + std::to_string(d) + " of " + std::to_string(m)).c_str());
  }

  // MTP speculation with the head sharded over worker processes: the
  // fixture's greedy ids (plain greedy decoding of an independent
  // implementation), logits within 1e-4 relative of plain decoding at TP 1,
  // and drafts made at every step.
  void generateMtpAtTp2_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("transport");
    QTest::addColumn<int>("k");
    QTest::newRow("glm4-moe-tiny tp2 shm k2") << "glm4-moe-tiny"
                                              << "shm" << 2;
    QTest::newRow("glm4-moe-tiny-nvfp4 tp2 tcp k3") << "glm4-moe-tiny-nvfp4"
                                                    << "tcp" << 3;
  }
  void generateMtpAtTp2() {
    QFETCH(QString, model);
    QFETCH(QString, transport);
    QFETCH(int, k);
    MakeDirs(ScratchDir()).IgnoreError();
    const std::string dir = ModelDir(model);
    const json ref = json::parse(*ReadFileToString(dir + "/reference.json"));
    std::string prompt;
    for (int id : ref["prompt_ids"].get<std::vector<int>>()) {
      prompt += (prompt.empty() ? "" : ",") + std::to_string(id);
    }
    const auto want = ref["generated_ids"].get<std::vector<int>>();
    const std::string n = std::to_string(want.size());
    const std::string l1 = ScratchDir() + "/m1.npy", ln = ScratchDir() + "/mn.npy";
    auto plain = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", prompt,
                             "--max-tokens", n, "--ignore-eos", "--json", "--logits-out", l1},
                            60'000);
    QVERIFY2(plain.exit_code == 0, plain.output.c_str());
    auto spec = RunProgram({"octet",         "generate", "--model",        dir,
                            "--prompt-ids",  prompt,     "--max-tokens",   n,
                            "--ignore-eos",  "--json",   "--logits-out",   ln,
                            "--tp",          "2",        "--transport",    transport.toStdString(),
                            "--speculative", "mtp",      "--draft-tokens", std::to_string(k)},
                           60'000);
    QVERIFY2(spec.exit_code == 0, spec.output.c_str());
    json a = LastJson(plain.output), b = LastJson(spec.output);
    QVERIFY2(a.is_object() && b.is_object(), (plain.output + spec.output).c_str());
    QCOMPARE(b["tp"].get<int>(), 2);
    QCOMPARE(a["ids"].get<std::vector<int>>(), want);
    QCOMPARE(b["ids"].get<std::vector<int>>(), want);
    QVERIFY2(b.contains("speculative") && b["speculative"]["drafted"].get<int>() > 0,
             b.dump().c_str());
    auto [d, m] = MaxDiff(ln, l1);
    QVERIFY2(d <= 1e-4 * m,
             ("max |diff| " + std::to_string(d) + " of " + std::to_string(m)).c_str());
  }

  void refusesADegreeTheModelCannotTake() {
    auto r = RunProgram({"octet", "generate", "--model", FixturesDir() + "/qwen3-tiny",
                         "--prompt-ids", "1,2,3", "--tp", "3"},
                        60'000);
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("4 query heads are not divisible by 3") != std::string::npos,
             r.output.c_str());
    // Refused from config.json before any rank starts: one line, no rank's
    // load error or poisoned communicator after it.
    QVERIFY2(r.output.find("[rank") == std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("octet worker") == std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "serve", "--model", FixturesDir() + "/qwen3-tiny", "--tp", "3"},
                   60'000);
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("TP 3 does not fit the model") != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("[rank") == std::string::npos, r.output.c_str());
  }

  // Ranks started as octet-agent starts them; rank 0 runs one generation.
  void workersWithTheAgentContract() {
    const std::string dir = FixturesDir() + "/qwen2-tiny";
    auto one = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", kPrompt,
                           "--max-tokens", "6", "--ignore-eos", "--json"});
    QCOMPARE(one.exit_code, 0);
    // Bound before either rank starts and handed to rank 0, as the agent does.
    auto rv = LocalRendezvous::Open();
    QVERIFY2(rv.ok(), rv.status().ToString().c_str());
    const std::string rdv = rv->address();
    SpawnOptions o;
    o.argv = {BinDir() + "/octet", "worker", "--job",  "inference", "--model",      dir,
              "--world-size",      "2",      "--rank", "1",         "--rendezvous", rdv,
              "--transport",       "tcp",    "--algo", "ring",      "--threads",    "1"};
    auto follower_out = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    o.on_output = [follower_out, mu](std::string_view c) {
      std::lock_guard<std::mutex> lock(*mu);
      follower_out->append(c);
    };
    o.env = {"OCTET_JOB_ID=test-job", "OCTET_NODE_ID=test-node"};
    auto follower = Subprocess::Spawn(o);
    QVERIFY(follower.ok());
    auto leader = RunProgram(
        {"octet",        "worker", "--job",        "inference", "--model",      dir,
         "--world-size", "2",      "--rank",       "0",         "--rendezvous", rdv,
         "--transport",  "tcp",    "--algo",       "ring",      "--threads",    "1",
         "--prompt-ids", kPrompt,  "--max-tokens", "6",         "--ignore-eos", "--json"},
        60'000,
        {"OCTET_JOB_ID=test-job", "OCTET_NODE_ID=test-node", LocalRendezvous::EnvFor({&*rv})});
    QVERIFY2(leader.exit_code == 0, leader.output.c_str());
    QCOMPARE(LastJson(leader.output)["ids"], LastJson(one.output)["ids"]);
    auto st = (*follower)->Wait(Deadline::AfterMs(20'000));
    QVERIFY(st.ok());
    QCOMPARE(st->code, 0);
    std::lock_guard<std::mutex> lock(*mu);
    QVERIFY2(follower_out->find("@octet-figures {\"state\":\"loading\"}") != std::string::npos,
             follower_out->c_str());
  }

  // A serving pair: figures from both ranks, then SIGTERM to both ends them cleanly.
  void serveWorkersStopOnSigterm() {
    const std::string dir = FixturesDir() + "/qwen3-tiny";
    auto rv = LocalRendezvous::Open();  // bound before rank 0 starts, handed to it
    QVERIFY2(rv.ok(), rv.status().ToString().c_str());
    const std::string rdv = rv->address();
    std::vector<std::unique_ptr<Subprocess>> ranks;
    std::vector<std::shared_ptr<std::string>> outs;
    auto mu = std::make_shared<std::mutex>();
    for (int r = 0; r < 2; ++r) {
      SpawnOptions o;
      o.argv = {BinDir() + "/octet",
                "worker",
                "--job",
                "inference",
                "--model",
                dir,
                "--world-size",
                "2",
                "--rank",
                std::to_string(r),
                "--rendezvous",
                rdv,
                "--transport",
                "shm",
                "--algo",
                "auto",
                "--threads",
                "1"};
      if (r == 0) o.argv.insert(o.argv.end(), {"--port", "0"});
      auto out = std::make_shared<std::string>();
      o.on_output = [out, mu](std::string_view c) {
        std::lock_guard<std::mutex> lock(*mu);
        out->append(c);
      };
      if (r == 0) o.env.push_back(LocalRendezvous::EnvFor({&*rv}));
      auto p = Subprocess::Spawn(o);
      if (r == 0) rv->Close();
      QVERIFY(p.ok());
      ranks.push_back(std::move(*p));
      outs.push_back(out);
    }
    auto both_reported = [&] {
      std::lock_guard<std::mutex> lock(*mu);
      return outs[0]->find("\"state\":\"serving\"") != std::string::npos &&
             outs[1]->find("\"state\":\"following\"") != std::string::npos;
    };
    for (const Deadline d = Deadline::AfterMs(20'000); !d.expired() && !both_reported();) {
      QThread::msleep(50);
    }
    QVERIFY2(both_reported(), (*outs[0] + *outs[1]).c_str());
    for (auto& p : ranks) p->Kill(SIGTERM);
    for (int r = 0; r < 2; ++r) {
      auto st = ranks[r]->Wait(Deadline::AfterMs(20'000));
      QVERIFY(st.ok());
      QVERIFY2(st->exited && st->code == 0, (st->ToString() + *outs[r]).c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestTpCli)
#include "test_tp_cli.moc"
