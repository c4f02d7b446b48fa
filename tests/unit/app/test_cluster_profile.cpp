// Cluster profiles and TLS material: what `octet cluster init/add` writes,
// with the permissions secrets need, and certificates that chain to the CA
// and name the node.
#include <sys/stat.h>

#include <QtTest>

#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/tls_material.h"
#include "octet/base/file_util.h"

using namespace octet;
using namespace octet::app;

namespace {
unsigned Mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}
bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
}  // namespace

class TestClusterProfile : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string config() { return dir_.path().toStdString() + "/config"; }

 private slots:
  void initWritesTokenAndProfile() {
    ClusterInitOptions o;
    o.name = "desk";
    o.config_dir = config();
    o.nodes = {{"spark1", "10.0.0.1"}, {"spark2", "10.0.0.2:47200"}};
    o.expected_cabling = "pair";
    auto p = InitCluster(o);
    QVERIFY2(p.ok(), p.status().ToString().c_str());
    QCOMPARE(p->dir, config() + "/clusters/desk");
    QCOMPARE(Mode(p->dir), 0700u);
    QCOMPARE(Mode(p->token_file()), 0600u);
    auto token = agent::ReadTokenFile(p->token_file());
    QVERIFY(token.ok());
    QCOMPARE(token->size(), size_t{64});
    auto back = LoadProfile("desk", config());
    QVERIFY(back.ok());
    QCOMPARE(back->nodes.size(), size_t{2});
    QCOMPARE(back->nodes[0].address, std::string("10.0.0.1:47100"));
    QCOMPARE(back->nodes[1].address, std::string("10.0.0.2:47200"));
    QCOMPARE(back->expected_cabling, std::string("pair"));
    QVERIFY(!back->tls);
    // A second init does not silently replace the token...
    QCOMPARE(InitCluster(o).status().code(), StatusCode::kAlreadyExists);
    // ...unless forced, which makes a new one.
    o.force = true;
    QVERIFY(InitCluster(o).ok());
    QVERIFY(*agent::ReadTokenFile(p->token_file()) != *token);
    // A profile that is not there: the error names the ones saved (the
    // default 'default' misses what `octet cluster local` saves as 'local').
    auto missing = LoadProfile("default", config());
    QCOMPARE(missing.status().code(), StatusCode::kNotFound);
    QVERIFY2(missing.status().message().find("no cluster profile 'default'") != std::string::npos &&
                 missing.status().message().find("saved profiles: desk (--cluster NAME)") !=
                     std::string::npos,
             missing.status().ToString().c_str());
    auto none = LoadProfile("default", config() + "-empty");
    QVERIFY2(none.status().message().find("saved profiles") == std::string::npos &&
                 none.status().message().find("octet cluster init") != std::string::npos,
             none.status().ToString().c_str());
  }

  void addNodeAndEndpoints() {
    ClusterInitOptions o;
    o.name = "grow";
    o.config_dir = config();
    auto p = InitCluster(o);
    QVERIFY(p.ok());
    QVERIFY(AddNode(&*p, {"spark3", "spark3.lan"}).ok());
    QVERIFY(AddNode(&*p, {"spark3", "10.0.0.3:47100"}).ok());  // re-adding replaces the address
    QCOMPARE(AddNode(&*p, {"bad name", "10.0.0.4"}).code(), StatusCode::kInvalidArgument);
    QCOMPARE(AddNode(&*p, {"ok", "host:notaport"}).code(), StatusCode::kInvalidArgument);
    auto back = LoadProfile("grow", config());
    QVERIFY(back.ok());
    QCOMPARE(back->nodes.size(), size_t{1});
    QCOMPARE(back->nodes[0].address, std::string("10.0.0.3:47100"));
    auto e = EndpointFor(*back, 0);
    QVERIFY(e.ok());
    QCOMPARE(e->address, std::string("10.0.0.3:47100"));
    QCOMPARE(e->token.size(), size_t{64});
    QVERIFY(e->tls_ca_pem.empty());
    QCOMPARE(LoadProfile("missing", config()).status().code(), StatusCode::kNotFound);
  }

  void addressNormalisation() {
    QCOMPARE(*NormalizeAgentAddress("spark1"), std::string("spark1:47100"));
    QCOMPARE(*NormalizeAgentAddress("fe80::1"), std::string("[fe80::1]:47100"));
    QCOMPARE(*NormalizeAgentAddress("[::1]:5"), std::string("[::1]:5"));
    QCOMPARE(*NormalizeAgentAddress("unix:/run/octet.sock"), std::string("unix:/run/octet.sock"));
    QVERIFY(!NormalizeAgentAddress("").ok());
    QVERIFY(!NormalizeAgentAddress("a b").ok());
    QVERIFY(!NormalizeAgentAddress("host:0").ok());
  }

  void tlsInitMakesACaAndNodeCertificates() {
    ClusterInitOptions o;
    o.name = "secure";
    o.config_dir = config();
    o.tls = true;
    o.nodes = {{"spark1", "10.0.0.1"}, {"spark2", "spark2.lan:47100"}};
    auto p = InitCluster(o);
    QVERIFY2(p.ok(), p.status().ToString().c_str());
    QCOMPARE(Mode(p->ca_key_file()), 0600u);
    QCOMPARE(Mode(p->node_key_file("spark1")), 0600u);
    QCOMPARE(Mode(p->node_cert_file("spark1")), 0644u);
    const std::string ca = *ReadFileToString(p->ca_cert_file());
    for (const char* node : {"spark1", "spark2"}) {
      const std::string cert = *ReadFileToString(p->node_cert_file(node));
      QVERIFY2(VerifyCertificate(ca, cert).ok(), node);
    }
    auto names1 = CertificateNames(*ReadFileToString(p->node_cert_file("spark1")));
    QVERIFY(names1.ok());
    QVERIFY(Contains(*names1, "DNS:spark1"));
    QVERIFY(Contains(*names1, "IP:10.0.0.1"));
    QVERIFY(Contains(*names1, "IP:127.0.0.1"));
    auto names2 = CertificateNames(*ReadFileToString(p->node_cert_file("spark2")));
    QVERIFY(Contains(*names2, "DNS:spark2.lan"));
    // A node added later gets a certificate from the same CA.
    QVERIFY(AddNode(&*p, {"spark3", "10.0.0.3"}).ok());
    QVERIFY(VerifyCertificate(ca, *ReadFileToString(p->node_cert_file("spark3"))).ok());
    auto e = EndpointFor(*p, 0);
    QVERIFY(e.ok());
    QCOMPARE(e->tls_ca_pem, ca);
    QCOMPARE(e->tls_server_name, std::string("spark1"));
  }

  void certificateFromAnotherCaDoesNotVerify() {
    auto ca1 = MakeCertificateAuthority("one");
    auto ca2 = MakeCertificateAuthority("two");
    QVERIFY(ca1.ok() && ca2.ok());
    auto cert = MakeNodeCertificate(*ca1, "n", {"n"}, {"10.1.1.1"});
    QVERIFY(cert.ok());
    QVERIFY(VerifyCertificate(ca1->cert_pem, cert->cert_pem).ok());
    QCOMPARE(VerifyCertificate(ca2->cert_pem, cert->cert_pem).code(),
             StatusCode::kFailedPrecondition);
    QVERIFY(!MakeNodeCertificate(*ca1, "n", {"bad name!"}, {}).ok());
    QVERIFY(!MakeNodeCertificate(*ca1, "n", {}, {"10.1.1"}).ok());
    QVERIFY(!VerifyCertificate("not a pem", cert->cert_pem).ok());
  }
};

QTEST_APPLESS_MAIN(TestClusterProfile)
#include "test_cluster_profile.moc"
