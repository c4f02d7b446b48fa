#include <sys/stat.h>

#include <QtTest>
#include <algorithm>
#include <cstring>

#include "octet/base/args.h"
#include "octet/base/clock.h"
#include "octet/base/cpu_affinity.h"
#include "octet/base/file_util.h"
#include "octet/base/host_port.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/npy.h"

using namespace octet;

class TestUtil : public QObject {
  Q_OBJECT
 private slots:
  // Addresses as profiles, flags and job specs write them; the agent, the
  // rendezvous and the cluster client all read them here.
  void hostPortParsing() {
    auto hp = ParseHostPort("10.0.0.1:47100");
    QVERIFY(hp.ok());
    QCOMPARE(hp->host, std::string("10.0.0.1"));
    QCOMPARE(hp->port, uint16_t{47100});
    hp = ParseHostPort("[fe80::1%ring0]:9");
    QVERIFY(hp.ok());
    QCOMPARE(hp->host, std::string("fe80::1%ring0"));
    QCOMPARE(hp->ToString(), std::string("[fe80::1%ring0]:9"));
    QVERIFY(ParseHostPort("spark1:0").ok());  // rank 0 may ask for any port
    for (const char* bad : {"fe80::1:9", "host:99999", "host", ":80", "host:", "host:8o", "[::1]80",
                            "[::1", "host:-1", "host:+80"}) {
      Result<HostPort> r = ParseHostPort(bad);
      QVERIFY2(!r.ok(), bad);
      QVERIFY2(r.status().message().find(std::string("'") + bad + "'") != std::string::npos,
               r.status().message().c_str());  // the error quotes the text
    }
    std::string h = "unchanged";
    uint16_t p = 7;
    QVERIFY(!SplitHostPort("host", &h, &p).ok());
    QCOMPARE(h, std::string("unchanged"));
    QVERIFY(SplitHostPort("[::1]:5", &h, &p).ok());
    QCOMPARE(JoinHostPort(h, p), std::string("[::1]:5"));
    QCOMPARE(JoinHostPort("spark1", 8080), std::string("spark1:8080"));
  }
  void pinningStaysInsideTheAllowedCpus() {
    const std::vector<int> before = AllowedCpus();
    QVERIFY(!before.empty());
    QVERIFY(std::is_sorted(before.begin(), before.end()));
    QVERIFY(!PinToCpuIndices({}));
    QVERIFY(!PinToCpuIndices({static_cast<int>(before.size())}));  // past the allowed ones
    QVERIFY(!PinToCpuIndices({-1}));
    QCOMPARE(AllowedCpus(), before);  // a refused pin changes nothing
    QVERIFY(PinToCpuIndices({static_cast<int>(before.size()) - 1}));
    QCOMPARE(AllowedCpus(), std::vector<int>{before.back()});
  }
  void unixMsIsWallClock() {
    const int64_t before = UnixMs();
    QVERIFY(before > 1700000000000);  // after November 2023
    QVERIFY(UnixMs() >= before);
  }
  // Allocations are 64-byte aligned, zero, disjoint, and survive further
  // allocations (chunks are never moved); one larger than a chunk gets its own.
  void hugePageArenaAllocations() {
    HugePageArena arena(size_t{4} << 20);
    std::vector<std::pair<uint8_t*, size_t>> got;
    for (size_t n : {size_t{100}, size_t{1} << 20, size_t{3} << 20, size_t{9} << 20, size_t{64}}) {
      uint8_t* p = arena.Allocate(n);
      QVERIFY(p != nullptr);
      QCOMPARE(reinterpret_cast<uintptr_t>(p) % 64, uintptr_t{0});
      for (size_t i = 0; i < n; i += 4096) QCOMPARE(int(p[i]), 0);
      QCOMPARE(int(p[n - 1]), 0);
      std::memset(p, int(got.size() + 1), n);
      got.push_back({p, n});
    }
    for (size_t a = 0; a < got.size(); ++a) {
      QCOMPARE(int(got[a].first[0]), int(a + 1));
      QCOMPARE(int(got[a].first[got[a].second - 1]), int(a + 1));
      for (size_t b = a + 1; b < got.size(); ++b) {
        const bool apart = got[a].first + got[a].second <= got[b].first ||
                           got[b].first + got[b].second <= got[a].first;
        QVERIFY(apart);
      }
    }
    QVERIFY(arena.bytes_mapped() >= (size_t{13} << 20) + 200);
    QCOMPARE(arena.bytes_mapped() % (size_t{2} << 20), size_t{0});
  }

  void argsParseForms() {
    ArgParser p("octet x", "test");
    p.Option("ranks", "N", "ranks", "2").Option("sizes", "LIST", "sizes").Flag("check", "check");
    QVERIFY(p.Parse(std::vector<std::string>{"--sizes=1,2,3", "--check"}).ok());
    QCOMPARE(*p.GetInt("ranks"), int64_t(2));
    QVERIFY(!p.Given("ranks"));
    QVERIFY(p.GetFlag("check"));
    QCOMPARE(p.GetIntList("sizes")->size(), size_t(3));
  }
  void argsErrorsNameTheFlag() {
    ArgParser p("octet x", "test");
    p.Option("ranks", "N", "ranks");
    Status s = p.Parse(std::vector<std::string>{"--rank", "2"});
    QVERIFY(!s.ok());
    QVERIFY(s.message().find("--rank") != std::string::npos);
    ArgParser q("octet x", "test");
    q.Option("ranks", "N", "ranks");
    QVERIFY(!q.Parse(std::vector<std::string>{"--ranks"}).ok());
    ArgParser r("octet x", "test");
    r.Option("ranks", "N", "ranks");
    QVERIFY(r.Parse(std::vector<std::string>{"--ranks", "two"}).ok());
    auto v = r.GetInt("ranks");
    QVERIFY(!v.ok());
    QVERIFY(v.status().message().find("'two'") != std::string::npos);
  }
  void byteSizes() {
    QCOMPARE(*ParseByteSize("64M"), int64_t(64) << 20);
    QCOMPARE(*ParseByteSize("128GiB"), int64_t(128) << 30);
    QCOMPARE(*ParseByteSize("8"), int64_t(8));
    QCOMPARE(*ParseByteSize("1.5K"), int64_t(1536));
    QCOMPARE(*ParseByteSize("2GB"), int64_t(2'000'000'000));
    QVERIFY(!ParseByteSize("12Q").ok());
    QVERIFY(!ParseByteSize("-3").ok());
    QCOMPARE(FormatBytes(1536), std::string("1.5 KiB"));
  }
  void atomicWriteReplacesWhole() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/token";
    QVERIFY(WriteFileAtomic(path, "first", 0600).ok());
    QVERIFY(WriteFileAtomic(path, "second", 0600).ok());
    QCOMPARE(*ReadFileToString(path), std::string("second"));
    struct stat st;
    QCOMPARE(::stat(path.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
    // Writing into a missing directory fails and says where.
    Status s = WriteFileAtomic(dir.path().toStdString() + "/nope/x", "y");
    QVERIFY(!s.ok());
    QVERIFY(s.message().find("nope") != std::string::npos);
  }
  void missingFileIsNotFound() {
    auto r = ReadFileToString("/nonexistent/octet");
    QCOMPARE(r.status().code(), StatusCode::kNotFound);
    auto m = MappedFile::Open("/nonexistent/octet");
    QCOMPARE(m.status().code(), StatusCode::kNotFound);
  }
  void npyRoundTrip() {
    const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 1e-7f, 42.0f};
    const std::string bytes = NpyBytesF32({2, 3}, v.data());
    auto a = ParseNpy(bytes, "mem");
    QVERIFY(a.ok());
    QCOMPARE(a->dtype, std::string("f4"));
    QCOMPARE(a->shape, (std::vector<int64_t>{2, 3}));
    QCOMPARE(a->AsFloat(), v);
    // Header is padded so data starts at a multiple of 64 (NumPy's rule).
    QCOMPARE((bytes.size() - v.size() * 4) % 64, size_t(0));
  }
  void npyRejectsTruncated() {
    const std::vector<int32_t> v = {1, 2, 3, 4};
    std::string bytes = NpyBytesI32({4}, v.data());
    bytes.resize(bytes.size() - 3);
    auto a = ParseNpy(bytes, "ids.npy");
    QVERIFY(!a.ok());
    QVERIFY(a.status().message().find("ids.npy") != std::string::npos);
    QVERIFY(!ParseNpy("garbage", "g").ok());
  }
};

QTEST_APPLESS_MAIN(TestUtil)
#include "test_util.moc"
