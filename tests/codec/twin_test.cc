// fp32 values and their bf16 twins (lmc/twin.h): rounding as torch rounds,
// fingerprints that match across the two, and the sampled check.
#include "lmc/twin.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace lmc {
namespace {

TEST(Twin, RoundsToNearestEvenAndKeepsNaNs) {
  EXPECT_EQ(RoundToBf16(0x3f800000u), 0x3f80);           // 1.0
  EXPECT_EQ(RoundToBf16(0x3f808000u), 0x3f80);           // tie, even below: down
  EXPECT_EQ(RoundToBf16(0x3f818000u), 0x3f82);           // tie, odd below: up
  EXPECT_EQ(RoundToBf16(0x3f808001u), 0x3f81);           // above the tie: up
  EXPECT_EQ(RoundToBf16(0x80000000u), 0x8000);           // -0
  EXPECT_EQ(RoundToBf16(0x7f7fffffu), 0x7f80);           // the largest finite rounds to infinity
  EXPECT_EQ(RoundToBf16(0xff800000u), 0xff80);           // -inf
  EXPECT_EQ(RoundToBf16(0x7f800001u) & 0x7fc0, 0x7fc0);  // a signalling NaN stays a NaN, quiet
}

TEST(Twin, FingerprintsOfTwinsMatchAndConstantsHaveNone) {
  std::mt19937 rng(1);
  std::normal_distribution<float> w(0.0f, 0.02f);
  std::vector<uint8_t> f32(4 * kFingerprintElems), bf16(2 * kFingerprintElems);
  for (size_t i = 0; i < kFingerprintElems; ++i) {
    const float f = w(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    std::memcpy(f32.data() + 4 * i, &u, 4);
    const uint16_t b = RoundToBf16(u);
    std::memcpy(bf16.data() + 2 * i, &b, 2);
  }
  ASSERT_TRUE(Fp32Fingerprint(f32.data()).has_value());
  EXPECT_EQ(Fp32Fingerprint(f32.data()), Bf16Fingerprint(bf16.data()));
  EXPECT_TRUE(TwinsMatch(f32.data(), kFingerprintElems, bf16.data(), 0));
  bf16[10] ^= 0x40;  // one value off: the fingerprint no longer matches
  EXPECT_NE(Fp32Fingerprint(f32.data()), Bf16Fingerprint(bf16.data()));
  std::vector<uint8_t> ones(2 * kFingerprintElems);
  for (size_t i = 0; i < kFingerprintElems; ++i) ones[2 * i + 1] = 0x3f, ones[2 * i] = 0x80;
  EXPECT_FALSE(Bf16Fingerprint(ones.data()).has_value());
}

TEST(Twin, MatchNeedsMostValuesWithinOneStep) {
  constexpr size_t kN = 4096;
  std::vector<uint8_t> f32(4 * kN), bf16(2 * kN);
  std::mt19937 rng(2);
  for (size_t i = 0; i < kN; ++i) {
    const uint32_t u = 0x3c000000u + (rng() & 0x00ffffffu);
    std::memcpy(f32.data() + 4 * i, &u, 4);
    const uint16_t b = static_cast<uint16_t>((u >> 16) + (rng() & 1));  // stochastic rounding
    std::memcpy(bf16.data() + 2 * i, &b, 2);
  }
  EXPECT_TRUE(TwinsMatch(f32.data(), kN, bf16.data(), 0));
  for (size_t i = 0; i < kN; i += 10) bf16[2 * i + 1] ^= 0x10;  // a tenth of the values elsewhere
  EXPECT_FALSE(TwinsMatch(f32.data(), kN, bf16.data(), 0));
}

TEST(Twin, OffsetsAreWhereTheTwinTensorsChunksStart) {
  constexpr size_t kMiB = 1 << 20;
  size_t o[2];
  ASSERT_EQ(TwinOffsets(1 << 19, kMiB, o), 2u);  // a whole chunk: its start and middle
  EXPECT_EQ(o[0], 0u);
  EXPECT_EQ(o[1], size_t{1} << 18);
  // A tensor's last, shorter chunk: the second fp32 chunk still starts a
  // quarter of the chunk size in, not at its middle.
  ASSERT_EQ(TwinOffsets(3 << 17, kMiB, o), 2u);
  EXPECT_EQ(o[1], size_t{1} << 18);
  EXPECT_EQ(TwinOffsets((1 << 18) + 63, kMiB, o), 1u);  // too few values after it
  EXPECT_EQ(TwinOffsets((1 << 18) + 64, kMiB, o), 2u);
  EXPECT_EQ(TwinOffsets(128, 256, o), 2u);  // small chunks: at 64
  EXPECT_EQ(o[1], 64u);
  EXPECT_EQ(TwinOffsets(100, kMiB, o), 1u);
  EXPECT_EQ(TwinOffsets(63, kMiB, o), 0u);
}

}  // namespace
}  // namespace lmc
