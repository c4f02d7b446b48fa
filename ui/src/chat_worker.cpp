#include "chat_worker.h"

#include "octet/base/deadline.h"

namespace octet::ui {

void ChatWorker::run(quint64 id, const app::ChatRequest& request,
                     const std::shared_ptr<const std::atomic<bool>>& cancel) {
  auto reply = app::StreamChat(
      request, [&](const std::string& text) { emit delta(id, QString::fromStdString(text)); },
      cancel.get(), Deadline::AfterMs(300'000));
  if (reply.ok()) {
    emit finished(id, true, *reply, {});
  } else {
    emit finished(id, false, {}, QString::fromStdString(reply.status().message()));
  }
}

void ChatWorker::fetchDefaults(const QString& url) {
  auto d = app::FetchServerDefaults(url.toStdString(), "", "", Deadline::AfterMs(3'000));
  if (d.ok()) {
    emit defaultsFetched(url, *d, {});
  } else {
    emit defaultsFetched(url, {}, QString::fromStdString(d.status().message()));
  }
}

}  // namespace octet::ui
