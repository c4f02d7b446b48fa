// A Tokenizer turns text into the token ids a model was trained with and back,
// byte-for-byte as Hugging Face `tokenizers` does for a `tokenizer.json` with a
// byte-level BPE model (Qwen2/Qwen3, Llama-3, GPT-2 style, and what
// octet::engine::BpeTrainer writes).
//
// Encode pipeline (the order Hugging Face uses):
//   1. added tokens (`added_tokens`, special or not) are split out of the raw
//      text, leftmost-longest, and never merged further;
//   2. each remaining segment is normalized (`normalizer`: NFC/NFD/NFKC/NFKD,
//      Sequence, or none);
//   3. pre-tokenized (`pre_tokenizer`: Split with a regex or string, ByteLevel,
//      Sequence) into pre-tokens;
//   4. each pre-token's UTF-8 bytes are merged by BPE rank (`model.merges`);
//   5. the post-processor adds template tokens (e.g. a BOS) when
//      EncodeOptions::add_special_tokens is set.
// Text that is not valid UTF-8 is not an error: each maximal invalid byte run
// becomes a pre-token of its own (never normalized or regex-split) and is
// encoded as its bytes, so DecodeBytes() gives the input back exactly.
//
// Thread-safety: a loaded Tokenizer is immutable; every const method may be
// called from many threads at once. (The pre-token cache is kept in per-call
// scratch objects taken from a mutex-protected pool, not shared mutable state.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/chat_template.h"

namespace octet::engine {

using TokenId = int32_t;

struct EncodeOptions {
  // Run the post-processor: e.g. a TemplateProcessing that prepends
  // <|begin_of_text|>. Added tokens written in the text are recognised either way.
  bool add_special_tokens = false;
  // Treat added tokens marked `special` that occur in the text as plain text
  // (Hugging Face `split_special_tokens`): use it for untrusted user content so
  // that typing "<|im_end|>" cannot end a turn. Non-special added tokens (Qwen3
  // <think>) are still recognised.
  bool split_special_tokens = false;
};

struct DecodeOptions {
  // Drop added tokens marked `special` (<|im_start|>, <|eot_id|>); non-special
  // added tokens such as Qwen3's <think> stay.
  bool skip_special_tokens = false;
  // Decode ids the vocabulary lacks to nothing instead of failing, as Hugging
  // Face does. Models pad their embedding beyond the tokenizer (Qwen: 151,936
  // rows for 151,669 ids), so sampled output may hold such ids; user input
  // should be checked instead (the default).
  bool skip_unknown_ids = false;
};

// One entry of tokenizer.json `added_tokens`.
struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;   // matched after normalization instead of on the raw text
  bool lstrip = false;       // swallows white space on its left
  bool rstrip = false;       // swallows white space on its right
  bool single_word = false;  // only matches when not touching a letter or digit
};

// What tokenizer_config.json (and generation_config.json) say about a model's
// special tokens and chat template. Empty strings / lists when absent.
struct TokenizerConfig {
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
  std::string chat_template;                // the Jinja text; the "default" one when it is a list
  std::optional<bool> add_bos_token;        // as written, when written
  std::vector<TokenId> generation_eos_ids;  // generation_config.json "eos_token_id"
};

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a model folder holding one (then
  // tokenizer_config.json and generation_config.json beside it are read too
  // when present). Errors name the file and the JSON path (`model.merges[12]`)
  // or the byte offset of a JSON syntax error, and name unsupported component
  // types ("pre_tokenizer.pretokenizers[0]: unsupported type 'Metaspace'").
  static Result<Tokenizer> Load(const std::string& path);
  // The same from text in memory. `config_json` is tokenizer_config.json (may be
  // empty); `source` names the data in error messages.
  static Result<Tokenizer> FromJson(std::string_view tokenizer_json,
                                    std::string_view config_json = {},
                                    std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`; an empty text gives no ids. Never fails: invalid UTF-8
  // is encoded as bytes (see above).
  std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options = {}) const;

  // The text of `ids`. Byte sequences that are not valid UTF-8 (a character cut
  // by the end of `ids`, or bytes out of order) become U+FFFD, one per maximal
  // invalid subpart, as Rust's String::from_utf8_lossy does. An id outside
  // [0, vocab_size()) or with no token is an error naming it and its position.
  Result<std::string> Decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // The raw bytes of `ids`, without UTF-8 repair: DecodeBytes(Encode(s)) == s
  // for any byte string s when the normalizer is empty (Llama-3), and == NFC(s)
  // for valid UTF-8 under Qwen's NFC normalizer.
  Result<std::string> DecodeBytes(std::span<const TokenId> ids,
                                  const DecodeOptions& options = {}) const;

  // The pre-tokens of `text` as the BPE model sees them: raw bytes after the
  // added-token split, normalization and the pre-tokenizer; added tokens come
  // out whole. For tests and debugging.
  std::vector<std::string> PreTokenize(std::string_view text) const;

  // One past the largest id of the vocabulary or the added tokens.
  TokenId vocab_size() const;
  // The id of a token written as in tokenizer.json: an added token's content
  // ("<|im_end|>") or a vocabulary string in byte-level form ("Ġhello").
  std::optional<TokenId> TokenToId(std::string_view token) const;
  // The tokenizer.json string of `id` (empty when there is none).
  std::string IdToToken(TokenId id) const;
  // The UTF-8 bytes `id` decodes to (empty for an unknown id).
  std::string TokenBytes(TokenId id) const;
  bool IsSpecial(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const;

  const TokenizerConfig& config() const;
  // Ids of config().bos_token / eos_token when those are tokens of this
  // tokenizer.
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  // The chat template recognised from config().chat_template at load (kPlain
  // with a warning() when there is none or it is not recognised: callers that
  // render chats should show that warning to the user).
  const ChatTemplate& chat_template() const;
  // Every id that ends a reply: the chat-template family's end-of-turn tokens
  // (<|im_end|>, <|eot_id|>, ...), eos_token, and generation_config.json's
  // eos_token_id, deduplicated, in that order. See chat_template.h.
  std::vector<TokenId> StopIds() const;

  // Short description: "BPE, 151669 ids (26 added), NFC, split regex, byte-level".
  std::string Describe() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes a stream of ids one at a time for display (the chat window, `octet
// chat`): text is released as soon as it is complete, and a UTF-8 sequence cut
// between two tokens is held back until its last byte arrives, so no broken
// character is ever shown. The concatenation of every Push() and the final
// Finish() equals Tokenizer::Decode() of all the ids. Not thread-safe; one
// decoder per stream. The tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {});

  // The text completed by `id` (often empty, at most a few characters); an
  // unknown id is an error and leaves the decoder as it was.
  Result<std::string> Push(TokenId id);
  // Flushes what is held back; an incomplete sequence at the end becomes U+FFFD.
  // The decoder is then empty and may be reused.
  std::string Finish();
  // Drops anything held back.
  void Reset() { pending_.clear(); }
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace octet::engine
