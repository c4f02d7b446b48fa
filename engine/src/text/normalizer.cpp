#include "text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace octet::engine::text {
namespace {

const icu::Normalizer2* Icu(const void* p) { return static_cast<const icu::Normalizer2*>(p); }

bool IsAscii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

}  // namespace

Result<UnicodeNormalizer> UnicodeNormalizer::Create(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || !n) {
    return UnavailableError(std::string("ICU normalizer data not available: ") +
                            u_errorName(status));
  }
  UnicodeNormalizer out;
  out.form_ = form;
  out.icu_ = n;
  return out;
}

bool UnicodeNormalizer::IsNormalized(std::string_view text) const {
  // ASCII is invariant under all four forms.
  if (IsAscii(text)) return true;
  UErrorCode status = U_ZERO_ERROR;
  const bool yes = Icu(icu_)->isNormalizedUTF8(icu::StringPiece(text.data(), text.size()), status);
  return U_SUCCESS(status) && yes;
}

void UnicodeNormalizer::Normalize(std::string_view text, std::string* out) const {
  if (IsNormalized(text)) {
    out->append(text);
    return;
  }
  // ICU takes int32 lengths; a single segment of 1 GiB or more is kept as is.
  if (text.size() >= (size_t{1} << 30)) {
    out->append(text);
    return;
  }
  const size_t before = out->size();
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(out, static_cast<int32_t>(text.size()));
  Icu(icu_)->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())),
                           sink, nullptr, status);
  if (U_FAILURE(status)) {  // only on allocation failure inside ICU
    out->resize(before);
    out->append(text);
  }
}

}  // namespace octet::engine::text
