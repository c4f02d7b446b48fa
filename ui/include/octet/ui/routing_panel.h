// Routing policy editor: the policy YAML with syntax highlighting, validated
// as you type by the router's own validator (app::CheckRoutingPolicy: the
// same messages at the same line:col as `octet route --check`; the line is
// marked in the editor and listed below it), apply (hot reload) to a running
// router gateway, and a "try a prompt" box showing the decision the policy in
// the editor (or the running router) makes.
//
// Validation runs on a pool thread (it loads the classifier weights the policy
// names) 250 ms after the last keystroke; a stale result is dropped. Router
// calls run on pool threads too.
#pragma once

#include <QWidget>

#include "octet/app/routing_policy_client.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QPushButton;
class QTimer;

namespace octet::ui {

class InstanceManager;

class RoutingPanel : public QWidget {
  Q_OBJECT
 public:
  RoutingPanel(InstanceManager* instances, QWidget* parent = nullptr);

  QPlainTextEdit* editor() const { return editor_; }
  // Loads a policy file into the editor (relative classifier paths resolve next to it).
  bool openFile(const QString& file);
  QString fileName() const { return file_; }
  const app::PolicyCheck& lastCheck() const { return check_; }
  void setRouterUrl(const QString& url);

 signals:
  void validated(bool valid);
  void decided(bool ok);
  void applied(bool ok);

 public slots:
  void validateNow();
  void apply();
  void tryPrompt();
  void loadFromRouter();
  bool saveFile();

 private:
  void onChecked(int generation, const app::PolicyCheck& check);
  void markErrors();
  void refreshRouters();
  QString routerUrl() const;

  InstanceManager* instances_;
  QPlainTextEdit* editor_;
  QLabel* file_label_;
  QLabel* verdict_;
  QLabel* cursor_;
  QListWidget* errors_;
  QComboBox* router_;
  QPushButton* apply_;
  QLabel* apply_state_;
  QLineEdit* prompt_;
  QCheckBox* on_router_;
  QLabel* decision_;
  QTimer* debounce_;
  QString file_;
  app::PolicyCheck check_;
  int generation_ = 0;
};

}  // namespace octet::ui
