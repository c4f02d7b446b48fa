// The official OpenAI Python client against `octet serve`
// (openai_client_check.py): logprobs on chat and completions, streamed and
// not, n = 2 (distinct, reproducible with a seed, identical at temperature 0,
// interleaved when streamed, the prompt counted once), 400s for out-of-range
// values, and a model whose generation_config.json says do_sample: false
// serving requests without a temperature greedily. The completions' logprobs
// are then compared with log_softmax (in double, here) of the engine's own
// logits for the same prompt (`octet generate --logits-out`), within 1e-5.
// Skips (77) only when the `openai` package cannot be imported.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>

#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

class TestOpenAiClient : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { OCTET_REQUIRE_FIXTURES(); }

  void officialClient() {
    if (RunProgram({"/usr/bin/env", "python3", "-c", "import openai"}).exit_code != 0) {
      OCTET_SKIP_PREMISE(
          "the openai Python package cannot be imported (installers/install-deps.sh)");
    }
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/model";
    Status w = WriteQwen3WithTokenizer(dir);
    QVERIFY2(w.ok(), w.ToString().c_str());
    {
      std::ofstream f(dir + "/generation_config.json");
      f << R"({"do_sample": false, "temperature": 0.7, "top_p": 0.8, "eos_token_id": 151645})";
    }
    ServerProcess server;
    Status s = server.Start({"--model", dir, "--threads", "1", "--slots", "4", "--context", "256",
                             "--grpc-port", "off"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::string prompt = "9707,11,1879,0,3555,264,1273";
    const std::string result = tmp.path().toStdString() + "/client.json";
    auto r = RunProgram({"/usr/bin/env", "python3",
                         SourceDir() + "/tests/integration/serving/openai_client_check.py",
                         "http://127.0.0.1:" + std::to_string(server.port()), prompt, result},
                        240'000);
    QVERIFY2(r.exit_code == 0, (r.output + "\nserver:\n" + server.output()).c_str());
    auto text = ReadFileToString(result);
    QVERIFY2(text.ok(), text.status().ToString().c_str());
    const json out = json::parse(*text);
    qInfo("openai %s", out["openai_version"].get<std::string>().c_str());
    // The engine's own logits for the same prompt and tokens.
    const std::string npy = tmp.path().toStdString() + "/logits.npy";
    auto g = RunProgram(
        {"octet", "generate", "--model", dir, "--prompt-ids", prompt, "--max-tokens", "6",
         "--temperature", "0", "--ignore-eos", "--threads", "1", "--logits-out", npy, "--json"},
        120'000);
    QVERIFY2(g.exit_code == 0, g.output.c_str());
    auto logits = ReadNpy(npy);
    QVERIFY2(logits.ok(), logits.status().ToString().c_str());
    const std::vector<float> l = logits->AsFloat();
    const int64_t vocab = logits->shape[1];
    const auto ids = out["completion"]["token_ids"].get<std::vector<int>>();
    const auto lps = out["completion"]["token_logprobs"].get<std::vector<double>>();
    const int64_t prompt_len = 7;
    QCOMPARE(logits->shape[0], prompt_len + 6 - 1);
    double worst = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      const float* row = l.data() + (prompt_len - 1 + static_cast<int64_t>(j)) * vocab;
      double mx = row[0];
      for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      int64_t argmax = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        sum += std::exp(double(row[v]) - mx);
        if (row[v] > row[argmax]) argmax = v;
      }
      QCOMPARE(int64_t(ids[j]), argmax);  // greedy, as generate chose
      worst = std::max(worst, std::fabs(lps[j] - (double(row[ids[j]]) - mx - std::log(sum))));
    }
    qInfo("max |served logprob - log_softmax(engine logits)| = %.3g", worst);
    QVERIFY2(worst <= 1e-5, qPrintable(QString::number(worst)));
  }
};

QTEST_GUILESS_MAIN(TestOpenAiClient)
#include "test_openai_client.moc"
