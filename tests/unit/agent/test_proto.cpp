// The wire API compiles and round-trips: a message serialised by one side is
// read back field for field by the other (what every agent call relies on).
#include <QtTest>

#include "octet/v1/jobs.pb.h"
#include "octet/v1/node.grpc.pb.h"
#include "octet/v1/telemetry.pb.h"

class TestProto : public QObject {
  Q_OBJECT
 private slots:
  void nodeFactsRoundTrip() {
    octet::v1::NodeFacts f;
    f.set_node_id("n-1234");
    f.mutable_cpu()->set_arch("aarch64");
    f.mutable_cpu()->set_cores(20);
    f.mutable_memory()->set_total_bytes(128ull << 30);
    auto* nic = f.add_interfaces();
    nic->set_name("enp1s0f0np0");
    nic->add_addresses("10.0.0.1/24");
    const std::string wire = f.SerializeAsString();
    octet::v1::NodeFacts g;
    QVERIFY(g.ParseFromString(wire));
    QCOMPARE(g.node_id(), std::string("n-1234"));
    QCOMPARE(g.cpu().cores(), 20u);
    QCOMPARE(g.memory().total_bytes(), 128ull << 30);
    QCOMPARE(g.interfaces(0).addresses(0), std::string("10.0.0.1/24"));
  }
  void truncatedBytesAreRejected() {
    octet::v1::JobSpec s;
    s.set_job_id("job-7");
    s.set_model("/models/qwen3");
    s.set_world_size(4);
    std::string wire = s.SerializeAsString();
    wire.resize(wire.size() - 3);
    octet::v1::JobSpec t;
    QVERIFY(!t.ParseFromString(wire));
  }
  void servicesAreDeclared() {
    QCOMPARE(std::string(octet::v1::NodeService::service_full_name()), std::string("octet.v1.NodeService"));
    octet::v1::TelemetrySample t;
    t.add_workers()->set_decode_tps(12.5);
    QCOMPARE(t.workers(0).decode_tps(), 12.5);
  }
};

QTEST_APPLESS_MAIN(TestProto)
#include "test_proto.moc"
