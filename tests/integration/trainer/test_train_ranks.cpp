// Data parallelism with real rank processes: N ranks on disjoint slices of a
// global batch produce the gradients one rank computes on the whole batch; a
// rank that dies stops the run with its name and leaves the last checkpoint
// usable; octet-agent's job supervisor can run the ranks as
// `octet worker --job training` and read their figures.
#include <QTest>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <regex>
#include <thread>

#include "octet/agent/job_supervisor.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/subprocess.h"
#include "octet/engine/safetensors.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/gpt_config.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/optimizer.h"
#include "octet_test.h"
#include "trainer_test_util.h"

using namespace octet;
using octet::test::BinDir;
using octet::test::RunProgram;

namespace {

constexpr char kConfig[] =
    R"({"model_type":"nanochat","n_layer":2,"n_head":2,"n_embd":32,"vocab_size":48,)"
    R"("sequence_len":16})";

// Gradient tensors of a --grads-out file, by name.
std::map<std::string, std::vector<float>> ReadGrads(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto f = engine::SafetensorsFile::Open(path);
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    std::vector<float> v(t.numel());
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
    out[t.name] = std::move(v);
  }
  return out;
}

}  // namespace

class TestTrainRanks : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::string root_;

  std::vector<std::string> TrainArgs(const std::string& out) {
    return {"octet",          "train",
            "--config",       root_ + "/small.json",
            "--data",         root_ + "/data",
            "--out",          out,
            "--seq-len",      "16",
            "--threads",      "1",
            "--eval-batches", "0"};
  }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    root_ = tmp_.path().toStdString();
    trainer::testing::WriteSyntheticData(root_ + "/data", 48, 30, 80);
    QVERIFY(WriteFileAtomic(root_ + "/small.json", kConfig).ok());
  }

  // Two steps on one rank give weights that are not nanochat's init (which
  // zeroes lm_head and the projections, and with them most first-step
  // gradients); from that checkpoint, one more step with 1, 2 and 4 rank
  // processes over the same 4 x 16 global batch, with buckets from a few
  // tensors each to one for the whole model, must average to the same
  // gradients (rank 0 writes them with --grads-out).
  void rankProcessesAverageToTheOneRankGradients() {
    auto args = TrainArgs(root_ + "/base");
    args.insert(args.end(), {"--batch-size", "4", "--steps", "2"});
    auto r = RunProgram(args, 60'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());

    struct Run {
      int ranks;
      const char* bucket;
    };
    const Run runs[] = {{1, "25M"}, {2, "1K"}, {2, "16K"}, {2, "25M"}, {4, "4K"}, {4, "25M"}};
    std::map<std::string, std::vector<float>> reference;
    for (const Run& run : runs) {
      const std::string name = std::to_string(run.ranks) + "x" + run.bucket;
      const std::string out = root_ + "/dp-" + name;
      std::filesystem::copy(root_ + "/base", out, std::filesystem::copy_options::recursive);
      const std::string grads = out + "/grads.safetensors";
      args = TrainArgs(out);
      args.insert(args.end(), {"--resume", "--steps", "3", "--ranks", std::to_string(run.ranks),
                               "--batch-size", std::to_string(4 / run.ranks), "--bucket-size",
                               run.bucket, "--grads-out", grads});
      r = RunProgram(args, 60'000);
      QVERIFY2(r.exit_code == 0, (name + ": " + r.output).c_str());
      auto g = ReadGrads(grads);
      QVERIFY2(g.size() == 14, name.c_str());  // wte, 2 x 6 block matrices, lm_head
      if (run.ranks == 1) {
        reference = g;
        for (const auto& [tensor, v] : g) {
          float m = 0;
          for (float x : v) m = std::max(m, std::abs(x));
          QVERIFY2(m > 0, ("vacuous comparison: zero gradient for " + tensor).c_str());
        }
        continue;
      }
      for (const auto& [tensor, want] : reference) {
        const auto& got = g[tensor];
        QCOMPARE(got.size(), want.size());
        double scale = 0, diff = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          scale = std::max(scale, double(std::abs(want[i])));
          diff = std::max(diff, double(std::abs(got[i] - want[i])));
        }
        QVERIFY2(diff <= 1e-5 * scale,
                 (name + " " + tensor + ": max difference " + std::to_string(diff) +
                  " vs max gradient " + std::to_string(scale))
                     .c_str());
      }
    }
  }

  // SIGKILL one rank in the middle of a run: the run stops with an error that
  // names it, the newest checkpoint loads, and resuming from it finishes with
  // exactly the weights and optimizer state of a run that was never killed.
  void killedRankStopsTheRunAndTheLastCheckpointSurvives() {
    const std::string out = root_ + "/killed";
    // The total step count sets the learning-rate schedule (its warm-down),
    // so the killed, resumed and uninterrupted runs all ask for the same
    // number; it is large enough that the kill lands long before the end.
    const std::string total_steps = "400";
    auto args = TrainArgs(out);
    args[0] = BinDir() + "/octet";
    args.insert(args.end(), {"--ranks", "2", "--batch-size", "2", "--steps", total_steps,
                             "--checkpoint-every", "3", "--keep-checkpoints", "2"});
    auto output = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions o;
    o.argv = args;
    o.on_output = [output, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      output->append(chunk);
    };
    auto proc = Subprocess::Spawn(o);
    QVERIFY(proc.ok());
    auto text = [&] {
      std::lock_guard<std::mutex> lock(*mu);
      return *output;
    };
    // Wait for rank 1's pid and for two checkpoints.
    const Deadline started = Deadline::AfterMs(60'000);
    std::smatch m;
    std::string seen;
    const std::regex rank1("rank 1 started \\(pid ([0-9]+)\\)");
    while (!started.expired()) {
      seen = text();
      if (std::regex_search(seen, m, rank1) && PathExists(out + "/checkpoints/step-000006")) break;
      QVERIFY2(!(*proc)->Poll(), seen.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    QVERIFY2(!started.expired(), seen.c_str());
    const pid_t victim = std::stoi(m[1].str());
    QCOMPARE(::kill(victim, SIGKILL), 0);
    auto status = (*proc)->Wait(Deadline::AfterMs(60'000));
    QVERIFY2(status.ok(), text().c_str());
    const std::string all = text();
    QVERIFY2(status->exited && status->code == 1, all.c_str());
    QVERIFY2(all.find("octet train: rank 1 failed (killed by signal 9") != std::string::npos,
             all.c_str());
    // Rank 0's own error blames rank 1 too (from its collectives).
    QVERIFY2(std::regex_search(all, std::regex("rank 0\\)?: [^\\n]*rank 1")), all.c_str());

    auto latest = trainer::LatestCheckpoint(out);
    QVERIFY2(latest.ok(), latest.status().ToString().c_str());
    auto config = trainer::GptConfig::Load(*latest + "/config.json");
    QVERIFY(config.ok());
    auto backend = kernels::CreateBackend("auto", {.threads = 1});
    QVERIFY(backend.ok());
    auto model = trainer::GptModel::Create(*config, backend->get());
    QVERIFY(model.ok());
    auto opt = trainer::Optimizer::Create(trainer::OptimizerConfig{.kind = "muon"}, model->get());
    QVERIFY(opt.ok());
    trainer::CheckpointState state;
    const Status loaded = trainer::LoadCheckpoint(*latest, **model, **opt, &state);
    QVERIFY2(loaded.ok(), loaded.ToString().c_str());
    QVERIFY(state.step >= 6 && state.step % 3 == 0);
    QVERIFY2(state.step < std::stoi(total_steps), "the run ended before the kill");
    // ... and the run continues from it to the end ...
    args = TrainArgs(out);
    args.insert(args.end(), {"--ranks", "2", "--batch-size", "2", "--resume", "--steps",
                             total_steps, "--checkpoint-every", "3", "--keep-checkpoints", "2"});
    auto r = RunProgram(args, 120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY2(r.output.find("resuming from") != std::string::npos, r.output.c_str());
    // ... bit for bit where a run that was never killed ends.
    const std::string whole = root_ + "/unkilled";
    args = TrainArgs(whole);
    args.insert(args.end(), {"--ranks", "2", "--batch-size", "2", "--steps", total_steps,
                             "--checkpoint-every", "3", "--keep-checkpoints", "2"});
    r = RunProgram(args, 120'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const std::string last = "/checkpoints/step-000" + total_steps;
    for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
      auto resumed = ReadFileToString(out + last + file);
      auto straight = ReadFileToString(whole + last + file);
      QVERIFY2(resumed.ok() && straight.ok(), (out + last + file).c_str());
      QVERIFY2(resumed->size() > 1000, file);
      QVERIFY2(*resumed == *straight,
               (std::string(file) + " after the kill and --resume differs from the run that "
                                    "was never killed")
                   .c_str());
    }
    // The data loader resumed at the same place (its position is in the state).
    auto resumed_state = ReadFileToString(out + last + "/trainer_state.json");
    auto straight_state = ReadFileToString(whole + last + "/trainer_state.json");
    QVERIFY(resumed_state.ok() && straight_state.ok());
    QCOMPARE(*resumed_state, *straight_state);
  }

  // octet-agent's contract: each rank is `octet worker --job training --model
  // RUN --world-size 2 --rank R --rendezvous ... [extra octet train flags]`;
  // the ranks report '@octet-figures' the supervisor parses, and a finished
  // run leaves the model in RUN.
  void agentJobSupervisorRunsTrainingWorkers() {
    const std::string run = root_ + "/models/run";
    QVERIFY(MakeDirs(run).ok());
    QVERIFY(WriteFileAtomic(run + "/config.json", kConfig).ok());
    agent::JobSupervisorOptions so;
    so.octet_binary = BinDir() + "/octet";
    so.model_roots = {root_ + "/models", root_ + "/data"};
    so.stop_grace_ms = 2000;
    agent::JobSupervisor sup(so);
    auto spec = [&](const std::string& id, int rank, const std::string& rendezvous,
                    const std::string& steps) {
      agent::JobSpec s;
      s.job_id = id;
      s.kind = agent::JobKind::kTraining;
      s.model = run;
      s.world_size = 2;
      s.rank = rank;
      s.rendezvous = rendezvous;
      s.transport = "shm";
      s.algorithm = "auto";
      s.threads = 1;
      s.extra_args = {"--data", root_ + "/data",  "--seq-len", "16",      "--batch-size",
                      "2",      "--eval-batches", "0",         "--steps", steps};
      return s;
    };
    // A long run: both ranks report figures while it runs.
    auto r0 = sup.Start(spec("long-0", 0, "127.0.0.1:0", "1000000"));
    QVERIFY2(r0.ok(), r0.status().ToString().c_str());
    auto r1 = sup.Start(spec("long-1", 1, r0->rendezvous, "1000000"));
    QVERIFY2(r1.ok(), r1.status().ToString().c_str());
    uint64_t step[2] = {0, 0};
    double loss[2] = {0, 0};
    const Deadline d = Deadline::AfterMs(60'000);
    while ((step[0] < 3 || step[1] < 3) && !d.expired()) {
      for (const auto& f : sup.Figures()) {
        QCOMPARE(f.kind, std::string("training"));
        if (f.rank < 2 && f.train_step > step[f.rank]) {
          step[f.rank] = f.train_step;
          loss[f.rank] = f.train_loss;
          QCOMPARE(f.state, std::string("running"));
          QVERIFY(f.train_tps > 0 && f.step_ms > 0);
          QVERIFY(f.allreduce_share >= 0 && f.allreduce_share <= 1);
        }
      }
      auto j0 = sup.Get("long-0");
      QVERIFY2(j0.ok() && j0->state == agent::JobState::kRunning,
               sup.ReadLogs("long-0", 0, 1 << 20)->text.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    QVERIFY2(step[0] >= 3 && step[1] >= 3, sup.ReadLogs("long-0", 0, 1 << 20)->text.c_str());
    QVERIFY(loss[0] > 0 && loss[1] > 0);
    QVERIFY(sup.Stop("long-0").ok());
    QVERIFY(sup.Stop("long-1").ok());

    // A short run ends cleanly on both ranks with the model in the run folder.
    r0 = sup.Start(spec("short-0", 0, "127.0.0.1:0", "3"));
    QVERIFY2(r0.ok(), r0.status().ToString().c_str());
    r1 = sup.Start(spec("short-1", 1, r0->rendezvous, "3"));
    QVERIFY2(r1.ok(), r1.status().ToString().c_str());
    for (const char* id : {"short-0", "short-1"}) {
      const Deadline end = Deadline::AfterMs(60'000);
      Result<agent::JobInfo> j = sup.Get(id);
      while (j.ok() && j->state == agent::JobState::kRunning && !end.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        j = sup.Get(id);
      }
      QVERIFY(j.ok());
      QVERIFY2(j->state == agent::JobState::kExited && j->exit_code == 0,
               (j->exit_reason + "\n" + sup.ReadLogs(id, 0, 1 << 20)->text).c_str());
    }
    QVERIFY(PathExists(run + "/model.safetensors"));
    QVERIFY(PathExists(run + "/checkpoints/step-000003/trainer_state.json"));
  }
};

QTEST_APPLESS_MAIN(TestTrainRanks)
#include "test_train_ranks.moc"
