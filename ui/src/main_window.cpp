#include "octet/ui/main_window.h"

#include <QLabel>
#include <QStatusBar>
#include <QVBoxLayout>

#include "octet/base/build_info.h"

namespace octet::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Octet Workbench"));
  setObjectName(QStringLiteral("octetMainWindow"));
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  auto* title = new QLabel(QStringLiteral("<h2>Octet</h2>"), central);
  auto* info = new QLabel(QString::fromStdString(GetBuildInfo().ToString()), central);
  info->setObjectName(QStringLiteral("buildInfo"));
  info->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(title);
  layout->addWidget(info);
  layout->addStretch(1);
  setCentralWidget(central);
  statusBar()->showMessage(QStringLiteral("No cluster connected"));
  resize(1280, 800);
}

}  // namespace octet::ui
