// `octet tokenize` as ../shared/docs/CLI.md specifies it: a JSON array of
// strings on stdin -> a JSON array of id arrays (and back with --decode),
// checked against the fixture ids; non-zero exits with a one-line reason.
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/bpe_trainer.h"
#include "octet_test.h"

using octet::test::RunProgram;
using json = nlohmann::json;

namespace {

// Runs `octet tokenize ARGS < stdin_text` and returns the result.
octet::test::CommandResult Tokenize(const std::string& stdin_text,
                                    const std::vector<std::string>& args, QTemporaryDir& dir) {
  const std::string in = dir.path().toStdString() + "/stdin.json";
  if (!octet::WriteFileAtomic(in, stdin_text).ok()) qFatal("cannot write %s", in.c_str());
  std::string cmd = "exec \"$0\" tokenize";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " < '" + in + "' 2>'" + dir.path().toStdString() + "/stderr'";
  auto r = RunProgram({"/bin/sh", "-c", cmd, octet::test::BinDir() + "/octet"}, 60'000);
  return r;
}

// A small trained tokenizer whose post-processor puts <s> in front when asked;
// returns its folder.
std::string SmallTokenizer(QTemporaryDir& dir) {
  octet::engine::BpeTrainerOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<s>"};
  auto text = octet::engine::TrainBpeTokenizerJson("hello world, hello tokens, hello again", o);
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  json j = json::parse(*text);
  // The corpus is tiny, so training stops early: <s> is the last id, whatever it is.
  const int bos = j["added_tokens"][0]["id"];
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}})");
  j["post_processor"]["special_tokens"]["<s>"]["ids"][0] = bos;
  const std::string folder = dir.path().toStdString() + "/small";
  if (!octet::MakeDirs(folder).ok() ||
      !octet::WriteFileAtomic(folder + "/tokenizer.json", j.dump()).ok()) {
    qFatal("cannot write the small tokenizer");
  }
  return folder;
}

std::string Stderr(QTemporaryDir& dir) {
  return octet::ReadFileToString(dir.path().toStdString() + "/stderr").value_or("");
}

}  // namespace

class TestCmdTokenize : public QObject {
  Q_OBJECT
 private slots:
  void encodesAndDecodesLikeTheFixtures() {
    OCTET_REQUIRE_FIXTURES();
    QTemporaryDir dir;
    const std::string tok = octet::test::FixturesDir() + "/tokenizers/qwen3";
    auto r = Tokenize(R"(["Hello world", "<|im_start|>user\nHello!<|im_end|>\n", ""])",
                      {"--tokenizer", tok}, dir);
    QCOMPARE(r.exit_code, 0);
    QCOMPARE(json::parse(r.output),
             json::parse("[[9707,1879],[151644,872,198,9707,0,151645,198],[]]"));

    r = Tokenize("[[9707,1879],[151644,872,198,13048,1052,151645]]",
                 {"--tokenizer", tok + "/tokenizer.json", "--decode", "--skip-special", "--json"},
                 dir);
    QCOMPARE(r.exit_code, 0);
    QCOMPARE(json::parse(r.output), json::parse(R"(["Hello world", "user\nHi there"])"));
  }

  void addSpecialOnlyWhenAsked() {
    QTemporaryDir dir;
    const std::string tok = SmallTokenizer(dir);
    auto plain = Tokenize(R"(["hello"])", {"--tokenizer", tok}, dir);
    auto special = Tokenize(R"(["hello"])", {"--tokenizer", tok, "--add-special"}, dir);
    QCOMPARE(plain.exit_code, 0);
    QCOMPARE(special.exit_code, 0);
    const json a = json::parse(plain.output), b = json::parse(special.output);
    QCOMPARE(b[0].size(), a[0].size() + 1);
    QCOMPARE(std::vector<int>(b[0].begin() + 1, b[0].end()), a[0].get<std::vector<int>>());
    // Written in the text, <s> is recognised, unless --split-special.
    auto written = Tokenize(R"(["<s>hello"])", {"--tokenizer", tok}, dir);
    QCOMPARE(json::parse(written.output), b);
    auto split = Tokenize(R"(["<s>"])", {"--tokenizer", tok, "--split-special"}, dir);
    QCOMPARE(json::parse(split.output)[0].size(), size_t(3));
  }

  void badInputIsAUsageError() {
    QTemporaryDir dir;
    const std::string tok = SmallTokenizer(dir);
    auto r = Tokenize("not json", {"--tokenizer", tok}, dir);
    QCOMPARE(r.exit_code, 2);
    QVERIFY(Stderr(dir).find("not valid JSON") != std::string::npos);
    r = Tokenize("[1, 2]", {"--tokenizer", tok}, dir);
    QCOMPARE(r.exit_code, 2);
    r = Tokenize("[[1, 999999]]", {"--tokenizer", tok, "--decode"}, dir);
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(Stderr(dir).find("999999") != std::string::npos, Stderr(dir).c_str());
    r = Tokenize("[[1, -3]]", {"--tokenizer", tok, "--decode"}, dir);
    QCOMPARE(r.exit_code, 2);
    r = Tokenize("[\"x\"]", {}, dir);
    QCOMPARE(r.exit_code, 2);
    r = Tokenize("[\"x\"]", {"--tokenizer", tok, "--bogus"}, dir);
    QCOMPARE(r.exit_code, 2);
  }

  void missingOrBrokenTokenizerIsAFailure() {
    QTemporaryDir dir;
    auto r = Tokenize("[\"x\"]", {"--tokenizer", dir.path().toStdString() + "/nope"}, dir);
    QCOMPARE(r.exit_code, 1);
    const std::string broken = dir.path().toStdString() + "/tokenizer.json";
    QVERIFY(octet::WriteFileAtomic(broken, "{\"model\": {\"type\": \"BPE\", \"vocab\": {").ok());
    r = Tokenize("[\"x\"]", {"--tokenizer", broken}, dir);
    QCOMPARE(r.exit_code, 1);
    const std::string err = Stderr(dir);
    QVERIFY2(err.find("tokenizer.json: not valid JSON at byte") != std::string::npos, err.c_str());
    QCOMPARE(std::count(err.begin(), err.end(), '\n'), 1L);  // one line
  }

  void helpExitsZero() {
    QTemporaryDir dir;
    auto r = Tokenize("", {"--help"}, dir);
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.output.find("--tokenizer PATH") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestCmdTokenize)
#include "test_cmd_tokenize.moc"
