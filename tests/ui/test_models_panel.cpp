// The Models page driven as a person would, against a Hub on loopback
// (tests/support/loopback_hub.h): typing a repo id and pressing Plan shows the
// planner's verdict from the Hub's file list and config.json without a
// weight fetched (the server counts); Pull downloads it with progress into
// the cache (byte for byte), where the local table lists it with its format
// and architecture; a slow pull is cancelled and the next Pull resumes it
// with Range; Delete removes it.
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>

#include "loopback_hub.h"
#include "random_checkpoint.h"
#include "octet/ui/models_panel.h"

using octet::test::LoopbackHub;
using octet::test::RepoFile;
namespace fs = std::filesystem;

class TestModelsPanel : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  std::unique_ptr<LoopbackHub> hub_;
  std::vector<RepoFile> files_;
  std::string cache_;

  template <typename T>
  T* Find(QWidget* w, const char* name) {
    T* c = w->findChild<T*>(QString::fromLatin1(name));
    if (!c) qFatal("no child %s", name);
    return c;
  }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    const std::string model = tmp_.path().toStdString() + "/model";
    QVERIFY(octet::engine::WriteRandomCheckpoint(octet::engine::RandomModelShape{}, model).ok());
    files_ = octet::test::ReadDir(model);
    files_.push_back({"extra/big.bin", octet::test::Random(2 << 20, 3), true});
    hub_ = std::make_unique<LoopbackHub>();
    hub_->AddRepo("acme/tiny", files_);
    cache_ = tmp_.path().toStdString() + "/cache";
    qputenv("HF_HUB_CACHE", QByteArray::fromStdString(cache_));
    qputenv("HF_HOME", QByteArray::fromStdString(tmp_.path().toStdString() + "/hf-home"));
    qputenv("HF_ENDPOINT", QByteArray::fromStdString(hub_->endpoint()));
    qputenv("HF_TOKEN", "");
    qputenv("HF_HUB_OFFLINE", "");
  }

  void planPullCancelResumeDelete() {
    octet::ui::ModelsPanel panel(nullptr);
    panel.setConfirmDeletes(false);
    panel.setPlanTarget(2, int64_t(1) << 30);
    panel.show();
    QTRY_VERIFY(Find<QLabel>(&panel, "cacheDir")->text().contains(QString::fromStdString(cache_)));
    QCOMPARE(panel.localModelCount(), 0);
    // An empty cache says what to do instead of showing an empty table; no
    // progress bar before a pull.
    QTRY_VERIFY(Find<QLabel>(&panel, "emptyCacheHint")->isVisible());
    QVERIFY(!Find<QTableWidget>(&panel, "localModels")->isVisible());
    QVERIFY(!Find<QProgressBar>(&panel, "pullProgress")->isVisible());
    QVERIFY(!Find<QPushButton>(&panel, "deleteModel")->isEnabled());

    // Plan before download: the verdict, and only config.json was fetched.
    QSignalSpy planned(&panel, &octet::ui::ModelsPanel::planShown);
    QTest::keyClicks(Find<QLineEdit>(&panel, "repoId"), "acme/tiny");
    QTest::mouseClick(Find<QPushButton>(&panel, "planRepo"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(planned.count(), 1, 30'000);
    QVERIFY2(planned.at(0).at(0).toBool(), qPrintable(Find<QLabel>(&panel, "hubVerdict")->text()));
    QVERIFY(panel.planVerdict().contains(QStringLiteral("fits")));
    QVERIFY(panel.planVerdict().contains(QStringLiteral("before download")));
    for (const auto& f : files_) {
      QCOMPARE(hub_->Requests(f.path), f.path == "config.json" ? 1 : 0);
    }

    // A slow Hub: Cancel stops the pull, partial files are kept.
    hub_->ResetCounters();
    hub_->SetChunkDelayMs(40);
    QSignalSpy finished(&panel, &octet::ui::ModelsPanel::pullFinished);
    QTest::mouseClick(Find<QPushButton>(&panel, "pullRepo"), Qt::LeftButton);
    QVERIFY(panel.pulling());
    QVERIFY(Find<QProgressBar>(&panel, "pullProgress")->isVisible());
    QTRY_VERIFY_WITH_TIMEOUT(hub_->BytesSent("extra/big.bin") >= (256 << 10), 30'000);
    QTest::mouseClick(Find<QPushButton>(&panel, "cancelPull"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30'000);
    QCOMPARE(finished.at(0).at(0).toBool(), false);
    QVERIFY(!panel.pulling());
    const int64_t sent_before = hub_->BytesSent("extra/big.bin");
    QVERIFY(sent_before < (2 << 20));

    // Pull again: resumed where it stopped (Range), then complete.
    hub_->SetChunkDelayMs(0);
    hub_->ResetCounters();
    QTest::mouseClick(Find<QPushButton>(&panel, "pullRepo"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 2, 60'000);
    QVERIFY2(finished.at(1).at(0).toBool(), qPrintable(finished.at(1).at(1).toString()));
    QCOMPARE(Find<QProgressBar>(&panel, "pullProgress")->value(), 100);
    QVERIFY(hub_->Ranges("extra/big.bin").front().rfind("bytes=", 0) == 0);
    QVERIFY(hub_->BytesSent("extra/big.bin") < (2 << 20));  // not fetched from the start
    const std::string snap =
        cache_ + "/models--acme--tiny/snapshots/" + std::string(LoopbackHub::kCommit);
    for (const auto& f : files_) {
      QVERIFY2(*octet::ReadFileToString(snap + "/" + f.path) == f.bytes, f.path.c_str());
    }

    // Listed with its format and architecture.
    QTRY_COMPARE_WITH_TIMEOUT(panel.localModelCount(), 1, 10'000);
    auto* table = Find<QTableWidget>(&panel, "localModels");
    QVERIFY(table->isVisible());
    QVERIFY(!Find<QLabel>(&panel, "emptyCacheHint")->isVisible());
    QCOMPARE(table->item(0, 0)->text(), QStringLiteral("acme/tiny"));
    QVERIFY(table->item(0, 4)->text().contains(QStringLiteral("Qwen3")));
    QVERIFY(table->item(0, 3)->text() != QStringLiteral("-"));
    QVERIFY(table->item(0, 5)->text().contains(QString::fromStdString(LoopbackHub::kCommit)));

    // Delete.
    QVERIFY(!Find<QPushButton>(&panel, "deleteModel")->isEnabled());  // nothing selected
    table->selectRow(0);
    QTest::mouseClick(Find<QPushButton>(&panel, "deleteModel"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(panel.localModelCount(), 0, 10'000);
    QTRY_VERIFY(Find<QLabel>(&panel, "emptyCacheHint")->isVisible());
    QVERIFY(!fs::exists(cache_ + "/models--acme--tiny"));
  }
};

QTEST_MAIN(TestModelsPanel)
#include "test_models_panel.moc"
