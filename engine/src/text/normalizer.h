// Unicode normalization forms for tokenizer.json `normalizer` (NFC for Qwen),
// through ICU's Normalizer2 on UTF-8.
#pragma once

#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet::engine::text {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

class UnicodeNormalizer {
 public:
  // Fails only when ICU's data for the form cannot be loaded.
  static Result<UnicodeNormalizer> Create(NormalForm form);

  // Appends the normal form of `text` (valid UTF-8) to `out`. Text already in
  // normal form (all ASCII, most real text) is copied after a quick check.
  void Normalize(std::string_view text, std::string* out) const;
  // True when `text` (valid UTF-8) is already in normal form.
  bool IsNormalized(std::string_view text) const;

  NormalForm form() const { return form_; }

 private:
  NormalForm form_ = NormalForm::kNFC;
  const void* icu_ = nullptr;  // const icu::Normalizer2*, owned by ICU
};

}  // namespace octet::engine::text
