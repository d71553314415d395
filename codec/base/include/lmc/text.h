// Bytes that may not be text (file names, lines of a damaged file), made
// safe to print and to put into JSON.
#pragma once

#include <string>
#include <string_view>

namespace lmc {

// `s` with every byte that is not part of a valid UTF-8 sequence written as
// the four characters \xNN (hex, lower case); with `controls`, the C0
// controls and DEL as well (for one-line messages). Valid UTF-8 is kept
// as it is, backslashes included, so a valid name is unchanged. Valid
// means what JSON and nlohmann::json accept: shortest forms, no
// surrogates, nothing above U+10FFFF.
std::string EscapeBytes(std::string_view s, bool controls = false);

// Whether `s` is valid UTF-8 in that sense.
bool IsValidUtf8(std::string_view s);

}  // namespace lmc
