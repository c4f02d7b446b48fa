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
