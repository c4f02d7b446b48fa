// The workbench's main window.
#pragma once

#include <QMainWindow>

namespace octet::ui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace octet::ui
