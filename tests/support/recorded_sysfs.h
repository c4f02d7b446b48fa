// The recorded sysfs trees of tests/data/sysfs (see its README) and variants
// of them made in a temporary folder, for RoCE tests on machines without an
// RDMA device.
//
// spark-roce: a DGX Spark's ConnectX-7 with one cable in its second port; both
// halves of that port (rocep1s0f1 over enp1s0f1np1, roceP2p1s0f1 over
// enP2p1s0f1np1) ACTIVE at MTU 9000 with their RoCE v2 IPv4 GID at index 3;
// the first port's halves DOWN.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "octet_test.h"

namespace octet::test {

inline std::string RecordedSysfs(const std::string& name = "spark-roce") {
  return SourceDir() + "/tests/data/sysfs/" + name;
}

// Copies a recorded tree into `dest` (symlinks kept as links); false on failure.
inline bool CopySysfsTree(const std::string& from, const std::string& dest) {
  std::error_code ec;
  std::filesystem::create_directories(dest, ec);
  std::filesystem::copy(from, dest,
                        std::filesystem::copy_options::recursive |
                            std::filesystem::copy_options::copy_symlinks |
                            std::filesystem::copy_options::overwrite_existing,
                        ec);
  return !ec;
}

// Writes one attribute ("class/net/enp1s0f1np1/mtu") of the tree at `root`,
// following its symlinks as the kernel's would be followed.
inline bool WriteSysfsAttr(const std::string& root, const std::string& rel,
                           const std::string& text) {
  std::ofstream out(root + "/" + rel, std::ios::trunc);
  out << text << "\n";
  return static_cast<bool>(out);
}

// spark-roce with the two faults users hit most, in `dest`: enp1s0f1np1 at
// MTU 1500 (its half stays ACTIVE, so NCCL uses it), and the other half of
// that port, roceP2p1s0f1, DOWN (its interface enP2p1s0f1np1 down). Returns
// `dest`, or "" when the tree could not be made.
inline std::string SparkWithMtu1500AndDownHalf(const std::string& dest) {
  if (!CopySysfsTree(RecordedSysfs(), dest)) return "";
  const std::string p2 = "class/infiniband/roceP2p1s0f1/ports/1/";
  bool ok = WriteSysfsAttr(dest, "class/net/enp1s0f1np1/mtu", "1500") &&
            WriteSysfsAttr(dest, p2 + "state", "1: DOWN") &&
            WriteSysfsAttr(dest, p2 + "phys_state", "3: Disabled") &&
            WriteSysfsAttr(dest, "class/net/enP2p1s0f1np1/operstate", "down");
  // A downed interface loses its IPv4 address, and with it the IPv4 GIDs.
  for (const char* i : {"2", "3"}) {
    ok = ok && WriteSysfsAttr(dest, p2 + "gids/" + i, "0000:0000:0000:0000:0000:0000:0000:0000");
  }
  return ok ? dest : "";
}

// spark-roce with RoCE v2 off on the cabled port (its halves ACTIVE, every GID
// entry typed RoCE v1). Returns `dest`, or "" when the tree could not be made.
inline std::string SparkWithoutRoceV2(const std::string& dest) {
  if (!CopySysfsTree(RecordedSysfs(), dest)) return "";
  bool ok = true;
  for (const char* dev : {"rocep1s0f1", "roceP2p1s0f1"}) {
    for (const char* i : {"1", "3"}) {
      ok = ok && WriteSysfsAttr(
                     dest, std::string("class/infiniband/") + dev + "/ports/1/gid_attrs/types/" + i,
                     "IB/RoCE v1");
    }
  }
  return ok ? dest : "";
}

}  // namespace octet::test
