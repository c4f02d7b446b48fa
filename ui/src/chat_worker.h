// The chat playground's worker object: it lives in a thread the ChatPanel
// owns and streams one reply at a time (app::StreamChat), reporting each text
// delta and the end of the reply by signals queued to the panel. Call run()
// queued (QMetaObject::invokeMethod with the worker as context).
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <memory>
#include <vector>

#include "octet/app/chat_client.h"

namespace octet::ui {

class ChatWorker : public QObject {
  Q_OBJECT
 public:
  // Streams reply `id` to its end; `cancel` is polled as each chunk arrives
  // (the reply then ends with finish reason "cancelled").
  void run(quint64 id, const app::ChatRequest& request,
           const std::shared_ptr<const std::atomic<bool>>& cancel);
  // Asks `url` for the sampling defaults it applies (app::FetchServerDefaults,
  // a few seconds at most) and answers with defaultsFetched.
  void fetchDefaults(const QString& url);

 signals:
  void delta(quint64 id, const QString& text);
  // `ok`: the reply ended (reply.finish_reason "stop", "length" or
  // "cancelled") with its figures in `reply`; otherwise `error` says why not.
  void finished(quint64 id, bool ok, const app::ChatReply& reply, const QString& error);
  // `error` empty: `defaults` is what the endpoint said (empty: it does not say).
  void defaultsFetched(const QString& url, const std::vector<app::ServerDefault>& defaults,
                       const QString& error);
};

}  // namespace octet::ui
