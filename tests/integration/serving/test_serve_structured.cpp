// Structured output and tool calls end to end: `octet serve` on a small
// random-weight Qwen3-shaped model with the real Qwen3 tokenizer and chat
// template, driven by the official `openai` Python client
// (openai_structured_client.py: json_schema output that parses and validates,
// greedy, sampled and streamed; json_object; 400s that name the schema
// keyword; tools in the prompt; forced, required and streamed tool calls and
// the round trip with a tool result). Skipped only when python3 cannot import
// openai.
#include <QtTest>

#include "octet_test.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::test;

class TestServeStructured : public QObject {
  Q_OBJECT
 private:
  std::string dir_;

 private slots:
  void openaiClient() {
    OCTET_REQUIRE_FIXTURES();
    dir_ = QDir::tempPath().toStdString() + "/octet_serve_structured_" +
           std::to_string(QCoreApplication::applicationPid());
    const std::string model = dir_ + "/qwen3-random";
    Status s = WriteQwen3WithTokenizer(model);
    QVERIFY2(s.ok(), s.ToString().c_str());
    ServerProcess server;
    s = server.Start({"--model", model, "--slots", "2", "--context", "2048", "--served-model-name",
                      "qwen3-test", "--grpc-port", "off"});
    QVERIFY2(s.ok(), s.ToString().c_str());
    auto r = RunProgram({"/usr/bin/env", "python3",
                         SourceDir() + "/tests/integration/serving/openai_structured_client.py",
                         server.url(""), "qwen3-test"},
                        240'000);
    server.Stop();
    if (r.exit_code == kSkipExitCode) OCTET_SKIP_PREMISE("python3 cannot import openai");
    QVERIFY2(r.exit_code == 0, (r.output + "\n--- server:\n" + server.output()).c_str());
  }

  void cleanupTestCase() {
    if (!dir_.empty()) QDir(QString::fromStdString(dir_)).removeRecursively();
  }
};

QTEST_GUILESS_MAIN(TestServeStructured)
#include "test_serve_structured.moc"
