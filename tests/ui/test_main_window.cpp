#include <QtTest>

#include <QLabel>

#include "octet/ui/main_window.h"

class TestMainWindow : public QObject {
  Q_OBJECT
 private slots:
  void opensWithTitleAndBuildInfo() {
    octet::ui::MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCOMPARE(w.windowTitle(), QStringLiteral("Octet Workbench"));
    auto* info = w.findChild<QLabel*>(QStringLiteral("buildInfo"));
    QVERIFY(info);
    QVERIFY(info->text().startsWith(QStringLiteral("octet ")));
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
