// The gRPC InferenceService (wire/proto/octet/v1/inference.proto) over a
// scheduler: a real client stub streams a generation whose ids equal the same
// request run alone through Generate; errors map to gRPC codes; a client that
// cancels its call cancels the request.
#include <grpcpp/grpcpp.h>

#include <QtTest>

#include "forwarding_runner.h"
#include "octet/app/inference_service.h"
#include "octet/engine/generate.h"
#include "octet/engine/scheduler.h"
#include "octet/v1/inference.grpc.pb.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {
// A local runner that takes at least 2 ms a step, so that a long request is
// still running when its client cancels.
class ThrottledRunner final : public test::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  Status Step(const std::vector<SequenceChunk>& b, ForwardOutput* out) override {
    QThread::msleep(2);
    return inner_.Step(b, out);
  }
};
}  // namespace

class TestInferenceService : public QObject {
  Q_OBJECT
 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<ThrottledRunner> runner_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<CompletionService> svc_;
  std::unique_ptr<app::InferenceGrpcServer> server_;
  std::unique_ptr<octet::v1::InferenceService::Stub> stub_;

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    LoadOptions lo;
    lo.threads = 1;
    auto m = Model::Load(test::FixturesDir() + "/qwen3-tiny", lo);
    QVERIFY(m.ok());
    model_ = std::move(*m);
    runner_ = std::make_unique<ThrottledRunner>(*model_);
    SchedulerOptions so;
    so.num_slots = 2;
    so.context = 512;
    so.max_batch_tokens = 32;
    sched_ = std::make_unique<Scheduler>(*runner_, so);
    QVERIFY(sched_->Start().ok());
    svc_ = std::make_unique<CompletionService>(*sched_, nullptr, "qwen3-tiny");
    auto s = app::InferenceGrpcServer::Start(*svc_, "127.0.0.1:0");
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    server_ = std::move(*s);
    QVERIFY(server_->port() > 0);
    stub_ = octet::v1::InferenceService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  void cleanupTestCase() {
    if (server_) server_->Stop();
    if (sched_) sched_->Stop(CancelledError("test done"));
  }

  void streamsTheSoloIds() {
    const std::vector<int32_t> prompt = {66, 315, 286, 228, 146, 114};
    GenerateOptions g;
    g.max_tokens = 8;
    g.stop_at_eos = false;
    auto solo = Generate(*model_, prompt, g);
    QVERIFY(solo.ok());
    octet::v1::GenerateRequest req;
    req.set_model("qwen3-tiny");
    for (int32_t id : prompt) req.add_prompt_ids(id);
    req.set_max_tokens(8);
    req.set_temperature(0);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&ctx, req);
    octet::v1::GenerateChunk chunk;
    std::vector<int32_t> ids;
    octet::v1::GenerateChunk last;
    while (reader->Read(&chunk)) {
      ids.insert(ids.end(), chunk.ids().begin(), chunk.ids().end());
      if (chunk.done()) last = chunk;
    }
    grpc::Status st = reader->Finish();
    QVERIFY2(st.ok(), st.error_message().c_str());
    // EOS may stop it early: compare with the solo run up to the same point.
    QVERIFY(last.done());
    std::vector<int32_t> expect = solo->ids;
    if (last.finish_reason() == "stop") {
      expect.resize(ids.size());
    } else {
      QCOMPARE(last.finish_reason(), std::string("length"));
    }
    QCOMPARE(ids, expect);
    QCOMPARE(last.usage().prompt_tokens(), uint32_t(prompt.size()));
    QCOMPARE(last.usage().completion_tokens(), uint32_t(ids.size()));
    QVERIFY(last.timing().ttft_ms() > 0);
  }

  void errorsMapToGrpcCodes() {
    auto call = [&](const octet::v1::GenerateRequest& req) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      auto reader = stub_->Generate(&ctx, req);
      octet::v1::GenerateChunk chunk;
      while (reader->Read(&chunk)) {
      }
      return reader->Finish();
    };
    octet::v1::GenerateRequest other;
    other.set_model("llama-70b");
    other.add_prompt_ids(1);
    QCOMPARE(call(other).error_code(), grpc::StatusCode::NOT_FOUND);
    octet::v1::GenerateRequest bad;
    bad.add_prompt_ids(100000);  // outside the vocabulary
    QCOMPARE(call(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    octet::v1::GenerateRequest text;
    text.set_prompt("needs a tokenizer");
    grpc::Status st = call(text);
    QCOMPARE(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    QVERIFY(st.error_message().find("tokenizer") != std::string::npos);
    octet::v1::GenerateRequest empty;
    QCOMPARE(call(empty).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  void cancellingTheCallCancelsTheRequest() {
    const uint64_t before = sched_->Metrics().requests_cancelled;
    octet::v1::GenerateRequest req;
    req.add_prompt_ids(5);
    req.add_prompt_ids(6);
    req.set_max_tokens(500);  // fits the context of 512
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    octet::v1::GenerateChunk chunk;
    QVERIFY(reader->Read(&chunk));
    ctx.TryCancel();
    while (reader->Read(&chunk)) {
    }
    (void)reader->Finish();
    // 500 steps take at least a second: the cancel arrives long before the end.
    const Deadline d = Deadline::AfterMs(10'000);
    while (!d.expired() && (sched_->Metrics().requests_cancelled == before ||
                            sched_->Metrics().running != 0)) {
      QThread::msleep(10);
    }
    const auto m = sched_->Metrics();
    QCOMPARE(m.requests_cancelled, before + 1);
    QCOMPARE(m.running, 0);
  }
  // A field the request leaves unset takes the model's generation_config.json
  // value (the service's defaults), one it sets wins: as over HTTP.
  void unsetFieldsTakeGenerationConfig() {
    const std::vector<int32_t> prompt = {66, 315, 286, 228, 146, 114};
    GenerateOptions g;
    g.max_tokens = 8;
    g.stop_at_eos = false;
    auto greedy = Generate(*model_, prompt, g);
    QVERIFY(greedy.ok());
    struct Out {
      std::vector<int32_t> ids;
      std::string finish;
      grpc::Status status;
    };
    auto run = [&](const octet::v1::GenerateRequest& req) {
      Out o;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      auto reader = stub_->Generate(&ctx, req);
      octet::v1::GenerateChunk chunk;
      while (reader->Read(&chunk)) {
        o.ids.insert(o.ids.end(), chunk.ids().begin(), chunk.ids().end());
        if (chunk.done()) o.finish = chunk.finish_reason();
      }
      o.status = reader->Finish();
      return o;
    };
    auto request = [&] {
      octet::v1::GenerateRequest req;
      for (int32_t id : prompt) req.add_prompt_ids(id);
      req.set_seed(7);
      return req;
    };
    // Unset max_tokens: the config's max_new_tokens; temperature 1.5 with
    // top_k 1 from the config is greedy.
    GenerationDefaults d;
    d.path = "generation_config.json";
    d.max_new_tokens = 3;
    d.temperature = 1.5f;
    d.top_k = 1;
    svc_->set_defaults(d);
    Out o = run(request());
    QVERIFY2(o.status.ok(), o.status.error_message().c_str());
    std::vector<int32_t> expect(greedy->ids.begin(), greedy->ids.begin() + 3);
    if (o.finish == "stop")
      expect.resize(o.ids.size());
    else
      QCOMPARE(o.finish, std::string("length"));
    QCOMPARE(o.ids, expect);
    // Set fields win: max_tokens 8, and temperature 0 with top_k 0 (greedy
    // without the config's top_k); then top_k 0 at the config's temperature
    // 1.5 samples away from the greedy ids (fixed seed).
    auto explicit_req = request();
    explicit_req.set_max_tokens(8);
    explicit_req.set_temperature(0);
    explicit_req.set_top_k(0);
    o = run(explicit_req);
    QVERIFY2(o.status.ok(), o.status.error_message().c_str());
    expect = greedy->ids;
    if (o.finish == "stop") expect.resize(o.ids.size());
    QCOMPARE(o.ids, expect);
    auto sampled_req = request();
    sampled_req.set_max_tokens(8);
    sampled_req.set_top_k(0);
    o = run(sampled_req);
    QVERIFY2(o.status.ok(), o.status.error_message().c_str());
    QVERIFY2(o.ids != std::vector<int32_t>(greedy->ids.begin(), greedy->ids.begin() + o.ids.size()),
             "temperature 1.5 from the config should sample away from greedy");
    // A bad value is INVALID_ARGUMENT.
    auto bad = request();
    bad.set_repetition_penalty(-0.0f);
    QCOMPARE(run(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    svc_->set_defaults(GenerationDefaults());
  }
};

QTEST_GUILESS_MAIN(TestInferenceService)
#include "test_inference_service.moc"
