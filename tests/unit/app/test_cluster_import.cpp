// What the workbench's "Connect cluster" dialog saves: a profile made from
// typed addresses and a token file (and a CA for TLS), which the CLI and the
// next start load again; bad input is refused with the field named.
#include <sys/stat.h>

#include <QtTest>

#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_import.h"
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
}  // namespace

class TestClusterImport : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string config() { return dir_.path().toStdString() + "/config"; }
  std::string token_file_;
  std::string token_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    token_file_ = dir_.path().toStdString() + "/picked-token";
    token_ = *agent::GenerateClusterToken();
    QVERIFY(agent::WriteTokenFile(token_file_, token_).ok());
  }

  void importedProfileLoadsBackWithItsOwnTokenCopy() {
    ClusterImport in;
    in.name = "lab";
    in.config_dir = config();
    in.nodes = {{"", "10.0.0.1"}, {"spark2", "10.0.0.2:47200"}};
    in.token_file = token_file_;
    in.expected_cabling = "pair";
    auto p = ImportCluster(in);
    QVERIFY2(p.ok(), p.status().ToString().c_str());
    auto back = LoadProfile("lab", config());
    QVERIFY(back.ok());
    QCOMPARE(back->nodes.size(), size_t{2});
    QCOMPARE(back->nodes[0].name, std::string("node-0"));
    QCOMPARE(back->nodes[0].address, std::string("10.0.0.1:47100"));
    QCOMPARE(back->nodes[1].address, std::string("10.0.0.2:47200"));
    QCOMPARE(back->expected_cabling, std::string("pair"));
    QVERIFY(!back->tls);
    QCOMPARE(Mode(back->token_file()), 0600u);
    QCOMPARE(*agent::ReadTokenFile(back->token_file()), token_);
    auto e = EndpointFor(*back, 1);
    QVERIFY(e.ok());
    QCOMPARE(e->token, token_);
    // The same name again is refused unless replacing.
    QCOMPARE(ImportCluster(in).status().code(), StatusCode::kAlreadyExists);
    in.replace = true;
    QVERIFY(ImportCluster(in).ok());
  }

  void tlsImportCopiesTheCa() {
    auto ca = MakeCertificateAuthority("octet test");
    QVERIFY(ca.ok());
    const std::string ca_file = dir_.path().toStdString() + "/ca.pem";
    QVERIFY(WriteFileAtomic(ca_file, ca->cert_pem).ok());
    ClusterImport in;
    in.name = "secure";
    in.config_dir = config();
    in.nodes = {{"a", "127.0.0.1:47100"}};
    in.token_file = token_file_;
    in.tls_ca_file = ca_file;
    auto p = ImportCluster(in);
    QVERIFY2(p.ok(), p.status().ToString().c_str());
    auto e = EndpointFor(*p, 0);
    QVERIFY(e.ok());
    QCOMPARE(e->tls_ca_pem, ca->cert_pem);
    QCOMPARE(e->tls_server_name, std::string("a"));
  }

  void listsProfilesSortedWithTheirShape() {
    const auto list = ListProfiles(config());
    QCOMPARE(list.size(), size_t{2});
    QCOMPARE(list[0].name, std::string("lab"));
    QCOMPARE(list[0].nodes, size_t{2});
    QVERIFY(!list[0].tls);
    QCOMPARE(list[1].name, std::string("secure"));
    QVERIFY(list[1].tls);
    QVERIFY(ListProfiles(dir_.path().toStdString() + "/nowhere").empty());
  }

  void badInputNamesTheField_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("address");
    QTest::addColumn<QString>("token");
    QTest::addColumn<QString>("ca");
    QTest::addColumn<QString>("expect");
    QTest::newRow("bad name") << "a b"
                              << "h"
                              << "T"
                              << ""
                              << "cluster";
    QTest::newRow("bad address") << "x"
                                 << "h:1:2/3"
                                 << "T"
                                 << ""
                                 << "h:1:2/3";
    QTest::newRow("no token") << "x"
                              << "h"
                              << ""
                              << ""
                              << "token file";
    QTest::newRow("missing token") << "x"
                                   << "h"
                                   << "/nonexistent/token"
                                   << ""
                                   << "/nonexistent/token";
    QTest::newRow("ca not pem") << "x"
                                << "h"
                                << "T"
                                << "T"
                                << "not a PEM certificate";
  }
  void badInputNamesTheField() {
    QFETCH(QString, name);
    QFETCH(QString, address);
    QFETCH(QString, token);
    QFETCH(QString, ca);
    QFETCH(QString, expect);
    ClusterImport in;
    in.name = name.toStdString();
    in.config_dir = config();
    in.nodes = {{"", address.toStdString()}};
    in.token_file = token == "T" ? token_file_ : token.toStdString();
    in.tls_ca_file = ca == "T" ? token_file_ : ca.toStdString();
    auto p = ImportCluster(in);
    QVERIFY(!p.ok());
    QVERIFY2(p.status().message().find(expect.toStdString()) != std::string::npos,
             p.status().ToString().c_str());
  }
};

QTEST_GUILESS_MAIN(TestClusterImport)
#include "test_cluster_import.moc"
