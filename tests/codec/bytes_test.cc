// lmc/bytes.h: the byte order of every helper, pinned to literal bytes.
#include "lmc/bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace lmc {
namespace {

TEST(BytesTest, LittleEndianFixedWidths) {
  const uint8_t b[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  EXPECT_EQ(LoadLE16(b), 0x0201u);
  EXPECT_EQ(LoadLE32(b), 0x04030201u);
  EXPECT_EQ(LoadLE64(b), 0x0807060504030201ull);
  uint8_t out[8] = {};
  StoreLE64(out, 0x0807060504030201ull);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 8), std::string(reinterpret_cast<const char*>(b), 8));
  StoreLE32(out, 0xa1b2c3d4u);
  EXPECT_EQ(out[0], 0xd4);
  EXPECT_EQ(out[3], 0xa1);
  StoreLE16(out, 0xbeef);
  EXPECT_EQ(out[0], 0xef);
  EXPECT_EQ(out[1], 0xbe);
  EXPECT_EQ(LoadLEBytes(b + 1, 3), 0x040302u);
  EXPECT_EQ(LoadLEBytes(b, 0), 0u);
}

TEST(BytesTest, BigEndianFixedAndVariableWidths) {
  const uint8_t b[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  EXPECT_EQ(LoadBE64(b), 0x0102030405060708ull);
  EXPECT_EQ(LoadBE<uint32_t>(b), 0x01020304u);
  EXPECT_EQ(LoadBEBytes(b, 3), 0x010203u);
  EXPECT_EQ(LoadBEBytes(b, 8), 0x0102030405060708ull);
  uint8_t out[8] = {};
  StoreBE64(out, 0x0102030405060708ull);
  EXPECT_EQ(LoadBE64(out), 0x0102030405060708ull);
  EXPECT_EQ(out[0], 0x01);
  StoreBEBytes(out, 0xaabbccddu, 2);  // the low 2 bytes
  EXPECT_EQ(out[0], 0xcc);
  EXPECT_EQ(out[1], 0xdd);
}

TEST(BytesTest, Appending) {
  std::string s;
  AppendLE32(&s, 0x04030201u);
  AppendLE64(&s, 0x0c0b0a0908070605ull);
  AppendBE64(&s, 0x0d0e0f1011121314ull);
  AppendBEBytes(&s, 0x151617u, 3);
  ASSERT_EQ(s.size(), 4u + 8 + 8 + 3);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(static_cast<uint8_t>(s[i]), i + 1) << i;
  // Big-endian keys sort as their numbers do.
  std::string a, b;
  AppendBE64(&a, 255);
  AppendBE64(&b, 256);
  EXPECT_LT(a, b);
}

}  // namespace
}  // namespace lmc
