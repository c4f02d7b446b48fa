// What the communicator tests check with: per-rank fill values whose sums are
// exact in every dtype, their encoding and decoding, and CheckAllOps, which
// runs every op once and checks the results exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "octet/collectives/communicator.h"

namespace octet::collectives::test {

// Small integers: every summation order gives the exact sum in f32, bf16, f16.
float Value(int rank, size_t i);

uint16_t Encode(DType d, float f);
float Decode(DType d, const uint8_t* p);
std::vector<uint8_t> Fill(DType d, int rank, size_t count, size_t offset = 0);

Status Expect(bool ok, const std::string& what);

// Runs every op once at `count` elements and checks the results exactly.
Status CheckAllOps(Communicator& c, DType d, size_t count);

}  // namespace octet::collectives::test
