#include "octet/trainer/prepare.h"

#include <algorithm>
#include <filesystem>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/engine/bpe_trainer.h"
#include "octet/engine/tokenizer.h"
#include "octet/trainer/token_shards.h"

namespace octet::trainer {
namespace {

namespace fs = std::filesystem;

Result<std::vector<std::string>> ListDocuments(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
      continue;
    }
    if (!fs::is_directory(in, ec)) return NotFoundError(in + ": no such file or folder");
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    if (ec) return InternalError(in + ": " + ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) return InvalidArgumentError("no input files");
  return files;
}

// A single document's text cut at a line boundary near (1 - fraction) of it.
std::pair<std::string, std::string> SplitTail(const std::string& text, double fraction) {
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - fraction));
  const size_t nl = text.find('\n', cut);
  cut = nl == std::string::npos ? cut : nl + 1;
  return {text.substr(0, cut), text.substr(cut)};
}

// The trained tokenizer.json with a post-processor that starts every encoded
// text with BOS when special tokens are added (Hugging Face
// TemplateProcessing, after ByteLevel): `octet generate --prompt` then gives
// the model what each training document began with.
Result<std::string> WithBosPostProcessor(const std::string& tokenizer_json, const std::string& bos,
                                         int32_t bos_id) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    return InternalError(std::string("trained tokenizer.json: ") + e.what());
  }
  const nlohmann::ordered_json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  nlohmann::ordered_json tp = {
      {"type", "TemplateProcessing"},
      {"single", {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair",
       {special,
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        special,
        {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  nlohmann::ordered_json seq = {{"type", "Sequence"}, {"processors", {j["post_processor"], tp}}};
  j["post_processor"] = seq;
  return j.dump(1) + "\n";
}

// tokenizer_config.json for a trained tokenizer: BOS starts a document and, for
// a base model, also ends a generation (a new document begins).
std::string TokenizerConfigJson(const std::string& bos) {
  nlohmann::ordered_json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                              {"bos_token", bos},
                              {"eos_token", bos},
                              {"add_bos_token", true},
                              {"clean_up_tokenization_spaces", false}};
  return j.dump(2) + "\n";
}

}  // namespace

Result<PrepareReport> PrepareData(const PrepareOptions& o) {
  if (o.out_dir.empty()) return InvalidArgumentError("an output folder is required");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return InvalidArgumentError("the validation fraction must be in [0, 1)");
  }
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  OCTET_ASSIGN_OR_RETURN(std::vector<std::string> files, ListDocuments(o.inputs));
  if (PathExists(JoinPath(o.out_dir, "meta.json"))) {
    return AlreadyExistsError(o.out_dir + " already holds prepared data (meta.json)");
  }
  OCTET_RETURN_IF_ERROR(MakeDirs(o.out_dir));

  // Documents and their split. A lone document is cut in two.
  struct Doc {
    std::string path;
    bool val = false;
    std::string text;  // only for the halves of a lone document
    bool inline_text = false;
  };
  std::vector<Doc> docs;
  if (files.size() == 1 && o.val_fraction > 0) {
    OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(files[0]));
    auto [train, val] = SplitTail(text, o.val_fraction);
    docs.push_back({files[0], false, std::move(train), true});
    if (!val.empty()) docs.push_back({files[0], true, std::move(val), true});
  } else {
    const auto val = ValidationDocuments(static_cast<int64_t>(files.size()), o.val_fraction);
    for (size_t i = 0; i < files.size(); ++i) docs.push_back({files[i], val[i], "", false});
  }
  auto text_of = [](const Doc& d) -> Result<std::string> {
    if (d.inline_text) return d.text;
    return ReadFileToString(d.path);
  };

  PrepareReport report;
  // Tokenizer: given, or trained on the training documents.
  std::string tokenizer_json;
  if (!o.tokenizer.empty()) {
    const std::string path =
        IsDirectory(o.tokenizer) ? JoinPath(o.tokenizer, "tokenizer.json") : o.tokenizer;
    OCTET_ASSIGN_OR_RETURN(tokenizer_json, ReadFileToString(path));
  } else {
    engine::BpeTrainerOptions bo;
    bo.vocab_size = o.vocab_size;
    bo.special_tokens = {o.bos_token};
    bo.progress = [&](int32_t done, int32_t total) {
      if (total > 0 && (done % 1000 == 0 || done == total)) {
        say("BPE merges " + std::to_string(done) + "/" + std::to_string(total));
      }
    };
    engine::BpeTrainer bpe(bo);
    for (const auto& d : docs) {
      if (d.val) continue;
      OCTET_ASSIGN_OR_RETURN(std::string text, text_of(d));
      OCTET_RETURN_IF_ERROR(bpe.AddText(text));
    }
    say("training a " + std::to_string(o.vocab_size) + "-token BPE vocabulary");
    OCTET_ASSIGN_OR_RETURN(tokenizer_json, bpe.Train());
    report.trained_tokenizer = true;
  }
  OCTET_ASSIGN_OR_RETURN(engine::Tokenizer tok, engine::Tokenizer::FromJson(tokenizer_json));
  const auto bos = tok.TokenToId(o.bos_token);
  if (!bos) {
    return InvalidArgumentError("the tokenizer has no '" + o.bos_token +
                                "' token to start documents with (see --bos-token)");
  }
  if (report.trained_tokenizer) {
    OCTET_ASSIGN_OR_RETURN(tokenizer_json, WithBosPostProcessor(tokenizer_json, o.bos_token, *bos));
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(o.out_dir, "tokenizer_config.json"),
                                          TokenizerConfigJson(o.bos_token)));
  } else {
    // A given tokenizer keeps its own tokenizer_config.json (when it has one).
    const std::string dir = IsDirectory(o.tokenizer) ? o.tokenizer : DirName(o.tokenizer);
    const std::string config = JoinPath(dir, "tokenizer_config.json");
    if (PathExists(config)) {
      OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config));
      OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(o.out_dir, "tokenizer_config.json"), text));
    }
  }
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(o.out_dir, "tokenizer.json"), tokenizer_json));
  report.vocab_size = tok.vocab_size();
  report.bos_id = *bos;

  // Shards.
  ShardSetWriter writer(o.out_dir, report.vocab_size, report.bos_id, o.shard_tokens);
  for (size_t i = 0; i < docs.size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(std::string text, text_of(docs[i]));
    report.text_bytes += static_cast<int64_t>(text.size());
    const std::vector<int32_t> ids = tok.Encode(text);
    if (Status s = writer.AddDocument(docs[i].val, ids); !s.ok()) {
      return s.WithContext(docs[i].path);
    }
    ++report.documents;
    if (docs[i].val) ++report.val_documents;
    if ((i + 1) % 500 == 0) say("tokenized " + std::to_string(i + 1) + " documents");
  }
  OCTET_ASSIGN_OR_RETURN(DataMeta meta, writer.Finish());
  report.train_tokens = meta.train_tokens;
  report.val_tokens = meta.val_tokens;
  report.train_shards = static_cast<int>(meta.train_files.size());
  report.val_shards = static_cast<int>(meta.val_files.size());

  std::vector<int32_t> bytes(report.vocab_size, 0);
  for (int32_t id = 0; id < report.vocab_size; ++id) {
    bytes[id] = tok.IsSpecial(id) ? 0 : static_cast<int32_t>(tok.TokenBytes(id).size());
  }
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(o.out_dir, "token_bytes.npy"),
                                        NpyBytesI32({report.vocab_size}, bytes.data())));
  return report;
}

}  // namespace octet::trainer
