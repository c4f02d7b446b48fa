// nlohmann::json, compiled once. Include this, not <nlohmann/json.hpp>.
//
// nlohmann::json is header-only: every source file that parses or dumps JSON
// instantiates the whole parser and serializer again, about 8 of the 12
// seconds such a file takes to compile here. The declarations below tell the
// compiler that those instantiations exist; octet_json (json.cpp) holds the
// one copy of each. The member templates (get<T>, value, ...) are still
// instantiated where they are used. Targets link octet::json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace octet::json_instances {
using StringInput = nlohmann::detail::iterator_input_adapter<std::string::const_iterator>;
using CharsInput = nlohmann::detail::iterator_input_adapter<const char*>;  // literals, string_view
}  // namespace octet::json_instances

extern template class nlohmann::basic_json<>;
extern template class nlohmann::detail::serializer<nlohmann::json>;
extern template class nlohmann::detail::lexer<nlohmann::json, octet::json_instances::StringInput>;
extern template class nlohmann::detail::parser<nlohmann::json, octet::json_instances::StringInput>;
extern template class nlohmann::detail::lexer<nlohmann::json, octet::json_instances::CharsInput>;
extern template class nlohmann::detail::parser<nlohmann::json, octet::json_instances::CharsInput>;

extern template class nlohmann::basic_json<nlohmann::ordered_map>;
extern template class nlohmann::detail::serializer<nlohmann::ordered_json>;
extern template class nlohmann::detail::lexer<nlohmann::ordered_json,
                                              octet::json_instances::StringInput>;
extern template class nlohmann::detail::parser<nlohmann::ordered_json,
                                               octet::json_instances::StringInput>;
