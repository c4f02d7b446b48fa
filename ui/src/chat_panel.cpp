#include "octet/ui/chat_panel.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QScrollBar>
#include <QShortcut>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QTextBrowser>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>
#include <thread>

#include "chat_worker.h"
#include "octet/app/chat_client.h"
#include "octet/ui/instance_manager.h"
#include "octet/ui/theme.h"
#include "octet/ui/widgets.h"

namespace octet::ui {

namespace {

QString Figure(double v, const char* unit, int decimals = 0) {
  return v < 0 ? QStringLiteral("–") : QStringLiteral("%1 %2").arg(v, 0, 'f', decimals).arg(unit);
}

// A sampling box at its lowest value means "not set: the server's default".
template <typename Box>
bool IsSet(const Box* b) {
  return b->value() > b->minimum();
}
template <typename Box>
void ClearToDefault(Box* b) {
  b->setValue(b->minimum());
}

// "0.6", "0", "to the end of the context" (max_tokens without a value).
QString DefaultValueText(const app::ServerDefault& d) {
  if (!d.value) return QObject::tr("to the end of the context");
  return QString::number(*d.value, 'g', 6);
}

QString StatsLine(const app::ChatReply& r) {
  QStringList parts;
  parts << QStringLiteral("TTFT %1").arg(Figure(r.ttft_ms, "ms"));
  parts << QStringLiteral("prefill %1").arg(Figure(r.prefill_tps, "tok/s"));
  parts << QStringLiteral("decode %1").arg(Figure(r.decode_tps, "tok/s", 1));
  parts << QStringLiteral("%1 tokens").arg(r.completion_tokens);
  if (!r.pool.empty()) {
    parts << QStringLiteral("pool %1").arg(QString::fromStdString(r.pool)) +
                 (r.route.empty() ? QString()
                                  : QStringLiteral(" (route %1)").arg(QString::fromStdString(r.route)));
  }
  if (r.finish_reason == "length") parts << QStringLiteral("stopped at max tokens");
  if (r.finish_reason == "cancelled") parts << QStringLiteral("stopped");
  return parts.join(QStringLiteral(" · "));
}

}  // namespace

ChatPanel::ChatPanel(InstanceManager* instances, QWidget* parent)
    : QWidget(parent),
      instances_(instances),
      render_timer_(new QTimer(this)),
      thread_(new QThread(this)),
      worker_(new ChatWorker) {
  setObjectName(QStringLiteral("chatPanel"));
  qRegisterMetaType<app::ChatReply>();
  qRegisterMetaType<std::vector<app::ServerDefault>>();
  thread_->setObjectName(QStringLiteral("chatReply"));
  worker_->moveToThread(thread_);
  thread_->start();
  connect(worker_, &ChatWorker::delta, this, [this](quint64 id, const QString& text) {
    if (stream_ && id == stream_id_) onDelta(text);
  });
  connect(worker_, &ChatWorker::finished, this,
          [this](quint64 id, bool ok, const app::ChatReply& reply, const QString& error) {
            if (!stream_ || id != stream_id_) return;
            onDone(ok, ok ? StatsLine(reply) : QString(), error,
                   QString::fromStdString(reply.finish_reason));
          });
  connect(worker_, &ChatWorker::defaultsFetched, this, &ChatPanel::showDefaults);
  conversation_dir_ =
      QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/conversations");
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(18, 14, 18, 14);
  auto* header = new PanelHeader(tr("Chat"), tr("Talk to a running instance or the router"), this);
  outer->addWidget(header);

  // Endpoint and saved conversations.
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Endpoint"), this));
  endpoint_ = new QComboBox(this);
  endpoint_->setObjectName(QStringLiteral("chatEndpoint"));
  endpoint_->setEditable(true);
  endpoint_->setInsertPolicy(QComboBox::NoInsert);
  endpoint_->setMinimumContentsLength(30);
  endpoint_->lineEdit()->setPlaceholderText(tr("launch an instance, or type http://host:port"));
  bar->addWidget(endpoint_, 2);
  bar->addSpacing(12);
  bar->addWidget(new QLabel(tr("Conversation"), this));
  saved_ = new QComboBox(this);
  saved_->setObjectName(QStringLiteral("savedConversations"));
  saved_->setMinimumContentsLength(22);
  bar->addWidget(saved_, 1);
  outer->addLayout(bar);

  auto* split = new QSplitter(Qt::Horizontal, this);
  // Left: transcript and input.
  auto* left = new QWidget(split);
  auto* ll = new QVBoxLayout(left);
  ll->setContentsMargins(0, 0, 0, 0);
  transcript_ = new QTextBrowser(left);
  transcript_->setObjectName(QStringLiteral("chatTranscript"));
  transcript_->setOpenLinks(false);
  ll->addWidget(transcript_, 1);
  input_ = new QPlainTextEdit(left);
  input_->setObjectName(QStringLiteral("chatInput"));
  input_->setPlaceholderText(tr("Message (Ctrl+Return sends)"));
  input_->setMaximumHeight(90);
  ll->addWidget(input_);
  auto* buttons = new QHBoxLayout;
  send_ = new QPushButton(GlyphIcon(Glyph::kChat), tr("Send"), left);
  send_->setObjectName(QStringLiteral("chatSend"));
  stop_ = new QPushButton(tr("Stop"), left);
  stop_->setObjectName(QStringLiteral("chatStop"));
  regenerate_ = new QPushButton(tr("Regenerate"), left);
  regenerate_->setObjectName(QStringLiteral("chatRegenerate"));
  copy_ = new QPushButton(tr("Copy reply"), left);
  copy_->setObjectName(QStringLiteral("chatCopy"));
  clear_ = new QPushButton(tr("New / clear"), left);
  clear_->setObjectName(QStringLiteral("chatClear"));
  state_ = new QLabel(left);
  state_->setObjectName(QStringLiteral("chatState"));
  state_->setWordWrap(true);
  buttons->addWidget(send_);
  buttons->addWidget(stop_);
  buttons->addWidget(regenerate_);
  buttons->addWidget(copy_);
  buttons->addWidget(clear_);
  buttons->addWidget(state_, 1);
  ll->addLayout(buttons);

  // Right: sampling settings.
  auto* right = new Card(split);
  auto* rl = new QVBoxLayout(right);
  rl->addWidget(SectionLabel(tr("System prompt"), right));
  system_ = new QPlainTextEdit(right);
  system_->setObjectName(QStringLiteral("chatSystem"));
  system_->setPlaceholderText(tr("You are a helpful assistant."));
  system_->setMaximumHeight(110);
  rl->addWidget(system_);
  rl->addWidget(SectionLabel(tr("Sampling"), right));
  auto* form = new QFormLayout;
  // A narrow card puts each box under its label rather than clip its text.
  form->setRowWrapPolicy(QFormLayout::WrapLongRows);
  // Each box's lowest value is "default": not sent (see the header).
  temperature_ = new QDoubleSpinBox(right);
  temperature_->setObjectName(QStringLiteral("chatTemperature"));
  temperature_->setRange(-0.1, 2);
  temperature_->setSingleStep(0.1);
  top_p_ = new QDoubleSpinBox(right);
  top_p_->setObjectName(QStringLiteral("chatTopP"));
  top_p_->setRange(0, 1);
  top_p_->setSingleStep(0.05);
  top_k_ = new QSpinBox(right);
  top_k_->setObjectName(QStringLiteral("chatTopK"));
  top_k_->setRange(-1, 1000);
  repetition_penalty_ = new QDoubleSpinBox(right);
  repetition_penalty_->setObjectName(QStringLiteral("chatRepetitionPenalty"));
  repetition_penalty_->setRange(0, 3);
  repetition_penalty_->setSingleStep(0.05);
  max_tokens_ = new QSpinBox(right);
  max_tokens_->setObjectName(QStringLiteral("chatMaxTokens"));
  max_tokens_->setRange(0, 32768);
  for (QAbstractSpinBox* b :
       {static_cast<QAbstractSpinBox*>(temperature_), static_cast<QAbstractSpinBox*>(top_p_),
        static_cast<QAbstractSpinBox*>(top_k_), static_cast<QAbstractSpinBox*>(repetition_penalty_),
        static_cast<QAbstractSpinBox*>(max_tokens_)}) {
    b->setSpecialValueText(tr("default"));
  }
  ClearToDefault(temperature_);
  ClearToDefault(top_p_);
  ClearToDefault(top_k_);
  ClearToDefault(repetition_penalty_);
  ClearToDefault(max_tokens_);
  defaults_ = new QLabel(right);
  defaults_->setObjectName(QStringLiteral("chatDefaults"));
  defaults_->setWordWrap(true);
  defaults_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  stop_strings_ = new QLineEdit(right);
  stop_strings_->setObjectName(QStringLiteral("chatStopStrings"));
  stop_strings_->setPlaceholderText(tr("comma-separated"));
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-p"), top_p_);
  form->addRow(tr("Top-k"), top_k_);
  form->addRow(tr("Repetition penalty"), repetition_penalty_);
  form->addRow(tr("Max tokens"), max_tokens_);
  form->addRow(tr("Stop"), stop_strings_);
  rl->addLayout(form);
  rl->addWidget(defaults_);
  rl->addStretch(1);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  outer->addWidget(split, 1);

  connect(send_, &QPushButton::clicked, this, &ChatPanel::send);
  connect(stop_, &QPushButton::clicked, this, &ChatPanel::stopReply);
  connect(regenerate_, &QPushButton::clicked, this, &ChatPanel::regenerate);
  connect(copy_, &QPushButton::clicked, this, &ChatPanel::copyLastReply);
  connect(clear_, &QPushButton::clicked, this, &ChatPanel::clearConversation);
  auto* shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
  shortcut->setContext(Qt::WidgetWithChildrenShortcut);
  connect(shortcut, &QShortcut::activated, this, &ChatPanel::send);
  connect(saved_, qOverload<int>(&QComboBox::activated), this, [this](int row) {
    const QString file = saved_->itemData(row).toString();
    if (!file.isEmpty() && !busy_) openConversation(file);
  });
  render_timer_->setSingleShot(true);
  render_timer_->setInterval(40);
  connect(render_timer_, &QTimer::timeout, this, &ChatPanel::render);
  connect(instances_, &InstanceManager::changed, this, &ChatPanel::refreshEndpoints);
  connect(endpoint_, &QComboBox::editTextChanged, this, [this] {
    updateButtons();
    defaults_timer_->start();
  });
  connect(endpoint_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this] { defaults_timer_->start(); });
  // The endpoint's defaults, once its text has settled.
  defaults_timer_ = new QTimer(this);
  defaults_timer_->setSingleShot(true);
  defaults_timer_->setInterval(300);
  connect(defaults_timer_, &QTimer::timeout, this, &ChatPanel::refreshDefaults);
  connect(input_, &QPlainTextEdit::textChanged, this, [this] { updateButtons(); });
  refreshEndpoints();
  refreshSaved();
  render();
  updateButtons();
}

ChatPanel::~ChatPanel() {
  if (stream_) *stream_ = true;  // the worker ends at its next chunk
  thread_->quit();
  thread_->wait();
  delete worker_;
}

void ChatPanel::setConversationDir(const QString& dir) {
  conversation_dir_ = dir;
  refreshSaved();
}

void ChatPanel::setEndpoint(const QString& url) { endpoint_->setEditText(url); }

QString ChatPanel::endpoint() const {
  const int i = endpoint_->findText(endpoint_->currentText());
  if (i >= 0 && !endpoint_->itemData(i).toString().isEmpty()) return endpoint_->itemData(i).toString();
  return endpoint_->currentText().trimmed();
}

void ChatPanel::refreshEndpoints() {
  const QString current = endpoint_->currentText();
  QStringList seen;
  endpoint_->blockSignals(true);
  endpoint_->clear();
  for (const InstanceInfo& info : instances_->instances()) {
    if (info.state != InstanceInfo::State::kReady) continue;
    endpoint_->addItem(QStringLiteral("%1 — %2").arg(info.name, info.url), info.url);
    seen << info.url;
  }
  endpoint_->blockSignals(false);
  if (!current.isEmpty()) {
    endpoint_->setEditText(current);
  } else if (endpoint_->count() > 0) {
    endpoint_->setCurrentIndex(endpoint_->count() - 1);
  }
  updateButtons();
}

void ChatPanel::updateButtons() {
  const bool has_endpoint = !endpoint().isEmpty();
  bool has_reply = false;
  for (const Message& m : messages_) has_reply = has_reply || m.role == QLatin1String("assistant");
  send_->setEnabled(!busy_ && has_endpoint && !input_->toPlainText().trimmed().isEmpty());
  stop_->setEnabled(busy_);
  regenerate_->setEnabled(!busy_ && has_endpoint && has_reply);
  copy_->setEnabled(has_reply);
  clear_->setEnabled(!busy_ && !messages_.isEmpty());
}

void ChatPanel::sendMessage(const QString& text) {
  input_->setPlainText(text);
  send();
}

void ChatPanel::send() {
  const QString text = input_->toPlainText().trimmed();
  if (busy_ || text.isEmpty()) return;
  if (endpoint().isEmpty()) {
    state_->setText(tr("Choose an endpoint: launch an instance on the Launch panel."));
    return;
  }
  messages_.append({QStringLiteral("user"), text, {}, {}});
  input_->clear();
  startReply();
}

void ChatPanel::regenerate() {
  if (busy_) return;
  while (!messages_.isEmpty() && messages_.last().role == QLatin1String("assistant")) {
    messages_.removeLast();
  }
  if (messages_.isEmpty()) return;
  startReply();
}

void ChatPanel::startReply() {
  app::ChatRequest req;
  req.base_url = endpoint().toStdString();
  const QString system = system_->toPlainText().trimmed();
  if (!system.isEmpty()) req.messages.push_back({"system", system.toStdString()});
  for (const Message& m : messages_) {
    if (m.error.isEmpty()) req.messages.push_back({m.role.toStdString(), m.content.toStdString()});
  }
  if (IsSet(temperature_)) req.temperature = temperature_->value();
  if (IsSet(top_p_)) req.top_p = top_p_->value();
  if (IsSet(top_k_)) req.top_k = top_k_->value();
  if (IsSet(repetition_penalty_)) req.repetition_penalty = repetition_penalty_->value();
  if (IsSet(max_tokens_)) req.max_tokens = max_tokens_->value();
  for (const QString& s : stop_strings_->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    req.stop.push_back(s.toStdString());
  }
  messages_.append({QStringLiteral("assistant"), {}, {}, {}});
  busy_ = true;
  state_->setText(tr("Waiting for the first token…"));
  updateButtons();
  render();

  auto cancel = std::make_shared<std::atomic<bool>>(false);
  stream_ = cancel;
  const quint64 id = ++stream_id_;
  QMetaObject::invokeMethod(worker_,
                            [worker = worker_, id, req, cancel] { worker->run(id, req, cancel); });
}

void ChatPanel::onDelta(const QString& text) {
  if (messages_.isEmpty()) return;
  if (messages_.last().content.isEmpty()) state_->setText(tr("Streaming…"));
  messages_.last().content += text;
  emit streamed(text);
  if (!render_timer_->isActive()) render_timer_->start();
}

void ChatPanel::onDone(bool ok, const QString& stats, const QString& error, const QString& finish) {
  busy_ = false;
  stream_.reset();
  if (!messages_.isEmpty()) {
    Message& m = messages_.last();
    m.stats = stats;
    m.error = error;
  }
  state_->setText(ok ? (finish == QLatin1String("cancelled") ? tr("Stopped.") : QString())
                     : tr("The reply failed: %1").arg(error));
  render_timer_->stop();
  render();
  save();
  updateButtons();
  refreshDefaults();  // when they could not be read before (the server was still starting)
  emit replyFinished(ok);
}

void ChatPanel::stopReply() {
  if (!stream_) return;
  *stream_ = true;
  state_->setText(tr("Stopping…"));
}

void ChatPanel::copyLastReply() {
  for (auto it = messages_.crbegin(); it != messages_.crend(); ++it) {
    if (it->role == QLatin1String("assistant")) {
      QApplication::clipboard()->setText(it->content);
      state_->setText(tr("Reply copied."));
      return;
    }
  }
}

void ChatPanel::clearConversation() {
  if (busy_) return;
  messages_.clear();
  conversation_file_.clear();
  state_->clear();
  saved_->setCurrentIndex(-1);
  render();
  updateButtons();
}

void ChatPanel::render() {
  const QPalette pal = palette();
  const StatusColors sc = StatusColorsFor(pal);
  QString html;
  if (messages_.isEmpty()) {
    html = QStringLiteral("<p style='color:%1'>%2</p>")
               .arg(sc.muted.name(),
                    tr("Launch an instance (Launch panel) or type an endpoint above, then write a "
                       "message below.")
                        .toHtmlEscaped());
  }
  for (const Message& m : messages_) {
    const bool user = m.role == QLatin1String("user");
    const QColor bg = user ? Mix(pal.color(QPalette::Base), sc.accent, 0.12) : pal.color(QPalette::AlternateBase);
    QString body = m.content.toHtmlEscaped();
    if (!user && body.isEmpty() && m.error.isEmpty()) body = QStringLiteral("…");
    html += QStringLiteral(
                "<table width='100%' cellpadding='8' style='margin-bottom:6px;background:%1'>"
                "<tr><td><b>%2</b><br><span style='white-space:pre-wrap'>%3</span>")
                .arg(bg.name(), user ? tr("You") : tr("Assistant"), body);
    if (!m.error.isEmpty()) {
      html += QStringLiteral("<br><span style='color:%1'>%2</span>")
                  .arg(sc.bad.name(), m.error.toHtmlEscaped());
    }
    if (!m.stats.isEmpty()) {
      html += QStringLiteral("<br><small style='color:%1'>%2</small>")
                  .arg(sc.muted.name(), m.stats.toHtmlEscaped());
    }
    html += QStringLiteral("</td></tr></table>");
  }
  QScrollBar* bar = transcript_->verticalScrollBar();
  const bool at_end = bar->value() >= bar->maximum() - 4;
  transcript_->setHtml(html);
  if (at_end) bar->setValue(bar->maximum());
}

void ChatPanel::save() {
  if (messages_.isEmpty()) return;
  QDir().mkpath(conversation_dir_);
  if (conversation_file_.isEmpty()) {
    conversation_file_ = QDir(conversation_dir_).filePath(
        QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz")) +
        QStringLiteral(".json"));
  }
  QJsonArray msgs;
  for (const Message& m : messages_) {
    QJsonObject o{{QStringLiteral("role"), m.role}, {QStringLiteral("content"), m.content}};
    if (!m.stats.isEmpty()) o[QStringLiteral("stats")] = m.stats;
    if (!m.error.isEmpty()) o[QStringLiteral("error")] = m.error;
    msgs.append(o);
  }
  QJsonObject doc{{QStringLiteral("endpoint"), endpoint()},
                  {QStringLiteral("system"), system_->toPlainText()},
                  {QStringLiteral("temperature"), temperature_->value()},
                  {QStringLiteral("top_p"), top_p_->value()},
                  {QStringLiteral("top_k"), top_k_->value()},
                  {QStringLiteral("repetition_penalty"), repetition_penalty_->value()},
                  {QStringLiteral("max_tokens"), max_tokens_->value()},
                  {QStringLiteral("stop"), stop_strings_->text()},
                  {QStringLiteral("messages"), msgs}};
  QFile f(conversation_file_ + QStringLiteral(".tmp"));
  if (f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    f.write(QJsonDocument(doc).toJson());
    f.close();
    QFile::remove(conversation_file_);
    f.rename(conversation_file_);
  } else {
    state_->setText(tr("Could not save the conversation to %1: %2").arg(conversation_file_, f.errorString()));
  }
  refreshSaved();
}

bool ChatPanel::openConversation(const QString& file) {
  QFile f(file);
  if (!f.open(QIODevice::ReadOnly)) return false;
  const QJsonObject doc = QJsonDocument::fromJson(f.readAll()).object();
  if (!doc.contains(QStringLiteral("messages"))) {
    state_->setText(tr("%1 is not a saved conversation.").arg(file));
    return false;
  }
  messages_.clear();
  for (const QJsonValue& v : doc.value(QStringLiteral("messages")).toArray()) {
    const QJsonObject o = v.toObject();
    messages_.append({o.value(QStringLiteral("role")).toString(),
                      o.value(QStringLiteral("content")).toString(),
                      o.value(QStringLiteral("stats")).toString(),
                      o.value(QStringLiteral("error")).toString()});
  }
  system_->setPlainText(doc.value(QStringLiteral("system")).toString());
  // Absent (or at the box's lowest value): the server's default.
  temperature_->setValue(
      doc.value(QStringLiteral("temperature")).toDouble(temperature_->minimum()));
  top_p_->setValue(doc.value(QStringLiteral("top_p")).toDouble(top_p_->minimum()));
  top_k_->setValue(doc.value(QStringLiteral("top_k")).toInt(top_k_->minimum()));
  repetition_penalty_->setValue(
      doc.value(QStringLiteral("repetition_penalty")).toDouble(repetition_penalty_->minimum()));
  max_tokens_->setValue(doc.value(QStringLiteral("max_tokens")).toInt(max_tokens_->minimum()));
  stop_strings_->setText(doc.value(QStringLiteral("stop")).toString());
  conversation_file_ = file;
  render();
  updateButtons();
  return true;
}

void ChatPanel::refreshSaved() {
  QDir dir(conversation_dir_);
  const QFileInfoList files =
      dir.entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name | QDir::Reversed);
  saved_->blockSignals(true);
  saved_->clear();
  int current = -1;
  for (int i = 0; i < std::min<qsizetype>(files.size(), 50); ++i) {
    const QFileInfo& fi = files[i];
    QString title = fi.completeBaseName();
    QFile f(fi.absoluteFilePath());
    if (f.open(QIODevice::ReadOnly)) {
      const QJsonArray msgs =
          QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("messages")).toArray();
      if (!msgs.isEmpty()) {
        title = fi.lastModified().toString(QStringLiteral("MMM d HH:mm")) + QStringLiteral(" — ") +
                msgs.first().toObject().value(QStringLiteral("content")).toString().left(40);
      }
    }
    saved_->addItem(title, fi.absoluteFilePath());
    if (fi.absoluteFilePath() == QFileInfo(conversation_file_).absoluteFilePath()) current = i;
  }
  saved_->setCurrentIndex(current);
  saved_->blockSignals(false);
}

void ChatPanel::refreshDefaults() {
  const QString url = endpoint();
  if (url == defaults_url_) return;
  defaults_url_ = url;
  if (url.isEmpty()) {
    showDefaults(url, {}, {});
    return;
  }
  defaults_->setText(tr("Asking %1 for its sampling defaults…").arg(url));
  // On the worker's thread (after a reply in flight); the answer comes back
  // as defaultsFetched.
  QMetaObject::invokeMethod(worker_, [worker = worker_, url] { worker->fetchDefaults(url); });
}

void ChatPanel::showDefaults(const QString& url, const std::vector<app::ServerDefault>& defaults,
                             const QString& error) {
  if (url != defaults_url_) return;  // the endpoint changed meanwhile
  auto box_for = [this](const std::string& name) -> QAbstractSpinBox* {
    if (name == "temperature") return temperature_;
    if (name == "top_p") return top_p_;
    if (name == "top_k") return top_k_;
    if (name == "repetition_penalty") return repetition_penalty_;
    if (name == "max_tokens") return max_tokens_;
    return nullptr;
  };
  for (const char* name : {"temperature", "top_p", "top_k", "repetition_penalty", "max_tokens"}) {
    box_for(name)->setSpecialValueText(tr("default"));
    box_for(name)->setToolTip(QString());
  }
  if (url.isEmpty()) {
    defaults_->clear();
    return;
  }
  if (!error.isEmpty()) {
    defaults_->setText(
        tr("Sampling defaults: the server's (%1 did not say which: %2)").arg(url, error));
    defaults_url_.clear();  // asked again after the next reply, or when the endpoint changes
    return;
  }
  if (defaults.empty()) {
    defaults_->setText(tr("Sampling defaults: the server's (it does not say which)."));
    return;
  }
  QStringList lines;
  for (const app::ServerDefault& d : defaults) {
    const QString value = DefaultValueText(d);
    const QString source = QString::fromStdString(d.source);
    if (QAbstractSpinBox* b = box_for(d.name)) {
      // The box shows the value; where it comes from is in its tooltip and
      // the list below (the whole text would not fit the box).
      b->setSpecialValueText(tr("default: %1").arg(d.value ? value : tr("no limit")));
      b->setToolTip(tr("Left at default: %1 (%2)").arg(value, source));
      // Never narrower than its text: the splitter then keeps the card wide enough.
      b->setMinimumWidth(b->sizeHint().width());
    }
    lines << tr("%1 = %2 (%3)").arg(QString::fromStdString(d.name), value, source);
  }
  defaults_->setText(tr("Left at \"default\", a setting takes the server's value:\n") +
                     lines.join(QLatin1Char('\n')));
}

}  // namespace octet::ui
