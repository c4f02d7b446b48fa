// The Benchmarks panel's work off the GUI thread: worker objects that live in
// threads the panel owns and report by signals (queued to the panel, carrying
// values). BenchStoreReader lists and reads stored runs, one request at a
// time; BenchSweeper runs a sweep (app::RunBenchmark) into the run store.
// Their methods run on their own thread: call them queued
// (QMetaObject::invokeMethod with the worker as context).
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/bench_runner.h"
#include "octet/app/bench_store.h"

namespace octet::ui {

class BenchStoreReader : public QObject {
  Q_OBJECT
 public:
  // The newest runs of the store at `path` (created when missing).
  void listRuns(int generation, const std::string& path);
  // The runs `ids` with their results, in that order.
  void readRuns(const std::vector<int64_t>& ids, const std::string& path);

 signals:
  void runsListed(int generation, const std::vector<app::BenchRun>& runs, const QString& error);
  void runsRead(const std::vector<app::BenchRun>& runs, const QString& error);
};

class BenchSweeper : public QObject {
  Q_OBJECT
 public:
  // `reader`: reads queued on it finish before a sweep opens the store (a read
  // may be creating a new store file, and two connections must not).
  explicit BenchSweeper(BenchStoreReader* reader) : reader_(reader) {}

  // Runs sweep `id` to its end; `cancel` is polled between requests and as
  // each streamed chunk arrives (the run is then stored as interrupted).
  void run(quint64 id, const app::BenchConfig& config, const std::string& store_path,
           const std::shared_ptr<const std::atomic<bool>>& cancel);

 signals:
  // `done` of the sweep's total requests; `begun`: the run is now in the store.
  void progress(quint64 id, int done, const QString& text, bool begun);
  // `store_failed`: the store could not be opened (nothing ran).
  void finished(quint64 id, bool ok, const QString& detail, bool store_failed);

 private:
  BenchStoreReader* reader_;
};

}  // namespace octet::ui
