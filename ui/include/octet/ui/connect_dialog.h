// "Connect cluster": choose the local embedded cluster (nodes, cabling,
// memory per node, model folders), a saved cluster profile, or type the
// agents of a real cluster (addresses, token file, optionally the cluster CA
// for TLS), which are saved as a profile (app::ImportCluster) so they are
// remembered. "Add node" adds one agent to the current profile (or a node to
// the local cluster).
#pragma once

#include <QDialog>
#include <string>

#include "octet/ui/connection.h"

class QButtonGroup;
class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QSpinBox;
class QStackedWidget;
class QTableWidget;

namespace octet::ui {

class ConnectDialog : public QDialog {
  Q_OBJECT
 public:
  ConnectDialog(const ConnectionSpec& current, std::string config_dir, QWidget* parent = nullptr);
  // What to connect to (valid after accept()).
  ConnectionSpec result() const { return result_; }

  void accept() override;

 private:
  QWidget* buildLocalPage();
  QWidget* buildProfilePage();
  QWidget* buildAgentsPage();
  void showError(const QString& text);

  std::string config_dir_;
  ConnectionSpec current_;
  ConnectionSpec result_;
  QButtonGroup* kind_;
  QStackedWidget* pages_;
  // local
  QSpinBox* nodes_;
  QComboBox* cabling_;
  QSpinBox* memory_gib_;
  QLineEdit* model_roots_;
  // profile
  QListWidget* profiles_;
  // agents
  QLineEdit* name_;
  QTableWidget* agents_;
  QLineEdit* token_file_;
  QLineEdit* ca_file_;
  QComboBox* expected_;
  QLabel* error_;
};

class AddNodeDialog : public QDialog {
  Q_OBJECT
 public:
  // For a profile connection, saves the node into that profile on accept.
  AddNodeDialog(const ConnectionSpec& current, std::string config_dir, QWidget* parent = nullptr);
  ConnectionSpec result() const { return result_; }
  void accept() override;

 private:
  std::string config_dir_;
  ConnectionSpec current_;
  ConnectionSpec result_;
  QLineEdit* name_;
  QLineEdit* address_;
  QLabel* error_;
};

}  // namespace octet::ui
