// The agent's gRPC services in-process: every method of every service refuses
// a missing or wrong token (UNAUTHENTICATED, logged, not executed), and each
// service round-trips with the right one: facts, telemetry, links and probes,
// jobs with logs, and shutdown cleaning up.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <QtTest>
#include <mutex>
#include <thread>

#include "octet/agent/agent_server.h"
#include "octet/agent/link_probe.h"
#include "octet/base/file_util.h"
#include "octet/base/log.h"
#include "octet/v1/jobs.grpc.pb.h"
#include "octet/v1/links.grpc.pb.h"
#include "octet/v1/models.grpc.pb.h"
#include "octet/v1/node.grpc.pb.h"
#include "octet/v1/telemetry.grpc.pb.h"
#include "octet_test.h"
#include "recorded_sysfs.h"

using namespace octet;
using namespace octet::agent;

namespace {

constexpr char kToken[] = "0123456789abcdef-test-token";

std::string FakeWorker() { return JoinPath(DirName(*SelfExecutablePath()), "octet_fake_worker"); }

void Auth(grpc::ClientContext* ctx, const std::string& token = kToken) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
}

// Calls any method by name with an empty (default) request; reads whatever
// comes back and returns the final status. Server-streaming calls are
// cancelled after `stream_ms`.
grpc::Status CallGeneric(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                         const char* token_header, int stream_ms = 500) {
  grpc::GenericStub stub(ch);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  if (token_header) ctx.AddMetadata("authorization", token_header);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(stream_ms + 10'000));
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    // Alarm-free wait: every op here completes (or fails) on its own.
    if (!cq.Next(&tag, &ok)) return false;
    return reinterpret_cast<intptr_t>(tag) == want;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  grpc::ByteBuffer empty;
  grpc::Slice nothing("", 0);
  empty = grpc::ByteBuffer(&nothing, 1);
  call->WriteLast(empty, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  step(2);
  const auto stop_at = std::chrono::system_clock::now() + std::chrono::milliseconds(stream_ms);
  for (;;) {
    grpc::ByteBuffer in;
    call->Read(&in, reinterpret_cast<void*>(3));
    step(3);
    if (!ok) break;
    if (std::chrono::system_clock::now() > stop_at) {
      ctx.TryCancel();
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  step(4);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// Every method of the five agent services, from the descriptors: a method
// added later is covered without touching this test.
std::vector<std::string> AllAgentMethods() {
  std::vector<std::string> out;
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* name :
       {"octet.v1.NodeService", "octet.v1.TelemetryService", "octet.v1.LinkService",
        "octet.v1.JobService", "octet.v1.ModelService"}) {
    const auto* svc = pool->FindServiceByName(name);
    if (!svc) return {};
    for (int i = 0; i < svc->method_count(); ++i) {
      out.push_back("/" + svc->full_name() + "/" + svc->method(i)->name());
    }
  }
  return out;
}

struct LogCapture {
  std::mutex mu;
  std::string text;
  LogCapture() {
    SetLogSink([this](LogLevel, std::string_view line) {
      std::lock_guard<std::mutex> lock(mu);
      text.append(line);
      text += "\n";
    });
  }
  ~LogCapture() { SetLogSink(nullptr); }
  std::string get() {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
};

}  // namespace

class TestAgentServer : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string models_;

  AgentConfig Config(const std::string& state) {
    AgentConfig c;
    c.listen = "127.0.0.1:0";
    c.token = kToken;
    c.identity.state_dir = dir_.path().toStdString() + "/" + state;
    c.model_roots = {models_};
    c.discovery = false;  // no beacons onto this machine's real network from a unit test
    c.octet_binary = FakeWorker();
    c.octet_binary_flags = test::FakeWorkerFlags();
    c.stop_grace_ms = 1000;
    return c;
  }
  std::shared_ptr<grpc::Channel> Channel(const AgentServer& s) {
    return grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials());
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    models_ = dir_.path().toStdString() + "/models";
    QVERIFY(MakeDirs(models_ + "/tiny").ok());
  }

  void everyMethodRejectsMissingAndWrongTokens() {
    LogCapture logs;
    auto server = AgentServer::Start(Config("auth"));
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    auto ch = Channel(**server);
    const auto methods = AllAgentMethods();
    QCOMPARE(methods.size(), size_t{12});
    for (const auto& m : methods) {
      for (const char* header :
           {static_cast<const char*>(nullptr), "Bearer wrong-token", "Bearer ",
            "0123456789abcdef-test-token", "Bearer 0123456789abcdef-test-tokeN"}) {
        const grpc::Status s = CallGeneric(ch, m, header);
        QVERIFY2(s.error_code() == grpc::StatusCode::UNAUTHENTICATED,
                 (m + " with " + (header ? header : "no header") + ": " +
                  std::to_string(s.error_code()) + " " + s.error_message())
                     .c_str());
      }
      // The right token gets past the check (whatever the empty request then earns).
      const std::string good = std::string("Bearer ") + kToken;
      const grpc::Status s = CallGeneric(ch, m, good.c_str(), 200);
      QVERIFY2(s.error_code() != grpc::StatusCode::UNAUTHENTICATED,
               (m + ": " + s.error_message()).c_str());
    }
    const std::string text = logs.get();
    QVERIFY2(text.find("rejected JobService/Start from ") != std::string::npos, text.c_str());
    QVERIFY(text.find("no cluster token") != std::string::npos);
    QVERIFY(text.find("wrong cluster token") != std::string::npos);
  }

  void rejectedCallsAreNeverExecuted() {
    auto server = AgentServer::Start(Config("never"));
    QVERIFY(server.ok());
    auto stub = v1::JobService::NewStub(Channel(**server));
    v1::StartJobRequest req;
    req.mutable_spec()->set_job_id("must-not-run");
    req.mutable_spec()->set_model(models_ + "/tiny");
    req.mutable_spec()->set_world_size(1);
    req.mutable_spec()->add_extra_args("--fake-sleep");
    v1::StartJobReply reply;
    grpc::ClientContext bad;
    Auth(&bad, "wrong");
    QCOMPARE(stub->Start(&bad, req, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    QCOMPARE(reply.pid(), 0u);
    grpc::ClientContext list_ctx;
    Auth(&list_ctx);
    v1::ListJobsReply jobs;
    QVERIFY(stub->List(&list_ctx, v1::ListJobsRequest(), &jobs).ok());
    QCOMPARE(jobs.jobs_size(), 0);
  }

  // A caller holding the token can neither read a file outside the roots (a
  // router job's policy) nor write one (a worker flag that writes a file).
  void jobsCannotReachOutsideTheRoots() {
    auto server = AgentServer::Start(Config("roots"));
    QVERIFY(server.ok());
    auto stub = v1::JobService::NewStub(Channel(**server));
    const std::string outside = dir_.path().toStdString() + "/outside.txt";
    QVERIFY(WriteFileAtomic(outside, "root:$6$secret:19000:0:99999:7:::\n").ok());
    auto start = [&](v1::StartJobRequest req) {
      v1::StartJobReply reply;
      grpc::ClientContext ctx;
      Auth(&ctx);
      return stub->Start(&ctx, req, &reply);
    };
    v1::StartJobRequest router;
    router.mutable_spec()->set_job_id("read-secret");
    router.mutable_spec()->set_kind(v1::JOB_KIND_ROUTER);
    router.mutable_spec()->set_policy(outside);
    grpc::Status s = start(router);
    QVERIFY2(!s.ok(), "a policy outside the roots was accepted");
    QVERIFY2(s.error_message().find("$6$") == std::string::npos, s.error_message().c_str());
    QVERIFY(s.error_message().find("outside this agent's model roots") != std::string::npos);

    v1::StartJobRequest writer;
    writer.mutable_spec()->set_job_id("write-file");
    writer.mutable_spec()->set_model(models_ + "/tiny");
    writer.mutable_spec()->set_world_size(1);
    writer.mutable_spec()->add_extra_args("--logits-out");
    writer.mutable_spec()->add_extra_args(outside);
    s = start(writer);
    QCOMPARE(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    QVERIFY2(s.error_message().find("--logits-out is not allowed") != std::string::npos,
             s.error_message().c_str());

    grpc::ClientContext list_ctx;
    Auth(&list_ctx);
    v1::ListJobsReply jobs;
    QVERIFY(stub->List(&list_ctx, v1::ListJobsRequest(), &jobs).ok());
    QCOMPARE(jobs.jobs_size(), 0);
    QCOMPARE(*ReadFileToString(outside), std::string("root:$6$secret:19000:0:99999:7:::\n"));
  }

  void factsDescribeTheNode() {
    AgentConfig c = Config("facts");
    c.memory_budget_bytes = 8ull << 30;
    c.declared_cabling = "ring";
    auto server = AgentServer::Start(c);
    QVERIFY(server.ok());
    auto stub = v1::NodeService::NewStub(Channel(**server));
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::NodeFacts f;
    const grpc::Status s = stub->GetFacts(&ctx, v1::GetFactsRequest(), &f);
    QVERIFY2(s.ok(), s.error_message().c_str());
    QCOMPARE(f.node_id(), (*server)->node_id());
    QVERIFY(!f.hostname().empty());
    QVERIFY(!f.os().empty());
    QVERIFY(f.cpu().cores() > 0);
    QVERIFY(!f.cpu().arch().empty());
    QVERIFY(f.simulated());
    QCOMPARE(f.memory().total_bytes(), 8ull << 30);
    QCOMPARE(f.memory().budget_bytes(), 8ull << 30);
    QCOMPARE(f.memory().available_bytes(), 8ull << 30);  // no jobs yet
    QCOMPARE(f.declared_cabling(), std::string("ring"));
    QCOMPARE(f.address(), (*server)->address());
    QCOMPARE(f.probe_port(), uint32_t{(*server)->probe_port()});
    QCOMPARE(f.model_roots_size(), 1);
    for (const auto& nic : f.interfaces()) QVERIFY(nic.name() != "lo");
    if (f.gpus_size() == 0) QVERIFY(!f.gpu_note().empty());
    if (f.rdma_devices_size() == 0) QVERIFY(!f.rdma_note().empty());
  }

  // RoCE facts from the recorded Spark tree travel in NodeFacts, survive a
  // serialize/parse round trip, and a faulty variant's warnings come back
  // structured (kind, device, port). A simulated node reads no tree.
  void factsCarryRoceFromRecordedTrees() {
    AgentConfig c = Config("roce");
    c.rdma_sys_root = test::RecordedSysfs();
    auto server = AgentServer::Start(c);
    QVERIFY(server.ok());
    auto stub = v1::NodeService::NewStub(Channel(**server));
    v1::NodeFacts got;
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      QVERIFY(stub->GetFacts(&ctx, v1::GetFactsRequest(), &got).ok());
    }
    v1::NodeFacts f;
    QVERIFY(f.ParseFromString(got.SerializeAsString()));
    QCOMPARE(f.rdma_devices_size(), 4);
    QVERIFY(f.rdma_note().empty());
    const v1::RdmaDevice& d = f.rdma_devices(1);
    QCOMPARE(d.name(), std::string("roceP2p1s0f1"));
    QCOMPARE(d.pci_address(), std::string("0002:01:00.1"));
    QCOMPARE(d.netdev(), std::string("enP2p1s0f1np1"));
    QCOMPARE(d.ports_size(), 1);
    const v1::RdmaPort& p = d.ports(0);
    QCOMPARE(p.port(), 1u);
    QCOMPARE(p.state(), std::string("ACTIVE"));
    QCOMPARE(p.phys_state(), std::string("LinkUp"));
    QCOMPARE(p.link_layer(), std::string("Ethernet"));
    QCOMPARE(p.netdev(), std::string("enP2p1s0f1np1"));
    QCOMPARE(p.netdev_mtu(), 9000u);
    QCOMPARE(p.active_mtu(), 4096u);
    QCOMPARE(p.rate(), std::string("200 Gb/sec (4X HDR)"));
    QCOMPARE(p.gid_table_size(), 4);
    QCOMPARE(p.gid_table(3).index(), 3u);
    QCOMPARE(p.gid_table(3).gid(), std::string("::ffff:10.10.1.1"));
    QCOMPARE(p.gid_table(3).type(), std::string("RoCE v2"));
    QCOMPARE(p.gid_table(3).netdev(), std::string("enP2p1s0f1np1"));
    QCOMPARE(p.gids(3), std::string("3:::ffff:10.10.1.1"));  // the old field, for old readers
    QCOMPARE(f.nccl().ib_hca(), std::string("=roceP2p1s0f1:1,rocep1s0f1:1"));
    QCOMPARE(f.nccl().socket_ifname(), std::string("=enP2p1s0f1np1,enp1s0f1np1"));
    QCOMPARE(f.nccl().ib_gid_index(), std::string("3"));
    QVERIFY(f.nccl().applied());  // a real node gives them to its NCCL jobs
    QCOMPARE(f.roce_warnings_size(), 0);
    (*server)->Shutdown();

    // The same node after a 1500 MTU on one half and the other half going down.
    const std::string faulty =
        test::SparkWithMtu1500AndDownHalf(dir_.path().toStdString() + "/sys");
    QVERIFY(!faulty.empty());
    c.rdma_sys_root = faulty;
    server = AgentServer::Start(c);
    QVERIFY(server.ok());
    stub = v1::NodeService::NewStub(Channel(**server));
    f.Clear();
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      QVERIFY(stub->GetFacts(&ctx, v1::GetFactsRequest(), &f).ok());
    }
    QCOMPARE(f.nccl().ib_hca(), std::string("=rocep1s0f1:1"));
    QCOMPARE(f.rdma_devices(3).ports(0).active_mtu(), 1024u);
    QCOMPARE(f.roce_warnings_size(), 2);
    QCOMPARE(f.roce_warnings(0).kind(), std::string("mtu-below-9000"));
    QCOMPARE(f.roce_warnings(0).device(), std::string("rocep1s0f1"));
    QCOMPARE(f.roce_warnings(0).port(), 1u);
    QCOMPARE(f.roce_warnings(1).kind(), std::string("port-half-unused"));
    QCOMPARE(f.roce_warnings(1).device(), std::string("roceP2p1s0f1"));
    QVERIFY(!f.roce_warnings(1).message().empty());
    (*server)->Shutdown();

    // A simulated node has no devices of its own.
    AgentConfig sim = Config("roce-sim");
    sim.memory_budget_bytes = 1ull << 30;
    server = AgentServer::Start(sim);
    QVERIFY(server.ok());
    stub = v1::NodeService::NewStub(Channel(**server));
    grpc::ClientContext ctx;
    Auth(&ctx);
    f.Clear();
    QVERIFY(stub->GetFacts(&ctx, v1::GetFactsRequest(), &f).ok());
    QCOMPARE(f.rdma_devices_size(), 0);
    QVERIFY(f.rdma_note().find("simulated") != std::string::npos);
    QVERIFY(!f.nccl().applied());
    QCOMPARE(f.roce_warnings_size(), 0);
  }

  void realNodeMemoryComesFromTheKernel() {
    auto server = AgentServer::Start(Config("real"));
    QVERIFY(server.ok());
    auto stub = v1::NodeService::NewStub(Channel(**server));
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::NodeFacts f;
    QVERIFY(stub->GetFacts(&ctx, v1::GetFactsRequest(), &f).ok());
    QVERIFY(!f.simulated());
    QCOMPARE(f.memory().budget_bytes(), 0ull);
    QVERIFY(f.memory().total_bytes() > (256ull << 20));
    QVERIFY(f.memory().available_bytes() <= f.memory().total_bytes());
  }

  void nodeIdSurvivesRestart() {
    std::string first;
    {
      auto a = AgentServer::Start(Config("restart"));
      QVERIFY(a.ok());
      first = (*a)->node_id();
    }
    auto b = AgentServer::Start(Config("restart"));
    QVERIFY(b.ok());
    QCOMPARE((*b)->node_id(), first);
  }

  void telemetryStreamsAtTheChosenRateWithWorkerFigures() {
    AgentConfig c = Config("telemetry");
    c.memory_budget_bytes = 4ull << 30;
    auto server = AgentServer::Start(c);
    QVERIFY(server.ok());
    auto ch = Channel(**server);
    auto jobs = v1::JobService::NewStub(ch);
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::StartJobRequest req;
      req.mutable_spec()->set_job_id("busy");
      req.mutable_spec()->set_model(models_ + "/tiny");
      req.mutable_spec()->set_world_size(1);
      req.mutable_spec()->add_extra_args(R"(--fake-figures={"state":"running","decode_tps":33})");
      req.mutable_spec()->add_extra_args("--fake-sleep");
      v1::StartJobReply reply;
      QVERIFY(jobs->Start(&ctx, req, &reply).ok());
    }
    auto stub = v1::TelemetryService::NewStub(ch);
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::TelemetryRequest req;
    req.set_interval_ms(50);
    auto reader = stub->Stream(&ctx, req);
    std::vector<v1::TelemetrySample> samples;
    v1::TelemetrySample s;
    while (samples.size() < 30 && reader->Read(&s)) {
      samples.push_back(s);
      if (samples.size() >= 4 && s.workers_size() == 1 && s.workers(0).state() == "running") break;
    }
    ctx.TryCancel();
    reader->Finish().error_code();
    QVERIFY(samples.size() >= 4);
    const auto& last = samples.back();
    QCOMPARE(last.node_id(), (*server)->node_id());
    QCOMPARE(last.mem_total_bytes(), 4ull << 30);
    QVERIFY(last.mem_used_bytes() > 0);  // the job's resident memory counts against the budget
    QCOMPARE(last.mem_used_bytes() + last.mem_available_bytes(), 4ull << 30);
    QVERIFY(last.cpu_busy() >= 0.0 && last.cpu_busy() <= 1.0);
    QVERIFY(last.unix_ms() >= samples.front().unix_ms());
    QCOMPARE(last.workers_size(), 1);
    QCOMPARE(last.workers(0).job_id(), std::string("busy"));
    QCOMPARE(last.workers(0).decode_tps(), 33.0);
    QVERIFY(last.workers(0).memory_bytes() > 0);
  }

  void linksReportDeclaredCablingAndProbesMeasure() {
    AgentConfig ca = Config("link-a");
    ca.declared_cabling = "switch";
    auto a = AgentServer::Start(ca);
    auto b = AgentServer::Start(Config("link-b"));
    QVERIFY(a.ok() && b.ok());
    auto stub = v1::LinkService::NewStub(Channel(**a));
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::LinksReply r;
      QVERIFY(stub->GetLinks(&ctx, v1::GetLinksRequest(), &r).ok());
      QCOMPARE(r.node_id(), (*a)->node_id());
      QCOMPARE(r.declared_cabling(), std::string("switch"));
      QCOMPARE(r.beacon_port(), 0u);  // discovery off
      QCOMPARE(r.probe_port(), uint32_t{(*a)->probe_port()});
    }
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::ProbeLinkRequest req;
    req.set_peer_address(JoinHostPort("127.0.0.1", (*b)->probe_port()));
    req.set_bytes(4u << 20);
    req.set_round_trips(20);
    v1::ProbeLinkReply r;
    const grpc::Status s = stub->ProbeLink(&ctx, req, &r);
    QVERIFY2(s.ok(), s.error_message().c_str());
    QCOMPARE(r.round_trips(), 20u);
    QCOMPARE(r.bytes(), uint64_t{4u << 20});
    QVERIFY(r.rtt_us_p50() > 0 && r.rtt_us_p99() >= r.rtt_us_p50());
    QVERIFY(r.throughput_gbps() > 0);
    // A prober without the cluster token is refused by the peer's probe endpoint.
    auto refused = RunLinkProbe("127.0.0.1", (*b)->probe_port(), "not-the-token", 1024, 1,
                                Deadline::AfterMs(5000));
    QCOMPARE(refused.status().code(), StatusCode::kUnauthenticated);
    // Nobody listening: a clear error, not a hang.
    grpc::ClientContext ctx2;
    Auth(&ctx2);
    req.set_peer_address("127.0.0.1:1");
    QCOMPARE(stub->ProbeLink(&ctx2, req, &r).error_code(), grpc::StatusCode::UNAVAILABLE);
  }

  void jobsStartListStreamAndStop() {
    auto server = AgentServer::Start(Config("jobs"));
    QVERIFY(server.ok());
    auto stub = v1::JobService::NewStub(Channel(**server));
    v1::StartJobRequest req;
    auto* spec = req.mutable_spec();
    spec->set_job_id("tp2");
    spec->set_kind(v1::JOB_KIND_INFERENCE);
    spec->set_model(models_ + "/tiny");
    spec->set_world_size(2);
    spec->set_rank(0);
    spec->set_rendezvous("127.0.0.1:0");
    spec->set_transport("tcp");
    spec->set_algorithm("auto");
    spec->add_extra_args("--fake-lines=50");
    spec->add_extra_args("--fake-sleep");
    v1::StartJobReply started;
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      const grpc::Status s = stub->Start(&ctx, req, &started);
      QVERIFY2(s.ok(), s.error_message().c_str());
    }
    QVERIFY(started.pid() > 0);
    QVERIFY(started.rendezvous().rfind("127.0.0.1:", 0) == 0 &&
            started.rendezvous() != "127.0.0.1:0");

    // Follow the logs on a thread while the job runs; they end when it is stopped.
    std::string followed;
    grpc::Status follow_status;
    std::thread follower([&] {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::StreamLogsRequest lr;
      lr.set_job_id("tp2");
      lr.set_follow(true);
      auto reader = stub->StreamLogs(&ctx, lr);
      v1::LogChunk chunk;
      while (reader->Read(&chunk)) followed += chunk.text();
      follow_status = reader->Finish();
    });
    QThread::msleep(300);
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::ListJobsReply list;
      QVERIFY(stub->List(&ctx, v1::ListJobsRequest(), &list).ok());
      QCOMPARE(list.jobs_size(), 1);
      QCOMPARE(list.jobs(0).state(), std::string("running"));
      QCOMPARE(list.jobs(0).spec().rendezvous(), started.rendezvous());
      QVERIFY(list.jobs(0).argv_size() > 3);
    }
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::StopJobRequest stop;
      stop.set_job_id("tp2");
      v1::StopJobReply reply;
      QVERIFY(stub->Stop(&ctx, stop, &reply).ok());
      QVERIFY(reply.stopped());
    }
    follower.join();
    QVERIFY2(follow_status.ok(), follow_status.error_message().c_str());
    QVERIFY(followed.find("line 50\n") != std::string::npos);
    QVERIFY(followed.find("--rendezvous " + started.rendezvous()) != std::string::npos);
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::ListJobsReply list;
      QVERIFY(stub->List(&ctx, v1::ListJobsRequest(), &list).ok());
      QCOMPARE(list.jobs(0).state(), std::string("stopped"));
      QCOMPARE(list.jobs(0).signal(), SIGTERM);
    }
    // Refusals carry their reason in the status.
    grpc::ClientContext ctx;
    Auth(&ctx);
    spec->set_job_id("escape");
    spec->set_model("/");
    const grpc::Status refused = stub->Start(&ctx, req, &started);
    QCOMPARE(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    QVERIFY(refused.error_message().find("outside") != std::string::npos);
  }

  // A peer that stops reading a file it streams is given up on after the
  // stall limit: the stream ends short of the file with DEADLINE_EXCEEDED
  // saying why (the agent's thread and the file are let go, not held while
  // the peer lives); a reader that keeps reading gets the whole file.
  void fileStreamToAStalledReaderEnds() {
    LogCapture logs;
    AgentConfig c = Config("stall");
    c.stream_stall_ms = 300;
    auto server = AgentServer::Start(c);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    const std::string path = models_ + "/tiny/big.bin";
    std::string bytes(64 << 20, '\0');
    for (size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = static_cast<char>(i >> 12);
    QVERIFY(WriteFileAtomic(path, bytes).ok());
    auto stub = v1::ModelService::NewStub(Channel(**server));
    v1::ReadFileRequest req;
    req.set_path(path);
    v1::FileChunk chunk;

    grpc::ClientContext stalled;
    Auth(&stalled);
    auto reader = stub->ReadFile(&stalled, req);
    QVERIFY(reader->Read(&chunk));
    size_t got = chunk.data().size();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    while (reader->Read(&chunk)) got += chunk.data().size();
    const grpc::Status s = reader->Finish();
    QVERIFY2(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED,
             (std::to_string(s.error_code()) + " " + s.error_message()).c_str());
    QVERIFY2(s.error_message() == "the reader took nothing for 300 ms", s.error_message().c_str());
    QVERIFY2(got < bytes.size(), std::to_string(got).c_str());
    QVERIFY2(logs.get().find("big.bin for ipv4:127.0.0.1:") != std::string::npos &&
                 logs.get().find("took nothing for 300 ms; the stream ends") != std::string::npos,
             logs.get().c_str());

    grpc::ClientContext steady;
    Auth(&steady);
    reader = stub->ReadFile(&steady, req);
    std::string whole;
    while (reader->Read(&chunk)) whole += chunk.data();
    QVERIFY(reader->Finish().ok());
    QVERIFY(whole == bytes);
  }

  void shutdownStopsJobsAndEndsStreams() {
    auto server = AgentServer::Start(Config("shutdown"));
    QVERIFY(server.ok());
    auto ch = Channel(**server);
    auto jobs = v1::JobService::NewStub(ch);
    v1::StartJobReply started;
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::StartJobRequest req;
      req.mutable_spec()->set_job_id("orphan-candidate");
      req.mutable_spec()->set_model(models_ + "/tiny");
      req.mutable_spec()->set_world_size(1);
      req.mutable_spec()->add_extra_args("--fake-sleep");
      QVERIFY(jobs->Start(&ctx, req, &started).ok());
    }
    auto telemetry = v1::TelemetryService::NewStub(ch);
    grpc::ClientContext tctx;
    Auth(&tctx);
    v1::TelemetryRequest treq;
    treq.set_interval_ms(100);
    auto reader = telemetry->Stream(&tctx, treq);
    v1::TelemetrySample sample;
    QVERIFY(reader->Read(&sample));
    (*server)->Shutdown();
    while (reader->Read(&sample)) {
    }
    QVERIFY(!reader->Finish().ok());
    QVERIFY(::kill(static_cast<pid_t>(started.pid()), 0) != 0);
  }

  void bindsLoopbackUnlessTold() {
    QVERIFY(AgentConfig().listen.rfind("127.0.0.1:", 0) == 0);
    auto loopback = AgentServer::Start(Config("bind-lo"));
    QVERIFY(loopback.ok());
    QVERIFY((*loopback)->address().rfind("127.0.0.1:", 0) == 0);
    // Told to serve on every address, the probe endpoint follows (probes come over the cables).
    AgentConfig c = Config("bind-any");
    c.listen = "0.0.0.0:0";
    auto any = AgentServer::Start(c);
    QVERIFY2(any.ok(), any.status().ToString().c_str());
    auto r = RunLinkProbe("127.0.0.1", (*any)->probe_port(), kToken, 0, 3, Deadline::AfterMs(5000));
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->round_trips, 3u);
  }

  void startRefusesBadConfig() {
    AgentConfig c = Config("bad");
    c.token.clear();
    QCOMPARE(AgentServer::Start(c).status().code(), StatusCode::kInvalidArgument);
    c = Config("bad");
    c.declared_cabling = "mesh";
    QCOMPARE(AgentServer::Start(c).status().code(), StatusCode::kInvalidArgument);
    c = Config("bad");
    c.listen = "203.0.113.1:47100";  // not an address of this machine
    QVERIFY(!AgentServer::Start(c).ok());
  }
};

QTEST_GUILESS_MAIN(TestAgentServer)
#include "test_agent_server.moc"
