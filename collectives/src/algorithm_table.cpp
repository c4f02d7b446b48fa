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

namespace {

double Median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

// Per band: the smoothed log ratio (> 0: ring faster) and the threshold it
// must pass to count as decisive.
struct Smoothed {
  double log_ratio = 0;
  double threshold = 0;
};

std::vector<Smoothed> SmoothBands(const std::vector<BandTimings>& bands) {
  const size_t m = bands.size();
  std::vector<BandJudgement> judged(m);
  for (size_t k = 0; k < m; ++k) judged[k] = JudgeBand(bands[k]);
  const double margin = -std::log(1 - kSwitchMargin);
  std::vector<Smoothed> out(m);
  for (size_t k = 0; k < m; ++k) {
    const size_t lo = k == 0 ? 0 : k - 1, hi = std::min(m - 1, k + 1);
    double sum = 0, var = 0;
    for (size_t j = lo; j <= hi; ++j) {
      sum += judged[j].log_ratio;
      var += judged[j].std_error * judged[j].std_error;
    }
    const double count = static_cast<double>(hi - lo + 1);
    out[k].log_ratio = sum / count;
    out[k].threshold = std::max(margin, kNoiseSigmas * std::sqrt(var) / count);
  }
  return out;
}

}  // namespace

BandJudgement JudgeBand(const BandTimings& band) {
  const size_t pairs = std::min(band.oneshot_ns.size(), band.ring_ns.size());
  BandJudgement j;
  if (pairs == 0) return j;
  std::vector<double> logs(pairs);
  for (size_t i = 0; i < pairs; ++i) {
    logs[i] = std::log(std::max(band.oneshot_ns[i], 1.0) / std::max(band.ring_ns[i], 1.0));
  }
  j.log_ratio = Median(logs);
  if (pairs >= 3) {
    std::vector<double> dev(pairs);
    for (size_t i = 0; i < pairs; ++i) dev[i] = std::fabs(logs[i] - j.log_ratio);
    // MAD * 1.4826 estimates the standard deviation of normal noise; the
    // median of N samples has about 1.2533 / sqrt(N) of it as its error.
    const double sigma = 1.4826 * Median(dev);
    j.std_error = 1.2533 * sigma / std::sqrt(static_cast<double>(pairs));
  }
  return j;
}

std::vector<AlgorithmBand> ChooseBands(const std::vector<BandTimings>& bands) {
  if (bands.empty()) return CrossoverBands(kNoLimit);
  const std::vector<Smoothed> smoothed = SmoothBands(bands);
  std::vector<AlgorithmBand> rows;
  AlgorithmKind prev = AlgorithmKind::kOneShot;
  for (size_t k = 0; k < bands.size(); ++k) {
    if (smoothed[k].log_ratio > smoothed[k].threshold) {
      prev = AlgorithmKind::kRing;
    } else if (smoothed[k].log_ratio < -smoothed[k].threshold) {
      prev = AlgorithmKind::kOneShot;
    } else if (bands[k].bytes >= kTieToRingBytes) {
      prev = AlgorithmKind::kRing;  // a tie among bandwidth-bound runs
    }
    rows.push_back({bands[k].bytes, prev});
  }
  // Beyond the largest measured size both algorithms are bandwidth-bound
  // and out of cache, so each is modelled as t = S / (its bandwidth at
  // 16 MiB): the ratio stays the 16 MiB ratio and every larger band takes
  // the 16 MiB band's algorithm. (The best bandwidth over 4-16 MiB would let
  // a 4 MiB run that still hit the 2 MiB-per-core L2 decide for 64 MB.)
  rows.push_back({kNoLimit, prev});
  return Compress(rows);
}

std::vector<size_t> BandsToRetime(const std::vector<BandTimings>& bands) {
  const std::vector<Smoothed> smoothed = SmoothBands(bands);
  const double margin = -std::log(1 - kSwitchMargin);
  std::vector<size_t> out;
  for (size_t k = 0; k < bands.size(); ++k) {
    const double r = std::fabs(smoothed[k].log_ratio);
    if (bands[k].bytes <= kRetimeMaxBytes && r > margin && r <= smoothed[k].threshold) {
      out.push_back(k);
    }
  }
  return out;
}

std::pair<int, int> TimingSchedule(size_t bytes) {
  if (bytes <= (64 << 10)) return {11, 5};
  if (bytes <= (1 << 20)) return {5, 3};
  if (bytes <= (4 << 20)) return {5, 1};
  return {3, 1};
}

BandTimings PairsFromBlocks(const BandTimings& runs, int block) {
  if (block <= 1) return runs;
  BandTimings out;
  out.bytes = runs.bytes;
  const size_t b = static_cast<size_t>(block);
  const size_t n = std::min(runs.oneshot_ns.size(), runs.ring_ns.size()) / b;
  for (size_t i = 0; i < n; ++i) {
    for (auto [from, to] : {std::pair{&runs.oneshot_ns, &out.oneshot_ns},
                            std::pair{&runs.ring_ns, &out.ring_ns}}) {
      to->push_back(Median(std::vector<double>(from->begin() + i * b + 1,
                                               from->begin() + (i + 1) * b)));
    }
  }
  return out;
}

std::vector<AlgorithmBand> ChooseBands(const std::vector<size_t>& sizes,
                                       const std::vector<double>& oneshot,
                                       const std::vector<double>& ring) {
  std::vector<BandTimings> bands(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) bands[k] = {sizes[k], {oneshot[k]}, {ring[k]}};
  return ChooseBands(bands);
}

}  // namespace octet::collectives
