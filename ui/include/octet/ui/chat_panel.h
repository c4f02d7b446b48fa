// Chat playground: a conversation with a running instance (launched from the
// Launch panel, or any OpenAI-compatible URL) or the router gateway. Replies
// stream in token by token; each one is followed by its figures (time to
// first token, prefill and decode tokens/s, tokens, and the pool that answered
// when routed). System prompt, temperature, top-p, top-k, repetition penalty,
// max tokens and stop strings; Stop, Regenerate, Copy, Clear; every
// conversation is saved as JSON (under the application data folder) and can
// be reopened.
//
// Sampling defaults: a setting at its lowest value reads "default" and is not
// sent, so the server applies its model's generation_config.json value (else
// its built-in one), as `octet chat` and `octet serve` do. The panel asks the
// endpoint which values those are (app::FetchServerDefaults) and shows each
// with where it came from (the "chatDefaults" label and each box's "default:
// ..." text).
//
// The HTTP request runs on a worker object (ChatWorker, app::StreamChat) in a
// thread the panel owns; text deltas arrive as queued signals and are drawn at
// most every 40 ms. Closing the panel stops a reply (at its next chunk) and
// joins the thread.
#pragma once

#include <QJsonObject>
#include <QWidget>
#include <atomic>
#include <memory>
#include <vector>

#include "octet/app/chat_client.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTextBrowser;
class QThread;
class QTimer;

namespace octet::ui {

class ChatWorker;
class InstanceManager;

class ChatPanel : public QWidget {
  Q_OBJECT
 public:
  struct Message {
    QString role;  // "user", "assistant"
    QString content;
    QString stats;  // assistant: "TTFT 12 ms · prefill ..."
    QString error;  // assistant: why the reply failed
  };

  ChatPanel(InstanceManager* instances, QWidget* parent = nullptr);
  ~ChatPanel() override;

  void setEndpoint(const QString& url);
  QString endpoint() const;
  const QList<Message>& messages() const { return messages_; }
  bool busy() const { return busy_; }
  // Where conversations are saved (default: <AppDataLocation>/conversations).
  void setConversationDir(const QString& dir);
  QString conversationFile() const { return conversation_file_; }

 signals:
  void streamed(const QString& piece);  // each text delta as it arrives
  void replyFinished(bool ok);

 public slots:
  // Sends `text` as the next user message (as typing it and pressing Send).
  void sendMessage(const QString& text);
  void send();
  void stopReply();
  void regenerate();
  void copyLastReply();
  void clearConversation();
  bool openConversation(const QString& file);

 private:
  void startReply();
  void onDelta(const QString& text);
  void onDone(bool ok, const QString& stats, const QString& error, const QString& finish);
  void render();
  void refreshEndpoints();
  void refreshSaved();
  void save();
  void updateButtons();
  void refreshDefaults();
  void showDefaults(const QString& url, const std::vector<app::ServerDefault>& defaults,
                    const QString& error);

  InstanceManager* instances_;
  QComboBox* endpoint_;
  QComboBox* saved_;
  QPlainTextEdit* system_;
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* top_p_;
  QSpinBox* top_k_;
  QDoubleSpinBox* repetition_penalty_;
  QSpinBox* max_tokens_;
  QLabel* defaults_;
  QTimer* defaults_timer_;
  QString defaults_url_;  // the endpoint `defaults_` describes
  QLineEdit* stop_strings_;
  QTextBrowser* transcript_;
  QPlainTextEdit* input_;
  QPushButton* send_;
  QPushButton* stop_;
  QPushButton* regenerate_;
  QPushButton* copy_;
  QPushButton* clear_;
  QLabel* state_;
  QTimer* render_timer_;
  QList<Message> messages_;
  // The reply in flight: its cancel flag (null when none) and its id.
  std::shared_ptr<std::atomic<bool>> stream_;
  quint64 stream_id_ = 0;
  QThread* thread_;     // runs worker_; quit and joined in the destructor
  ChatWorker* worker_;  // lives in thread_
  bool busy_ = false;
  QString conversation_dir_;
  QString conversation_file_;
};

}  // namespace octet::ui
