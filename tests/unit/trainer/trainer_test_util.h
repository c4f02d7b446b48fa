// Helpers for the trainer tests: a synthetic token data folder and an
// in-process collective whose "ranks" are threads.
#pragma once

#include <QtGlobal>
#include <barrier>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/grad_sync.h"
#include "octet/trainer/token_shards.h"

namespace octet::trainer::testing {

// A kernel backend for a test; a backend this build cannot make ends the test.
inline std::unique_ptr<kernels::KernelBackend> TestBackend(const char* name = "auto",
                                                           int threads = 1) {
  auto be = kernels::CreateBackend(name, {.threads = threads});
  if (!be.ok()) qFatal("%s", be.status().ToString().c_str());
  return std::move(*be);
}

// Token ids of an integer .npy file (the fixtures' batches), with its shape.
inline std::vector<int32_t> ReadIds(const std::string& path, std::vector<int64_t>* shape) {
  auto a = ReadNpy(path);
  if (!a.ok()) qFatal("%s", a.status().ToString().c_str());
  *shape = a->shape;
  std::vector<int32_t> ids;
  for (int64_t v : a->AsInt64()) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// Writes a data folder of `docs` documents over a vocabulary of `vocab`
// (BOS = vocab − 1) that a model can learn: each document walks
// t → (5·t + 3) mod (vocab − 1) with an occasional jump, so the next token is
// mostly predictable. One val document; token_bytes.npy gives every
// non-BOS token 1 byte.
inline void WriteSyntheticData(const std::string& dir, int vocab, int docs, int doc_len) {
  if (!MakeDirs(dir).ok()) abort();
  DataMeta meta;
  meta.vocab_size = vocab;
  meta.bos_id = vocab - 1;
  uint64_t s = 99;
  auto rnd = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  };
  auto doc = [&] {
    std::vector<int32_t> d;
    int32_t t = static_cast<int32_t>(rnd() % (vocab - 1));
    for (int i = 0; i < doc_len; ++i) {
      d.push_back(t);
      t = (rnd() % 8 == 0) ? static_cast<int32_t>(rnd() % (vocab - 1)) : (5 * t + 3) % (vocab - 1);
    }
    return d;
  };
  TokenShardWriter train(vocab, vocab - 1);
  for (int i = 0; i < docs; ++i) {
    if (!train.AddDocument(doc()).ok()) abort();
    if (i == docs / 2) {  // two shards
      if (!train.Write(JoinPath(dir, "train-00000.bin")).ok()) abort();
      meta.train_files.push_back("train-00000.bin");
      meta.train_tokens += train.token_count();
      train.Clear();
    }
  }
  if (!train.Write(JoinPath(dir, "train-00001.bin")).ok()) abort();
  meta.train_files.push_back("train-00001.bin");
  meta.train_tokens += train.token_count();
  TokenShardWriter val(vocab, vocab - 1);
  for (int i = 0; i < 4; ++i) {
    if (!val.AddDocument(doc()).ok()) abort();
  }
  if (!val.Write(JoinPath(dir, "val-00000.bin")).ok()) abort();
  meta.val_files.push_back("val-00000.bin");
  meta.val_tokens = val.token_count();
  if (!meta.Save(dir).ok()) abort();
  std::vector<int32_t> bytes(vocab, 1);
  bytes[vocab - 1] = 0;
  if (!WriteFileAtomic(JoinPath(dir, "token_bytes.npy"), NpyBytesI32({vocab}, bytes.data())).ok()) {
    abort();
  }
}

// Fills every parameter with small deterministic values (nanochat's init
// zeroes lm_head and the projections, which would make the first gradients of
// every block exactly zero and comparisons of them vacuous).
inline void RandomizeParams(GptModel& model, uint64_t seed) {
  uint64_t s = seed;
  for (float& p : model.params()) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p = (static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f - 0.5f) * 0.2f;
  }
}

// Ranks are threads of one process; every rank sums all contributions in rank
// order, so all ranks get identical bits (as the collectives library promises).
class ThreadGroup {
 public:
  explicit ThreadGroup(int world) : world_(world), slots_(world), barrier_(world) {}
  int world() const { return world_; }
  void Put(int rank, const float* data, size_t n) { slots_[rank].assign(data, data + n); }
  void Sync() { barrier_.arrive_and_wait(); }
  void Sum(float* data, size_t n) const {
    for (size_t i = 0; i < n; ++i) {
      float s = slots_[0][i];
      for (int r = 1; r < world_; ++r) s += slots_[r][i];
      data[i] = s;
    }
  }

 private:
  int world_;
  std::vector<std::vector<float>> slots_;
  std::barrier<> barrier_;
};

class ThreadCollective : public GradientCollective {
 public:
  ThreadCollective(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world(); }
  Status AllReduceSum(float* data, size_t count) override {
    group_->Put(rank_, data, count);
    group_->Sync();
    group_->Sum(data, count);
    group_->Sync();
    return Status::Ok();
  }
  Status Barrier() override {
    group_->Sync();
    return Status::Ok();
  }

 private:
  ThreadGroup* group_;
  int rank_;
};

}  // namespace octet::trainer::testing
