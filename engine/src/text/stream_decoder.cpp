#include "octet/engine/tokenizer.h"
#include "text/utf8.h"

namespace octet::engine {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

Result<std::string> StreamDecoder::Push(TokenId id) {
  const TokenId one[1] = {id};
  OCTET_ASSIGN_OR_RETURN(std::string bytes, tokenizer_->DecodeBytes(one, options_));
  pending_ += bytes;
  std::string out;
  // Everything up to a valid-but-unfinished character at the end is final:
  // the lossy decoder replaces exactly what from_utf8_lossy on the whole
  // stream would, because a held tail is always a prefix of one character.
  const size_t used = text::AppendUtf8Lossy(pending_, /*hold_incomplete_tail=*/true, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out;
  text::AppendUtf8Lossy(pending_, /*hold_incomplete_tail=*/false, &out);
  pending_.clear();
  return out;
}

}  // namespace octet::engine
