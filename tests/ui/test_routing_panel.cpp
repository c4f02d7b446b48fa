// The Routing panel driven as a person would: the example policy opens valid;
// typing a policy with a bad value shows the router's own message at its line
// and column (and marks that line); fixing it validates again; "try a prompt"
// shows the decision of the policy in the editor; then a router gateway
// (`octet route` from the build) is launched from the Launch panel, an edited
// policy is applied to it (hot reload) and the running router routes a prompt
// with it.
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTextBlock>
#include <QtTest>

#include "octet/ui/instance_manager.h"
#include "octet/ui/launch_panel.h"
#include "octet/ui/main_window.h"
#include "octet/ui/routing_panel.h"
#include "workbench_test_util.h"

using namespace octet;
using octet::ui::MainWindow;

namespace {

const char* kRouterPolicy =
    "version: 1\n"
    "gateway:\n"
    "  host: 127.0.0.1\n"
    "  port: 0\n"
    "  threads: 4\n"
    "  watch: false\n"
    "pools:\n"
    "  - name: small\n"
    "    replicas:\n"
    "      - http://127.0.0.1:9\n"
    "routes:\n"
    "  - name: all\n"
    "    pool: small\n";

// Line 5, column 21: the value of load_balancing.
const char* kBadPolicy =
    "version: 1\n"
    "pools:\n"
    "  - name: small\n"
    "    replicas: [http://127.0.0.1:9]\n"
    "    load_balancing: fastest\n"
    "routes:\n"
    "  - name: all\n"
    "    pool: small\n";

// Types `text` as keystrokes (Return for each newline).
void TypeText(QWidget* w, const QString& text) {
  const QStringList lines = text.split(QLatin1Char('\n'));
  for (int i = 0; i < lines.size(); ++i) {
    QTest::keyClicks(w, lines[i]);
    if (i + 1 < lines.size()) QTest::keyClick(w, Qt::Key_Return);
  }
}

}  // namespace

class TestRoutingPanel : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  ui::WorkbenchOptions Offline() { return test::OfflineWorkbench(dir_); }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::IsolateWorkbench(dir_);
  }

  void typingShowsErrorsAtTheirLine() {
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::keyClick(&w, Qt::Key_5, Qt::ControlModifier);
    auto* panel = qobject_cast<ui::RoutingPanel*>(w.panel(MainWindow::Panel::kRouting));
    QVERIFY(panel);
    QSignalSpy validated(panel, &ui::RoutingPanel::validated);
    // The example policy from resources/ opens, and is valid.
    QVERIFY2(panel->fileName().endsWith(QStringLiteral("example-policy.yaml")),
             qPrintable(panel->fileName()));
    QVERIFY(QTest::qWaitFor([&] { return panel->lastCheck().valid; }, 10'000));
    auto* verdict = panel->findChild<QLabel*>(QStringLiteral("policyVerdict"));
    QVERIFY(verdict->text().contains(QStringLiteral("Valid")));

    // Try a prompt against the policy in the editor.
    QSignalSpy decided(panel, &ui::RoutingPanel::decided);
    QTest::keyClicks(panel->findChild<QLineEdit*>(QStringLiteral("tryPrompt")),
                     QStringLiteral("hi there"));
    QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("tryPromptButton")),
                      Qt::LeftButton);
    QVERIFY(decided.wait(10'000));
    QCOMPARE(decided.first().first().toBool(), true);
    auto* decision = panel->findChild<QLabel*>(QStringLiteral("routingDecision"));
    QVERIFY2(decision->text().contains(QStringLiteral("pool")), qPrintable(decision->text()));

    // Replace the text by typing a policy with a bad value on line 5.
    QPlainTextEdit* editor = panel->editor();
    editor->setFocus();
    QTest::keyClick(editor, Qt::Key_A, Qt::ControlModifier);
    QTest::keyClick(editor, Qt::Key_Delete);
    validated.clear();
    TypeText(editor, QString::fromLatin1(kBadPolicy));
    QVERIFY(QTest::qWaitFor(
        [&] { return !validated.isEmpty() && !validated.last().first().toBool() &&
                     !panel->lastCheck().errors.empty() &&
                     panel->lastCheck().errors[0].line == 5; },
        10'000));
    QCOMPARE(editor->toPlainText(), QString::fromLatin1(kBadPolicy));
    const auto& e = panel->lastCheck().errors[0];
    QCOMPARE(e.column, 21);
    QVERIFY(QString::fromStdString(e.message).contains(QStringLiteral("load_balancing")));
    auto* errors = panel->findChild<QListWidget*>(QStringLiteral("policyErrors"));
    QCOMPARE(errors->count(), 1);
    QVERIFY2(errors->item(0)->text().startsWith(QStringLiteral("line 5:21")),
             qPrintable(errors->item(0)->text()));
    // The line is marked in the editor.
    bool marked = false;
    for (const auto& sel : editor->extraSelections()) marked = marked || sel.cursor.blockNumber() == 4;
    QVERIFY(marked);
    QVERIFY(verdict->text().contains(QStringLiteral("1 error")));
    // A click on the error puts the cursor there.
    QTest::mouseClick(errors->viewport(), Qt::LeftButton, {},
                      errors->visualItemRect(errors->item(0)).center());
    QCOMPARE(editor->textCursor().blockNumber(), 4);
    QCOMPARE(editor->textCursor().positionInBlock(), 20);

    // Fix it: select the bad word and type a good one.
    QTest::keyClick(editor, Qt::Key_End, Qt::ShiftModifier);
    validated.clear();
    QTest::keyClicks(editor, QStringLiteral("round_robin"));
    QVERIFY(QTest::qWaitFor([&] { return !validated.isEmpty() && validated.last().first().toBool(); },
                            10'000));
    QCOMPARE(errors->count(), 0);
  }

  void applyToARunningRouter() {
    const QString policy = dir_.path() + "/router.yaml";
    {
      QFile f(policy);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(kRouterPolicy);
    }
    MainWindow w(Offline());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::keyClick(&w, Qt::Key_2, Qt::ControlModifier);
    auto* launch = qobject_cast<ui::LaunchPanel*>(w.panel(MainWindow::Panel::kLaunch));
    auto* file = launch->findChild<QLineEdit*>(QStringLiteral("policyFile"));
    file->clear();
    QTest::keyClicks(file, policy);
    QSignalSpy ready(w.instances(), &ui::InstanceManager::ready);
    QTest::mouseClick(launch->findChild<QPushButton*>(QStringLiteral("launchRouter")), Qt::LeftButton);
    QVERIFY2(ready.wait(30'000), qPrintable(launch->findChild<QLabel*>(QStringLiteral("launchState"))->text()));
    const QString url = ready.first().at(1).toString();

    QTest::keyClick(&w, Qt::Key_5, Qt::ControlModifier);
    auto* panel = qobject_cast<ui::RoutingPanel*>(w.panel(MainWindow::Panel::kRouting));
    QCOMPARE(panel->findChild<QComboBox*>(QStringLiteral("routerUrl"))->currentText(), url);
    QVERIFY(panel->openFile(policy));
    // Add a pool and a route that sends "urgent" prompts to it, then apply.
    QPlainTextEdit* editor = panel->editor();
    editor->moveCursor(QTextCursor::End);
    editor->setFocus();
    QString text = QString::fromLatin1(kRouterPolicy);
    text.replace(QStringLiteral("routes:\n"),
                 QStringLiteral("  - name: fast\n    replicas:\n      - http://127.0.0.1:10\n"
                                "routes:\n  - name: urgent\n    match:\n      keywords: [urgent]\n"
                                "    pool: fast\n"));
    QSignalSpy validated(panel, &ui::RoutingPanel::validated);
    editor->setPlainText(text);
    QVERIFY(validated.wait(10'000));
    QVERIFY2(validated.last().first().toBool(),
             panel->lastCheck().errors.empty() ? "" : panel->lastCheck().errors[0].text.c_str());
    QSignalSpy applied(panel, &ui::RoutingPanel::applied);
    QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("policyApply")), Qt::LeftButton);
    QVERIFY(applied.wait(15'000));
    auto* state = panel->findChild<QLabel*>(QStringLiteral("applyState"));
    QVERIFY2(applied.first().first().toBool(), qPrintable(state->text()));
    QVERIFY(state->text().contains(QStringLiteral("generation")));

    // The running router now routes "urgent" prompts to the new pool.
    panel->findChild<QCheckBox*>(QStringLiteral("decideOnRouter"))->setChecked(true);
    QSignalSpy decided(panel, &ui::RoutingPanel::decided);
    QTest::keyClicks(panel->findChild<QLineEdit*>(QStringLiteral("tryPrompt")),
                     QStringLiteral("this is urgent"));
    QTest::keyClick(panel->findChild<QLineEdit*>(QStringLiteral("tryPrompt")), Qt::Key_Return);
    QVERIFY(decided.wait(15'000));
    auto* decision = panel->findChild<QLabel*>(QStringLiteral("routingDecision"));
    QVERIFY2(decided.first().first().toBool(), qPrintable(decision->text()));
    QVERIFY2(decision->text().contains(QStringLiteral("urgent")) &&
                 decision->text().contains(QStringLiteral("fast")),
             qPrintable(decision->text()));

    // Stop the router.
    QSignalSpy exited(w.instances(), &ui::InstanceManager::exited);
    w.instances()->stop(w.instances()->instances().first().id);
    QVERIFY(exited.wait(10'000));
  }
};

QTEST_MAIN(TestRoutingPanel)
#include "test_routing_panel.moc"
