// HistogramRunsLikely against HistogramRuns on every vector unit this CPU
// has, PickLikely's choice, the sample SampleSaysRaw counts, and the
// entropy floor with which ChooseCoder skips the rANS estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "entropy.h"
#include "huffman.h"
#include "lmc/codec.h"
#include "lmc/transform.h"
#include "rans.h"
#include "test_util.h"
#include "transform_internal.h"

namespace lmc {
namespace {

using internal::HistogramIsa;
using Bytes = std::vector<uint8_t>;

const char* IsaName(HistogramIsa isa) {
  switch (isa) {
    case HistogramIsa::kScalar:
      return "scalar";
    case HistogramIsa::kAvx2:
      return "avx2";
    case HistogramIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

// The units this CPU has, scalar first. The best is restored at the end.
std::vector<HistogramIsa> Isas() {
  std::vector<HistogramIsa> v;
  for (int i = 0; i <= static_cast<int>(internal::BestHistogramIsa()); ++i) v.push_back(HistogramIsa(i));
  return v;
}

class IsaScope {
 public:
  explicit IsaScope(HistogramIsa isa) : was_(internal::SetHistogramIsa(isa)) {}
  ~IsaScope() { internal::SetHistogramIsa(was_); }

 private:
  HistogramIsa was_;
};

// A bf16-exponent-like stream: a few values nearly always, `rare_every`
// bytes on average one of any other value.
Bytes Exponents(size_t n, uint32_t seed, int rare_every) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> gauss(0.0, 0.02);
  Bytes v(n);
  for (size_t i = 0; i < n; ++i) {
    if (rare_every > 0 && rng() % rare_every == 0) {
      v[i] = static_cast<uint8_t>(rng());
      continue;
    }
    const double w = std::fabs(gauss(rng)) + 1e-30;
    v[i] = static_cast<uint8_t>(std::clamp(127 + static_cast<int>(std::floor(std::log2(w))), 0, 255));
  }
  return v;
}

// Compares HistogramRunsLikely with HistogramRuns on p[0, n) at `cuts`,
// for every unit, with `likely` as given.
void ExpectSame(const uint8_t* p, const size_t cuts[5], const uint8_t likely[kLikelySymbols],
                const std::string& what) {
  uint32_t want_runs[4][256], want[256];
  HistogramRuns(p, cuts, want_runs, want);
  for (HistogramIsa isa : Isas()) {
    IsaScope scope(isa);
    uint32_t runs[4][256], hist[256];
    std::memset(runs, 0xab, sizeof(runs));  // garbage: the function must clear them
    std::memset(hist, 0xab, sizeof(hist));
    HistogramRunsLikely(p, cuts, likely, runs, hist);
    EXPECT_EQ(0, std::memcmp(want, hist, sizeof(want))) << what << " on " << IsaName(isa);
    EXPECT_EQ(0, std::memcmp(want_runs, runs, sizeof(want_runs))) << what << " on " << IsaName(isa);
  }
}

void PickFrom(const uint8_t* p, size_t n, uint8_t likely[kLikelySymbols]) {
  uint32_t h[256];
  Histogram(p, n, h);
  PickLikely(h, likely);
}

TEST(HistogramLikely, EveryUnitCountsWhatTheScalarLoopCounts) {
  // Say which units ran, so that a log shows what this machine checked.
  std::string units;
  for (HistogramIsa isa : Isas()) units += std::string(" ") + IsaName(isa);
  std::printf("units checked:%s\n", units.c_str());

  for (int rare : {0, 10000, 100, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{63}, size_t{64}, size_t{65}, size_t{200},
                     size_t{4097}, size_t{65536 + 17}, size_t{512 * 1024}}) {
      const Bytes v = Exponents(n + 1, static_cast<uint32_t>(n * 7 + rare), rare);
      uint8_t likely[kLikelySymbols];
      PickFrom(v.data(), v.size(), likely);
      // Quarters, and runs of very different lengths, some empty.
      size_t quarters[5];
      QuarterCuts(n, quarters);
      const size_t uneven[5] = {0, 0, n / 3, n / 3 + (n > 5 ? 5 : 0), n};
      // From an odd address: no alignment is assumed.
      const std::string what = "n=" + std::to_string(n) + " rare=" + std::to_string(rare);
      ExpectSame(v.data() + 1, quarters, likely, what + " quarters");
      ExpectSame(v.data() + 1, uneven, likely, what + " uneven runs");
    }
  }
}

TEST(HistogramLikely, ExactForAnyListOfLikelyValues) {
  const Bytes exp = Exponents(100000, 5, 50);
  const Bytes uni = testing::RandomBytes(100000, 6);
  size_t cuts[5];
  QuarterCuts(exp.size(), cuts);
  // None of the values present, all the same value, repeats, every value
  // of the data but one.
  uint8_t absent[kLikelySymbols], same[kLikelySymbols], repeats[kLikelySymbols], high[kLikelySymbols];
  for (int k = 0; k < kLikelySymbols; ++k) {
    absent[k] = static_cast<uint8_t>(200 + k);
    same[k] = 120;
    repeats[k] = static_cast<uint8_t>(118 + k % 3);
    high[k] = static_cast<uint8_t>(255 - k);
  }
  for (const Bytes* v : {&exp, &uni}) {
    const std::string what = v == &exp ? "exponents" : "uniform";
    ExpectSame(v->data(), cuts, absent, what + ", values absent");
    ExpectSame(v->data(), cuts, same, what + ", one value 16 times");
    ExpectSame(v->data(), cuts, repeats, what + ", three values repeated");
    ExpectSame(v->data(), cuts, high, what + ", the top 16 values");
  }
}

TEST(HistogramLikely, OneValueEverywhereAndEveryValueOnce) {
  Bytes constant(300000, 0x7f);
  Bytes ramp(256 * 64);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<uint8_t>(i);
  uint8_t likely[kLikelySymbols];
  for (const Bytes* v : {&constant, &ramp}) {
    PickFrom(v->data(), v->size(), likely);
    size_t cuts[5];
    QuarterCuts(v->size(), cuts);
    ExpectSame(v->data(), cuts, likely, v == &constant ? "constant" : "ramp");
  }
  // The constant's counts: all in its value, split by run.
  uint32_t runs[4][256], hist[256];
  size_t cuts[5];
  QuarterCuts(constant.size(), cuts);
  PickFrom(constant.data(), constant.size(), likely);
  HistogramRunsLikely(constant.data(), cuts, likely, runs, hist);
  EXPECT_EQ(hist[0x7f], constant.size());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(runs[j][0x7f], cuts[j + 1] - cuts[j]);
}

TEST(HistogramLikely, PickLikelyTakesTheMostFrequentAndSaysWhenTheyCover) {
  for (HistogramIsa isa : Isas()) {
    IsaScope scope(isa);
    const int need = internal::LikelyCoverageNeeded();
    SCOPED_TRACE(std::string(IsaName(isa)) + ", needs " + std::to_string(need) + "%");
    if (isa == HistogramIsa::kScalar) {
      EXPECT_GT(need, 100);
    }
    uint32_t h[256] = {};
    uint8_t likely[kLikelySymbols];
    // 16 values of 1000 each, four of 1: the top 16 by count, ties by value.
    for (int s = 0; s < 16; ++s) h[100 + s] = 1000;
    for (int s = 16; s < 20; ++s) h[100 + s] = 1;
    EXPECT_EQ(PickLikely(h, likely), need <= 100);
    for (int k = 0; k < kLikelySymbols; ++k) EXPECT_EQ(likely[k], 100 + k);
    // Spread evenly over 256 values: 16 of them hold 1/16.
    for (int s = 0; s < 256; ++s) h[s] = 100;
    EXPECT_FALSE(PickLikely(h, likely));
    if (need > 100) continue;
    // Exactly `need` percent in the top 16, then one short of it: value 0
    // with the most, values 1-15 with 151 each, the 240 others with 150
    // each (36000, the rest of the sample).
    std::memset(h, 0, sizeof(h));
    const uint64_t total = 36000 * 100 / static_cast<uint64_t>(100 - need);
    ASSERT_EQ(total * static_cast<uint64_t>(100 - need), 3600000u);  // whole
    h[0] = static_cast<uint32_t>(total - 36000 - 15 * 151);
    for (int s = 1; s < 16; ++s) h[s] = 151;
    for (int s = 16; s < 256; ++s) h[s] = 150;
    EXPECT_TRUE(PickLikely(h, likely));
    EXPECT_EQ(likely[0], 0);
    for (int k = 1; k < kLikelySymbols; ++k) EXPECT_EQ(likely[k], k);
    --h[0];
    ++h[16];  // ties with 1-15, which stay ahead by value
    EXPECT_FALSE(PickLikely(h, likely));
  }
  // An empty sample picks nothing.
  uint32_t h[256] = {};
  uint8_t likely[kLikelySymbols];
  EXPECT_FALSE(PickLikely(h, likely));
}

// The frames themselves: with the likely-value histograms and pair codes on
// (the default) and with both off, EncodeChunk writes the same bytes, for
// exponent planes that take both, planes that take neither, and both
// Huffman layouts.
TEST(HistogramLikely, FramesAreTheSameBytesWithAndWithoutTheFastPaths) {
  const Bytes f32 = testing::F32Weights(1 << 18, 11), bf16 = testing::Bf16Weights(1 << 19, 11);  // 1 MiB each
  struct Case {
    const char* name;
    const Bytes* data;
    DType dtype;
  };
  const Bytes uniform = testing::RandomBytes(1 << 20, 12);
  const uint64_t pairs_before = huff::internal::PairCodedStreams();
  for (const Case& c : {Case{"bf16", &bf16, DType::kBF16}, Case{"f32", &f32, DType::kF32},
                        Case{"bytes", &uniform, DType::kBytes}}) {
    for (EncodeProfile prof : {EncodeProfile::kCpu, EncodeProfile::kCpuQuarters}) {
      auto encode = [&](bool fast) {
        const HistogramIsa isa =
            internal::SetHistogramIsa(fast ? internal::BestHistogramIsa() : HistogramIsa::kScalar);
        const bool pairs = huff::internal::SetPairCodes(fast);
        Workspace ws;
        EncodeParams p{c.dtype};
        p.profile = prof;
        Bytes out(MaxEncodedSize(c.data->size()));
        auto r = EncodeChunk(c.data->data(), c.data->size(), p, out.data(), out.size(), ws);
        internal::SetHistogramIsa(isa);
        huff::internal::SetPairCodes(pairs);
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        out.resize(r.ok() ? *r : 0);
        return out;
      };
      const Bytes fast = encode(true), plain = encode(false);
      EXPECT_EQ(fast, plain) << c.name << (prof == EncodeProfile::kCpu ? " blocked" : " quarters");
      Workspace ws;
      Bytes back(c.data->size());
      ASSERT_TRUE(DecodeChunk(fast.data(), fast.size(), nullptr, 0, back.data(), back.size(), ws).ok());
      EXPECT_EQ(back, *c.data);
    }
  }
  EXPECT_GT(huff::internal::PairCodedStreams(), pairs_before);
}

// The fuzz target's hook: a stream is sampled from the minimum on, never
// below 16 KiB (where the sample's 32 blocks of 512 would overlap).
TEST(HistogramLikely, SampleMinimumSamplesSmallerStreamsAndNeverBelow16KiB) {
  std::mt19937 rng(7);
  Bytes uniform(40000);
  for (auto& b : uniform) b = static_cast<uint8_t>(rng());
  uint32_t sample[256];
  EXPECT_FALSE(SampleSaysRaw(uniform.data(), uniform.size(), sample));  // 64 KiB by default
  EXPECT_EQ(sample[uniform[0]], 0u);
  const size_t before = internal::SetSampleMinimum(16 * 1024);
  EXPECT_EQ(before, 64u * 1024);
  EXPECT_TRUE(SampleSaysRaw(uniform.data(), uniform.size(), sample));
  uint64_t total = 0;
  for (uint32_t c : sample) total += c;
  EXPECT_EQ(total, 32u * 512);
  EXPECT_TRUE(SampleSaysRaw(uniform.data(), 16 * 1024, nullptr));
  EXPECT_FALSE(SampleSaysRaw(uniform.data(), 16 * 1024 - 1, nullptr));
  EXPECT_EQ(internal::SetSampleMinimum(1), 16u * 1024);  // taken as 16 KiB
  EXPECT_FALSE(SampleSaysRaw(uniform.data(), 16 * 1024 - 1, nullptr));
  EXPECT_EQ(internal::SetSampleMinimum(before), 16u * 1024);
  EXPECT_FALSE(SampleSaysRaw(uniform.data(), uniform.size(), nullptr));
}

// The sample's histogram is the count of its 32 blocks of 512 symbols, one
// block every n/32 bytes (the four tables SampleSaysRaw counts in add up).
TEST(SampleSaysRaw, SampleIsTheCountOfItsBlocks) {
  std::mt19937 rng(11);
  for (size_t n : {size_t{64} << 10, size_t{65537}, size_t{262144}, size_t{1} << 20}) {
    Bytes data(n);
    // Runs of one symbol, then noise: both the stall case and the flat one.
    for (size_t i = 0; i < n; ++i)
      data[i] = i < n / 2 ? static_cast<uint8_t>(i / 4096) : static_cast<uint8_t>(rng());
    uint32_t sample[256];
    SampleSaysRaw(data.data(), n, sample);
    uint32_t want[256] = {};
    for (size_t b = 0; b < 32; ++b)
      for (size_t i = 0; i < 512; ++i) ++want[data[b * (n / 32) + i]];
    for (int v = 0; v < 256; ++v) ASSERT_EQ(sample[v], want[v]) << "n " << n << ", symbol " << v;
  }
}

// Histograms from flat to one dominant symbol, over lengths.
std::vector<std::vector<uint32_t>> CoderHistograms() {
  std::mt19937 rng(5);
  std::vector<std::vector<uint32_t>> out;
  for (int distinct : {2, 3, 8, 32, 100, 256})
    for (double skew : {0.0, 0.5, 0.9, 0.99, 0.999})
      for (uint32_t scale : {1000u, 65536u, 262144u}) {
        std::vector<uint32_t> h(256, 0);
        const uint32_t top = static_cast<uint32_t>(scale * skew);
        h[rng() % 256] += top;
        for (uint32_t i = 0; i < scale - top; ++i) h[rng() % distinct] += 1;
        out.push_back(h);
      }
  return out;
}

// rANS's estimate never falls below the order-0 entropy (its floor), so a
// stream RansCanPay rules out is one the estimate would have lost on too:
// ChooseCoder picks what it picked before it skipped the estimate.
TEST(ChooseCoder, RansIsRuledOutOnlyWhereItsEstimateLoses) {
  int ruled_out = 0, can_pay = 0, rans_taken = 0;
  for (const auto& hv : CoderHistograms()) {
    const uint32_t* h = hv.data();
    size_t n = 0;
    for (uint32_t c : hv) n += c;
    for (int states : {4, 32}) {
      const size_t rans = rans::EstimatedSize(h, n, states);
      ASSERT_GE(static_cast<double>(rans), EntropyBits(h, n) / 8) << "n " << n;
    }
    for (Coder huffman : {Coder::kHuffman, Coder::kHuffmanBlocked}) {
      const size_t huff =
          huffman == Coder::kHuffman ? huff::EncodedSize(h, n) : huff::BlockedEncodedSize(h, n, 12);
      const size_t rans = rans::EstimatedSize(h, n, n >= kRansX32MinSymbols ? 32 : 4);
      const bool taken = rans + huff / 16 < huff;
      rans_taken += taken;
      if (RansCanPay(h, n, huff)) {
        ++can_pay;
      } else {
        ++ruled_out;
        ASSERT_FALSE(taken) << "n " << n << ": rANS " << rans << " would beat Huffman " << huff;
      }
      const Coder got = ChooseCoder(h, n, huffman, 12);
      if (got != Coder::kRaw && got != Coder::kConst) {
        EXPECT_EQ(got == Coder::kRans || got == Coder::kRansX32, taken) << "n " << n;
      }
    }
  }
  // Both sides are reached: flat streams skip the estimate, skewed ones
  // not, and some of those take rANS.
  EXPECT_GT(ruled_out, 20);
  EXPECT_GT(can_pay, 20);
  EXPECT_GT(rans_taken, 5);
}

}  // namespace
}  // namespace lmc
