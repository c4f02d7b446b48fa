// generation_config.json's sampling defaults (octet/engine/generation_defaults.h)
// and `octet generate` using them: do_sample false makes a model greedy (its
// ids are then the fixture's reference greedy ids, whatever the seed), the
// config's temperature/top_k apply when no flag is given and a flag wins,
// max_new_tokens sets the default length, --show-defaults says where every
// value came from, and a malformed file is an error naming the file and key.
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/generation_defaults.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;
using octet::test::RunProgram;

namespace {

std::string JoinIds(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// A copy of a fixture model with `config` as its generation_config.json.
std::string ModelWith(const QTemporaryDir& tmp, const std::string& name,
                      const std::string& config) {
  const std::string src = test::FixturesDir() + "/qwen3-tiny";
  const std::string dir = tmp.path().toStdString() + "/" + name;
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  if (!config.empty()) std::ofstream(dir + "/generation_config.json") << config;
  return dir;
}

// `octet generate ... --json`: the ids.
std::vector<int> GenerateIds(const std::vector<std::string>& extra, int* exit_code = nullptr) {
  std::vector<std::string> argv = {"octet", "generate", "--threads", "1", "--ignore-eos", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = RunProgram(argv);
  if (exit_code) *exit_code = r.exit_code;
  if (r.exit_code != 0) {
    qWarning("%s", r.output.c_str());
    return {};
  }
  const size_t p = r.output.rfind("\n{");
  const auto j = nlohmann::json::parse(r.output.substr(p == std::string::npos ? 0 : p + 1));
  return j["ids"].get<std::vector<int>>();
}

}  // namespace

class TestGenerationDefaults : public QObject {
  Q_OBJECT
 private slots:
  void parsesAndValidates() {
    auto d = ParseGenerationDefaults(
        R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
            "repetition_penalty": 1.1, "max_new_tokens": 64, "eos_token_id": [1, 2]})",
        "m/generation_config.json");
    QVERIFY2(d.ok(), d.status().ToString().c_str());
    QCOMPARE(*d->temperature, 0.6f);
    QCOMPARE(*d->top_p, 0.95f);
    QCOMPARE(*d->top_k, int64_t(20));
    QCOMPARE(*d->repetition_penalty, 1.1f);
    QCOMPARE(*d->max_new_tokens, int64_t(64));
    auto greedy = ParseGenerationDefaults(R"({"do_sample": false, "temperature": 0.6})", "g");
    QVERIFY(greedy.ok());
    QCOMPARE(*greedy->temperature, 0.0f);
    auto none = ParseGenerationDefaults(R"({"eos_token_id": 2})", "n");
    QVERIFY(none.ok() && none->empty());
    struct Bad {
      const char* text;
      const char* key;
    };
    for (const Bad& b :
         {Bad{R"({"temperature": "hot"})", "\"temperature\""},
          Bad{R"({"top_p": 1.5})", "\"top_p\""}, Bad{R"({"top_p": 0})", "\"top_p\""},
          Bad{R"({"top_k": 2.5})", "\"top_k\""}, Bad{R"({"top_k": -3})", "\"top_k\""},
          Bad{R"({"repetition_penalty": 0})", "\"repetition_penalty\""},
          Bad{R"({"max_new_tokens": 0})", "\"max_new_tokens\""},
          Bad{R"({"do_sample": "yes"})", "\"do_sample\""},
          Bad{R"({"temperature": )", "not valid JSON"}, Bad{R"([1, 2])", "JSON object"}}) {
      auto r = ParseGenerationDefaults(b.text, "/models/x/generation_config.json");
      QVERIFY2(!r.ok(), b.text);
      QCOMPARE(r.status().code(), StatusCode::kInvalidArgument);
      QVERIFY2(r.status().message().find("/models/x/generation_config.json") != std::string::npos,
               r.status().message().c_str());
      QVERIFY2(r.status().message().find(b.key) != std::string::npos, r.status().message().c_str());
    }
  }

  void generateFollowsTheModelsDefaults() {
    OCTET_REQUIRE_FIXTURES();
    const std::string src = test::FixturesDir() + "/qwen3-tiny";
    auto ref = nlohmann::json::parse(*ReadFileToString(src + "/reference.json"));
    const std::string prompt = JoinIds(ref["prompt_ids"].get<std::vector<int>>());
    const auto greedy_ids = ref["generated_ids"].get<std::vector<int>>();
    QTemporaryDir tmp;
    // do_sample false: greedy whatever the seed and the listed temperature.
    const std::string greedy =
        ModelWith(tmp, "greedy", R"({"do_sample": false, "temperature": 1.5, "top_k": 50})");
    for (const char* seed : {"1", "2"}) {
      QCOMPARE(GenerateIds({"--model", greedy, "--prompt-ids", prompt, "--max-tokens", "8",
                            "--seed", seed}),
               greedy_ids);
    }
    // A sampling config: different seeds differ (the config's temperature
    // applies; generate's built-in is greedy), a --temperature 0 flag wins.
    const std::string sampled =
        ModelWith(tmp, "sampled", R"({"temperature": 5.0, "max_new_tokens": 12})");
    const auto a = GenerateIds({"--model", sampled, "--prompt-ids", prompt, "--seed", "1"});
    const auto b = GenerateIds({"--model", sampled, "--prompt-ids", prompt, "--seed", "2"});
    QCOMPARE(a.size(), size_t(12));  // max_new_tokens
    QVERIFY(a != b);
    const auto flag = GenerateIds({"--model", sampled, "--prompt-ids", prompt, "--seed", "1",
                                   "--temperature", "0", "--max-tokens", "8"});
    QCOMPARE(flag, greedy_ids);
    // --show-defaults: each value and where it came from.
    auto show =
        RunProgram({"octet", "generate", "--model", sampled, "--show-defaults", "--top-k", "7"});
    QVERIFY2(show.exit_code == 0, show.output.c_str());
    QVERIFY2(show.output.find("temperature = 5  (generation_config.json: " + sampled) !=
                 std::string::npos,
             show.output.c_str());
    QVERIFY2(show.output.find("top_k = 7  (flag)") != std::string::npos, show.output.c_str());
    QVERIFY2(show.output.find("top_p = 1  (built-in default)") != std::string::npos,
             show.output.c_str());
    QVERIFY2(show.output.find("max_tokens = 12  (generation_config.json") != std::string::npos,
             show.output.c_str());
    auto help = RunProgram({"octet", "generate", "--help", "--model", greedy});
    QVERIFY2(help.exit_code == 0, help.output.c_str());
    QVERIFY2(help.output.find("temperature = 0 (greedy: do_sample is false)") != std::string::npos,
             help.output.c_str());
    // Malformed: exit 1, the file and the key named.
    const std::string bad = ModelWith(tmp, "bad", R"({"top_p": "high"})");
    int code = 0;
    QVERIFY(GenerateIds({"--model", bad, "--prompt-ids", prompt}, &code).empty());
    QCOMPARE(code, 1);
    auto r = RunProgram({"octet", "generate", "--model", bad, "--prompt-ids", prompt});
    QVERIFY2(r.output.find(bad + "/generation_config.json: \"top_p\"") != std::string::npos,
             r.output.c_str());
  }
};

QTEST_GUILESS_MAIN(TestGenerationDefaults)
#include "test_generation_defaults.moc"
