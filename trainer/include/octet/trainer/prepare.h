// `octet train prepare`: text files → a data folder of token shards
// (token_shards.h) that `octet train --data` reads.
//
//   1. Documents: every regular file under the inputs (folders are walked
//      recursively, hidden entries skipped, paths sorted, so the result does
//      not depend on the file system's order). One file is one document.
//   2. Tokenizer: an existing tokenizer.json (and its tokenizer_config.json),
//      or a byte-level BPE trained here on the training documents
//      (octet::engine::BpeTrainer) with the BOS token as its one special
//      token, a post-processor that prepends BOS when special tokens are
//      added, and a tokenizer_config.json naming BOS as bos_token and
//      eos_token (a base model ends a text where a new document would
//      begin); written to OUT/tokenizer.json, OUT/tokenizer_config.json.
//   3. Split: whole documents go to validation (ValidationDocuments); a
//      single document is cut at a line boundary instead, its last
//      `val_fraction` becoming the validation document.
//   4. Shards: BOS + tokens per document, train-*.bin / val-*.bin, meta.json,
//      and token_bytes.npy (bytes each token decodes to; 0 for special tokens)
//      for bits-per-byte.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::trainer {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and folders
  std::string out_dir;
  std::string tokenizer;  // tokenizer.json (or its folder); empty: train one
  int vocab_size = 8192;  // when training: bytes + merges + the BOS token
  std::string bos_token = "<|bos|>";
  double val_fraction = 0.01;
  int64_t shard_tokens = 50'000'000;
  std::function<void(const std::string&)> progress;  // human progress lines (may be empty)
};

struct PrepareReport {
  int64_t documents = 0;
  int64_t val_documents = 0;
  int64_t text_bytes = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int32_t vocab_size = 0;
  int32_t bos_id = -1;
  bool trained_tokenizer = false;
  int train_shards = 0;
  int val_shards = 0;
};

Result<PrepareReport> PrepareData(const PrepareOptions& options);

}  // namespace octet::trainer
