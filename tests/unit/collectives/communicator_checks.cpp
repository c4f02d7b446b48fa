// The communicator tests' checks (communicator_checks.h): fill values, their
// encoding in each dtype, and every op run once with its results checked.
#include "communicator_checks.h"

#include <cstring>

#include "reduce.h"

namespace octet::collectives::test {

float Value(int rank, size_t i) {
  return static_cast<float>(((rank + 3) * static_cast<int>(i % 7 + 1)) % 9 - 4);
}

uint16_t Encode(DType d, float f) { return d == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f); }
float Decode(DType d, const uint8_t* p) {
  if (d == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
}
std::vector<uint8_t> Fill(DType d, int rank, size_t count, size_t offset) {
  std::vector<uint8_t> v(count * DTypeSize(d));
  for (size_t i = 0; i < count; ++i) {
    const float f = Value(rank, offset + i);
    if (d == DType::kF32)
      std::memcpy(&v[i * 4], &f, 4);
    else {
      const uint16_t h = Encode(d, f);
      std::memcpy(&v[i * 2], &h, 2);
    }
  }
  return v;
}

Status Expect(bool ok, const std::string& what) { return ok ? Status::Ok() : DataLossError(what); }

Status CheckAllOps(Communicator& c, DType d, size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t es = DTypeSize(d);
  // all_reduce, out of place and in place
  std::vector<uint8_t> in = Fill(d, r, count), out(count * es);
  OCTET_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, d));
  OCTET_RETURN_IF_ERROR(c.AllReduce(in.data(), count, d));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += Value(q, i);
    if (Decode(d, &out[i * es]) != want || Decode(d, &in[i * es]) != want) {
      return DataLossError("all_reduce element " + std::to_string(i) + " wrong");
    }
  }
  // all_gather
  std::vector<uint8_t> mine = Fill(d, r, count), all(n * count * es);
  OCTET_RETURN_IF_ERROR(c.AllGather(mine.data(), all.data(), count, d));
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < count; ++i) {
      if (Decode(d, &all[(q * count + i) * es]) != Value(q, i)) {
        return DataLossError("all_gather block " + std::to_string(q) + " wrong");
      }
    }
  }
  // reduce_scatter: block b of rank q holds Value(q, b*count + i)
  std::vector<uint8_t> blocks = Fill(d, r, n * count), part(count * es);
  OCTET_RETURN_IF_ERROR(c.ReduceScatter(blocks.data(), part.data(), count, d));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += Value(q, r * count + i);
    if (Decode(d, &part[i * es]) != want) return DataLossError("reduce_scatter wrong");
  }
  // broadcast from the last rank
  std::vector<uint8_t> b = Fill(d, r, count);
  OCTET_RETURN_IF_ERROR(c.Broadcast(b.data(), b.size(), n - 1));
  if (b != Fill(d, n - 1, count)) return DataLossError("broadcast wrong");
  return c.Barrier();
}

}  // namespace octet::collectives::test
