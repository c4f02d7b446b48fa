// The one copy of nlohmann::json's parser and serializer that
// octet/base/json.h declares.
#include "octet/base/json.h"

template class nlohmann::basic_json<>;
template class nlohmann::detail::serializer<nlohmann::json>;
template class nlohmann::detail::lexer<nlohmann::json, octet::json_instances::StringInput>;
template class nlohmann::detail::parser<nlohmann::json, octet::json_instances::StringInput>;
template class nlohmann::detail::lexer<nlohmann::json, octet::json_instances::CharsInput>;
template class nlohmann::detail::parser<nlohmann::json, octet::json_instances::CharsInput>;

template class nlohmann::basic_json<nlohmann::ordered_map>;
template class nlohmann::detail::serializer<nlohmann::ordered_json>;
template class nlohmann::detail::lexer<nlohmann::ordered_json, octet::json_instances::StringInput>;
template class nlohmann::detail::parser<nlohmann::ordered_json, octet::json_instances::StringInput>;

namespace octet {

std::optional<int64_t> IntegerMember(const nlohmann::json& object, const char* key,
                                     int64_t fallback) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  return std::nullopt;
}

}  // namespace octet
