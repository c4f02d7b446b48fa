// `octet generate` as a user runs it: ids and logits against the fixtures,
// the JSON contract, and exit codes for bad input.
#include <QtTest>
#include <cmath>
#include <nlohmann/json.hpp>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet_test.h"

using octet::test::RunProgram;

namespace {
std::string JoinIds(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}
}  // namespace

class TestGenerateCli : public QObject {
  Q_OBJECT
 private slots:
  void jsonIdsAndLogitsMatchFixture() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/qwen3-tiny-nvfp4";
    auto ref = nlohmann::json::parse(*octet::ReadFileToString(dir + "/reference.json"));
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto gen = ref["generated_ids"].get<std::vector<int>>();
    QTemporaryDir tmp;
    const std::string npy = tmp.path().toStdString() + "/logits.npy";
    auto r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", JoinIds(prompt),
                         "--max-tokens", "8", "--ignore-eos", "--threads", "2", "--json",
                         "--logits-out", npy});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    // stdout holds exactly one JSON document (the last line; progress goes to stderr).
    const std::string line = r.output.substr(r.output.rfind('{'));
    auto j = nlohmann::json::parse(line);
    QCOMPARE(j["ids"].get<std::vector<int>>(), gen);
    QCOMPARE(j["prompt_tokens"].get<int>(), int(prompt.size()));
    QCOMPARE(j["tp"].get<int>(), 1);
    for (const char* k : {"prefill_tps", "decode_tps", "ttft_ms"}) QVERIFY(j[k].is_number());
    QVERIFY(j.contains("text"));
    auto got = octet::ReadNpy(npy);
    auto want = octet::ReadNpy(dir + "/logits.npy");
    QVERIFY(got.ok() && want.ok());
    QCOMPARE(got->shape, want->shape);
    auto g = got->AsFloat(), w = want->AsFloat();
    double d = 0;
    for (size_t i = 0; i < g.size(); ++i) d = std::max(d, std::fabs(double(g[i]) - w[i]));
    QVERIFY2(d <= 2e-3, std::to_string(d).c_str());
  }

  void exitCodes() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/qwen3-tiny";
    auto r = RunProgram({"octet", "generate", "--help"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.output.find("--prompt-ids") != std::string::npos);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt", "hello"});
    QCOMPARE(r.exit_code, 3);
    QVERIFY2(r.output.find("tokenizer") != std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1", "--chat"});
    QCOMPARE(r.exit_code, 3);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,2,320"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("token id 320 at position 2 is out of range") != std::string::npos,
             r.output.c_str());
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1", "--top-p", "0"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,x"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--prompt-ids", "1"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--model", dir + "/missing", "--prompt-ids", "1"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("missing") != std::string::npos, r.output.c_str());
    // Sampling with a seed is reproducible.
    auto a = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "5,6,7",
                         "--temperature", "1.2", "--top-k", "20", "--seed", "7", "--json"});
    auto b = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "5,6,7",
                         "--temperature", "1.2", "--top-k", "20", "--seed", "7", "--json"});
    QCOMPARE(a.exit_code, 0);
    auto ja = nlohmann::json::parse(a.output.substr(a.output.rfind('{')));
    auto jb = nlohmann::json::parse(b.output.substr(b.output.rfind('{')));
    QCOMPARE(ja["ids"], jb["ids"]);
  }
};

QTEST_APPLESS_MAIN(TestGenerateCli)
#include "test_generate_cli.moc"
