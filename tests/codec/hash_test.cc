// lmc/hash.h against libxxhash's own inline XXH3 (this file's, compiled for
// the build's unit): every vector unit this CPU has gives XXH3's values for
// one-shot and streamed input, 64- and 128-bit, default and custom secret,
// seeded, at lengths across XXH3's short, mid and long paths and unaligned starts.
#include "lmc/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "xxhash_reference.h"

namespace lmc::hash {
namespace {

using Bytes = std::vector<uint8_t>;

// Restores the unit a test found.
class HashTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = internal::HashUnit(); }
  void TearDown() override { ASSERT_TRUE(internal::SetHashUnit(saved_.c_str())); }

  // The units this CPU can run, widest first.
  static std::vector<std::string> Units() {
    std::vector<std::string> out;
    const std::string was = internal::HashUnit();
    for (const char* u : {"avx512", "avx2", "sse2", "neon", "scalar"})
      if (internal::SetHashUnit(u)) out.push_back(u);
    internal::SetHashUnit(was.c_str());
    return out;
  }

  std::string saved_;
};

Bytes Random(size_t n, uint32_t seed) {
  Bytes v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Lengths on each side of XXH3's path boundaries (16, 128, 240), its
// stripes (64) and blocks (1024 with the default secret), its internal
// buffer (256), and a chunk's 1 MiB.
std::vector<size_t> Lengths() {
  std::vector<size_t> out;
  for (size_t n = 0; n <= 300; ++n) out.push_back(n);
  for (size_t b : {511, 512, 1023, 1024, 1025, 4096, 65535, 65536, 65537, 1 << 20, (1 << 20) + 7})
    out.push_back(b);
  return out;
}

TEST_F(HashTest, Avx2IsChosenWhereTheCpuHasIt) {
#if defined(__x86_64__)
  EXPECT_EQ(saved_, __builtin_cpu_supports("avx2") ? "avx2" : "sse2");
  // A unit this CPU lacks is refused.
  EXPECT_EQ(internal::SetHashUnit("avx512"), __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(internal::SetHashUnit("avx2"), __builtin_cpu_supports("avx2") != 0);
  EXPECT_FALSE(internal::SetHashUnit("neon"));
#else
  GTEST_SKIP() << "the vector units are chosen on x86-64 only";
#endif
}

TEST_F(HashTest, UnknownUnitsAreRefused) {
  EXPECT_FALSE(internal::SetHashUnit("avx1024"));
  EXPECT_FALSE(internal::SetHashUnit(""));
  EXPECT_EQ(saved_, internal::HashUnit());
}

TEST_F(HashTest, EveryUnitGivesXxh3sValues) {
  const std::vector<std::string> units = Units();
#if defined(__x86_64__)
  // The build's own unit, and AVX2 on any x86-64 CPU of the last decade.
  ASSERT_GE(units.size(), __builtin_cpu_supports("avx2") ? 2u : 1u);
#endif
  const Bytes data = Random((1 << 20) + 64, 7);
  const Bytes secret = Random(192, 8);
  const Bytes short_secret = Random(XXH3_SECRET_SIZE_MIN, 9);
  for (const std::string& u : units) {
    ASSERT_TRUE(internal::SetHashUnit(u.c_str()));
    ASSERT_EQ(u, internal::HashUnit());
    for (size_t n : Lengths()) {
      for (size_t off : {0, 1, 3}) {
        const uint8_t* p = data.data() + off;
        SCOPED_TRACE(u + " n=" + std::to_string(n) + " off=" + std::to_string(off));
        ASSERT_EQ(Xxh3_64(p, n), XXH3_64bits(p, n));
        for (uint64_t seed : {uint64_t{0}, uint64_t{1}, ~uint64_t{0} / 3})
          ASSERT_EQ(Xxh3_64WithSeed(p, n, seed), XXH3_64bits_withSeed(p, n, seed));
        for (const Bytes* s : {&secret, &short_secret}) {
          const XXH128_hash_t want = XXH3_128bits_withSecret(p, n, s->data(), s->size());
          ASSERT_EQ(Xxh3_128WithSecret(p, n, s->data(), s->size()), (Hash128{want.low64, want.high64}));
        }
      }
    }
  }
}

TEST_F(HashTest, StreamsEqualOneShotOverAnySplit) {
  const Bytes data = Random((1 << 20) + 64, 11);
  const Bytes secret = Random(192, 12);
  std::mt19937 rng(13);
  for (const std::string& u : Units()) {
    ASSERT_TRUE(internal::SetHashUnit(u.c_str()));
    for (size_t n : {size_t{0}, size_t{100}, size_t{1000}, size_t{70000}, size_t{1} << 20}) {
      for (int trial = 0; trial < 8; ++trial) {
        SCOPED_TRACE(u + " n=" + std::to_string(n) + " trial=" + std::to_string(trial));
        Xxh3Stream plain, keyed(secret.data(), secret.size());
        size_t at = 0;
        while (at < n) {  // pieces of 0 to 70,000 bytes, across the 256-byte buffer and blocks
          size_t piece = std::min<size_t>(n - at, trial < 4 ? rng() % 300 : rng() % 70000);
          plain.Update(data.data() + at, piece);
          keyed.Update(data.data() + at, piece);
          at += piece;
        }
        EXPECT_EQ(plain.Digest64(), XXH3_64bits(data.data(), n));
        const XXH128_hash_t want = XXH3_128bits_withSecret(data.data(), n, secret.data(), secret.size());
        EXPECT_EQ(keyed.Digest128(), (Hash128{want.low64, want.high64}));
        // A digest does not end the stream.
        EXPECT_EQ(plain.Digest64(), XXH3_64bits(data.data(), n));
      }
    }
  }
}

TEST_F(HashTest, AStreamOutlivesAChangeOfUnit) {
  const std::vector<std::string> units = Units();
  if (units.size() < 2) GTEST_SKIP() << "this CPU has one vector unit";
  const Bytes data = Random(300000, 14);
  ASSERT_TRUE(internal::SetHashUnit(units.front().c_str()));
  Xxh3Stream st;
  st.Update(data.data(), 100000);
  ASSERT_TRUE(internal::SetHashUnit(units.back().c_str()));
  st.Update(data.data() + 100000, 200000);
  EXPECT_EQ(st.Digest64(), XXH3_64bits(data.data(), data.size()));
}

}  // namespace
}  // namespace lmc::hash
