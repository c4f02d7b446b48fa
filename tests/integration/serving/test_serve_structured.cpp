// Structured output and tool calls end to end: the OpenAI server (in this
// process, as `octet serve` runs it) on a small random-weight Qwen3-shaped
// model with the real Qwen3 tokenizer and chat template, driven over HTTP by
// the official `openai` Python client (openai_structured_client.py:
// json_schema output that parses and validates, greedy, sampled and
// streamed; json_object; 400s that name the schema keyword; tools in the
// prompt; forced, required and streamed tool calls and the round trip with a
// tool result; Llama-3's JSON form of a call, streamed as OpenAI streams
// calls — the head, then the arguments as they are decoded — and not); and
// the same for a Llama-shaped model with a Llama-3.1-style template
// (openai_llama_tools_client.py).
// Skipped only when python3 cannot import openai.
#include <QtTest>
#include <functional>

#include "octet/engine/completion.h"
#include "octet/engine/model_runner.h"
#include "octet/engine/openai_server.h"
#include "octet/engine/scheduler.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"
#include "serving_test_util.h"

using namespace octet;
using namespace octet::engine;
using namespace octet::test;

class TestServeStructured : public QObject {
  Q_OBJECT
 private:
  std::string dir_;

  // Serves the model `write` puts in a scratch folder (as `octet serve` does,
  // in this process) and runs `script` against it with the openai client.
  void ServeAndRun(const std::string& name, const std::function<Status(const std::string&)>& write,
                   const std::string& script) {
    OCTET_REQUIRE_FIXTURES();
    dir_ = QDir::tempPath().toStdString() + "/octet_serve_structured_" +
           std::to_string(QCoreApplication::applicationPid());
    const std::string path = dir_ + "/" + name;
    Status s = write(path);
    QVERIFY2(s.ok(), s.ToString().c_str());
    LoadOptions lo;
    lo.threads = 2;
    auto model = Model::Load(path, lo);
    QVERIFY2(model.ok(), model.status().ToString().c_str());
    auto tok = Tokenizer::Load(path);
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    LocalRunner runner(**model);
    SchedulerOptions so;
    so.num_slots = 2;
    so.context = 2048;
    so.max_batch_tokens = 256;
    Scheduler sched(runner, so);
    QVERIFY(sched.Start().ok());
    CompletionService service(sched, &*tok, name);
    OpenAiServerOptions o;
    o.port = 0;
    auto server = OpenAiServer::Start(service, o);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port());
    auto r = RunProgram({"/usr/bin/env", "python3",
                         SourceDir() + "/tests/integration/serving/" + script, url, name},
                        240'000);
    (*server)->Stop();
    sched.Stop(CancelledError("test over"));
    if (r.exit_code == kSkipExitCode) OCTET_SKIP_PREMISE("python3 cannot import openai");
    QVERIFY2(r.exit_code == 0, r.output.c_str());
  }

 private slots:
  void openaiClient() {
    ServeAndRun(
        "qwen3-test", [](const std::string& p) { return WriteQwen3WithTokenizer(p); },
        "openai_structured_client.py");
  }

  // Llama 3.1's tools section: the tools in the prompt, a forced call, the
  // round trip with the arguments as JSON text, the 400s of its template.
  void llama31Tools() {
    ServeAndRun("llama31-test", WriteLlama31WithTokenizer, "openai_llama_tools_client.py");
  }

  void cleanupTestCase() {
    if (!dir_.empty()) QDir(QString::fromStdString(dir_)).removeRecursively();
  }
};

QTEST_GUILESS_MAIN(TestServeStructured)
#include "test_serve_structured.moc"
