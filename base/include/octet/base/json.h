// nlohmann::json, compiled once. Include this, not <nlohmann/json.hpp>.
//
// nlohmann::json is header-only: every source file that parses or dumps JSON
// instantiates the whole parser and serializer again, about 8 of the 12
// seconds such a file takes to compile here. The declarations below tell the
// compiler that those instantiations exist; octet_json (json.cpp) holds the
// one copy of each. The member templates (get<T>, value, ...) are still
// instantiated where they are used. Targets link octet::json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
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

namespace octet {

// An integer member of untrusted JSON. nlohmann's value<int64_t>() and
// get<int64_t>() turn a float into an integer by a cast: 2.5 silently becomes
// 2, and a float past int64's range (1e70, or an integer literal too long for
// 64 bits, which the parser keeps as a float) is undefined behaviour (UBSan
// under fuzz_benchy). Absent or null: `fallback`; an integer that fits int64:
// its value; anything else (a float, a string, an unsigned past INT64_MAX):
// nullopt, for the caller to report with its path. `object` must be an object.
std::optional<int64_t> IntegerMember(const nlohmann::json& object, const char* key,
                                     int64_t fallback);

}  // namespace octet
