#include "octet/trainer/token_shards.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "octet/base/json.h"

namespace octet::trainer {
namespace {

void PutU32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t GetU64(const uint8_t* p) { return uint64_t{GetU32(p)} | uint64_t{GetU32(p + 4)} << 32; }

}  // namespace

// ---- writer --------------------------------------------------------------------

TokenShardWriter::TokenShardWriter(int32_t vocab_size, int32_t bos_id)
    : vocab_size_(vocab_size), bos_id_(bos_id) {}

Status TokenShardWriter::AddDocument(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size_) {
      return InvalidArgumentError("token " + std::to_string(tokens[i]) + " at " +
                                  std::to_string(i) + " of document " + std::to_string(documents_) +
                                  " is outside [0, " + std::to_string(vocab_size_) + ")");
    }
  }
  if (bos_id_ >= 0) tokens_.push_back(static_cast<uint32_t>(bos_id_));
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  ++documents_;
  return Status::Ok();
}

void TokenShardWriter::Clear() {
  tokens_.clear();
  documents_ = 0;
}

Status TokenShardWriter::Write(const std::string& path) const {
  const int width = vocab_size_ <= 65536 ? 2 : 4;
  std::string out(kTokenShardHeaderBytes + tokens_.size() * width, '\0');
  std::memcpy(out.data(), kTokenShardMagic, 8);
  PutU32(out, 8, kTokenShardVersion);
  PutU32(out, 12, static_cast<uint32_t>(width));
  PutU64(out, 16, tokens_.size());
  PutU32(out, 24, static_cast<uint32_t>(vocab_size_));
  PutU32(out, 28, static_cast<uint32_t>(bos_id_));
  PutU64(out, 32, static_cast<uint64_t>(documents_));
  size_t at = kTokenShardHeaderBytes;
  for (uint32_t t : tokens_) {
    for (int i = 0; i < width; ++i) out[at++] = static_cast<char>((t >> (8 * i)) & 0xff);
  }
  return WriteFileAtomic(path, out);
}

// ---- a whole data folder --------------------------------------------------------

ShardSetWriter::ShardSetWriter(std::string dir, int32_t vocab_size, int32_t bos_id,
                               int64_t shard_tokens)
    : dir_(std::move(dir)),
      shard_tokens_(std::max<int64_t>(1, shard_tokens)),
      train_(vocab_size, bos_id),
      val_(vocab_size, bos_id) {
  meta_.vocab_size = vocab_size;
  meta_.bos_id = bos_id;
}

Status ShardSetWriter::Flush(bool validation) {
  TokenShardWriter& w = validation ? val_ : train_;
  if (w.token_count() == 0) return Status::Ok();
  auto& files = validation ? meta_.val_files : meta_.train_files;
  char name[32];
  std::snprintf(name, sizeof(name), "%s-%05zu.bin", validation ? "val" : "train", files.size());
  OCTET_RETURN_IF_ERROR(w.Write(JoinPath(dir_, name)));
  files.push_back(name);
  (validation ? meta_.val_tokens : meta_.train_tokens) += w.token_count();
  w.Clear();
  return Status::Ok();
}

Status ShardSetWriter::AddDocument(bool validation, std::span<const int32_t> tokens) {
  TokenShardWriter& w = validation ? val_ : train_;
  if (w.token_count() > 0 &&
      w.token_count() + static_cast<int64_t>(tokens.size()) + 1 > shard_tokens_) {
    OCTET_RETURN_IF_ERROR(Flush(validation));
  }
  return w.AddDocument(tokens);
}

Result<DataMeta> ShardSetWriter::Finish() {
  OCTET_RETURN_IF_ERROR(Flush(false));
  OCTET_RETURN_IF_ERROR(Flush(true));
  OCTET_RETURN_IF_ERROR(meta_.Save(dir_));
  return meta_;
}

std::vector<bool> ValidationDocuments(int64_t n, double fraction) {
  std::vector<bool> val(n, false);
  if (n < 2 || !(fraction > 0)) return val;
  const int64_t every = std::max<int64_t>(2, std::llround(1.0 / std::min(fraction, 0.5)));
  int64_t count = 0;
  for (int64_t i = every - 1; i < n; i += every) {
    val[i] = true;
    ++count;
  }
  if (count == 0) val[n - 1] = true;
  return val;
}

// ---- reader --------------------------------------------------------------------

Result<TokenShard> TokenShard::Open(const std::string& path) {
  TokenShard s;
  OCTET_ASSIGN_OR_RETURN(s.file_, MappedFile::Open(path));
  const uint8_t* p = s.file_.data();
  const uint64_t size = s.file_.size();
  if (size < kTokenShardHeaderBytes) {
    return DataLossError(path + ": " + std::to_string(size) +
                         " bytes, shorter than the 64-byte token shard header");
  }
  if (std::memcmp(p, kTokenShardMagic, 8) != 0) {
    return DataLossError(path + ": bad magic at byte 0 (not an Octet token shard)");
  }
  const uint32_t version = GetU32(p + 8);
  if (version != kTokenShardVersion) {
    return DataLossError(path + ": format version " + std::to_string(version) + " at byte 8, " +
                         "this build reads version " + std::to_string(kTokenShardVersion));
  }
  const uint32_t width = GetU32(p + 12);
  if (width != 2 && width != 4) {
    return DataLossError(path + ": " + std::to_string(width) +
                         " bytes per token at byte 12 (2 or 4)");
  }
  const uint64_t count = GetU64(p + 16);
  const uint32_t vocab = GetU32(p + 24);
  const int32_t bos = static_cast<int32_t>(GetU32(p + 28));
  const uint64_t docs = GetU64(p + 32);
  for (int i = 40; i < 64; ++i) {
    if (p[i] != 0)
      return DataLossError(path + ": reserved header byte " + std::to_string(i) + " is not zero");
  }
  // The size is kept as an int32_t: 2^31 itself would read negative.
  if (vocab == 0 || vocab > uint32_t{INT32_MAX} || (width == 2 && vocab > 65536)) {
    return DataLossError(path + ": vocabulary size " + std::to_string(vocab) + " at byte 24 " +
                         "does not fit " + std::to_string(width) + "-byte tokens");
  }
  if (bos < -1 || bos >= static_cast<int64_t>(vocab)) {
    return DataLossError(path + ": BOS id " + std::to_string(bos) +
                         " at byte 28 is outside the vocabulary");
  }
  if (count > (size - kTokenShardHeaderBytes) / width ||
      size != kTokenShardHeaderBytes + count * width) {
    return DataLossError(path + ": header says " + std::to_string(count) + " tokens (" +
                         std::to_string(kTokenShardHeaderBytes + count * width) +
                         " bytes) but the file has " + std::to_string(size) + " bytes");
  }
  const uint8_t* data = p + kTokenShardHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t t =
        width == 2 ? uint32_t{data[2 * i]} | uint32_t{data[2 * i + 1]} << 8 : GetU32(data + 4 * i);
    if (t >= vocab) {
      return DataLossError(path + ": token " + std::to_string(t) + " at byte " +
                           std::to_string(kTokenShardHeaderBytes + i * width) +
                           " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
  s.count_ = static_cast<int64_t>(count);
  s.bytes_per_token_ = static_cast<int>(width);
  s.vocab_size_ = static_cast<int32_t>(vocab);
  s.bos_id_ = bos;
  s.documents_ = static_cast<int64_t>(docs);
  return s;
}

void TokenShard::Read(int64_t begin, int64_t n, int32_t* out) const {
  const uint8_t* data = file_.data() + kTokenShardHeaderBytes;
  if (bytes_per_token_ == 2) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* q = data + 2 * (begin + i);
      out[i] = static_cast<int32_t>(uint32_t{q[0]} | uint32_t{q[1]} << 8);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(GetU32(data + 4 * (begin + i)));
  }
}

// ---- meta.json ---------------------------------------------------------------------

Result<DataMeta> DataMeta::Load(const std::string& dir) {
  const std::string path = JoinPath(dir, "meta.json");
  if (!PathExists(dir)) return NotFoundError("data folder '" + dir + "' does not exist");
  if (!PathExists(path)) {
    // Text files, or a folder of them, given where token shards are wanted.
    return NotFoundError("'" + dir +
                         "' is not a prepared data folder (no meta.json): make one from text "
                         "files with `octet train prepare --out DATA FILES...`");
  }
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  DataMeta m;
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "octet-token-shards") {
      return InvalidArgumentError(path + ": \"format\" is not \"octet-token-shards\"");
    }
    if (j.value("version", 0) != 1) {
      return InvalidArgumentError(path + ": unsupported version " +
                                  j.value("version", nlohmann::json()).dump());
    }
    // Integers, not floats cast to them; ids within int32.
    const std::optional<int64_t> vocab = IntegerMember(j, "vocab_size", 0);  // absent: refused
    const std::optional<int64_t> bos = IntegerMember(j, "bos_id", -1);
    const std::optional<int64_t> train = IntegerMember(j, "train_tokens", 0);
    const std::optional<int64_t> val = IntegerMember(j, "val_tokens", 0);
    if (!vocab || *vocab <= 0 || *vocab > INT32_MAX) {
      return InvalidArgumentError(path + ": vocab_size must be a positive 32-bit integer");
    }
    if (!bos || *bos < -1 || *bos >= *vocab) {
      return InvalidArgumentError(path + ": bos_id must be -1 or an id below vocab_size");
    }
    if (!train || !val || *train < 0 || *val < 0) {
      return InvalidArgumentError(path + ": train_tokens and val_tokens must be counts");
    }
    m.vocab_size = static_cast<int32_t>(*vocab);
    m.bos_id = static_cast<int32_t>(*bos);
    m.train_files = j.at("train").get<std::vector<std::string>>();
    m.val_files = j.value("val", std::vector<std::string>{});
    m.train_tokens = *train;
    m.val_tokens = *val;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  if (m.vocab_size <= 0) return InvalidArgumentError(path + ": vocab_size must be positive");
  return m;
}

Status DataMeta::Save(const std::string& dir) const {
  nlohmann::ordered_json j;
  j["format"] = "octet-token-shards";
  j["version"] = 1;
  j["vocab_size"] = vocab_size;
  j["bos_id"] = bos_id;
  j["train"] = train_files;
  j["val"] = val_files;
  j["train_tokens"] = train_tokens;
  j["val_tokens"] = val_tokens;
  return WriteFileAtomic(JoinPath(dir, "meta.json"), j.dump(2) + "\n");
}

// ---- dataset -------------------------------------------------------------------------

Result<std::unique_ptr<TokenDataset>> TokenDataset::Open(const std::string& dir,
                                                         const std::string& split) {
  OCTET_ASSIGN_OR_RETURN(DataMeta meta, DataMeta::Load(dir));
  const auto& files = split == "train" ? meta.train_files : meta.val_files;
  if (split != "train" && split != "val") return InvalidArgumentError("split must be train or val");
  if (files.empty()) {
    return NotFoundError(JoinPath(dir, "meta.json") + ": no " + split + " shards");
  }
  auto ds = std::make_unique<TokenDataset>();
  ds->vocab_size_ = meta.vocab_size;
  for (const auto& f : files) {
    if (f.find('/') != std::string::npos || f == ".." || f.empty()) {
      return InvalidArgumentError(JoinPath(dir, "meta.json") + ": shard name '" + f +
                                  "' must be a plain file name in the folder");
    }
    OCTET_ASSIGN_OR_RETURN(TokenShard shard, TokenShard::Open(JoinPath(dir, f)));
    if (shard.vocab_size() != meta.vocab_size) {
      return DataLossError(shard.path() + ": vocabulary size " +
                           std::to_string(shard.vocab_size()) + " differs from meta.json's " +
                           std::to_string(meta.vocab_size));
    }
    ds->starts_.push_back(ds->total_);
    ds->total_ += shard.size();
    ds->shards_.push_back(std::move(shard));
  }
  return ds;
}

void TokenDataset::Read(int64_t begin, int64_t n, int32_t* out) const {
  // First shard holding `begin`.
  size_t s = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
  while (n > 0) {
    const int64_t local = begin - starts_[s];
    const int64_t take = std::min(n, shards_[s].size() - local);
    shards_[s].Read(local, take, out);
    out += take;
    begin += take;
    n -= take;
    ++s;
  }
}

// ---- loader ----------------------------------------------------------------------------

Result<std::unique_ptr<DataLoader>> DataLoader::Create(const TokenDataset* data, int B, int T,
                                                       int rank, int world) {
  if (!data) return InvalidArgumentError("DataLoader needs a dataset");
  if (B <= 0 || T <= 0 || world <= 0 || rank < 0 || rank >= world) {
    return InvalidArgumentError("DataLoader: bad shape or rank");
  }
  const int64_t need = int64_t{world} * B * T + 1;
  if (data->size() < need) {
    return InvalidArgumentError("the data has " + std::to_string(data->size()) +
                                " tokens, fewer than one global batch of " + std::to_string(need) +
                                " (ranks x batch x sequence + 1)");
  }
  std::unique_ptr<DataLoader> l(new DataLoader());
  l->data_ = data;
  l->B_ = B;
  l->T_ = T;
  l->rank_ = rank;
  l->world_ = world;
  l->buf_.resize(int64_t{B} * T + 1);
  return l;
}

void DataLoader::Next(int32_t* x, int32_t* y) {
  const int64_t global = tokens_per_global_batch();
  if (pos_.offset + global + 1 > data_->size()) {
    pos_.offset = 0;
    ++pos_.epoch;
  }
  const int64_t n = int64_t{B_} * T_;
  data_->Read(pos_.offset + int64_t{rank_} * n, n + 1, buf_.data());
  std::memcpy(x, buf_.data(), n * sizeof(int32_t));
  std::memcpy(y, buf_.data() + 1, n * sizeof(int32_t));
  pos_.offset += global;
}

}  // namespace octet::trainer
