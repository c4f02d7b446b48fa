// Token shards: the pre-tokenised training data `octet train prepare` writes
// and the data loader reads.
//
// One shard file ("train-00000.bin", "val-00000.bin"): a 64-byte header, all
// fields little-endian, then the tokens back to back:
//   bytes  0..7   magic "OCTTOKEN"
//          8..11  u32 format version (1)
//         12..15  u32 bytes per token: 2 (uint16, vocab <= 65536) or 4 (uint32)
//         16..23  u64 token count
//         24..27  u32 vocabulary size (every token is < this)
//         28..31  i32 BOS id (-1: none); every document starts with it
//         32..39  u64 document count
//         40..63  reserved, zero
// Opening a shard checks all of it — magic, version, token width, that the
// file is exactly 64 + count·width bytes, reserved bytes zero, every token below
// the vocabulary size — and errors name the file and the byte offset.
//
// A data folder: shards plus meta.json ({"format": "octet-token-shards",
// "version": 1, "vocab_size", "bos_id", "train": [files], "val": [files],
// "train_tokens", "val_tokens", ...}), tokenizer.json and token_bytes.npy
// (int32 [vocab]: UTF-8 bytes each token decodes to, 0 for special tokens;
// for bits-per-byte).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/status.h"

namespace octet::trainer {

inline constexpr char kTokenShardMagic[8] = {'O', 'C', 'T', 'T', 'O', 'K', 'E', 'N'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderBytes = 64;

// Builds one shard in memory and writes it atomically.
class TokenShardWriter {
 public:
  TokenShardWriter(int32_t vocab_size, int32_t bos_id);
  // Appends a document: BOS (when bos_id >= 0) then `tokens`. Errors: a token
  // outside [0, vocab_size).
  Status AddDocument(std::span<const int32_t> tokens);
  int64_t token_count() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t document_count() const { return documents_; }
  Status Write(const std::string& path) const;
  void Clear();

 private:
  int32_t vocab_size_;
  int32_t bos_id_;
  int64_t documents_ = 0;
  std::vector<uint32_t> tokens_;
};

// A memory-mapped, validated shard.
class TokenShard {
 public:
  static Result<TokenShard> Open(const std::string& path);
  int64_t size() const { return count_; }
  int32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }
  int64_t document_count() const { return documents_; }
  const std::string& path() const { return file_.path(); }
  // Tokens [begin, begin + n) as int32 (begin + n <= size()).
  void Read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  MappedFile file_;
  int64_t count_ = 0;
  int bytes_per_token_ = 2;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int64_t documents_ = 0;
};

struct DataMeta {
  int32_t vocab_size = 0;
  int32_t bos_id = -1;
  std::vector<std::string> train_files;  // relative to the folder
  std::vector<std::string> val_files;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;

  static Result<DataMeta> Load(const std::string& dir);
  Status Save(const std::string& dir) const;  // meta.json, atomically
};

// Writes a whole data folder: documents go to the train or val split, each
// split is cut into shards of about `shard_tokens` tokens (a document never
// straddles two shards unless it alone is larger), and Finish writes
// meta.json. File names: train-00000.bin, ..., val-00000.bin, ...
class ShardSetWriter {
 public:
  ShardSetWriter(std::string dir, int32_t vocab_size, int32_t bos_id, int64_t shard_tokens);
  Status AddDocument(bool validation, std::span<const int32_t> tokens);
  // Flushes the open shards and writes meta.json; returns what it wrote.
  Result<DataMeta> Finish();

 private:
  Status Flush(bool validation);
  std::string dir_;
  int64_t shard_tokens_;
  DataMeta meta_;
  TokenShardWriter train_, val_;
};

// Which of `n_documents` documents (in order) form the validation split:
// every round(1/fraction)-th one, and at least one when n >= 2 and fraction
// > 0 (never all of them). With one document or fraction 0: none.
std::vector<bool> ValidationDocuments(int64_t n_documents, double fraction);

// The concatenation of one split's shards (in meta.json order) as one token
// stream.
class TokenDataset {
 public:
  // `split` is "train" or "val".
  static Result<std::unique_ptr<TokenDataset>> Open(const std::string& dir,
                                                    const std::string& split);
  int64_t size() const { return total_; }
  int32_t vocab_size() const { return vocab_size_; }
  // Tokens [begin, begin + n) of the stream (crossing shard ends as needed).
  void Read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;  // stream offset of each shard
  int64_t total_ = 0;
  int32_t vocab_size_ = 0;
};

// Where a loader is in its stream: resumable state for checkpoints.
struct LoaderPosition {
  int64_t epoch = 0;   // completed passes over the stream
  int64_t offset = 0;  // next global batch starts at this token
};

// Reads [B, T] micro-batches for one rank of `world` (llm.c style). Each global
// micro-batch is world·B·T + 1 consecutive tokens starting at the position;
// rank r takes rows r·B .. r·B + B − 1 of it (so ranks read disjoint slices
// and world ranks × B rows see exactly the rows one rank with world·B rows
// would); x = tokens, y = the same tokens shifted by one. After each call the
// position advances by world·B·T; a global batch that would run past the end
// starts over at offset 0 (epoch + 1).
class DataLoader {
 public:
  // Errors: the stream is shorter than one global batch.
  static Result<std::unique_ptr<DataLoader>> Create(const TokenDataset* data, int B, int T,
                                                    int rank, int world);
  // x, y: [B, T] each.
  void Next(int32_t* x, int32_t* y);
  LoaderPosition position() const { return pos_; }
  void set_position(LoaderPosition p) { pos_ = p; }
  int64_t tokens_per_global_batch() const { return int64_t{world_} * B_ * T_; }

 private:
  DataLoader() = default;
  const TokenDataset* data_ = nullptr;
  int B_ = 0, T_ = 0, rank_ = 0, world_ = 1;
  LoaderPosition pos_;
  std::vector<int32_t> buf_;
};

}  // namespace octet::trainer
