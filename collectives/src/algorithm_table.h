// kAuto's algorithm table (AlgorithmBand rows, see communicator.h): how it is
// built from start-up timings, checked, sent between ranks and stored in a
// profile. Pure functions, so every rank that runs them on the same input
// gets the same table (the communicator still sends rank 0's to all).
#pragma once

#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
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

// The table from timings: sizes[k] (increasing powers of two, at least one)
// took oneshot_ns[k] with one-shot and ring_ns[k] with ring. Row k covers
// (sizes[k-1], sizes[k]]; sizes above the last take the last row's algorithm.
// Each band is judged by the geometric mean of one-shot/ring over itself and
// its neighbours, and switches algorithm only for a >5% win (see the .cpp).
std::vector<AlgorithmBand> ChooseBands(const std::vector<size_t>& sizes,
                                       const std::vector<double>& oneshot_ns,
                                       const std::vector<double>& ring_ns);

}  // namespace octet::collectives
