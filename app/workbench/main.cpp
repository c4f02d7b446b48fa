// `octet-workbench`: the Qt window.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "octet/base/build_info.h"
#include "octet/ui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("octet-workbench"));
  QApplication::setOrganizationName(QStringLiteral("Octet"));
  QApplication::setApplicationVersion(QString::fromStdString(octet::GetBuildInfo().version));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Octet workbench: the cluster in one window."));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption quit_after(QStringLiteral("quit-after"),
                                QStringLiteral("Quit after MS milliseconds (scripted runs)."),
                                QStringLiteral("MS"));
  QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                QStringLiteral("Save a PNG of the window before quitting."),
                                QStringLiteral("FILE"));
  parser.addOption(quit_after);
  parser.addOption(screenshot);
  parser.process(app);

  octet::ui::MainWindow window;
  window.show();

  if (parser.isSet(quit_after)) {
    const int ms = parser.value(quit_after).toInt();
    const QString shot = parser.value(screenshot);
    QTimer::singleShot(ms, &window, [&window, shot] {
      if (!shot.isEmpty()) window.grab().save(shot);
      QApplication::quit();
    });
  }
  return QApplication::exec();
}
