#include <QtTest>

#include "octet/base/log.h"
#include "octet/base/status.h"

using namespace octet;

namespace {
Result<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("x must be positive, got " + std::to_string(x));
  return x;
}
Result<int> Doubled(int x) {
  OCTET_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return 2 * v;
}
Status Check(int x) {
  OCTET_RETURN_IF_ERROR(ParsePositive(x).status());
  return Status::Ok();
}
}  // namespace

class TestStatus : public QObject {
  Q_OBJECT
 private slots:
  void okByDefault() {
    Status s;
    QVERIFY(s.ok());
    QCOMPARE(s.ToString(), std::string("ok"));
  }
  void errorCarriesCodeAndMessage() {
    Status s = NotFoundError("no tensor 'lm_head.weight'");
    QVERIFY(!s.ok());
    QCOMPARE(s.code(), StatusCode::kNotFound);
    QCOMPARE(s.ToString(), std::string("not found: no tensor 'lm_head.weight'"));
  }
  void contextIsPrepended() {
    Status s = DataLossError("truncated").WithContext("model.safetensors");
    QCOMPARE(s.message(), std::string("model.safetensors: truncated"));
    QVERIFY(Status::Ok().WithContext("x").ok());
  }
  void resultHoldsValueOrError() {
    Result<int> a = Doubled(21);
    QVERIFY(a.ok());
    QCOMPARE(*a, 42);
    Result<int> b = Doubled(-1);
    QVERIFY(!b.ok());
    QCOMPARE(b.status().code(), StatusCode::kInvalidArgument);
    QCOMPARE(b.value_or(7), 7);
  }
  void returnIfErrorPropagates() {
    QVERIFY(Check(3).ok());
    QCOMPARE(Check(0).code(), StatusCode::kInvalidArgument);
  }
  void logSinkReceivesLinesAboveThreshold() {
    std::vector<std::string> lines;
    SetLogSink([&](LogLevel, std::string_view l) { lines.emplace_back(l); });
    SetLogLevel(LogLevel::kWarning);
    OCTET_LOG(INFO) << "hidden";
    OCTET_LOG(WARNING) << "shown " << 3;
    SetLogLevel(LogLevel::kInfo);
    SetLogSink({});
    QCOMPARE(lines.size(), size_t(1));
    QVERIFY(lines[0].find("shown 3") != std::string::npos);
    QCOMPARE(lines[0][0], 'W');
  }
};

QTEST_APPLESS_MAIN(TestStatus)
#include "test_status.moc"
