// What ctest sees of a test program: a skip never hides a failure, and a
// program is reported skipped only when its premise is absent (exit 77).
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet_test.h"

using octet::test::RunProgram;

namespace {

int Probe(std::vector<std::string> functions, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {
      octet::JoinPath(octet::DirName(*octet::SelfExecutablePath()), "octet_skip_probe")};
  argv.insert(argv.end(), functions.begin(), functions.end());
  const auto r = RunProgram(argv, 30'000, std::move(env));
  if (r.timed_out) return -1000;
  return r.exit_code;
}

}  // namespace

class TestSkipVerdict : public QObject {
  Q_OBJECT
 private slots:
  void aSkippedFunctionDoesNotHideAFailingOne() {
    const int code = Probe({"hardwareSkip", "fails"});
    QVERIFY2(code != 0 && code != octet::test::kSkipExitCode, std::to_string(code).c_str());
  }
  void aSkippedFunctionLeavesTheVerdictToTheOthers() {
    QCOMPARE(Probe({"hardwareSkip", "passes"}), 0);
  }
  void anAbsentPremiseSkipsTheProgram() {
    QCOMPARE(Probe({"premiseAbsent", "passes"}), octet::test::kSkipExitCode);
  }
  void anAbsentPremiseDoesNotHideAFailure() {
    const int code = Probe({"premiseAbsent", "fails"});
    QVERIFY2(code != 0 && code != octet::test::kSkipExitCode, std::to_string(code).c_str());
  }
  void missingFixturesSkipTheProgram() {
    QTemporaryDir empty;
    QCOMPARE(
        Probe({"needsFixtures", "passes"}, {"OCTET_FIXTURES_DIR=" + empty.path().toStdString()}),
        octet::test::kSkipExitCode);
  }
  // No ctest entry of this build may be judged by its output text: each is
  // skipped only through exit code 77.
  void ctestSkipsOnlyThroughTheExitCode() {
    const std::string build_dir = octet::DirName(octet::test::BinDir());
    const auto r = RunProgram(
        {"/usr/bin/env", "ctest", "--test-dir", build_dir, "--show-only=json-v1"}, 60'000);
    QCOMPARE(r.exit_code, 0);
    const auto doc = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
    QVERIFY(doc.is_object());
    int tests = 0;
    for (const auto& t : doc["tests"]) {
      ++tests;
      bool skip_code = false;
      for (const auto& p : t["properties"]) {
        const std::string name = p["name"];
        QVERIFY2(name != "SKIP_REGULAR_EXPRESSION" && name != "PASS_REGULAR_EXPRESSION",
                 (t["name"].get<std::string>() + " is judged by its output").c_str());
        if (name == "SKIP_RETURN_CODE") skip_code = p["value"] == 77;
      }
      QVERIFY2(skip_code, (t["name"].get<std::string>() + " has no SKIP_RETURN_CODE 77").c_str());
    }
    QVERIFY(tests > 50);
  }
};

QTEST_GUILESS_MAIN(TestSkipVerdict)
#include "test_skip_verdict.moc"
