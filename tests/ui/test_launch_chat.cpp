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
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QtTest>

#include "octet/ui/chat_panel.h"
#include "octet/ui/cluster_controller.h"
#include "octet/ui/dashboard_panel.h"
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
    // Its MTP layers can draft; chosen, the plan holds them too (and the draft
    // length follows the method: 2 of at most 3).
    auto* spec = launch->findChild<QComboBox*>(QStringLiteral("speculative"));
    const int mtp = spec->findData(QStringLiteral("mtp"));
    QVERIFY(spec->model()->index(mtp, 0).flags() & Qt::ItemIsEnabled);
    const QString without = test::WeightsInPlan(plan->text());
    QVERIFY2(!without.isEmpty(), qPrintable(plan->text()));
    spec->setCurrentIndex(mtp);
    auto* drafts = launch->findChild<QSpinBox*>(QStringLiteral("draftTokens"));
    QCOMPARE(drafts->value(), 2);
    QCOMPARE(drafts->maximum(), 3);
    QVERIFY2(QTest::qWaitFor([&] { return test::WeightsInPlan(plan->text()) != without; }, 10'000),
             qPrintable(without + " -> " + plan->text()));
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
    // In a 1366x768 window (a laptop) what the model holds and its plan are shown whole
    // (scrolled where the panel is short), never cut off by the next section.
    w.resize(1366, 768);
    for (const char* name : {"modelInfo", "memoryPlan"}) {
      auto* label = launch->findChild<QLabel*>(QString::fromUtf8(name));
      QTRY_VERIFY2(label->height() >= label->heightForWidth(label->width()),
                   qPrintable(QStringLiteral("%1: %2 px high, needs %3")
                                  .arg(QString::fromUtf8(name))
                                  .arg(label->height())
                                  .arg(label->heightForWidth(label->width()))));
    }

    // TP 1 is the only choice without a cluster; TP 2 is refused with the reason.
    auto* tp = launch->findChild<QComboBox*>(QStringLiteral("tpDegree"));
    QCOMPARE(tp->currentData().toInt(), 1);
    QVERIFY(!(tp->model()->index(1, 0).flags() & Qt::ItemIsEnabled));
    QVERIFY(tp->itemData(1, Qt::ToolTipRole).toString().contains(QStringLiteral("1 node")));

    // Speculative decoding: this model has no MTP layers (the choice says so);
    // n-gram drafting drafts 4 tokens a step unless told otherwise.
    auto* spec = launch->findChild<QComboBox*>(QStringLiteral("speculative"));
    const int mtp = spec->findData(QStringLiteral("mtp"));
    QVERIFY(!(spec->model()->index(mtp, 0).flags() & Qt::ItemIsEnabled));
    QVERIFY(spec->itemData(mtp, Qt::ToolTipRole).toString().contains(QStringLiteral("no multi")));
    auto* drafts = launch->findChild<QSpinBox*>(QStringLiteral("draftTokens"));
    QVERIFY(!drafts->isEnabled());
    spec->setCurrentIndex(spec->findData(QStringLiteral("ngram")));
    QVERIFY(drafts->isEnabled());
    QCOMPARE(drafts->value(), 4);
    QCOMPARE(drafts->maximum(), 8);

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
    // Its detail says which kernel backend it computes with (from its figures).
    const QRegularExpression one_backend(QStringLiteral("^backend [a-z0-9-]+$"));
    QVERIFY2(QTest::qWaitFor(
                 [&] { return one_backend.match(table->item(0, 3)->text()).hasMatch(); }, 10'000),
             qPrintable(table->item(0, 3)->text()));
    QVERIFY(QTest::qWaitFor([&] { return log->toPlainText().contains(QStringLiteral("serving")); }, 5000));
    QVERIFY2(
        log->toPlainText().contains(QStringLiteral("speculative ngram drafting up to 4 tokens")),
        qPrintable(log->toPlainText()));
    // The status bar counts the server, which no agent reports.
    auto* jobs = w.findChild<QLabel*>(QStringLiteral("jobsStatus"));
    QCOMPARE(jobs->text(), QStringLiteral("1 job running on this machine"));

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
    QCOMPARE(jobs->text(), QStringLiteral("2 jobs running on this machine"));

    // Stop the instance from the Launch panel.
    QTest::keyClick(&w, Qt::Key_2, Qt::ControlModifier);
    QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
    table->selectRow(0);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("stopInstance")), Qt::LeftButton);
    QVERIFY(exited.wait(10'000));
    QCOMPARE(exited.first().at(1).toBool(), false);  // stopped, not failed
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("stopped"));
    QCOMPARE(jobs->text(), QStringLiteral("1 job running on this machine"));
    w.instances()->stop(w.instances()->instances().last().id);  // the router
    QVERIFY(
        QTest::qWaitFor([&] { return jobs->text() == QStringLiteral("no jobs running"); }, 10'000));
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
    QVERIFY2(chat->messages().last().error.contains(
                 QStringLiteral("no answer from http://127.0.0.1:1: could not connect")),
             qPrintable(chat->messages().last().error));
  }
  // The chat's sampling settings left at "default" are not sent: the server
  // applies the model's generation_config.json, and the panel shows each
  // default and where it came from; a value typed in wins.
  void chatTakesTheModelsGenerationDefaults() {
    const QString model = dir_.path() + "/qwen3-gencfg";
    QVERIFY(test::WriteChatModel(model.toStdString()).ok());
    {
      QFile f(model + "/generation_config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"temperature": 0.0, "top_k": 20, "max_new_tokens": 5})");
    }
    ui::InstanceManager instances;
    app::InstanceSpec spec;
    spec.model_dir = model.toStdString();
    spec.served_name = "gencfg";
    spec.num_slots = 1;
    spec.context = 256;
    spec.octet_binary = test::BinDir() + "/octet";
    QSignalSpy ready(&instances, &ui::InstanceManager::ready);
    QString error;
    QVERIFY2(instances.start(spec, QStringLiteral("gencfg"), &error) > 0, qPrintable(error));
    QVERIFY(ready.wait(60'000));
    const QString url = ready.first().at(1).toString();

    // The Dashboard follows the instance like an agent's job (issue 22).
    ui::ClusterController controller(ui::ClusterController::Options{});
    ui::DashboardPanel dashboard(&controller);
    dashboard.setInstanceManager(&instances);
    dashboard.show();

    ui::ChatPanel chat(&instances);
    chat.setConversationDir(dir_.path() + "/conversations-gencfg");
    chat.show();
    chat.setEndpoint(url);
    auto* defaults = chat.findChild<QLabel*>(QStringLiteral("chatDefaults"));
    QVERIFY(QTest::qWaitFor(
        [&] { return defaults->text().contains(QStringLiteral("generation_config.json")); },
        10'000));
    const QString text = defaults->text();
    for (const char* line :
         {"temperature = 0 (generation_config.json)", "top_k = 20 (generation_config.json)",
          "max_tokens = 5 (generation_config.json)", "top_p = 1 (built-in)",
          "repetition_penalty = 1 (built-in)"}) {
      QVERIFY2(text.contains(QString::fromUtf8(line)),
               qPrintable(line + QStringLiteral(" in ") + text));
    }
    auto* max_tokens = chat.findChild<QSpinBox*>(QStringLiteral("chatMaxTokens"));
    QCOMPARE(max_tokens->text(), QStringLiteral("default: 5"));
    QVERIFY2(max_tokens->toolTip().contains(QStringLiteral("5 (generation_config.json)")),
             qPrintable(max_tokens->toolTip()));
    auto* temperature = chat.findChild<QDoubleSpinBox*>(QStringLiteral("chatTemperature"));
    QCOMPARE(temperature->text(), QStringLiteral("default: 0"));
    // Nothing clipped, even in a narrow window: each box keeps the width its
    // text needs.
    chat.resize(640, 700);
    for (QAbstractSpinBox* box : {static_cast<QAbstractSpinBox*>(max_tokens),
                                  static_cast<QAbstractSpinBox*>(temperature)}) {
      const int text_width = box->fontMetrics().horizontalAdvance(box->text());
      QTRY_VERIFY2(box->width() > text_width,
                   qPrintable(QStringLiteral("'%1': %2 px for %3 px of text")
                                  .arg(box->text())
                                  .arg(box->width())
                                  .arg(text_width)));
    }

    // Left at default: the config's max_new_tokens ends the reply at 5 tokens.
    QSignalSpy finished(&chat, &ui::ChatPanel::replyFinished);
    auto* input = chat.findChild<QPlainTextEdit*>(QStringLiteral("chatInput"));
    QTest::keyClicks(input, QStringLiteral("Say hi"));
    QTest::mouseClick(chat.findChild<QPushButton*>(QStringLiteral("chatSend")), Qt::LeftButton);
    QVERIFY(finished.wait(60'000));
    QVERIFY2(finished.last().first().toBool(), qPrintable(chat.messages().last().error));
    QVERIFY2(chat.messages().last().stats.contains(QStringLiteral("5 tokens")),
             qPrintable(chat.messages().last().stats));
    // Typed in: 3 wins over the config's 5.
    max_tokens->setFocus();
    max_tokens->selectAll();
    QTest::keyClicks(max_tokens, QStringLiteral("3"));
    QCOMPARE(max_tokens->value(), 3);
    QTest::mouseClick(chat.findChild<QPushButton*>(QStringLiteral("chatRegenerate")),
                      Qt::LeftButton);
    QVERIFY(finished.wait(60'000));
    QVERIFY2(finished.last().first().toBool(), qPrintable(chat.messages().last().error));
    QVERIFY2(chat.messages().last().stats.contains(QStringLiteral("3 tokens")),
             qPrintable(chat.messages().last().stats));

    // Dashboard: the instance's own figures (`octet serve --figures`, once a
    // second) on the tok/s and concurrency charts under its name; the tokens
    // just generated show as a decode rate above zero.
    auto* decode = dashboard.chart(ui::DashboardPanel::Chart::kDecode);
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   for (const QPointF& p : decode->points(QStringLiteral("gencfg")))
                     if (p.y() > 0) return true;
                   return false;
                 },
                 15'000),
             "no decode tok/s above 0 for the local instance");
    QVERIFY(!dashboard.chart(ui::DashboardPanel::Chart::kConcurrency)
                 ->points(QStringLiteral("gencfg"))
                 .isEmpty());
    QCOMPARE(dashboard.history().jobs().at(QStringLiteral("gencfg")).kind,
             QStringLiteral("inference"));
  }
};

QTEST_MAIN(TestLaunchChat)
#include "test_launch_chat.moc"
