#include "bench_workers.h"

namespace octet::ui {

void BenchStoreReader::listRuns(int generation, const std::string& path) {
  std::vector<app::BenchRun> runs;
  QString error;
  auto store = app::BenchRunStore::Open(path);
  if (store.ok()) {
    auto listed = (*store)->ListRuns(500);
    if (listed.ok()) {
      runs = std::move(*listed);
    } else {
      error = QString::fromStdString(listed.status().message());
    }
  } else {
    error = QString::fromStdString(store.status().message());
  }
  emit runsListed(generation, runs, error);
}

void BenchStoreReader::readRuns(const std::vector<int64_t>& ids, const std::string& path) {
  std::vector<app::BenchRun> runs;
  QString error;
  auto store = app::BenchRunStore::Open(path);
  if (!store.ok()) {
    error = QString::fromStdString(store.status().message());
  } else {
    for (int64_t id : ids) {
      auto run = (*store)->GetRun(id);
      if (!run.ok()) {
        error = QString::fromStdString(run.status().message());
        break;
      }
      runs.push_back(std::move(*run));
    }
  }
  emit runsRead(runs, error);
}

void BenchSweeper::run(quint64 id, const app::BenchConfig& c, const std::string& path,
                       const std::shared_ptr<const std::atomic<bool>>& cancel) {
  // A read may be creating the file right now (a new store): let the reads
  // queued so far finish (the reader's thread runs them in order).
  QMetaObject::invokeMethod(
      reader_, [] {}, Qt::BlockingQueuedConnection);
  auto store = app::BenchRunStore::Open(path);
  if (!store.ok()) {
    emit finished(id, false, QString::fromStdString(store.status().message()), true);
    return;
  }
  bool posted_begin = false;
  auto run = app::RunBenchmark(
      c, store->get(),
      [&](const app::BenchProgress& pr) {
        const int done = pr.test_index * pr.runs + pr.repetition + (pr.phase == "done" ? 1 : 0);
        const QString text =
            QStringLiteral("%1 — %2 (%3/%4)")
                .arg(QString::fromStdString(pr.test), QString::fromStdString(pr.phase))
                .arg(pr.repetition + 1)
                .arg(pr.runs);
        const bool begun = pr.run_id > 0 && !posted_begin;
        if (begun) posted_begin = true;
        emit progress(id, done, text, begun);
      },
      cancel.get());
  const bool ok = run.ok();
  const QString detail =
      ok ? QObject::tr("Run #%1 stored: %2 test(s).").arg(run->id).arg(run->results.size())
         : QString::fromStdString(run.status().message());
  emit finished(id, ok, detail, false);
}

}  // namespace octet::ui
