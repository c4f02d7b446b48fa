// Which RDMA port each pair of ranks uses (collectives/src/rdma_links.h): a
// switch, a ring of four Sparks whose far ranks are reached through a
// forwarding neighbour, InfiniBand ports without IPv4, an unreachable rank,
// the pairs' agreement and the wire format. The routing table of the ring
// is written out here by hand (the static routes of a ring, shortest way
// round); the kernel's own answers are checked on loopback here, and in a
// routed ring of network namespaces by test_netns_cabling through --probe.
#include <arpa/inet.h>

#include <QtTest>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rdma_links.h"

using namespace octet::collectives;

namespace {

uint32_t Ip(const char* text) {
  in_addr a{};
  inet_pton(AF_INET, text, &a);
  return ntohl(a.s_addr);
}

uint32_t Ip(int a, int b, int c, int d) {
  return (uint32_t(a) << 24) | (uint32_t(b) << 16) | (uint32_t(c) << 8) | uint32_t(d);
}

// Every rank's agreed links, from every rank's choices.
std::vector<std::vector<RdmaLink>> AgreeAll(const std::vector<std::vector<RdmaPort>>& ports,
                                            const std::vector<SourceAddressFn>& source) {
  const int n = static_cast<int>(ports.size());
  std::vector<std::vector<RdmaLink>> choices(n), agreed(n);
  for (int r = 0; r < n; ++r) {
    auto c = ChooseRdmaLinks(ports, r, source[r]);
    if (!c.ok()) qFatal("rank %d: %s", r, c.status().ToString().c_str());
    // Through the wire format, as the bootstrap carries it.
    auto decoded = DecodeRdmaLinks(EncodeRdmaLinks(*c), n);
    if (!decoded.ok()) qFatal("rank %d: %s", r, decoded.status().ToString().c_str());
    choices[r] = *decoded;
  }
  for (int r = 0; r < n; ++r) {
    auto a = AgreedRdmaLinks(choices, r);
    if (!a.ok()) qFatal("rank %d: %s", r, a.status().ToString().c_str());
    agreed[r] = *a;
  }
  return agreed;
}

// Both ends of every pair name the same two ports.
void CheckSymmetric(const std::vector<std::vector<RdmaLink>>& links) {
  const int n = static_cast<int>(links.size());
  for (int a = 0; a < n; ++a) {
    QCOMPARE(links[a][a].local_port, -1);
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      QVERIFY(links[a][b].local_port >= 0);
      QCOMPARE(links[a][b].local_port, links[b][a].peer_port);
      QCOMPARE(links[a][b].peer_port, links[b][a].local_port);
      QCOMPARE(links[a][b].routed, links[b][a].routed);
    }
  }
}

// A ring of n Sparks: cable k joins rank k (10.0.k.1, its "east" port) and
// rank k+1 (10.0.k.2, its "west" port) on 10.0.k.0/30. Even ranks list east
// first, odd ranks west first, as device order does not follow the cabling.
struct Ring {
  int n;
  int East(int r) const { return r % 2 == 0 ? 0 : 1; }  // index of r's east port
  int West(int r) const { return 1 - East(r); }
  std::vector<std::vector<RdmaPort>> Ports() const {
    std::vector<std::vector<RdmaPort>> ports(n, std::vector<RdmaPort>(2));
    for (int r = 0; r < n; ++r) {
      ports[r][East(r)] = {"rocep1s0f0", 1, Ip(10, 0, r, 1), 30};
      ports[r][West(r)] = {"rocep1s0f1", 1, Ip(10, 0, (r + n - 1) % n, 2), 30};
    }
    return ports;
  }
  // Rank r's static routes: cable s is reached the shorter way round.
  SourceAddressFn Routes(int r) const {
    return [this, r](uint32_t dst) -> uint32_t {
      if ((dst >> 16) != (10u << 8)) return 0;
      const int s = static_cast<int>((dst >> 8) & 0xff);
      if (s >= n) return 0;
      const int east = ((s - r) % n + n) % n;      // cables to pass going east
      const int west = ((r - 1 - s) % n + n) % n;  // going west
      return east <= west ? Ip(10, 0, r, 1) : Ip(10, 0, (r + n - 1) % n, 2);
    };
  }
};

}  // namespace

class TestRdmaLinks : public QObject {
  Q_OBJECT

 private slots:
  void switchUsesTheOnePortEverywhere() {
    const int n = 4;
    std::vector<std::vector<RdmaPort>> ports(n);
    for (int r = 0; r < n; ++r) ports[r] = {{"rocep1s0f1", 1, Ip(192, 168, 100, 10 + r), 24}};
    const auto links = AgreeAll(ports, std::vector<SourceAddressFn>(n));
    CheckSymmetric(links);
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        QCOMPARE(links[a][b].local_port, 0);
        QVERIFY(!links[a][b].routed);
      }
    }
  }

  void ringNeighboursUseTheirCableAndFarRanksAreRouted() {
    const Ring ring{4};
    const auto ports = ring.Ports();
    std::vector<SourceAddressFn> routes;
    for (int r = 0; r < ring.n; ++r) routes.push_back(ring.Routes(r));
    const auto links = AgreeAll(ports, routes);
    CheckSymmetric(links);
    for (int r = 0; r < ring.n; ++r) {
      const int next = (r + 1) % ring.n, prev = (r + ring.n - 1) % ring.n;
      // The cable to the next rank: our east port, its west port, direct.
      QCOMPARE(links[r][next].local_port, ring.East(r));
      QCOMPARE(links[r][next].peer_port, ring.West(next));
      QVERIFY(!links[r][next].routed);
      QCOMPARE(links[r][prev].local_port, ring.West(r));
      QVERIFY(!links[r][prev].routed);
    }
    // Across the ring (0-2, 1-3) the lower rank decides: the first address of
    // the far rank that its routes reach, out of the port they leave by.
    for (int low : {0, 1}) {
      const int high = low + 2;
      const RdmaLink& l = links[low][high];
      QVERIFY(l.routed);
      const uint32_t target = ports[high][l.peer_port].ipv4;
      QCOMPARE(ports[low][l.local_port].ipv4, ring.Routes(low)(target));
      QCOMPARE(l.peer_port, 0);  // its first port is reachable
    }
  }

  void eightRankRingConnectsEveryPair() {
    const Ring ring{8};
    std::vector<SourceAddressFn> routes;
    for (int r = 0; r < ring.n; ++r) routes.push_back(ring.Routes(r));
    const auto links = AgreeAll(ring.Ports(), routes);
    CheckSymmetric(links);
    int routed = 0;
    for (int a = 0; a < ring.n; ++a) {
      for (int b = a + 1; b < ring.n; ++b) routed += links[a][b].routed;
    }
    QCOMPARE(routed, 8 * 7 / 2 - 8);  // all but the eight cables
  }

  void bothEndsMustAgreeOnTheSubnet() {
    // 10.0.0.5 is inside 10.0.0.1/24 but 10.0.0.1 is outside 10.0.0.5/30:
    // not one subnet, and with no route the pair fails.
    std::vector<std::vector<RdmaPort>> ports = {{{"mlx5_0", 1, Ip("10.0.0.1"), 24}},
                                                {{"mlx5_0", 1, Ip("10.0.0.5"), 30}}};
    QVERIFY(!ChooseRdmaLinks(ports, 0, {}).ok());
  }

  void infinibandPortsPairByOrder() {
    std::vector<std::vector<RdmaPort>> ports = {
        {{"mlx5_0", 1, 0, 0}, {"mlx5_1", 1, 0, 0}},
        {{"mlx5_0", 1, 0, 0}},
        {{"mlx5_2", 1, 0, 0}, {"mlx5_3", 1, 0, 0}},
    };
    const auto links = AgreeAll(ports, std::vector<SourceAddressFn>(3));
    CheckSymmetric(links);
    QCOMPARE(links[0][2].local_port, 0);
    QCOMPARE(links[0][2].peer_port, 0);
  }

  void anUnreachableRankIsNamedWithItsAddresses() {
    std::vector<std::vector<RdmaPort>> ports = {{{"rocep1s0f0", 1, Ip("10.0.0.1"), 30}},
                                                {{"rocep1s0f0", 1, Ip("10.9.0.2"), 30}}};
    auto c = ChooseRdmaLinks(ports, 0, [](uint32_t) { return 0u; });
    QVERIFY(!c.ok());
    const std::string m = c.status().message();
    QVERIFY2(m.find("rank 0") != std::string::npos && m.find("rank 1") != std::string::npos,
             m.c_str());
    QVERIFY2(m.find("10.0.0.1/30") != std::string::npos, m.c_str());
    QVERIFY2(m.find("10.9.0.2/30") != std::string::npos, m.c_str());
    // A route that leaves by an address that is not one of our RDMA ports
    // (the management network, say) does not count.
    auto other = ChooseRdmaLinks(ports, 0, [](uint32_t) { return Ip("172.16.0.9"); });
    QVERIFY(!other.ok());
    // A rank with no port at all.
    ports[1].clear();
    QVERIFY(!ChooseRdmaLinks(ports, 0, {}).ok());
    // The higher rank does not decide, so it does not fail for the pair.
    QVERIFY(ChooseRdmaLinks(ports, 1, {}).ok());
  }

  void agreementRejectsMissingOrShortChoices() {
    std::vector<std::vector<RdmaLink>> choices(3, std::vector<RdmaLink>(3));
    choices[0][1] = {0, 0, false};
    choices[0][2] = {0, 0, false};
    // Rank 1 chose nothing for rank 2.
    QVERIFY(!AgreedRdmaLinks(choices, 2).ok());
    choices[1][2] = {1, 0, true};
    auto ok = AgreedRdmaLinks(choices, 2);
    QVERIFY(ok.ok());
    QCOMPARE((*ok)[1].local_port, 0);
    QCOMPARE((*ok)[1].peer_port, 1);
    QVERIFY((*ok)[1].routed);
    choices[0].pop_back();
    QVERIFY(!AgreedRdmaLinks(choices, 1).ok());
  }

  void wireFormatRoundTripsAndRefusesDamage() {
    const std::vector<RdmaPort> ports = {{"rocep1s0f1", 1, Ip("10.0.0.1"), 30},
                                         {"roceP2p1s0f1", 2, 0, 0}};
    const std::string blob = EncodeRdmaPorts(ports);
    auto back = DecodeRdmaPorts(blob);
    QVERIFY(back.ok());
    QCOMPARE(back->size(), size_t{2});
    QCOMPARE((*back)[1].device, std::string("roceP2p1s0f1"));
    QCOMPARE((*back)[1].port, 2);
    QCOMPARE((*back)[0].ipv4, Ip("10.0.0.1"));
    QCOMPARE((*back)[0].prefix_len, 30);
    QVERIFY(!DecodeRdmaPorts(blob.substr(0, blob.size() - 1)).ok());
    QVERIFY(!DecodeRdmaPorts(blob + "x").ok());
    const std::string links = EncodeRdmaLinks({{-1, -1, false}, {1, 0, true}});
    QVERIFY(DecodeRdmaLinks(links, 2).ok());
    QVERIFY(!DecodeRdmaLinks(links, 3).ok());
    QVERIFY(!DecodeRdmaLinks(links.substr(0, links.size() - 2), 2).ok());
    QCOMPARE(DescribeRdmaPort(ports[0]), std::string("rocep1s0f1 port 1 (10.0.0.1/30)"));
  }

  void theKernelAnswersForLoopback() {
    QCOMPARE(KernelSourceAddress(Ip("127.0.0.1")), Ip("127.0.0.1"));
    QCOMPARE(LocalPrefixLength(Ip("127.0.0.1")), 8);
    QCOMPARE(LocalPrefixLength(Ip("192.0.2.77")), 0);  // TEST-NET-1: on no interface here
  }
};

// `test_collectives_rdma_links --probe RANK PORTS0 PORTS1 ...`, each PORTSi
// "dev=a.b.c.d/len,...": rank RANK's choices with this host's own answers
// (its interfaces' prefixes, which replace the given ones for its own ports,
// and its routes). Prints "prefix L..." for its ports and "link PEER LOCAL
// PEER_PORT ROUTED" per higher rank. test_netns_cabling runs it inside the
// namespaces of a routed ring.
int Probe(int argc, char** argv) {
  const int me = std::atoi(argv[2]);
  std::vector<std::vector<RdmaPort>> ports;
  for (int a = 3; a < argc; ++a) {
    std::vector<RdmaPort>& rank = ports.emplace_back();
    const QStringList list = QString::fromUtf8(argv[a]).split(',', Qt::SkipEmptyParts);
    for (const QString& item : list) {
      const QStringList nameAddr = item.split('=');
      const QStringList addrLen = nameAddr.value(1).split('/');
      rank.push_back({nameAddr.value(0).toStdString(), 1,
                      Ip(addrLen.value(0).toStdString().c_str()), addrLen.value(1).toInt()});
    }
  }
  if (me < 0 || me >= static_cast<int>(ports.size())) {
    std::fprintf(stderr, "--probe: rank %d of %zu\n", me, ports.size());
    return 2;
  }
  std::string prefixes = "prefix";
  for (RdmaPort& p : ports[me]) {
    p.prefix_len = LocalPrefixLength(p.ipv4);
    prefixes += " " + std::to_string(p.prefix_len);
  }
  auto links = ChooseRdmaLinks(ports, me, KernelSourceAddress);
  if (!links.ok()) {
    std::fprintf(stderr, "%s\n", links.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", prefixes.c_str());
  for (int peer = me + 1; peer < static_cast<int>(ports.size()); ++peer) {
    const RdmaLink& l = (*links)[peer];
    std::printf("link %d %d %d %d\n", peer, l.local_port, l.peer_port, l.routed ? 1 : 0);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--probe") return Probe(argc, argv);
  TestRdmaLinks test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_rdma_links.moc"
