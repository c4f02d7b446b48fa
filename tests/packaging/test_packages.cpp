// The .deb packages: cpack builds them from this build directory into a
// scratch folder; each is unpacked (dpkg-deb -x) into one scratch root; the
// file lists, control fields, maintainer scripts and systemd units are
// checked; and the installed programs' --version runs from the scratch root
// with a clean environment (no LD_LIBRARY_PATH: the packages ship no library
// of their own, so the system's libraries are all the programs may use).
// The same test runs in the aarch64 cross build (the arm64-packages preset):
// arm64 packages, their programs run under qemu-aarch64 with the system's
// multiarch arm64 libraries.
#include <sys/stat.h>

#include <QtTest>
#include <map>
#include <regex>
#include <set>

#include "octet_test.h"

using octet::test::RunProgram;

namespace {

std::string BuildDir() { return octet::test::Env("OCTET_BUILD_DIR"); }
bool WithGui() { return octet::test::Env("OCTET_WITH_GUI") == "1"; }
bool WithCuda() { return octet::test::Env("OCTET_WITH_CUDA") == "1"; }
// The packages' Debian architecture, and the emulator that runs their programs
// on this host (empty for a native build).
std::string DebArch() { return octet::test::Env("OCTET_DEB_ARCH"); }
std::string Emulator() { return octet::test::Env("OCTET_TEST_EMULATOR"); }

unsigned Mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

bool Executable(const char* path) { return ::access(path, X_OK) == 0; }

std::string Field(const std::string& deb, const std::string& field) {
  auto r = RunProgram({"/usr/bin/dpkg-deb", "-f", deb, field}, 60'000);
  return r.exit_code == 0 ? r.output : "<dpkg-deb -f failed: " + r.output + ">";
}

// "Overall exposure level for NAME: 1.9 OK" -> 1.9 (or -1).
double Exposure(const std::string& output) {
  static const std::regex re(R"(Overall exposure level for \S+: ([0-9.]+))");
  std::smatch m;
  return std::regex_search(output, m, re) ? std::stod(m[1]) : -1;
}

}  // namespace

class TestPackages : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::map<std::string, std::string> debs_;  // package name -> .deb path
  std::string Root() { return dir_.path().toStdString() + "/root"; }

 private slots:
  void initTestCase() {
    if (!Executable("/usr/bin/cpack") || !Executable("/usr/bin/dpkg-deb") ||
        !Executable("/usr/bin/dpkg-shlibdeps")) {
      OCTET_SKIP_PREMISE("cpack, dpkg-deb or dpkg-shlibdeps (dpkg-dev) not installed");
    }
    QVERIFY(!BuildDir().empty());
    QVERIFY(DebArch() == "amd64" || DebArch() == "arm64");
    QVERIFY(dir_.isValid());
  }

  void cpackBuildsThePackages() {
    const std::string out = dir_.path().toStdString() + "/cpack";
    auto r = RunProgram(
        {"/usr/bin/cpack", "-G", "DEB", "--config", BuildDir() + "/CPackConfig.cmake", "-B", out},
        480'000);
    QVERIFY2(!r.timed_out, "cpack did not finish in 8 minutes");
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    std::vector<std::string> expect = {"octet", "octet-agent"};
    if (WithGui()) expect.push_back("octet-workbench");
    QDir d(QString::fromStdString(out));
    const auto files = d.entryList({QStringLiteral("*.deb")}, QDir::Files);
    QCOMPARE(static_cast<size_t>(files.size()), expect.size());
    for (const QString& f : files) {
      const std::string path = out + "/" + f.toStdString();
      std::string name = Field(path, "Package");
      name.erase(name.find_last_not_of("\n") + 1);
      debs_[name] = path;
    }
    for (const std::string& p : expect) QVERIFY2(debs_.count(p), ("no package " + p).c_str());
    // Unpack all into one scratch root, as dpkg would install them.
    QVERIFY(QDir().mkpath(QString::fromStdString(Root())));
    for (const auto& [name, path] : debs_) {
      auto x = RunProgram({"/usr/bin/dpkg-deb", "-x", path, Root()}, 120'000);
      QVERIFY2(x.exit_code == 0, (name + ": " + x.output).c_str());
    }
  }

  void controlFieldsStateTheDependencies() {
    if (debs_.empty()) QSKIP("no packages (cpackBuildsThePackages failed)");
    for (const auto& [name, path] : debs_) {
      const std::string arch = Field(path, "Architecture");
      const std::string depends = Field(path, "Depends");
      QVERIFY2(arch == DebArch() + "\n", (name + ": " + arch + ", want " + DebArch()).c_str());
      QVERIFY2(depends.find("libc6") != std::string::npos, (name + ": " + depends).c_str());
      QVERIFY2(depends.find("libstdc++6") != std::string::npos, (name + ": " + depends).c_str());
      // Loaded at run time, so never a dependency of the package.
      for (const char* never : {"cuda", "nccl", "ibverbs", "rdma"}) {
        QVERIFY2(depends.find(never) == std::string::npos, (name + ": " + depends).c_str());
      }
    }
    const std::string cli = Field(debs_["octet"], "Depends");
    for (const char* lib : {"libgrpc++", "libprotobuf", "libyaml-cpp", "libsqlite3"}) {
      QVERIFY2(cli.find(lib) != std::string::npos, (std::string(lib) + ": " + cli).c_str());
    }
    const std::string agent = Field(debs_["octet-agent"], "Depends");
    QVERIFY2(agent.find("octet (= ") != std::string::npos, agent.c_str());
    QVERIFY2(agent.find("libgrpc++") != std::string::npos, agent.c_str());
    if (WithGui()) {
      const std::string wb = Field(debs_["octet-workbench"], "Depends");
      for (const char* lib : {"libqt6widgets6", "libqt6gui6", "libqt6core6", "octet-agent (= "}) {
        QVERIFY2(wb.find(lib) != std::string::npos, (std::string(lib) + ": " + wb).c_str());
      }
    }
  }

  void filesAreWhereTheSystemLooks() {
    if (debs_.empty()) QSKIP("no packages (cpackBuildsThePackages failed)");
    struct Expect {
      std::string path;
      unsigned mode;
    };
    std::vector<Expect> files = {
        {"/usr/bin/octet", 0755},
        {"/usr/bin/octet-agent", 0755},
        {"/usr/lib/systemd/system/octet-agent.service", 0644},
        {"/usr/lib/systemd/system/octet-serve@.service", 0644},
        {"/usr/lib/systemd/system/octet-route@.service", 0644},
        {"/usr/share/octet/routing/example-policy.yaml", 0644},
    };
    if (WithGui()) {
      files.push_back({"/usr/bin/octet-workbench", 0755});
      files.push_back({"/usr/share/applications/octet-workbench.desktop", 0644});
      files.push_back({"/usr/share/icons/hicolor/scalable/apps/octet-workbench.svg", 0644});
      for (int s : {16, 24, 32, 48, 64, 128, 256}) {
        files.push_back({"/usr/share/icons/hicolor/" + std::to_string(s) + "x" + std::to_string(s) +
                             "/apps/octet-workbench.png",
                         0644});
      }
    }
    for (const Expect& e : files) {
      QVERIFY2(Mode(Root() + e.path) == e.mode,
               (e.path + " mode " + std::to_string(Mode(Root() + e.path))).c_str());
    }
    if (WithGui()) {
      // The PNGs are the sizes their folders say (the IHDR chunk's width and height).
      for (int s : {16, 24, 32, 48, 64, 128, 256}) {
        QFile png(QString::fromStdString(Root() + "/usr/share/icons/hicolor/" + std::to_string(s) +
                                         "x" + std::to_string(s) + "/apps/octet-workbench.png"));
        QVERIFY(png.open(QIODevice::ReadOnly));
        const QByteArray head = png.read(24);
        QVERIFY(head.size() == 24 && head.startsWith("\x89PNG\r\n\x1a\n") &&
                head.mid(12, 4) == "IHDR");
        auto be32 = [&](int at) {
          uint32_t v = 0;
          for (int i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(head[at + i]);
          return v;
        };
        QCOMPARE(be32(16), static_cast<uint32_t>(s));
        QCOMPARE(be32(20), static_cast<uint32_t>(s));
      }
      QFile desktop(
          QString::fromStdString(Root() + "/usr/share/applications/octet-workbench.desktop"));
      QVERIFY(desktop.open(QIODevice::ReadOnly));
      const QByteArray text = desktop.readAll();
      for (const char* line : {"[Desktop Entry]", "\nType=Application\n", "\nExec=octet-workbench",
                               "\nIcon=octet-workbench\n"}) {
        QVERIFY2(text.contains(line), line);
      }
    }
    // Stripped programs (debug info stays in the build tree).
    auto file = RunProgram({"/usr/bin/readelf", "-S", "-W", Root() + "/usr/bin/octet"}, 30'000);
    QVERIFY2(file.exit_code == 0, file.output.c_str());
    QVERIFY2(file.output.find(".debug_info") == std::string::npos, "octet is not stripped");
  }

  void maintainerScriptsMakeTheServiceUser() {
    if (debs_.empty()) QSKIP("no packages (cpackBuildsThePackages failed)");
    for (const char* pkg : {"octet", "octet-agent"}) {
      const std::string ctl = dir_.path().toStdString() + "/control-" + pkg;
      auto e = RunProgram({"/usr/bin/dpkg-deb", "-e", debs_[pkg], ctl}, 60'000);
      QVERIFY2(e.exit_code == 0, e.output.c_str());
      QCOMPARE(Mode(ctl + "/postinst"), 0755u);
      QCOMPARE(Mode(ctl + "/postrm"), 0755u);
      auto syntax = RunProgram({"/bin/sh", "-n", ctl + "/postinst"}, 10'000);
      QVERIFY2(syntax.exit_code == 0, syntax.output.c_str());
      QFile f(QString::fromStdString(ctl + "/postinst"));
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QByteArray text = f.readAll();
      QVERIFY(text.contains("useradd --system"));
      QVERIFY(text.contains("install -d -m 07"));
    }
  }

  void unitsAreSandboxed() {
    if (debs_.empty()) QSKIP("no packages (cpackBuildsThePackages failed)");
    const char* analyze = "/usr/bin/systemd-analyze";
    if (!Executable(analyze)) QSKIP("systemd-analyze not installed");
    const std::string units = Root() + "/usr/lib/systemd/system/";
    const std::string inst = dir_.path().toStdString() + "/units/";
    QVERIFY(QDir().mkpath(QString::fromStdString(inst)));
    // Template units are rated as an instance of themselves.
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"octet-agent.service", "octet-agent.service"},
        {"octet-serve@.service", "octet-serve@test.service"},
        {"octet-route@.service", "octet-route@test.service"}};
    for (const auto& [file, as] : cases) {
      QVERIFY(QFile::copy(QString::fromStdString(units + file), QString::fromStdString(inst + as)));
      QFile f(QString::fromStdString(inst + as));
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QByteArray text = f.readAll();
      QVERIFY2(text.contains("\nExecStart=/usr/bin/octet"), file.c_str());
      QVERIFY2(text.contains("\nUser=octet\n"), file.c_str());
      QVERIFY2(!text.contains("@BINDIR@"), file.c_str());
      auto r = RunProgram({analyze, "security", "--offline=yes", inst + as}, 60'000);
      const double level = Exposure(r.output);
      QVERIFY2(level >= 0, r.output.c_str());
      qInfo("%s: systemd-analyze security exposure %.1f", as.c_str(), level);
      QVERIFY2(level <= 4.0,
               (as + ": exposure " + std::to_string(level) + "\n" + r.output).c_str());
    }
  }

  void installedProgramsRunFromTheScratchRoot() {
    if (debs_.empty()) QSKIP("no packages (cpackBuildsThePackages failed)");
    // A clean environment: no LD_LIBRARY_PATH, no build-tree paths.
    auto run = [&](std::vector<std::string> argv) {
      if (!Emulator().empty()) argv.insert(argv.begin(), Emulator());
      argv.insert(argv.begin(), {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin",
                                 "HOME=" + dir_.path().toStdString(), "QT_QPA_PLATFORM=offscreen"});
      return RunProgram(argv, Emulator().empty() ? 60'000 : 300'000);
    };
    auto cli = run({Root() + "/usr/bin/octet", "--version"});
    QVERIFY2(cli.exit_code == 0, cli.output.c_str());
    QVERIFY2(cli.output.rfind("octet ", 0) == 0, cli.output.c_str());
    QVERIFY2(cli.output.find("\nrun time: CUDA driver ") != std::string::npos, cli.output.c_str());
    // A build without CUDA (the arm64 cross build) says so rather than probe.
    QCOMPARE(cli.output.find("CUDA driver not compiled in") == std::string::npos, WithCuda());
    auto agent = run({Root() + "/usr/bin/octet-agent", "--version"});
    QVERIFY2(agent.exit_code == 0, agent.output.c_str());
    QVERIFY2(agent.output.rfind("octet-agent ", 0) == 0, agent.output.c_str());
    QVERIFY2(agent.output.find("\nrun time: CUDA driver ") != std::string::npos,
             agent.output.c_str());
    if (WithGui()) {
      auto wb = run({Root() + "/usr/bin/octet-workbench", "--version"});
      QVERIFY2(wb.exit_code == 0, wb.output.c_str());
      QVERIFY2(wb.output.find("octet-workbench ") != std::string::npos, wb.output.c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestPackages)
#include "test_packages.moc"
