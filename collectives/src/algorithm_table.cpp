#include "algorithm_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "wire.h"

namespace octet::collectives {

std::vector<AlgorithmBand> CrossoverBands(size_t oneshot_max) {
  if (oneshot_max == kNoLimit) return {{kNoLimit, AlgorithmKind::kOneShot}};
  return {{oneshot_max, AlgorithmKind::kOneShot}, {kNoLimit, AlgorithmKind::kRing}};
}

std::vector<AlgorithmBand> Compress(const std::vector<AlgorithmBand>& rows) {
  std::vector<AlgorithmBand> out;
  for (const AlgorithmBand& r : rows) {
    if (!out.empty() && out.back().algorithm == r.algorithm) {
      out.back().max_bytes = r.max_bytes;
    } else {
      out.push_back(r);
    }
  }
  if (!out.empty()) out.back().max_bytes = kNoLimit;
  return out;
}

bool WellFormed(const std::vector<AlgorithmBand>& bands) {
  if (bands.empty() || bands.back().max_bytes != kNoLimit) return false;
  for (size_t i = 0; i < bands.size(); ++i) {
    if (bands[i].algorithm != AlgorithmKind::kOneShot &&
        bands[i].algorithm != AlgorithmKind::kRing) {
      return false;
    }
    if (i > 0 && bands[i].max_bytes <= bands[i - 1].max_bytes) return false;
  }
  return true;
}

std::string EncodeBands(const std::vector<AlgorithmBand>& bands) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(bands.size()));
  for (const AlgorithmBand& b : bands) {
    w.U64(b.max_bytes).U32(static_cast<uint32_t>(b.algorithm));
  }
  return w.str();
}

std::vector<AlgorithmBand> DecodeBands(const std::string& bytes) {
  WireReader rd(bytes);
  const uint32_t n = rd.U32();
  std::vector<AlgorithmBand> bands;
  for (uint32_t i = 0; i < n && i < 128 && rd.ok(); ++i) {
    AlgorithmBand b;
    b.max_bytes = static_cast<size_t>(rd.U64());
    b.algorithm = static_cast<AlgorithmKind>(rd.U32());
    bands.push_back(b);
  }
  if (!rd.ok() || bands.size() != n || !WellFormed(bands)) return {};
  return bands;
}

std::vector<AlgorithmBand> ParseProfileBands(std::istringstream& fields) {
  std::vector<std::string> tokens;
  for (std::string t; fields >> t;) tokens.push_back(t);
  if (tokens.size() == 1 && tokens[0].find(':') == std::string::npos) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(tokens[0].c_str(), &end, 10);
    if (*end != '\0' || v == 0) return {};
    return CrossoverBands(static_cast<size_t>(v));
  }
  std::vector<AlgorithmBand> bands;
  for (const std::string& t : tokens) {
    const size_t colon = t.find(':');
    if (colon == std::string::npos) return {};
    auto algo = ParseAlgorithm(t.substr(0, colon));
    if (!algo.ok()) return {};
    AlgorithmBand b;
    b.algorithm = *algo;
    const std::string max = t.substr(colon + 1);
    if (max == "max") {
      b.max_bytes = kNoLimit;
    } else {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(max.c_str(), &end, 10);
      if (max.empty() || *end != '\0' || v == 0 || v >= kNoLimit) return {};
      b.max_bytes = static_cast<size_t>(v);
    }
    bands.push_back(b);
  }
  return WellFormed(bands) ? bands : std::vector<AlgorithmBand>{};
}

std::string ProfileLine(TransportKind kind, int n, const std::vector<AlgorithmBand>& bands) {
  std::string line = std::string(TransportName(kind)) + " " + std::to_string(n);
  for (const AlgorithmBand& b : bands) {
    line += " " + std::string(AlgorithmName(b.algorithm)) + ":" +
            (b.max_bytes == kNoLimit ? std::string("max") : std::to_string(b.max_bytes));
  }
  return line;
}

std::vector<AlgorithmBand> ChooseBands(const std::vector<size_t>& sizes,
                                       const std::vector<double>& oneshot,
                                       const std::vector<double>& ring) {
  if (sizes.empty()) return CrossoverBands(kNoLimit);
  // Each band is judged by the geometric mean of one-shot/ring over itself
  // and its two neighbours: real crossovers are smooth in size, while on a
  // busy machine single medians swing by tens of percent, and a table that
  // flips at every disturbed band is worse than either algorithm. A band
  // also keeps the algorithm of the band below unless the other is more
  // than kSwitchMargin faster there (within it, either is close enough).
  // The smallest band starts from one-shot (one step against ring's 2(n-1)).
  constexpr double kSwitchMargin = 0.05;
  const size_t m = sizes.size();
  std::vector<double> log_ratio(m);  // > 0: ring faster
  for (size_t k = 0; k < m; ++k) {
    log_ratio[k] = std::log(std::max(oneshot[k], 1.0) / std::max(ring[k], 1.0));
  }
  const double switch_at = -std::log(1 - kSwitchMargin);
  std::vector<AlgorithmBand> rows;
  AlgorithmKind prev = AlgorithmKind::kOneShot;
  for (size_t k = 0; k < m; ++k) {
    const size_t lo = k == 0 ? 0 : k - 1, hi = std::min(m - 1, k + 1);
    double smoothed = 0;
    for (size_t j = lo; j <= hi; ++j) smoothed += log_ratio[j];
    smoothed /= static_cast<double>(hi - lo + 1);
    if (prev == AlgorithmKind::kOneShot && smoothed > switch_at) prev = AlgorithmKind::kRing;
    if (prev == AlgorithmKind::kRing && smoothed < -switch_at) prev = AlgorithmKind::kOneShot;
    rows.push_back({sizes[k], prev});
  }
  // Beyond the largest measured size both algorithms are bandwidth-bound
  // and out of cache, so each is modelled as t = S / (its bandwidth at
  // 16 MiB): the ratio stays the 16 MiB ratio and every larger band takes
  // the 16 MiB band's algorithm. (The best bandwidth over 4-16 MiB would let
  // a 4 MiB run that still hit the 2 MiB-per-core L2 decide for 64 MB.)
  rows.push_back({kNoLimit, prev});
  return Compress(rows);
}

}  // namespace octet::collectives
