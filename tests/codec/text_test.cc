#include "lmc/text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace lmc {
namespace {

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// Whether nlohmann::json, which every protocol document goes through,
// accepts `s` as a string.
bool JsonAccepts(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(Text, ValidUtf8IsKeptAsItIs) {
  for (const std::string& s : {std::string(), std::string("plain.bin"), std::string("a\\xbd"),
                               std::string("gr\xc3\xbc\xc3\x9f"),  // U+00FC U+00DF
                               std::string("\xe2\x82\xac"),        // U+20AC
                               std::string("\xed\x9f\xbf"),        // U+D7FF, below surrogates
                               std::string("\xee\x80\x80"),        // U+E000, above them
                               std::string("\xf0\x9f\x98\x80"),    // U+1F600
                               std::string("\xf4\x8f\xbf\xbf"),    // U+10FFFF, the last
                               std::string("tab\there", 8)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << EscapeBytes(s, true);
    EXPECT_EQ(EscapeBytes(s), s);
    EXPECT_TRUE(JsonAccepts(s));
  }
}

TEST(Text, InvalidSequencesAreEscapedByteByByte) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {Bytes({'d', 0xbd}), "d\\xbd"},                             // lone continuation byte
      {Bytes({0xff, 0xfe, '.'}), "\\xff\\xfe."},                  // never valid
      {Bytes({0xc0, 0xaf}), "\\xc0\\xaf"},                        // overlong '/'
      {Bytes({0xc1, 0xbf}), "\\xc1\\xbf"},                        // overlong U+007F
      {Bytes({0xe0, 0x80, 0xaf}), "\\xe0\\x80\\xaf"},             // overlong, 3 bytes
      {Bytes({0xf0, 0x8f, 0xbf, 0xbf}), "\\xf0\\x8f\\xbf\\xbf"},  // overlong, 4 bytes
      {Bytes({0xed, 0xa0, 0x80}), "\\xed\\xa0\\x80"},             // U+D800, a surrogate
      {Bytes({0xed, 0xbf, 0xbf}), "\\xed\\xbf\\xbf"},             // U+DFFF
      {Bytes({0xf4, 0x90, 0x80, 0x80}), "\\xf4\\x90\\x80\\x80"},  // U+110000
      {Bytes({0xf5, 0x80, 0x80, 0x80}), "\\xf5\\x80\\x80\\x80"},  // no such lead byte
      {Bytes({'a', 0xe2, 0x82}), "a\\xe2\\x82"},                  // truncated at the end
      {Bytes({0xe2, 0x82, 'x'}), "\\xe2\\x82x"},                  // truncated before ASCII
      {Bytes({0xf0, 0x9f, 0x98}), "\\xf0\\x9f\\x98"},             // truncated 4-byte form
      // A valid sequence right after a broken one survives whole.
      {Bytes({0xc3, 0xc3, 0xbc}), "\\xc3\xc3\xbc"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(IsValidUtf8(c.in)) << c.out;
    EXPECT_FALSE(JsonAccepts(c.in)) << c.out;  // so we agree with the library
    const std::string e = EscapeBytes(c.in);
    EXPECT_EQ(e, c.out);
    EXPECT_TRUE(IsValidUtf8(e));
    EXPECT_TRUE(JsonAccepts(e));
  }
}

TEST(Text, ControlsAreEscapedOnlyWhenAsked) {
  const std::string s = Bytes({'a', '\n', 'b', 0x7f, 0x1b, 0xbd, 'c'});
  EXPECT_EQ(EscapeBytes(s), Bytes({'a', '\n', 'b', 0x7f, 0x1b}) + "\\xbdc");
  EXPECT_EQ(EscapeBytes(s, true), "a\\x0ab\\x7f\\x1b\\xbdc");
  EXPECT_EQ(EscapeBytes(std::string("\0x", 2), true), "\\x00x");
}

// Random bytes: the escaped form is always valid UTF-8 that the JSON
// library takes, our verdict matches the library's, and without escapes
// needed the bytes come back unchanged.
TEST(Text, RandomBytesAgreeWithTheJsonLibrary) {
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 20000; ++round) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) {
      const uint64_t r = rng();
      // Mostly bytes that start or continue multi-byte forms.
      c = static_cast<char>(r % 4 == 0 ? r >> 8 & 0x7f : 0x80 | (r >> 8 & 0x7f));
    }
    const bool valid = IsValidUtf8(s);
    EXPECT_EQ(valid, JsonAccepts(s)) << EscapeBytes(s, true);
    const std::string e = EscapeBytes(s);
    EXPECT_TRUE(IsValidUtf8(e)) << EscapeBytes(s, true);
    EXPECT_TRUE(JsonAccepts(e));
    if (valid) {
      EXPECT_EQ(e, s);
    } else {
      EXPECT_NE(e, s);
    }
  }
}

}  // namespace
}  // namespace lmc
