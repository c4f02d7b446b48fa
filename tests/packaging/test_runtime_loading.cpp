// The programs start on machines without the CUDA runtime, NCCL or RDMA
// verbs: none of them names those libraries as NEEDED (readelf -d), and
// --version prints one line saying which of them this machine can load —
// a library's file name when it loads, "not found (tried ...: <dlerror>)"
// when it does not, "not compiled in" when the build left it out.
#include <unistd.h>

#include <QtTest>
#include <cstring>
#include <regex>
#include <set>

#include "octet_test.h"

using octet::test::CommandResult;
using octet::test::RunProgram;

namespace {

// The NEEDED entries of an ELF file's dynamic section.
std::vector<std::string> Needed(const std::string& path, std::string* error) {
  auto r = RunProgram({"/usr/bin/readelf", "-d", "-W", path}, 30'000);
  if (r.exit_code != 0) {
    *error = "readelf -d " + path + ": " + r.output;
    return {};
  }
  std::vector<std::string> needed;
  static const std::regex re(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it) {
    needed.push_back((*it)[1]);
  }
  return needed;
}

// Libraries that must be loaded at run time, never linked.
bool IsRuntimeOnly(const std::string& lib) {
  static const std::regex re(R"(^lib(cudart|cublas|cublasLt|cuda|nccl|ibverbs|rdmacm|mlx5)\.so.*)");
  return std::regex_match(lib, re);
}

// The files ld.so.cache gives for these sonames ("libnccl.so.2 (libc6,x86-64) => /path").
std::set<std::string> CachedLibraries() {
  std::set<std::string> paths;
  for (const char* ldconfig : {"/usr/sbin/ldconfig", "/sbin/ldconfig"}) {
    if (::access(ldconfig, X_OK) != 0) continue;
    auto r = RunProgram({ldconfig, "-p"}, 30'000);
    static const std::regex re(
        R"((libcuda\.so\.1|libnccl\.so\.\d+|libibverbs\.so\.1) \(.*\) => (\S+))");
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it) {
      paths.insert((*it)[2]);
    }
    break;
  }
  return paths;
}

// The "run time:" line: CUDA driver, NCCL and RDMA verbs, each found, not found
// (with the names tried and the loader's reason) or not compiled in.
void CheckRuntimeLine(const std::string& output) {
  const auto at = output.find("run time: ");
  QVERIFY2(at != std::string::npos, output.c_str());
  const std::string line = output.substr(at, output.find('\n', at) - at);
  static const std::regex re(
      R"(^run time: CUDA driver (libcuda\.so\.1|libcuda not found \(tried libcuda\.so\.1: .+\)|not compiled in); )"
      R"(NCCL (\S*libnccl\.so\.\d+|libnccl not found \(tried libnccl\.so\.\d+.*: .+\)|not compiled in); )"
      R"(RDMA verbs (libibverbs\.so\.1|libibverbs not found \(tried libibverbs\.so\.1: .+\)|not compiled in)$)");
  QVERIFY2(std::regex_match(line, re), line.c_str());
}

}  // namespace

class TestRuntimeLoading : public QObject {
  Q_OBJECT
 private slots:
  void runtimeOnlyLibrariesAreNotNeeded() {
    QVERIFY(::access("/usr/bin/readelf", X_OK) == 0);  // binutils: a build dependency
    std::vector<std::string> programs = {"octet", "octet-agent"};
    if (QFileInfo::exists(QString::fromStdString(octet::test::BinDir() + "/octet-workbench"))) {
      programs.push_back("octet-workbench");
    }
    for (const std::string& p : programs) {
      std::string error;
      const auto needed = Needed(octet::test::BinDir() + "/" + p, &error);
      QVERIFY2(error.empty(), error.c_str());
      QVERIFY2(!needed.empty(), p.c_str());  // the C++ runtime at least: the parse works
      for (const std::string& lib : needed) {
        QVERIFY2(!IsRuntimeOnly(lib), (p + " links " + lib).c_str());
      }
    }
  }

  void theMatcherKnowsTheLibraries() {
    // The check above is only as good as its pattern.
    for (const char* lib : {"libcudart.so.13", "libnccl.so.2", "libibverbs.so.1", "librdmacm.so.1",
                            "libcublas.so.13", "libcublasLt.so.13", "libcuda.so.1"}) {
      QVERIFY2(IsRuntimeOnly(lib), lib);
    }
    for (const char* lib :
         {"libc.so.6", "libstdc++.so.6", "libgrpc++.so.1.51", "libQt6Core.so.6"}) {
      QVERIFY2(!IsRuntimeOnly(lib), lib);
    }
  }

  void versionSaysWhichLibrariesLoad() {
    auto r = RunProgram({"octet", "--version"}, 30'000);
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY2(r.output.rfind("octet ", 0) == 0, r.output.c_str());
    CheckRuntimeLine(r.output);
    auto a = RunProgram({"octet-agent", "--version"}, 30'000);
    QVERIFY2(a.exit_code == 0, a.output.c_str());
    QVERIFY2(a.output.rfind("octet-agent ", 0) == 0, a.output.c_str());
    CheckRuntimeLine(a.output);
  }

  void withoutTheLibrariesEachSaysNotFound() {
    // The fallback for real: in a private mount namespace, /dev/null is mounted
    // over every file the loader could open for CUDA, NCCL and libibverbs, and
    // the programs must still start and say, per library, what they tried.
    if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0) {
      QSKIP("needs root and unshare(1) for a private mount namespace");
    }
    std::set<std::string> hide = CachedLibraries();
    for (const std::string program : {"octet", "octet-agent"}) {
      const std::string bin = octet::test::BinDir() + "/" + program;
      CommandResult r;
      // A library found through a fallback path is named by it: hide that too, and rerun.
      for (int round = 0; round < 4; ++round) {
        std::string script;
        for (const std::string& p : hide) script += "mount --bind /dev/null '" + p + "' && ";
        script += "exec '" + bin + "' --version";
        r = RunProgram({"/usr/bin/unshare", "-m", "/bin/sh", "-c", script}, 30'000);
        QVERIFY2(r.exit_code == 0, r.output.c_str());
        static const std::regex loaded(
            R"((?:CUDA driver|NCCL|RDMA verbs) (/\S+\.so\.\d+)(?:;|\n|$))");
        std::smatch m;
        if (!std::regex_search(r.output, m, loaded)) break;
        hide.insert(m[1]);
      }
      CheckRuntimeLine(r.output);
      if (QTest::currentTestFailed()) return;
      for (const char* what : {"CUDA driver ", "NCCL ", "RDMA verbs "}) {
        const auto at = r.output.find(what);
        const std::string rest = r.output.substr(at + std::strlen(what));
        QVERIFY2(rest.rfind("not compiled in", 0) == 0 ||
                     rest.find(" not found (tried ") < rest.find(';'),
                 (program + ": " + r.output).c_str());
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestRuntimeLoading)
#include "test_runtime_loading.moc"
