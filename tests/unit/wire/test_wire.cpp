// wire/: the job spec and worker figures reach the other end of a call
// unchanged, every field of the messages is carried (a field added to a
// .proto without a conversion fails here), and the "@octet-figures" line
// written by one side is read by the other.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <QtTest>

#include "octet/base/json.h"
#include "octet/v1/jobs.pb.h"
#include "octet/v1/telemetry.pb.h"
#include "octet/wire/figures_line.h"
#include "octet/wire/job.h"
#include "octet/wire/proto_convert.h"

using namespace octet;
using namespace octet::wire;

namespace {

// The fields of `m` left at their default: a converter that forgot one leaves
// it there when every field of the source value is set to a non-default.
QStringList UnsetFields(const google::protobuf::Message& m) {
  QStringList unset;
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    const bool set = f->is_repeated() ? r->FieldSize(m, f) > 0 : r->HasField(m, f);
    if (!set) unset << QString::fromStdString(f->name());
  }
  return unset;
}

JobSpec FullSpec() {
  JobSpec s;
  s.job_id = "large-0.r1";
  s.kind = JobKind::kTraining;
  s.model = "/models/qwen3-tiny";
  s.world_size = 4;
  s.rank = 3;
  s.rendezvous = "10.0.0.1:29500";
  s.transport = "shm";
  s.algorithm = "ring";
  s.port = 8080;
  s.policy = "/models/policy.yaml";
  s.extra_args = {"--kv-memory", "2G", "--slots", "8"};
  s.threads = 12;
  s.deployment = "switchyard-demo";
  s.instance = "large-0";
  return s;
}

WorkerFigures FullFigures() {
  WorkerFigures f;
  f.job_id = "j1";
  f.rank = 2;
  f.kind = "inference";
  f.state = "running";
  f.prefill_tps = 1234.5;
  f.decode_tps = 41.25;
  f.step_ms = 24.5;
  f.allreduce_share = 0.125;
  f.kv_used_fraction = 0.75;
  f.running_requests = 5;
  f.queued_requests = 7;
  f.train_loss = 3.5;
  f.train_tps = 9000;
  f.train_step = 42;
  f.memory_bytes = uint64_t{3} << 30;
  f.spec_drafted_tokens = 120;
  f.spec_accepted_tokens = 90;
  f.backend = "avx512";
  return f;
}

}  // namespace

class TestWire : public QObject {
  Q_OBJECT
 private slots:
  void jobSpecCarriesEveryField() {
    const JobSpec s = FullSpec();
    v1::JobSpec m;
    ToProto(s, &m);
    QCOMPARE(UnsetFields(m), QStringList());
    QVERIFY(FromProto(m) == s);
    // Through the bytes a peer would receive.
    v1::JobSpec again;
    QVERIFY(again.ParseFromString(m.SerializeAsString()));
    QVERIFY(FromProto(again) == s);
  }

  void jobKindsSurvive() {
    for (JobKind k : {JobKind::kInference, JobKind::kTraining, JobKind::kRouter}) {
      JobSpec s;
      s.kind = k;
      v1::JobSpec m;
      ToProto(s, &m);
      QCOMPARE(int(FromProto(m).kind), int(k));
    }
    QCOMPARE(JobKindName(JobKind::kRouter), std::string_view("router"));
  }

  void unsetFieldsTakeTheDefaults() {
    // An older peer that leaves world size, transport and algorithm unset
    // starts a one-rank tcp job with the automatic algorithm, on either end.
    const JobSpec s = FromProto(v1::JobSpec());
    QCOMPARE(s.world_size, 1u);
    QCOMPARE(s.transport, std::string("tcp"));
    QCOMPARE(s.algorithm, std::string("auto"));
    QCOMPARE(int(s.kind), int(JobKind::kInference));
  }

  void workerFiguresCarryEveryField() {
    const WorkerFigures f = FullFigures();
    v1::WorkerFigures m;
    ToProto(f, &m);
    QCOMPARE(UnsetFields(m), QStringList());
    v1::WorkerFigures again;
    QVERIFY(again.ParseFromString(m.SerializeAsString()));
    QVERIFY(FromProto(again) == f);
  }

  void figuresLineWrittenIsRead() {
    nlohmann::json j = {{"state", "running"},
                        {"decode_tps", 41.5},
                        {"running_requests", 3},
                        {"spec_drafted_tokens_total", 10},
                        {"spec_accepted_tokens_total", 6}};
    const std::string line = FormatFiguresLine(j);
    QVERIFY(IsFiguresLine(line));
    QVERIFY(line.find('\n') == std::string::npos);
    WorkerFigures f;
    QVERIFY(ParseFiguresJson(std::string_view(line).substr(kFiguresPrefix.size()), &f).ok());
    QCOMPARE(f.state, std::string("running"));
    QCOMPARE(f.decode_tps, 41.5);
    QCOMPARE(f.running_requests, 3u);
    QCOMPARE(f.spec_drafted_tokens, uint64_t{10});
    QCOMPARE(f.spec_accepted_tokens, uint64_t{6});
    QVERIFY(!IsFiguresLine("@octet-figure {}"));
    QVERIFY(!IsFiguresLine("step 1 | loss 3.2"));
  }

  // The backend a rank says it computes with: kept when a later line leaves it
  // out, and taken only as a short word (it ends up in the window).
  void figuresLineCarriesTheBackend() {
    WorkerFigures f;
    QVERIFY(ParseFiguresJson(R"({"state":"serving","backend":"cuda"})", &f).ok());
    QCOMPARE(f.backend, std::string("cuda"));
    QVERIFY(ParseFiguresJson(R"({"state":"following"})", &f).ok());
    QCOMPARE(f.backend, std::string("cuda"));
    QVERIFY(ParseFiguresJson(R"({"backend":"neon"})", &f).ok());
    QCOMPARE(f.backend, std::string("neon"));
    for (const char* bad :
         {R"({"backend":"<b>x</b>"})", R"({"backend":"a b"})", R"({"backend":7})",
          R"({"backend":""})", R"({"backend":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})"}) {
      QVERIFY(ParseFiguresJson(bad, &f).ok());
      QVERIFY2(f.backend == "neon", bad);
    }
  }

  void figuresJsonIsClamped() {
    WorkerFigures f;
    QVERIFY(
        ParseFiguresJson(
            R"({"state":"running","decode_tps":41.5,"allreduce_share":1.7,"train_step":12})", &f)
            .ok());
    QCOMPARE(f.allreduce_share, 1.0);  // a fraction
    QCOMPARE(f.train_step, uint64_t{12});
    // Kept drafts never exceed proposed ones; absurd counts stay defined.
    QVERIFY(
        ParseFiguresJson(
            R"({"spec_drafted_tokens_total":5,"spec_accepted_tokens_total":7,"train_step":1e300,"queued_requests":-3})",
            &f)
            .ok());
    QCOMPARE(f.spec_accepted_tokens, uint64_t{5});
    QCOMPARE(f.train_step, uint64_t{9007199254740992});
    QCOMPARE(f.queued_requests, 0u);
    QVERIFY(!ParseFiguresJson("not json", &f).ok());
    QVERIFY(!ParseFiguresJson("[1,2]", &f).ok());
    QVERIFY(ParseFiguresJson(R"({"decode_tps":"fast"})", &f).ok());  // wrong types read as 0
    QCOMPARE(f.decode_tps, 0.0);
  }
};

QTEST_GUILESS_MAIN(TestWire)
#include "test_wire.moc"
