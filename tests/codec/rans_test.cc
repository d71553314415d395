#include "rans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hd/rans_hd.h"
#include "lmc/transform.h"

namespace lmc {
namespace {

using Bytes = std::vector<uint8_t>;

// XOR-delta-like stream: 0 with probability p_zero, else a small value
// (1..4) or one of `rare` other values, half and half.
Bytes Skewed(size_t n, double p_zero, uint32_t seed, uint32_t rare = 256) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  Bytes v(n, 0);
  for (auto& b : v) {
    const double r = u(rng);
    if (r < p_zero) continue;
    b = r < p_zero + (1 - p_zero) / 2 ? static_cast<uint8_t>(1 + rng() % 4)
                                      : static_cast<uint8_t>(rng() % rare);
  }
  return v;
}

Bytes Uniform(size_t n, int symbols, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % static_cast<uint32_t>(symbols));
  return v;
}

Bytes Exponents(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> gauss(0.0, 0.02);
  Bytes v(n);
  for (auto& b : v) {
    const double w = std::fabs(gauss(rng)) + 1e-30;
    b = static_cast<uint8_t>(std::clamp(127 + static_cast<int>(std::floor(std::log2(w))), 0, 255));
  }
  return v;
}

Bytes OneInAMillion(size_t n) {
  Bytes v(n, 0);
  for (size_t i = 999983 % n; i < n; i += 1000000) v[i] = 0x80;
  if (n > 1 && v[n / 2] == 0) v[n / 2] = 0x40;
  return v;
}

// Every test runs on each coder: 4 states (kRans), and 32 states
// (kRansX32) through the vector paths and through the scalar reference.
struct Variant {
  const char* name;
  bool x32;
  bool simd;
};

Variant g_variant{"4 states", false, true};
const Variant& GetVariant() { return g_variant; }

class RansTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    g_variant = GetParam();
    simd_was_ = rans::SetSimd(GetParam().simd);
  }
  void TearDown() override { rans::SetSimd(simd_was_); }
  bool simd_was_ = false;
};

Result<size_t> Enc(const Bytes& in, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  return GetVariant().x32 ? rans::EncodeX32(in.data(), in.size(), hist, dst, cap)
                          : rans::Encode(in.data(), in.size(), hist, dst, cap);
}

Status Dec(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  return GetVariant().x32 ? rans::DecodeX32(src, len, dst, n) : rans::Decode(src, len, dst, n);
}

struct RansEncoded {
  Bytes bytes;
  size_t estimate = 0;
};

RansEncoded RansEncodeOrDie(const Bytes& in) {
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  RansEncoded e;
  e.estimate = rans::EstimatedSize(hist, in.size(), GetVariant().x32 ? 32 : 4);
  e.bytes.resize(rans::MaxEncodedSize(in.size()));
  auto r = Enc(in, hist, e.bytes.data(), e.bytes.size());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) e.bytes.resize(*r);
  return e;
}

void ExpectRansRoundTrip(const Bytes& in) {
  const RansEncoded e = RansEncodeOrDie(in);
  const double actual = static_cast<double>(e.bytes.size());
  EXPECT_NEAR(static_cast<double>(e.estimate), actual, actual * 0.01 + 24) << "n " << in.size();
  Bytes exact(e.bytes);  // exactly sized, so ASan sees any over-read
  Bytes out(in.size() + 1, 0xAB);
  ASSERT_TRUE(Dec(exact.data(), exact.size(), out.data(), in.size()).ok());
  EXPECT_EQ(out.back(), 0xAB);
  out.pop_back();
  EXPECT_EQ(out, in);
}

double BitsPerSymbol(const Bytes& in) {
  return 8.0 * static_cast<double>(RansEncodeOrDie(in).bytes.size()) / static_cast<double>(in.size());
}

TEST_P(RansTest, RoundTripsAllSourcesAndSizes) {
  const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 31, 33, 64, 65, 101, 1000, 4097, 65537};
  for (size_t n : sizes) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto seed = static_cast<uint32_t>(n);
    ExpectRansRoundTrip(Uniform(n, 2, seed));
    ExpectRansRoundTrip(Uniform(n, 256, seed));
    ExpectRansRoundTrip(Uniform(n, 1, seed));
    ExpectRansRoundTrip(Skewed(n, 0.99, seed));
    ExpectRansRoundTrip(Exponents(n, seed));
    ExpectRansRoundTrip(OneInAMillion(n));
  }
}

TEST_P(RansTest, RoundTripsOneMebibyte) {
  const size_t n = (1 << 20) + 1;
  ExpectRansRoundTrip(Uniform(n, 256, 1));
  ExpectRansRoundTrip(Skewed(n, 0.995, 2));
  ExpectRansRoundTrip(Exponents(n, 3));
  ExpectRansRoundTrip(OneInAMillion(n));
}

TEST_P(RansTest, SkewedStreamsCostLittle) {
  const size_t n = 1 << 20;
  EXPECT_LT(BitsPerSymbol(Skewed(n, 0.995, 4)), 0.2);
  // Near the entropy when the rare values are few. (With 256 of them at
  // 2e-5 each, 12-bit frequencies of at least 1/4096 cost ~0.06 bits more.)
  const Bytes p99 = Skewed(n, 0.99, 5, 16);
  uint32_t hist[256];
  Histogram(p99.data(), p99.size(), hist);
  const double entropy = EntropyBits(hist, n) / static_cast<double>(n);
  const double bits = BitsPerSymbol(p99);
  EXPECT_LT(bits, entropy * 1.02 + 0.002);
  EXPECT_LT(BitsPerSymbol(OneInAMillion(n)), 0.01);
}

TEST_P(RansTest, CloseToEntropy) {
  const size_t n = 1 << 20;
  for (const Bytes& in : {Exponents(n, 6), Uniform(n, 256, 7), Uniform(n, 3, 8)}) {
    uint32_t hist[256];
    Histogram(in.data(), in.size(), hist);
    const double entropy_bytes = EntropyBits(hist, n) / 8;
    const double size = static_cast<double>(RansEncodeOrDie(in).bytes.size());
    EXPECT_LE(size, entropy_bytes * 1.005 + 600);
  }
}

TEST_P(RansTest, SmallCapacityIsInvalidArgument) {
  const Bytes in = Exponents(1000, 9);
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  const size_t need = RansEncodeOrDie(in).bytes.size();
  for (size_t cap : {size_t{0}, size_t{3}, need / 2, need - 1}) {
    Bytes out(cap + 1);
    auto r = Enc(in, hist, out.data(), cap);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  Bytes out(need);
  EXPECT_TRUE(Enc(in, hist, out.data(), need).ok());
}

TEST_P(RansTest, HistogramMismatchIsInvalidArgument) {
  Bytes in = Exponents(1000, 10);
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  Bytes out(rans::MaxEncodedSize(in.size()));
  in[3] = 255;  // absent from hist
  EXPECT_EQ(Enc(in, hist, out.data(), out.size()).status().code(), Code::kInvalidArgument);
}

TEST_P(RansTest, RejectsEveryTruncation) {
  for (const Bytes& in : {Exponents(300, 11), Skewed(300, 0.9, 12)}) {
    const Bytes enc = RansEncodeOrDie(in).bytes;
    Bytes out(in.size());
    for (size_t len = 0; len < enc.size(); ++len) {
      Bytes cut(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(len));
      Status s = Dec(cut.data(), cut.size(), out.data(), out.size());
      EXPECT_TRUE(s.IsCorruption()) << "len " << len;
    }
  }
}

TEST_P(RansTest, SurvivesBitFlips) {
  const Bytes in = Exponents(3000, 13);
  const Bytes enc = RansEncodeOrDie(in).bytes;
  std::mt19937 rng(1);
  Bytes out(in.size());
  int detected = 0;
  const int trials = 3000;
  for (int t = 0; t < trials; ++t) {
    Bytes bad = enc;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Status s = Dec(bad.data(), bad.size(), out.data(), out.size());
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption());
      ++detected;
    }
  }
  EXPECT_GT(detected, trials * 9 / 10);
}

TEST_P(RansTest, SurvivesRandomInput) {
  std::mt19937 rng(2);
  Bytes out(5000);
  for (int t = 0; t < 20000; ++t) {
    Bytes junk(rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    // Plausible headers now and then: two symbols, frequencies 1 + 4095.
    if (junk.size() > 40 && t % 2) {
      junk[0] = 1;
      junk[1] = 0;
      junk[2] = 9;
      junk[3] = 0;
      junk[4] = 0x80 | 0x7e;
      junk[5] = 31;
    }
    const size_t n = rng() % out.size();
    Status s = Dec(junk.data(), junk.size(), out.data(), n);
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption());
    }
  }
}

TEST_P(RansTest, RejectsBadFrequencyTables) {
  const Bytes in = Uniform(500, 2, 14);
  const Bytes enc = RansEncodeOrDie(in).bytes;
  Bytes out(in.size());
  ASSERT_EQ(enc[0], 1);  // two symbols, listed, then two 2-byte varints
  Bytes bad = enc;
  bad[4] ^= 1;  // sum != 4096
  EXPECT_TRUE(Dec(bad.data(), bad.size(), out.data(), out.size()).IsCorruption());
  bad = enc;
  bad[2] = bad[1];  // symbols not increasing
  EXPECT_TRUE(Dec(bad.data(), bad.size(), out.data(), out.size()).IsCorruption());
}

// The vector paths write and read exactly the scalar reference's bytes,
// and each decodes what the other encoded.
TEST(RansX32, VectorAndScalarPathsAgreeByteForByte) {
  const bool was = rans::SetSimd(true);
  const size_t sizes[] = {1, 31, 32, 33, 63, 64, 65, 95, 1000, 4096, 4097, 65536 + 17, (1 << 20) + 5};
  for (size_t n : sizes) {
    for (int source = 0; source < 5; ++source) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " source " << source);
      const auto seed = static_cast<uint32_t>(n * 7 + source);
      const Bytes in = source == 0   ? Skewed(n, 0.99, seed)
                       : source == 1 ? Skewed(n, 0.6, seed)
                       : source == 2 ? Exponents(n, seed)
                       : source == 3 ? Uniform(n, 256, seed)
                                     : OneInAMillion(n);
      uint32_t hist[256];
      Histogram(in.data(), in.size(), hist);
      Bytes a(rans::MaxEncodedSize(n)), b(rans::MaxEncodedSize(n));
      rans::SetSimd(true);
      auto ra = rans::EncodeX32(in.data(), n, hist, a.data(), a.size());
      rans::SetSimd(false);
      auto rb = rans::EncodeX32(in.data(), n, hist, b.data(), b.size());
      ASSERT_TRUE(ra.ok() && rb.ok());
      a.resize(*ra);
      b.resize(*rb);
      ASSERT_EQ(a, b);
      Bytes out(n);
      rans::SetSimd(true);
      ASSERT_TRUE(rans::DecodeX32(b.data(), b.size(), out.data(), n).ok());
      EXPECT_EQ(out, in);
      rans::SetSimd(false);
      std::fill(out.begin(), out.end(), 0);
      ASSERT_TRUE(rans::DecodeX32(a.data(), a.size(), out.data(), n).ok());
      EXPECT_EQ(out, in);
    }
  }
  rans::SetSimd(was);
}

// The GPU profile's table (hd/rans_hd.h): integer log2, normalisation,
// estimate, and the coder given those frequencies.
TEST(GpuProfileRans, IntegerLog2IsWithinTwoToTheMinus20AndIncreasing) {
  uint32_t prev = 0;
  for (uint32_t f = 1; f <= 8192; ++f) {
    const uint32_t v = hd::RansLog2Q24(f);
    EXPECT_NEAR(v / 16777216.0, std::log2(static_cast<double>(f)), 1.0 / (1 << 20)) << f;
    if (f > 1) {
      EXPECT_GT(v, prev) << f;
    }
    prev = v;
  }
  EXPECT_EQ(hd::RansLog2Q24(1), 0u);
  EXPECT_EQ(hd::RansLog2Q24(4096), 12u << 24);
}

// Costs sum h * (12 - log2 f) of a table, in bits.
double TableBits(const uint32_t hist[256], const uint32_t freq[256]) {
  double bits = 0;
  for (int s = 0; s < 256; ++s)
    if (hist[s]) bits += hist[s] * (12 - std::log2(static_cast<double>(freq[s])));
  return bits;
}

TEST(GpuProfileRans, NormalisedTablesSumTo4096AndCostAlmostWhatTheCpuTablesCost) {
  int checked = 0;
  for (int source = 0; source < 6; ++source) {
    for (size_t n : {size_t{2}, size_t{300}, size_t{5000}, size_t{70000}, size_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << "source " << source << " n " << n);
      const auto seed = static_cast<uint32_t>(n + 13 * source);
      const Bytes in = source == 0   ? Skewed(n, 0.99, seed)
                       : source == 1 ? Skewed(n, 0.6, seed)
                       : source == 2 ? Exponents(n, seed)
                       : source == 3 ? Uniform(n, 256, seed)
                       : source == 4 ? OneInAMillion(n)
                                     : Skewed(n, 0.999, seed, 40);
      uint32_t hist[256], freq[256];
      Histogram(in.data(), n, hist);
      const int k = hd::RansNormalizeGpu(hist, n, freq);
      int present = 0;
      uint32_t sum = 0;
      for (int s = 0; s < 256; ++s) {
        present += hist[s] != 0;
        EXPECT_EQ(freq[s] != 0, hist[s] != 0) << s;
        sum += freq[s];
      }
      EXPECT_EQ(k, present);
      EXPECT_EQ(sum, 4096u);
      if (k < 2) continue;
      // Against the CPU profile's optimal table, through its estimate: the
      // same size within 0.2% and 8 bytes.
      const int states = n >= hd::kRansX32MinSymbols ? 32 : 4;
      const double gpu = static_cast<double>(hd::RansEstimateGpu(hist, freq, k, states));
      const double cpu = static_cast<double>(rans::EstimatedSize(hist, n, states));
      EXPECT_GE(gpu, cpu - 2);
      EXPECT_LE(gpu, cpu * 1.002 + 8);
      // The estimate is the table's cost.
      const double bits = TableBits(hist, freq);
      EXPECT_NEAR(gpu, hd::RansHeaderSize(freq, k) + 4.0 * states + std::max(0.0, bits - 8.0 * states) / 8,
                  2.0 + bits * 1e-6);
      // The coder with that table writes a stream that decodes.
      Bytes out(rans::MaxEncodedSize(n)), back(n);
      auto r = rans::EncodeWithFrequencies(in.data(), n, freq, states, out.data(), out.size());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_NEAR(static_cast<double>(*r), gpu, gpu * 0.01 + 24);
      ASSERT_TRUE((states == 32 ? rans::DecodeX32(out.data(), *r, back.data(), n)
                                : rans::Decode(out.data(), *r, back.data(), n))
                      .ok());
      EXPECT_EQ(back, in);
      ++checked;
    }
  }
  EXPECT_GE(checked, 25);
}

TEST(GpuProfileRans, TablesThatCannotCodeTheDataAreInvalidArgument) {
  const Bytes in = Skewed(5000, 0.9, 3, 16);
  uint32_t hist[256], freq[256];
  Histogram(in.data(), in.size(), hist);
  hd::RansNormalizeGpu(hist, in.size(), freq);
  Bytes out(rans::MaxEncodedSize(in.size()));
  EXPECT_TRUE(rans::EncodeWithFrequencies(in.data(), in.size(), freq, 4, out.data(), out.size()).ok());
  EXPECT_EQ(
      rans::EncodeWithFrequencies(in.data(), in.size(), freq, 8, out.data(), out.size()).status().code(),
      Code::kInvalidArgument);
  uint32_t bad[256];
  std::memcpy(bad, freq, sizeof(bad));
  ++bad[0];  // sums to 4097
  EXPECT_EQ(rans::EncodeWithFrequencies(in.data(), in.size(), bad, 4, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
  // A symbol of the data absent from the table.
  std::memcpy(bad, freq, sizeof(bad));
  std::vector<int> present;
  for (int s = 0; s < 256; ++s)
    if (bad[s]) present.push_back(s);
  ASSERT_GE(present.size(), 3u);
  bad[present[1]] += bad[present[0]];  // still 4096, over 2+ symbols
  bad[present[0]] = 0;
  auto r = rans::EncodeWithFrequencies(in.data(), in.size(), bad, 4, out.data(), out.size());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Coders, RansTest,
                         ::testing::Values(Variant{"4 states", false, true}, Variant{"32 states", true, true},
                                           Variant{"32 states scalar", true, false}),
                         [](const auto& info) {
                           return std::string(info.param.x32 ? (info.param.simd ? "X32" : "X32Scalar")
                                                             : "Four");
                         });

}  // namespace
}  // namespace lmc
