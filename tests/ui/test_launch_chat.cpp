// The Launch and Chat panels driven as a person would: pick a model folder
// (a small random Qwen3-shaped checkpoint carrying the real Qwen3 tokenizer
// from the fixtures), see its architecture and the planner's verdict, launch
// an inference instance (`octet serve` from the build), watch it become
// ready, then chat with it: the reply streams in as several pieces, gets its
// TTFT/decode figures, can be regenerated, copied and cleared, and the
// conversation is saved and reopened. Catalog entries plan but do not launch;
// a folder that is not a model says why.
#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QDoubleSpinBox>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QtTest>
#include "octet/ui/chat_panel.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/main_window.h"
#include "octet/ui/resources.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::MainWindow;


class TestLaunchChat : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  QString model_;

  ui::WorkbenchOptions Offline() { return test::OfflineWorkbench(dir_); }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
    model_ = dir_.path() + "/qwen3-chat";
    const Status s = test::WriteChatModel(model_.toStdString());
    QVERIFY2(s.ok(), s.ToString().c_str());
  }

  void notAModelSaysWhy() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.showPanel(MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    QVERIFY(launch);
    QSignalSpy shown(launch, &ui::LaunchPanel::modelSummaryShown);
    auto* folder = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
    folder->lineEdit()->clear();
    QTest::keyClicks(folder->lineEdit(), dir_.path() + "/no-such-model");
    QTest::keyClick(folder->lineEdit(), Qt::Key_Return);
    QVERIFY(shown.wait(10'000));
    QCOMPARE(shown.first().first().toBool(), false);
    auto* info = launch->findChild<QLabel*>(QStringLiteral("modelInfo"));
    QVERIFY2(info->text().contains(QStringLiteral("no-such-model")), qPrintable(info->text()));
    QVERIFY(!launch->findChild<QPushButton*>(QStringLiteral("launchInference"))->isEnabled());
  }

  void catalogEntryPlansButDoesNotLaunch() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    auto* folder = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
    int row = -1;
    for (int i = 0; i < folder->count(); ++i) {
      if (folder->itemData(i).toString().endsWith(QStringLiteral("llama-3.3-70b.json"))) row = i;
    }
    QVERIFY2(row >= 0, "the catalog (resources/models) is listed");
    QSignalSpy planned(launch, &ui::LaunchPanel::planShown);
    folder->setCurrentIndex(row);
    emit folder->activated(row);
    QVERIFY(planned.wait(10'000));
    // 70B in BF16 is ~141 GB: one 128 GiB node cannot hold it (no cluster: one node).
    QCOMPARE(planned.last().first().toBool(), false);
    auto* plan = launch->findChild<QLabel*>(QStringLiteral("memoryPlan"));
    QVERIFY2(plan->text().contains(QStringLiteral("Does not fit")), qPrintable(plan->text()));
    QVERIFY(!launch->findChild<QPushButton*>(QStringLiteral("launchInference"))->isEnabled());
  }

  // A mixture-of-experts entry: the model card says how much of the weights a
  // token reads, the plan says what the nodes hold and what a decode step reads.
  void moeEntryShowsTotalAndActiveWeights() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    auto* folder = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
    int row = -1;
    for (int i = 0; i < folder->count(); ++i) {
      if (folder->itemData(i).toString().endsWith(QStringLiteral("glm-5.3-753b-nvfp4.json")))
        row = i;
    }
    QVERIFY2(row >= 0, "the GLM 5.3 catalog entry is listed");
    QSignalSpy planned(launch, &ui::LaunchPanel::planShown);
    folder->setCurrentIndex(row);
    emit folder->activated(row);
    QVERIFY(planned.wait(10'000));
    auto* info = launch->findChild<QLabel*>(QStringLiteral("modelInfo"));
    QVERIFY2(info->text().contains(QStringLiteral("Read per token")), qPrintable(info->text()));
    QVERIFY2(info->text().contains(QStringLiteral("8 of 208 routed experts active")),
             qPrintable(info->text()));
    QVERIFY2(info->text().contains(QStringLiteral("MTP layer")), qPrintable(info->text()));
    auto* plan = launch->findChild<QLabel*>(QStringLiteral("memoryPlan"));
    QVERIFY2(plan->text().contains(QStringLiteral("in memory")), qPrintable(plan->text()));
    QVERIFY2(plan->text().contains(QStringLiteral("a decode step reads")),
             qPrintable(plan->text()));
  }

  void launchThenChatStreams() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::keyClick(&w, Qt::Key_2, Qt::ControlModifier);
    QCOMPARE(w.currentPanel(), MainWindow::Panel::kLaunch);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    QSignalSpy shown(launch, &ui::LaunchPanel::modelSummaryShown);
    QSignalSpy planned(launch, &ui::LaunchPanel::planShown);
    auto* folder = launch->findChild<QComboBox*>(QStringLiteral("modelFolder"));
    folder->lineEdit()->clear();
    QTest::keyClicks(folder->lineEdit(), model_);
    QTest::keyClick(folder->lineEdit(), Qt::Key_Return);
    QVERIFY(shown.wait(10'000));
    QVERIFY(shown.first().first().toBool());
    auto* info = launch->findChild<QLabel*>(QStringLiteral("modelInfo"));
    QVERIFY2(info->text().contains(QStringLiteral("Qwen3ForCausalLM")), qPrintable(info->text()));
    QVERIFY(info->text().contains(QStringLiteral("tokenizer.json")));
    QVERIFY(planned.count() > 0 || planned.wait(10'000));
    QCOMPARE(planned.last().first().toBool(), true);  // a tiny model fits one node

    // TP 1 is the only choice without a cluster; TP 2 is refused with the reason.
    auto* tp = launch->findChild<QComboBox*>(QStringLiteral("tpDegree"));
    QCOMPARE(tp->currentData().toInt(), 1);
    QVERIFY(!(tp->model()->index(1, 0).flags() & Qt::ItemIsEnabled));
    QVERIFY(tp->itemData(1, Qt::ToolTipRole).toString().contains(QStringLiteral("1 node")));

    QSignalSpy ready(w.instances(), &ui::InstanceManager::ready);
    auto* go = launch->findChild<QPushButton*>(QStringLiteral("launchInference"));
    QVERIFY(go->isEnabled());
    QTest::mouseClick(go, Qt::LeftButton);
    auto* log = launch->findChild<QPlainTextEdit*>(QStringLiteral("launchLog"));
    auto* state = launch->findChild<QLabel*>(QStringLiteral("launchState"));
    QVERIFY2(ready.wait(60'000), qPrintable(state->text() + "\n" + log->toPlainText()));
    const QString url = ready.first().at(1).toString();
    QVERIFY(url.startsWith(QStringLiteral("http://127.0.0.1:")));
    auto* table = launch->findChild<QTableWidget*>(QStringLiteral("instanceTable"));
    QCOMPARE(table->rowCount(), 1);
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("ready"));
    QVERIFY(QTest::qWaitFor([&] { return log->toPlainText().contains(QStringLiteral("serving")); }, 5000));

    // Chat: the new instance is the endpoint.
    QTest::keyClick(&w, Qt::Key_4, Qt::ControlModifier);
    auto* chat = qobject_cast<ui::ChatPanel*>(w.panel(MainWindow::Panel::kChat));
    chat->setConversationDir(dir_.path() + "/conversations");
    QCOMPARE(chat->endpoint(), url);
    chat->findChild<QSpinBox*>(QStringLiteral("chatMaxTokens"))->setValue(24);
    chat->findChild<QDoubleSpinBox*>(QStringLiteral("chatTemperature"))->setValue(0);  // greedy
    QTest::keyClicks(chat->findChild<QPlainTextEdit*>(QStringLiteral("chatSystem")),
                     QStringLiteral("Answer briefly."));
    QSignalSpy pieces(chat, &ui::ChatPanel::streamed);
    QSignalSpy finished(chat, &ui::ChatPanel::replyFinished);
    auto* input = chat->findChild<QPlainTextEdit*>(QStringLiteral("chatInput"));
    QTest::keyClicks(input, QStringLiteral("Say hi"));
    QTest::mouseClick(chat->findChild<QPushButton*>(QStringLiteral("chatSend")), Qt::LeftButton);
    QVERIFY(finished.wait(60'000));
    QVERIFY2(finished.first().first().toBool(), qPrintable(chat->messages().last().error));
    QCOMPARE(chat->messages().size(), 2);
    const QString reply = chat->messages().last().content;
    QVERIFY(!reply.isEmpty());
    QVERIFY2(pieces.count() >= 2, "the reply arrived in pieces, not at once");
    QString joined;
    for (const auto& p : pieces) joined += p.first().toString();
    QCOMPARE(joined, reply);
    QVERIFY2(chat->messages().last().stats.contains(QStringLiteral("TTFT")),
             qPrintable(chat->messages().last().stats));
    QVERIFY(chat->messages().last().stats.contains(QStringLiteral("decode")));
    auto* transcript = chat->findChild<QTextBrowser*>(QStringLiteral("chatTranscript"));
    QVERIFY(transcript->toPlainText().contains(QStringLiteral("Say hi")));
    QVERIFY2(transcript->toPlainText().contains(reply.left(8)), qPrintable(reply.left(8).toUtf8().toHex() + " in " + transcript->toPlainText().toUtf8().toHex()));

    // Copy, regenerate (still one exchange), conversation saved on disk.
    QTest::mouseClick(chat->findChild<QPushButton*>(QStringLiteral("chatCopy")), Qt::LeftButton);
    QCOMPARE(QApplication::clipboard()->text(), reply);
    QTest::mouseClick(chat->findChild<QPushButton*>(QStringLiteral("chatRegenerate")), Qt::LeftButton);
    QVERIFY(finished.wait(60'000));
    QCOMPARE(chat->messages().size(), 2);
    QCOMPARE(chat->messages().first().content, QStringLiteral("Say hi"));
    const QString saved = chat->conversationFile();
    QVERIFY(QFile::exists(saved));
    QTest::mouseClick(chat->findChild<QPushButton*>(QStringLiteral("chatClear")), Qt::LeftButton);
    QCOMPARE(chat->messages().size(), 0);
    QVERIFY(chat->openConversation(saved));
    QCOMPARE(chat->messages().size(), 2);
    QCOMPARE(chat->messages().first().content, QStringLiteral("Say hi"));

    // Through a router (launched from the Launch panel) whose one pool is the
    // instance: the reply says which pool answered.
    const QString policy = dir_.path() + "/via-router.yaml";
    {
      QFile f(policy);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QStringLiteral("version: 1\ngateway:\n  host: 127.0.0.1\n  port: 0\n  threads: 4\n"
                             "  watch: false\npools:\n  - name: small\n    replicas:\n      - %1\n"
                             "routes:\n  - name: all\n    pool: small\n")
                  .arg(url)
                  .toUtf8());
    }
    QTest::keyClick(&w, Qt::Key_2, Qt::ControlModifier);
    auto* policy_file = launch->findChild<QLineEdit*>(QStringLiteral("policyFile"));
    policy_file->clear();
    QTest::keyClicks(policy_file, policy);
    ready.clear();
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchRouter")), Qt::LeftButton);
    QVERIFY2(ready.wait(30'000), qPrintable(state->text()));
    const QString router_url = ready.first().at(1).toString();
    QVERIFY(router_url != url);
    QTest::keyClick(&w, Qt::Key_4, Qt::ControlModifier);
    chat->setEndpoint(router_url);
    finished.clear();
    chat->sendMessage(QStringLiteral("And through the router?"));
    QVERIFY(finished.wait(60'000));
    QVERIFY2(finished.first().first().toBool(), qPrintable(chat->messages().last().error));
    QVERIFY2(chat->messages().last().stats.contains(QStringLiteral("pool small")),
             qPrintable(chat->messages().last().stats));
    QCOMPARE(chat->messages().size(), 4);

    // Stop the instance from the Launch panel.
    QTest::keyClick(&w, Qt::Key_2, Qt::ControlModifier);
    QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
    table->selectRow(0);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")), Qt::LeftButton);
    QVERIFY(exited.wait(10'000));
    QCOMPARE(exited.first().at(1).toBool(), false);  // stopped, not failed
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("stopped"));
    w.instances()->stop(w.instances()->instances().last().id);  // the router
  }

  void chatWithNothingListeningSaysSo() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* chat = qobject_cast<ui::ChatPanel*>(w.panel(MainWindow::Panel::kChat));
    chat->setConversationDir(dir_.path() + "/conversations2");
    chat->setEndpoint(QStringLiteral("http://127.0.0.1:1"));
    QSignalSpy finished(chat, &ui::ChatPanel::replyFinished);
    QTest::keyClicks(chat->findChild<QPlainTextEdit*>(QStringLiteral("chatInput")), QStringLiteral("hello"));
    QTest::mouseClick(chat->findChild<QPushButton*>(QStringLiteral("chatSend")), Qt::LeftButton);
    QVERIFY(finished.wait(20'000));
    QCOMPARE(finished.first().first().toBool(), false);
    QVERIFY2(chat->messages().last().error.contains(QStringLiteral("no answer")),
             qPrintable(chat->messages().last().error));
  }
};

QTEST_MAIN(TestLaunchChat)
#include "test_launch_chat.moc"
