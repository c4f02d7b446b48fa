#include "octet/ui/routing_panel.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSplitter>
#include <QSyntaxHighlighter>
#include <QTextBlock>
#include <QThreadPool>
#include <QTimer>
#include <QVBoxLayout>

#include "octet/base/file_util.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/resources.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

// YAML as far as a policy uses it: comments, keys, list dashes, quoted
// strings, numbers, booleans/null, and anchors/aliases.
class YamlHighlighter : public QSyntaxHighlighter {
 public:
  explicit YamlHighlighter(QTextDocument* doc) : QSyntaxHighlighter(doc) { updateColors(QPalette()); }

  void updateColors(const QPalette& pal) {
    const bool dark = pal.color(QPalette::Base).lightness() < 128;
    key_.setForeground(dark ? QColor(0x7f, 0xb8, 0xff) : QColor(0x1f, 0x4e, 0x9e));
    key_.setFontWeight(QFont::DemiBold);
    comment_.setForeground(dark ? QColor(0x8a, 0x93, 0x9c) : QColor(0x6a, 0x73, 0x7d));
    comment_.setFontItalic(true);
    string_.setForeground(dark ? QColor(0xa5, 0xd6, 0x8f) : QColor(0x22, 0x86, 0x3a));
    number_.setForeground(dark ? QColor(0xf0, 0xa8, 0x6e) : QColor(0xb3, 0x54, 0x00));
    keyword_.setForeground(dark ? QColor(0xd2, 0x9b, 0xf0) : QColor(0x8a, 0x3f, 0xb8));
    dash_.setForeground(dark ? QColor(0xe0, 0xc0, 0x60) : QColor(0x9a, 0x6a, 0x00));
    dash_.setFontWeight(QFont::Bold);
    rehighlight();
  }

 protected:
  void highlightBlock(const QString& text) override {
    // Where a comment starts: '#' at the start or after a space, outside quotes.
    int comment = -1;
    QChar quote;
    for (int i = 0; i < text.size(); ++i) {
      const QChar c = text[i];
      if (!quote.isNull()) {
        if (c == quote) quote = QChar();
        continue;
      }
      if (c == QLatin1Char('"') || c == QLatin1Char('\'')) {
        quote = c;
      } else if (c == QLatin1Char('#') && (i == 0 || text[i - 1].isSpace())) {
        comment = i;
        break;
      }
    }
    const QString code = comment < 0 ? text : text.left(comment);
    static const QRegularExpression kKey(QStringLiteral(R"(^(\s*(?:-\s+)?)([^\s#:'"\[\]{}][^#:]*?|"[^"]*"|'[^']*')\s*:(?=\s|$))"));
    static const QRegularExpression kDash(QStringLiteral(R"(^\s*(-)(?=\s|$))"));
    static const QRegularExpression kString(QStringLiteral(R"("(?:[^"\\]|\\.)*"|'[^']*')"));
    static const QRegularExpression kNumber(QStringLiteral(R"((?<=[\s:\[,{-])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?(?=\s*($|[,\]}])))"));
    static const QRegularExpression kKeyword(QStringLiteral(R"((?<=[\s:\[,{])(true|false|null|yes|no|~)(?=\s*($|[,\]}])))"));
    static const QRegularExpression kAnchor(QStringLiteral(R"([&*][A-Za-z0-9_-]+)"));
    for (auto it = kNumber.globalMatch(code); it.hasNext();) {
      auto m = it.next();
      setFormat(m.capturedStart(), m.capturedLength(), number_);
    }
    for (auto it = kKeyword.globalMatch(code); it.hasNext();) {
      auto m = it.next();
      setFormat(m.capturedStart(), m.capturedLength(), keyword_);
    }
    for (auto it = kAnchor.globalMatch(code); it.hasNext();) {
      auto m = it.next();
      setFormat(m.capturedStart(), m.capturedLength(), keyword_);
    }
    if (auto m = kDash.match(code); m.hasMatch()) setFormat(m.capturedStart(1), 1, dash_);
    if (auto m = kKey.match(code); m.hasMatch()) {
      setFormat(m.capturedStart(2), m.capturedLength(2), key_);
    }
    for (auto it = kString.globalMatch(code); it.hasNext();) {
      auto m = it.next();
      setFormat(m.capturedStart(), m.capturedLength(), string_);
    }
    if (comment >= 0) setFormat(comment, text.size() - comment, comment_);
  }

 private:
  QTextCharFormat key_, comment_, string_, number_, keyword_, dash_;
};

QString DecisionHtml(const app::RoutingDecision& d) {
  QString s = QStringLiteral("<b>route</b> %1 &nbsp; <b>pool</b> %2")
                  .arg(QString::fromStdString(d.route).toHtmlEscaped(),
                       QString::fromStdString(d.pool).toHtmlEscaped());
  if (d.score >= 0) s += QStringLiteral(" &nbsp; <b>score</b> %1").arg(d.score, 0, 'f', 3);
  if (!d.replica.empty())
    s += QStringLiteral(" &nbsp; <b>replica</b> %1").arg(QString::fromStdString(d.replica).toHtmlEscaped());
  if (d.sticky) s += QStringLiteral(" &nbsp; sticky");
  if (d.fallback) s += QStringLiteral(" &nbsp; (fallback)");
  if (!d.reason.empty())
    s += QStringLiteral("<br><small>%1</small>").arg(QString::fromStdString(d.reason).toHtmlEscaped());
  return s;
}

}  // namespace

RoutingPanel::RoutingPanel(InstanceManager* instances, QWidget* parent)
    : QWidget(parent), instances_(instances), debounce_(new QTimer(this)) {
  setObjectName(QStringLiteral("routingPanel"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  auto* header =
      new PanelHeader(tr("Routing"), tr("Edit, validate and apply a routing policy"), this);
  auto* open = new QPushButton(tr("Open…"), header);
  auto* save = new QPushButton(tr("Save"), header);
  save->setObjectName(QStringLiteral("routingSave"));
  header->addAction(open);
  header->addAction(save);
  outer->addWidget(header);

  auto* split = new QSplitter(Qt::Horizontal, this);
  auto* left = new QWidget(split);
  auto* ll = new QVBoxLayout(left);
  ll->setContentsMargins(0, 0, 0, 0);
  auto* file_row = new QHBoxLayout;
  file_label_ = new QLabel(left);
  file_label_->setObjectName(QStringLiteral("routingFile"));
  file_label_->setForegroundRole(QPalette::PlaceholderText);
  cursor_ = new QLabel(left);
  cursor_->setForegroundRole(QPalette::PlaceholderText);
  file_row->addWidget(file_label_, 1);
  file_row->addWidget(cursor_);
  ll->addLayout(file_row);
  editor_ = new QPlainTextEdit(left);
  editor_->setObjectName(QStringLiteral("policyEditor"));
  editor_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  editor_->setLineWrapMode(QPlainTextEdit::NoWrap);
  editor_->setTabStopDistance(editor_->fontMetrics().horizontalAdvance(QLatin1Char(' ')) * 2);
  new YamlHighlighter(editor_->document());
  ll->addWidget(editor_, 1);
  verdict_ = new QLabel(left);
  verdict_->setObjectName(QStringLiteral("policyVerdict"));
  verdict_->setWordWrap(true);
  ll->addWidget(verdict_);
  errors_ = new QListWidget(left);
  errors_->setObjectName(QStringLiteral("policyErrors"));
  errors_->setMaximumHeight(110);
  ll->addWidget(errors_);

  auto* right = new Card(split);
  auto* rl = new QVBoxLayout(right);
  rl->addWidget(SectionLabel(tr("Running router"), right));
  router_ = new QComboBox(right);
  router_->setObjectName(QStringLiteral("routerUrl"));
  router_->setEditable(true);
  router_->setInsertPolicy(QComboBox::NoInsert);
  router_->lineEdit()->setPlaceholderText(tr("http://127.0.0.1:8080 (launch one on Launch)"));
  rl->addWidget(router_);
  auto* rrow = new QHBoxLayout;
  apply_ = new QPushButton(tr("Apply (hot reload)"), right);
  apply_->setObjectName(QStringLiteral("policyApply"));
  auto* fetch = new QPushButton(tr("Load its policy"), right);
  fetch->setObjectName(QStringLiteral("policyFetch"));
  rrow->addWidget(apply_);
  rrow->addWidget(fetch);
  rl->addLayout(rrow);
  apply_state_ = new QLabel(right);
  apply_state_->setObjectName(QStringLiteral("applyState"));
  apply_state_->setWordWrap(true);
  rl->addWidget(apply_state_);
  rl->addSpacing(10);
  rl->addWidget(SectionLabel(tr("Try a prompt"), right));
  prompt_ = new QLineEdit(right);
  prompt_->setObjectName(QStringLiteral("tryPrompt"));
  prompt_->setPlaceholderText(tr("Prove that there are infinitely many primes"));
  rl->addWidget(prompt_);
  auto* drow = new QHBoxLayout;
  on_router_ = new QCheckBox(tr("ask the running router"), right);
  on_router_->setObjectName(QStringLiteral("decideOnRouter"));
  on_router_->setToolTip(tr("Off: the policy in the editor decides (replicas assumed healthy). "
                            "On: the running router decides, with its live pool health."));
  auto* decide = new QPushButton(tr("Route it"), right);
  decide->setObjectName(QStringLiteral("tryPromptButton"));
  drow->addWidget(on_router_);
  drow->addStretch(1);
  drow->addWidget(decide);
  rl->addLayout(drow);
  decision_ = new QLabel(right);
  decision_->setObjectName(QStringLiteral("routingDecision"));
  decision_->setWordWrap(true);
  decision_->setTextFormat(Qt::RichText);
  rl->addWidget(decision_);
  rl->addStretch(1);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  outer->addWidget(split, 1);

  debounce_->setSingleShot(true);
  debounce_->setInterval(250);
  connect(debounce_, &QTimer::timeout, this, &RoutingPanel::validateNow);
  connect(editor_, &QPlainTextEdit::textChanged, debounce_, qOverload<>(&QTimer::start));
  connect(editor_, &QPlainTextEdit::cursorPositionChanged, this, [this] {
    const QTextCursor c = editor_->textCursor();
    cursor_->setText(tr("Ln %1, Col %2").arg(c.blockNumber() + 1).arg(c.positionInBlock() + 1));
  });
  connect(errors_, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
    const int line = item->data(Qt::UserRole).toInt();
    const int col = item->data(Qt::UserRole + 1).toInt();
    QTextBlock b = editor_->document()->findBlockByNumber(std::max(0, line - 1));
    QTextCursor c(b);
    c.movePosition(QTextCursor::Right, QTextCursor::MoveAnchor, std::max(0, std::min(col - 1, b.length() - 1)));
    editor_->setTextCursor(c);
    editor_->setFocus();
  });
  connect(errors_, &QListWidget::itemClicked, errors_, &QListWidget::itemActivated);
  connect(apply_, &QPushButton::clicked, this, &RoutingPanel::apply);
  connect(fetch, &QPushButton::clicked, this, &RoutingPanel::loadFromRouter);
  connect(decide, &QPushButton::clicked, this, &RoutingPanel::tryPrompt);
  connect(prompt_, &QLineEdit::returnPressed, this, &RoutingPanel::tryPrompt);
  connect(save, &QPushButton::clicked, this, &RoutingPanel::saveFile);
  connect(open, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Routing policy"), file_,
                                                   tr("YAML (*.yaml *.yml)"));
    if (!f.isEmpty()) openFile(f);
  });
  connect(instances_, &InstanceManager::changed, this, &RoutingPanel::refreshRouters);

  QSettings settings;
  QString start = settings.value(QStringLiteral("routing/file")).toString();
  if (start.isEmpty() || !QFileInfo::exists(start))
    start = ResourcePath(QStringLiteral("routing/example-policy.yaml"));
  if (!start.isEmpty()) {
    openFile(start);
  } else {
    file_label_->setText(tr("untitled policy"));
    verdict_->setText(tr("Type a routing policy, or open one."));
  }
  refreshRouters();
}

bool RoutingPanel::openFile(const QString& file) {
  QFile f(file);
  if (!f.open(QIODevice::ReadOnly)) {
    verdict_->setText(tr("Could not open %1: %2").arg(file, f.errorString()));
    return false;
  }
  file_ = QFileInfo(file).absoluteFilePath();
  file_label_->setText(file_);
  editor_->setPlainText(QString::fromUtf8(f.readAll()));
  QSettings().setValue(QStringLiteral("routing/file"), file_);
  validateNow();
  return true;
}

bool RoutingPanel::saveFile() {
  QString target = file_;
  if (target.isEmpty()) {
    target = QFileDialog::getSaveFileName(this, tr("Save routing policy"), QString(),
                                          tr("YAML (*.yaml *.yml)"));
    if (target.isEmpty()) return false;
  }
  const Status s = WriteFileAtomic(target.toStdString(), editor_->toPlainText().toStdString());
  if (!s.ok()) {
    apply_state_->setText(tr("Could not save: %1").arg(QString::fromStdString(s.message())));
    return false;
  }
  file_ = target;
  file_label_->setText(file_);
  editor_->document()->setModified(false);
  return true;
}

void RoutingPanel::validateNow() {
  debounce_->stop();
  const int generation = ++generation_;
  const std::string yaml = editor_->toPlainText().toStdString();
  const std::string name =
      file_.isEmpty() ? std::string("policy.yaml") : file_.toStdString();
  QPointer<RoutingPanel> self(this);
  QThreadPool::globalInstance()->start([self, generation, yaml, name] {
    app::PolicyCheck check = app::CheckRoutingPolicy(yaml, name);
    QMetaObject::invokeMethod(
        qApp, [self, generation, check] { if (self) self->onChecked(generation, check); },
        Qt::QueuedConnection);
  });
}

void RoutingPanel::onChecked(int generation, const app::PolicyCheck& check) {
  if (generation != generation_) return;  // the text changed since
  check_ = check;
  const StatusColors sc = StatusColorsFor(palette());
  errors_->clear();
  if (check.valid) {
    verdict_->setText(
        QStringLiteral("<span style='color:%1'>✔ %2</span>")
            .arg(sc.good.name(),
                 tr("Valid: %1 pool(s), %2 route(s), %3 classifier(s)")
                     .arg(check.pools.size())
                     .arg(check.routes.size())
                     .arg(check.classifiers.size())
                     .toHtmlEscaped()));
  } else {
    verdict_->setText(QStringLiteral("<span style='color:%1'>✘ %2</span>")
                          .arg(sc.bad.name(), tr("%n error(s) — the router would refuse this policy",
                                                 nullptr, static_cast<int>(check.errors.size()))
                                                  .toHtmlEscaped()));
    for (const app::PolicyIssue& e : check.errors) {
      const QString where = e.line > 0 ? tr("line %1:%2").arg(e.line).arg(e.column) : tr("policy");
      auto* item = new QListWidgetItem(
          QStringLiteral("%1  %2").arg(where, QString::fromStdString(e.message)), errors_);
      item->setForeground(sc.bad);
      item->setData(Qt::UserRole, e.line);
      item->setData(Qt::UserRole + 1, e.column);
    }
  }
  markErrors();
  emit validated(check.valid);
}

void RoutingPanel::markErrors() {
  QList<QTextEdit::ExtraSelection> marks;
  const StatusColors sc = StatusColorsFor(palette());
  for (const app::PolicyIssue& e : check_.errors) {
    if (e.line <= 0) continue;
    QTextBlock b = editor_->document()->findBlockByNumber(e.line - 1);
    if (!b.isValid()) continue;
    QTextEdit::ExtraSelection line;
    line.format.setBackground(Mix(palette().color(QPalette::Base), sc.bad, 0.18));
    line.format.setProperty(QTextFormat::FullWidthSelection, true);
    line.format.setToolTip(QString::fromStdString(e.message));
    line.cursor = QTextCursor(b);
    marks << line;
    QTextEdit::ExtraSelection at;
    at.format.setUnderlineStyle(QTextCharFormat::WaveUnderline);
    at.format.setUnderlineColor(sc.bad);
    at.format.setToolTip(QString::fromStdString(e.message));
    QTextCursor c(b);
    const int col = std::max(0, std::min(e.column - 1, b.length() - 2));
    c.movePosition(QTextCursor::Right, QTextCursor::MoveAnchor, col);
    c.movePosition(QTextCursor::EndOfWord, QTextCursor::KeepAnchor);
    if (!c.hasSelection()) c.movePosition(QTextCursor::EndOfBlock, QTextCursor::KeepAnchor);
    at.cursor = c;
    marks << at;
  }
  editor_->setExtraSelections(marks);
}

void RoutingPanel::refreshRouters() {
  const QString current = router_->currentText();
  router_->blockSignals(true);
  router_->clear();
  for (const InstanceInfo& info : instances_->instances()) {
    if (info.kind == app::InstanceSpec::Kind::kRouter && info.state == InstanceInfo::State::kReady)
      router_->addItem(info.url, info.url);
  }
  router_->blockSignals(false);
  if (!current.isEmpty()) {
    router_->setEditText(current);
  } else if (router_->count() > 0) {
    router_->setCurrentIndex(router_->count() - 1);
  }
}

void RoutingPanel::setRouterUrl(const QString& url) { router_->setEditText(url); }

QString RoutingPanel::routerUrl() const { return router_->currentText().trimmed(); }

void RoutingPanel::apply() {
  const QString url = routerUrl();
  if (url.isEmpty()) {
    apply_state_->setText(tr("No running router: launch one on the Launch panel or type its URL."));
    emit applied(false);
    return;
  }
  apply_->setEnabled(false);
  apply_state_->setText(tr("Sending the policy to %1…").arg(url));
  const std::string yaml = editor_->toPlainText().toStdString();
  QPointer<RoutingPanel> self(this);
  QThreadPool::globalInstance()->start([self, url, yaml] {
    auto r = app::SendPolicyToRouter(url.toStdString(), yaml, /*apply=*/true, Deadline::AfterMs(10'000));
    QString text;
    bool ok = false;
    if (!r.ok()) {
      text = QObject::tr("The router did not take it: %1").arg(QString::fromStdString(r.status().message()));
    } else if (!r->applied) {
      QStringList errs;
      for (const auto& e : r->errors) errs << QString::fromStdString(e.text.empty() ? e.message : e.text);
      text = QObject::tr("The router refused the policy: %1").arg(errs.join(QStringLiteral("; ")));
    } else {
      ok = true;
      text = QObject::tr("Applied: the router runs policy generation %1.").arg(r->policy_generation);
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, ok, text] {
          if (!self) return;
          self->apply_->setEnabled(true);
          const StatusColors sc = StatusColorsFor(self->palette());
          self->apply_state_->setText(QStringLiteral("<span style='color:%1'>%2</span>")
                                          .arg((ok ? sc.good : sc.bad).name(), text.toHtmlEscaped()));
          emit self->applied(ok);
        },
        Qt::QueuedConnection);
  });
}

void RoutingPanel::loadFromRouter() {
  const QString url = routerUrl();
  if (url.isEmpty()) return;
  QPointer<RoutingPanel> self(this);
  QThreadPool::globalInstance()->start([self, url] {
    auto r = app::FetchRouterPolicy(url.toStdString(), Deadline::AfterMs(10'000));
    const bool ok = r.ok();
    const QString text = QString::fromStdString(ok ? *r : r.status().message());
    QMetaObject::invokeMethod(
        qApp,
        [self, ok, text, url] {
          if (!self) return;
          if (ok) {
            self->editor_->setPlainText(text);
            self->apply_state_->setText(tr("Loaded the policy %1 runs.").arg(url));
          } else {
            self->apply_state_->setText(tr("Could not read the router's policy: %1").arg(text));
          }
        },
        Qt::QueuedConnection);
  });
}

void RoutingPanel::tryPrompt() {
  const QString prompt = prompt_->text().trimmed().isEmpty() ? prompt_->placeholderText()
                                                             : prompt_->text().trimmed();
  const std::string request = app::ChatRequestJson(prompt.toStdString());
  const bool remote = on_router_->isChecked();
  const QString url = routerUrl();
  const std::string yaml = editor_->toPlainText().toStdString();
  const std::string name = file_.isEmpty() ? std::string("policy.yaml") : file_.toStdString();
  decision_->setText(tr("Deciding…"));
  QPointer<RoutingPanel> self(this);
  QThreadPool::globalInstance()->start([self, request, remote, url, yaml, name] {
    Result<app::RoutingDecision> d =
        remote ? app::DecideOnRouter(url.toStdString(), request, Deadline::AfterMs(10'000))
               : app::DecideOffline(yaml, name, request);
    const bool ok = d.ok();
    const QString html = ok ? DecisionHtml(*d)
                            : QString::fromStdString(d.status().message()).toHtmlEscaped();
    QMetaObject::invokeMethod(
        qApp,
        [self, ok, html] {
          if (!self) return;
          const StatusColors sc = StatusColorsFor(self->palette());
          self->decision_->setText(ok ? html
                                      : QStringLiteral("<span style='color:%1'>%2</span>")
                                            .arg(sc.bad.name(), html));
          emit self->decided(ok);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace octet::ui
