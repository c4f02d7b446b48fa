// kAuto's algorithm table (AlgorithmBand rows, see communicator.h): how it is
// built from start-up timings, checked, sent between ranks and stored in a
// profile. Pure functions, so every rank that runs them on the same input
// gets the same table (the communicator still sends rank 0's to all).
#pragma once

#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "octet/collectives/communicator.h"

namespace octet::collectives {

constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();

// One-shot up to `oneshot_max` bytes, ring above (kNoLimit: one-shot always).
std::vector<AlgorithmBand> CrossoverBands(size_t oneshot_max);

// Merges adjacent rows with the same algorithm and widens the last row to
// every size. Rows must be sorted by max_bytes.
std::vector<AlgorithmBand> Compress(const std::vector<AlgorithmBand>& rows);

// True for a table AlgorithmFor can use: non-empty, strictly increasing
// max_bytes ending at kNoLimit, one-shot or ring in every row.
bool WellFormed(const std::vector<AlgorithmBand>& bands);

// The wire form sent from rank 0; DecodeBands returns an empty table for
// anything that is not a well-formed encoded table.
std::string EncodeBands(const std::vector<AlgorithmBand>& bands);
std::vector<AlgorithmBand> DecodeBands(const std::string& bytes);

// A profile line's table after "TRANSPORT WORLD_SIZE": "ALGO:MAX_BYTES ...
// ALGO:max", or a single ONESHOT_MAX_BYTES (the format before band tables).
// Empty when malformed.
std::vector<AlgorithmBand> ParseProfileBands(std::istringstream& fields);
// "shm 4 oneshot:16384 ring:max".
std::string ProfileLine(TransportKind kind, int n, const std::vector<AlgorithmBand>& bands);

// One band's start-up timings: run i of one-shot and run i of ring ran back
// to back (a pair, so a disturbance on a busy machine tends to hit both),
// each the slowest rank's time of that run, in ns. Sizes increase by powers
// of two from band to band.
struct BandTimings {
  size_t bytes = 0;
  std::vector<double> oneshot_ns, ring_ns;  // same length, at least one
};

// What one band's pairs say: the median over pairs of log(one-shot / ring)
// (> 0: ring faster) and its standard error from the pairs' spread (median
// absolute deviation; 0 with fewer than 3 pairs, i.e. no noise estimate).
struct BandJudgement {
  double log_ratio = 0;
  double std_error = 0;
};
BandJudgement JudgeBand(const BandTimings& band);

// The table from timings. Row k covers (bytes[k-1], bytes[k]]; sizes above
// the last band take its algorithm. Each band is judged by the mean of its
// own and its neighbours' median log ratios (real crossovers are smooth in
// size, single bands on a busy machine swing by tens of percent). It takes
// the faster algorithm only when that one is faster by more than both
// kSwitchMargin and kNoiseSigmas standard errors of that mean; otherwise the
// two are a tie within noise, and a tie keeps the choice of the band below,
// starting from one-shot at the smallest (the latency model: one step
// against ring's 2(n-1); ring takes over only once measured decisively
// faster, and stays through ties above: its bandwidth advantage only grows).
// From kTieToRingBytes up a tie goes to ring: there both are bandwidth-bound,
// ring never moves more bytes per rank ((2(n-1)/n) S against (n-1) S, equal
// at n = 2), reduces one piece while the next is in flight, and needs no
// full-size slot per peer. (Measured, 2 ranks over TCP at 1 MiB: ring ahead
// by 5-32% in every run while start-up called it a tie and kept one-shot.)
// So timings that differ only by noise always give the same table.
constexpr double kSwitchMargin = 0.05;
constexpr double kNoiseSigmas = 2.0;
constexpr size_t kTieToRingBytes = size_t{1} << 20;
std::vector<AlgorithmBand> ChooseBands(const std::vector<BandTimings>& bands);

// The bands (indices, at most kRetimeMaxBytes) whose smoothed ratio says one
// algorithm is more than kSwitchMargin faster but within noise: worth
// timing again (more pairs) before ChooseBands decides.
constexpr size_t kRetimeMaxBytes = size_t{1} << 20;
std::vector<size_t> BandsToRetime(const std::vector<BandTimings>& bands);

// Start-up timing per size: {pairs, block}: each pair is `block` one-shot
// runs and `block` ring runs back to back. Blocks because an algorithm run
// right after the other one is not what a caller sees: in a decode loop the
// same all-reduce runs back to back, and with 4 ranks on 2 cores single
// alternating runs made one-shot look best up to 16-32 KiB over shm where
// back-to-back ring was 1.3-2x faster. 11 blocks of 5 up to 64 KiB (cheap),
// 5 of 3 up to 1 MiB, 5 single runs up to 4 MiB, 3 above.
std::pair<int, int> TimingSchedule(size_t bytes);

// One figure per pair from per-run times (each run's slowest rank): pair i
// is runs [i * block, (i + 1) * block); its first run, right after the other
// algorithm's block, is left out when block > 1 and the median of the rest
// stands for the pair.
BandTimings PairsFromBlocks(const BandTimings& runs, int block);

// ChooseBands with one pair per band: sizes[k] took oneshot_ns[k] with
// one-shot and ring_ns[k] with ring (no noise estimate: the margin decides).
std::vector<AlgorithmBand> ChooseBands(const std::vector<size_t>& sizes,
                                       const std::vector<double>& oneshot_ns,
                                       const std::vector<double>& ring_ns);

}  // namespace octet::collectives
