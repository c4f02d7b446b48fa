// What the workbench's deployment editor writes (octet/app/deployment_edit.h):
// a deployment written by DeploymentToYaml parses back (ParseDeployment, the
// reader `octet deploy` uses) to the same deployment — the example file, one
// with every optional key away from its default, names and paths that YAML
// would read as something else unquoted; a router policy beside the file is
// written relative to it and one elsewhere stays absolute. The policy written
// for a deployment's instances is a valid routing policy whose pools name
// them; a pool naming an instance the deployment lacks is an error with
// its FILE:LINE:COL.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "octet/app/deployment.h"
#include "octet/app/deployment_edit.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;

namespace {

void WriteText(const QString& path, const std::string& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(text.data(), static_cast<qint64>(text.size()));
}

// Writes `d` as if saved to `file`, parses what was written as that file,
// and compares.
void RoundTrip(const Deployment& d, const std::string& file) {
  const std::string yaml = DeploymentToYaml(d, file);
  const DeploymentParseResult back = ParseDeployment(yaml, file);
  QVERIFY2(back.ok(), (back.status().ToString() + "\n" + yaml).c_str());
  std::string why;
  QVERIFY2(SameDeployment(d, *back.deployment, &why), (why + " differs in\n" + yaml).c_str());
}

}  // namespace

class TestDeploymentEdit : public QObject {
  Q_OBJECT
 private slots:
  void exampleFileRoundTrips() {
    const std::string path = test::SourceDir() + "/resources/deploy/example-deployment.yaml";
    const DeploymentParseResult r = LoadDeploymentFile(path);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r.deployment->instances.size(), size_t{2});
    // Saved beside its policy: the policy is written by its name alone.
    const std::string yaml = DeploymentToYaml(*r.deployment, path);
    QVERIFY2(yaml.find("policy: example-policy.yaml") != std::string::npos, yaml.c_str());
    RoundTrip(*r.deployment, path);
    // Saved elsewhere: the policy's absolute path.
    const std::string elsewhere = "/tmp/somewhere-else/deployment.yaml";
    const std::string moved = DeploymentToYaml(*r.deployment, elsewhere);
    QVERIFY2(moved.find("policy: " + r.deployment->router.policy) != std::string::npos,
             moved.c_str());
    RoundTrip(*r.deployment, elsewhere);
  }

  void everyOptionalKeyRoundTrips() {
    Deployment d;
    d.name = "all-keys";
    DeployInstanceSpec i;
    i.name = "big";
    i.model = "/models/with space/and: colon";
    i.tp = 2;
    i.replicas = 2;
    i.nodes = {"n1", "n2", "n3", "n4"};
    i.transport = "verbs";
    i.algorithm = "ring";
    i.kv_memory = "4GiB";
    i.kv_memory_bytes = int64_t{4} << 30;
    i.kv_dtype = "f16";
    i.num_slots = 8;
    i.context = 2048;
    i.speculative = "ngram";
    i.draft_tokens = 3;
    i.backend = "avx2";
    i.threads = 6;
    i.served_model_name = "yes";  // a YAML 1.1 boolean unquoted
    d.instances.push_back(i);
    DeployInstanceSpec s;
    s.name = "null";  // a YAML null unquoted
    s.model = "/models/123";
    d.instances.push_back(s);
    d.router.present = true;
    d.router.policy = "/etc/octet/policy.yaml";
    d.router.node = "n8";
    d.router.port = 8080;
    RoundTrip(d, "/tmp/all-keys.yaml");
    // Defaults are left out of the file.
    const std::string yaml = DeploymentToYaml(d, "/tmp/all-keys.yaml");
    QVERIFY2(yaml.find("transport", yaml.find("/models/123")) == std::string::npos, yaml.c_str());
    // A difference is found and named.
    Deployment other = d;
    other.instances[1].replicas = 3;
    std::string why;
    QVERIFY(!SameDeployment(d, other, &why));
    QVERIFY2(why.find("replicas") != std::string::npos, why.c_str());
  }

  void policyForInstancesIsValid() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    Deployment d;
    d.name = "demo";
    for (const char* n : {"large", "small"}) {
      DeployInstanceSpec i;
      i.name = n;
      i.model = std::string("/models/") + n;
      d.instances.push_back(i);
    }
    d.router.present = true;
    d.router.policy = dir.path().toStdString() + "/policy.yaml";
    WriteText(QString::fromStdString(d.router.policy), PolicyForInstances(d));
    const RouterPolicyCheck ok = CheckRouterPolicy(d);
    QVERIFY2(ok.errors.empty(), ok.errors.empty() ? "" : ok.errors[0].c_str());
    QCOMPARE(ok.pools.size(), size_t{2});
    QCOMPARE(ok.pools[0].second, std::string("large"));
    QCOMPARE(ok.pools[1].second, std::string("small"));
    // The deployment loses an instance the policy names: an error at the pool.
    d.instances.pop_back();
    const RouterPolicyCheck bad = CheckRouterPolicy(d);
    QCOMPARE(bad.errors.size(), size_t{1});
    QVERIFY2(bad.errors[0].rfind(d.router.policy + ":", 0) == 0, bad.errors[0].c_str());
    QVERIFY2(bad.errors[0].find("instance 'small'") != std::string::npos, bad.errors[0].c_str());
    // A policy that is not there is an error naming it.
    d.router.policy = dir.path().toStdString() + "/missing.yaml";
    const RouterPolicyCheck missing = CheckRouterPolicy(d);
    QVERIFY(!missing.errors.empty());
    QVERIFY2(missing.errors[0].find("missing.yaml") != std::string::npos,
             missing.errors[0].c_str());
  }
};

QTEST_GUILESS_MAIN(TestDeploymentEdit)
#include "test_deployment_edit.moc"
