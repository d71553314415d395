#include "huffman.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lmc/transform.h"

namespace lmc {
namespace {

using Bytes = std::vector<uint8_t>;

// Symbol sources, each a different shape of histogram.
enum class Source { kTwo, kUniform, kGeometric, kExponent, kMillion, kFibonacci, kSingle };

Bytes Make(Source src, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes v(n);
  std::normal_distribution<double> gauss(0.0, 0.02);
  std::geometric_distribution<int> geo(0.3);
  // Cumulative Fibonacci weights, largest first: F(27), F(26), ...
  uint32_t fib[27] = {1, 1};
  for (int k = 2; k < 27; ++k) fib[k] = fib[k - 1] + fib[k - 2];
  uint32_t fib_cum[26];
  uint32_t fib_total = 0;
  for (int s = 0; s < 26; ++s) fib_cum[s] = fib_total += fib[25 - s];
  for (size_t i = 0; i < n; ++i) {
    switch (src) {
      case Source::kTwo:
        v[i] = (rng() & 3) ? 7 : 200;
        break;
      case Source::kUniform:
        v[i] = static_cast<uint8_t>(rng());
        break;
      case Source::kGeometric:
        v[i] = static_cast<uint8_t>(std::min(geo(rng), 255));
        break;
      case Source::kExponent: {
        // bf16 exponent byte of a N(0, 0.02) weight.
        const double w = std::fabs(gauss(rng)) + 1e-30;
        v[i] = static_cast<uint8_t>(std::clamp(127 + static_cast<int>(std::floor(std::log2(w))), 0, 255));
        break;
      }
      case Source::kMillion:
        v[i] = rng() % 1000000 == 0 ? 1 : 0;
        break;
      case Source::kFibonacci: {
        // P(s) ~ 1/phi^s: unlimited Huffman lengths would reach 25.
        const uint32_t r = rng() % fib_total;
        size_t s = 0;
        while (r >= fib_cum[s]) ++s;
        v[i] = static_cast<uint8_t>(s);
        break;
      }
      case Source::kSingle:
        v[i] = 42;
        break;
    }
  }
  if (src == Source::kMillion && n > 1) v[n / 2] = 1;  // at least one rare symbol
  if (src == Source::kFibonacci && n > 30) {
    for (int s = 0; s < 26; ++s) v[static_cast<size_t>(s)] = static_cast<uint8_t>(s);
  }
  return v;
}

struct Encoded {
  Bytes bytes;
  size_t predicted = 0;
};

Encoded EncodeOrDie(const Bytes& in) {
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  Encoded e;
  e.predicted = huff::EncodedSize(hist, in.size());
  e.bytes.resize(huff::MaxEncodedSize(in.size()));
  auto r = huff::Encode(in.data(), in.size(), hist, e.bytes.data(), e.bytes.size());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) e.bytes.resize(*r);
  return e;
}

// Code lengths from the stream header, indexed by symbol.
std::vector<int> Lengths(const Bytes& enc) {
  std::vector<int> len(256, 0);
  const int lo = enc[0], hi = enc[1];
  for (int s = lo; s <= hi; ++s) {
    const int i = s - lo;
    len[static_cast<size_t>(s)] = (enc[2 + static_cast<size_t>(i / 2)] >> (4 * (i & 1))) & 0xf;
  }
  return len;
}

void ExpectRoundTrip(const Bytes& in) {
  const Encoded e = EncodeOrDie(in);
  EXPECT_EQ(e.bytes.size(), e.predicted);
  // Decode from an exactly sized heap copy so ASan sees any over-read.
  Bytes exact(e.bytes);
  Bytes out(in.size() + 1, 0xAB);
  ASSERT_TRUE(huff::Decode(exact.data(), exact.size(), out.data(), in.size()).ok());
  EXPECT_EQ(out.back(), 0xAB);  // no write past n
  out.pop_back();
  EXPECT_EQ(out, in);
}

TEST(HuffmanTest, RoundTripsAllSourcesAndSizes) {
  const Source sources[] = {Source::kTwo,     Source::kUniform,   Source::kGeometric, Source::kExponent,
                            Source::kMillion, Source::kFibonacci, Source::kSingle};
  const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 19, 20, 21, 39, 41, 63, 64, 65, 101, 1000, 4097, 65537};
  for (Source src : sources) {
    for (size_t n : sizes) {
      SCOPED_TRACE(::testing::Message() << "source " << static_cast<int>(src) << " n " << n);
      ExpectRoundTrip(Make(src, n, static_cast<uint32_t>(n)));
    }
  }
}

TEST(HuffmanTest, RoundTripsOneMebibyte) {
  for (Source src : {Source::kExponent, Source::kUniform, Source::kMillion, Source::kFibonacci}) {
    ExpectRoundTrip(Make(src, (1 << 20) + 3, 7));
  }
}

TEST(HuffmanTest, LengthsLimitedAndComplete) {
  for (Source src : {Source::kFibonacci, Source::kGeometric, Source::kExponent, Source::kUniform}) {
    const Encoded e = EncodeOrDie(Make(src, 1 << 18, 3));
    const std::vector<int> len = Lengths(e.bytes);
    uint32_t kraft = 0;
    int max_len = 0;
    for (int l : len) {
      if (l) kraft += 1u << (huff::kMaxCodeLen - l);
      max_len = std::max(max_len, l);
    }
    EXPECT_LE(max_len, huff::kMaxCodeLen);
    EXPECT_EQ(kraft, 1u << huff::kMaxCodeLen);
  }
  // The Fibonacci source really needs the limit.
  const std::vector<int> fib = Lengths(EncodeOrDie(Make(Source::kFibonacci, 1 << 18, 3)).bytes);
  EXPECT_EQ(*std::max_element(fib.begin(), fib.end()), huff::kMaxCodeLen);
}

TEST(HuffmanTest, CloseToEntropy) {
  for (Source src : {Source::kExponent, Source::kGeometric, Source::kUniform}) {
    const Bytes in = Make(src, 1 << 20, 11);
    uint32_t hist[256];
    Histogram(in.data(), in.size(), hist);
    const double entropy_bytes = EntropyBits(hist, in.size()) / 8;
    const size_t size = EncodeOrDie(in).bytes.size();
    EXPECT_GE(static_cast<double>(size), entropy_bytes);
    EXPECT_LE(static_cast<double>(size), entropy_bytes * 1.03 + 200) << static_cast<int>(src);
  }
}

TEST(HuffmanTest, SmallCapacityIsInvalidArgument) {
  const Bytes in = Make(Source::kExponent, 1000, 5);
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  const size_t need = huff::EncodedSize(hist, in.size());
  for (size_t cap : {size_t{0}, size_t{1}, need / 2, need - 1}) {
    Bytes out(cap + 1);
    auto r = huff::Encode(in.data(), in.size(), hist, out.data(), cap);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  Bytes out(need);
  EXPECT_TRUE(huff::Encode(in.data(), in.size(), hist, out.data(), need).ok());
}

TEST(HuffmanTest, HistogramMismatchIsInvalidArgument) {
  const Bytes in = Make(Source::kExponent, 1000, 5);
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  Bytes out(huff::MaxEncodedSize(in.size()));
  uint32_t wrong_sum[256];
  std::memcpy(wrong_sum, hist, sizeof(hist));
  ++wrong_sum[0];
  EXPECT_EQ(huff::Encode(in.data(), in.size(), wrong_sum, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
  // Same total, but a symbol of the data has no code.
  Bytes bad = in;
  bad[500] = 3;
  EXPECT_EQ(huff::Encode(bad.data(), bad.size(), hist, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
}

// Reference encoder: one bit at a time from the lengths the encoder wrote,
// straight from the format description (canonical codes, quarters back to
// back in one LSB-first bit string).
Bytes ReferenceEncode(const Bytes& in, const Bytes& enc) {
  const int lo = enc[0], hi = enc[1];
  uint8_t len[256] = {};
  for (int s = lo; s <= hi; ++s) len[s] = (enc[2 + (s - lo) / 2] >> (4 * ((s - lo) & 1))) & 0xf;
  const size_t header = 2 + static_cast<size_t>(hi - lo + 2) / 2 + 16;
  uint32_t code[256] = {};
  uint32_t next = 0;
  for (int l = 1; l <= huff::kMaxCodeLen; ++l) {
    for (int s = 0; s < 256; ++s)
      if (len[s] == l) code[s] = next++;
    next <<= 1;
  }
  Bytes out(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(header));
  std::vector<bool> bits;
  const size_t q = in.size() / 4;
  for (int j = 0; j < 4; ++j) {
    const size_t stop = j == 3 ? in.size() : (j + 1) * q;
    for (size_t i = j * q; i < stop; ++i)
      for (int b = len[in[i]] - 1; b >= 0; --b) bits.push_back((code[in[i]] >> b) & 1);
    const uint32_t end = static_cast<uint32_t>(bits.size());
    for (int k = 0; k < 4; ++k) out[header - 16 + 4 * j + k] = static_cast<uint8_t>(end >> (8 * k));
  }
  out.resize(header + (bits.size() + 7) / 8, 0);
  for (size_t b = 0; b < bits.size(); ++b)
    if (bits[b]) out[header + b / 8] |= static_cast<uint8_t>(1u << (b % 8));
  return out;
}

// The four writers must produce exactly the single-writer bit string, for
// every alignment of the quarter boundaries.
TEST(HuffmanTest, MatchesReferenceEncoder) {
  for (Source src : {Source::kTwo, Source::kUniform, Source::kExponent, Source::kFibonacci}) {
    for (size_t n : {size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{6}, size_t{7}, size_t{9}, size_t{17},
                     size_t{31}, size_t{64}, size_t{101}, size_t{1000}, size_t{4099}, size_t{65537}}) {
      Bytes in = Make(src, n, static_cast<uint32_t>(n));
      in[0] = 1;
      in[n - 1] = 2;  // at least two symbols
      const Bytes enc = EncodeOrDie(in).bytes;
      EXPECT_EQ(enc, ReferenceEncode(in, enc)) << static_cast<int>(src) << " n=" << n;
      Bytes dec(n);
      ASSERT_TRUE(huff::Decode(enc.data(), enc.size(), dec.data(), n).ok());
      EXPECT_EQ(dec, in);
    }
  }
}

// The fast loop codes symbol pairs where building their table pays: the
// bytes must be those of single codes, in both stream forms, for every
// shape of code (lengths up to 11) and for lengths that leave 1-3 symbols
// to the tail; and the pair coder must actually have run.
class PairCodesOff {
 public:
  PairCodesOff() : was_(huff::internal::SetPairCodes(false)) {}
  ~PairCodesOff() { huff::internal::SetPairCodes(was_); }

 private:
  bool was_;
};

Bytes EncodeWith(bool pairs, const Bytes& in, bool blocked) {
  const bool was = huff::internal::SetPairCodes(pairs);
  uint32_t hist[256];
  Histogram(in.data(), in.size(), hist);
  Bytes out(huff::MaxEncodedSize(in.size()) + 2 * (in.size() >> 8) + 64);
  auto r = blocked ? huff::EncodeBlocked(in.data(), in.size(), hist, 12, out.data(), out.size())
                   : huff::Encode(in.data(), in.size(), hist, out.data(), out.size());
  huff::internal::SetPairCodes(was);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  out.resize(r.ok() ? *r : 0);
  return out;
}

TEST(HuffmanTest, PairCodesWriteTheBytesOfSingleCodes) {
  const uint64_t before = huff::internal::PairCodedStreams();
  for (Source src :
       {Source::kTwo, Source::kGeometric, Source::kExponent, Source::kFibonacci, Source::kUniform}) {
    for (size_t n : {size_t{4099}, size_t{65537}, size_t{262146}, size_t{1} << 20}) {
      const Bytes in = Make(src, n, static_cast<uint32_t>(n) + static_cast<uint32_t>(src));
      for (bool blocked : {false, true}) {
        const Bytes single = EncodeWith(false, in, blocked);
        const Bytes pairs = EncodeWith(true, in, blocked);
        EXPECT_EQ(single, pairs) << static_cast<int>(src) << " n=" << n << " blocked=" << blocked;
        Bytes dec(n);
        ASSERT_TRUE((blocked ? huff::DecodeBlocked(pairs.data(), pairs.size(), dec.data(), n)
                             : huff::Decode(pairs.data(), pairs.size(), dec.data(), n))
                        .ok());
        EXPECT_EQ(dec, in);
      }
    }
  }
  EXPECT_GT(huff::internal::PairCodedStreams(), before) << "no stream was coded with pair codes";
}

// The pair table of one code must not leak into the next: a histogram that
// does not match the data is refused because a symbol without a code codes
// nothing, and so the bit count comes out short. A pair left over from the
// last stream's code would code it: here (3, 7), two 1-bit codes of the
// last stream, in place of two 1-bit codes of this one, which would give
// the same bit count and so a wrong stream taken for a right one.
TEST(HuffmanTest, PairCodesOfTheLastStreamDoNotCodeTheNext) {
  Bytes last = Make(Source::kTwo, size_t{1} << 20, 9);
  for (auto& b : last) b = b == 7 ? 3 : 7;  // 3 and 7
  ASSERT_FALSE(EncodeWith(true, last, false).empty());
  ASSERT_FALSE(EncodeWith(true, last, true).empty());
  Bytes narrow = Make(Source::kTwo, size_t{1} << 20, 10);  // 7 and 200
  // The run histograms of the data, then a symbol the wide stream had a
  // code for put in, which they lack (their sums still hold, so the coder
  // runs and must find the mismatch itself).
  uint32_t quarters[4][256], runs[4][256], hist[256];
  HistogramQuarters(narrow.data(), narrow.size(), quarters, hist);
  size_t cuts[5];
  huff::BlockedCuts(narrow.size(), 12, cuts);
  HistogramRuns(narrow.data(), cuts, runs, hist);
  narrow[1000] = 3;  // a pair of the fast loop: (3, 7)
  narrow[1001] = 7;
  Bytes out(huff::MaxEncodedSize(narrow.size()) + 2 * (narrow.size() >> 8) + 64);
  const uint64_t before = huff::internal::PairCodedStreams();
  EXPECT_EQ(huff::Encode(narrow.data(), narrow.size(), quarters, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
  ASSERT_FALSE(EncodeWith(true, last, true).empty());  // the last code again, for the blocked coder
  EXPECT_EQ(
      huff::EncodeBlocked(narrow.data(), narrow.size(), runs, 12, out.data(), out.size()).status().code(),
      Code::kInvalidArgument);
  EXPECT_GT(huff::internal::PairCodedStreams(), before) << "the pair coder did not run";
}

// Quarters of very different bit lengths: short codes in one quarter, long
// ones in another, so the writers start at unrelated bit offsets.
TEST(HuffmanTest, QuartersOfVeryDifferentSizes) {
  for (size_t n : {size_t{8}, size_t{13}, size_t{400}, size_t{40003}}) {
    for (int hot = 0; hot < 4; ++hot) {
      Bytes in = Make(Source::kFibonacci, n, static_cast<uint32_t>(n + hot));
      const size_t q = n / 4;
      const size_t a = hot * q, b = hot == 3 ? n : (hot + 1) * q;
      for (size_t i = a; i < b; ++i) in[i] = 0;  // the most frequent symbol: 1-2 bits
      in[0] = 25;
      in[n - 1] = 24;
      const Bytes enc = EncodeOrDie(in).bytes;
      EXPECT_EQ(enc, ReferenceEncode(in, enc)) << "n=" << n << " hot=" << hot;
      Bytes dec(n);
      ASSERT_TRUE(huff::Decode(enc.data(), enc.size(), dec.data(), n).ok());
      EXPECT_EQ(dec, in);
    }
  }
}

// The quarter-histogram entry point gives the same bytes, and rejects
// quarter histograms that do not split the stream as the format does.
TEST(HuffmanTest, QuarterHistogramsEntryPoint) {
  const Bytes in = Make(Source::kExponent, 10007, 3);
  uint32_t quarters[4][256], hist[256];
  HistogramQuarters(in.data(), in.size(), quarters, hist);
  uint32_t whole[256];
  Histogram(in.data(), in.size(), whole);
  EXPECT_EQ(0, std::memcmp(whole, hist, sizeof(hist)));
  Bytes out(huff::MaxEncodedSize(in.size()));
  auto r = huff::Encode(in.data(), in.size(), quarters, out.data(), out.size());
  ASSERT_TRUE(r.ok());
  out.resize(*r);
  EXPECT_EQ(out, EncodeOrDie(in).bytes);
  // Move one count between quarters: the total still matches.
  int s = 0;
  while (!quarters[0][s]) ++s;
  --quarters[0][s];
  ++quarters[1][s];
  Bytes out2(huff::MaxEncodedSize(in.size()));
  EXPECT_EQ(huff::Encode(in.data(), in.size(), quarters, out2.data(), out2.size()).status().code(),
            Code::kInvalidArgument);
}

TEST(HuffmanTest, RejectsEveryTruncation) {
  const Bytes in = Make(Source::kExponent, 200, 9);
  const Bytes enc = EncodeOrDie(in).bytes;
  Bytes out(in.size());
  for (size_t len = 0; len < enc.size(); ++len) {
    Bytes cut(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(len));
    Status s = huff::Decode(cut.data(), cut.size(), out.data(), out.size());
    EXPECT_TRUE(s.IsCorruption()) << "len " << len;
  }
  Bytes longer = enc;
  longer.push_back(0);
  EXPECT_TRUE(huff::Decode(longer.data(), longer.size(), out.data(), out.size()).IsCorruption());
}

TEST(HuffmanTest, SurvivesBitFlips) {
  const Bytes in = Make(Source::kExponent, 3000, 13);
  const Bytes enc = EncodeOrDie(in).bytes;
  std::mt19937 rng(1);
  Bytes out(in.size());
  int detected = 0;
  const int trials = 3000;
  for (int t = 0; t < trials; ++t) {
    Bytes bad = enc;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Status s = huff::Decode(bad.data(), bad.size(), out.data(), out.size());
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption());
      ++detected;
    } else if (out != in) {
      // Undetected corruption is possible (no checksum here) but must be rare.
    }
  }
  EXPECT_GT(detected, trials / 2);
}

TEST(HuffmanTest, SurvivesRandomInput) {
  std::mt19937 rng(2);
  Bytes out(5000);
  for (int t = 0; t < 20000; ++t) {
    Bytes junk(rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    // Plausible headers now and then: a small complete code.
    if (junk.size() > 20 && t % 2) {
      junk[0] = 10;
      junk[1] = 13;
      junk[2] = 0x21;  // lengths 1, 2
      junk[3] = 0x33;  // lengths 3, 3
    }
    const size_t n = rng() % out.size();
    Status s = huff::Decode(junk.data(), junk.size(), out.data(), n);
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption());
    }
  }
}

TEST(HuffmanTest, RejectsBadTables) {
  const Bytes in = Make(Source::kTwo, 100, 1);
  const Bytes enc = EncodeOrDie(in).bytes;
  Bytes out(in.size());
  // Two symbols of length 1: make one length 2 (incomplete) or 12 (too long).
  for (uint8_t nibble : {uint8_t{2}, uint8_t{12}, uint8_t{0}}) {
    Bytes bad = enc;
    const int i = 200 - bad[0];
    bad[2 + static_cast<size_t>(i / 2)] = static_cast<uint8_t>(
        (bad[2 + static_cast<size_t>(i / 2)] & ~(0xf << (4 * (i & 1)))) | nibble << (4 * (i & 1)));
    EXPECT_TRUE(huff::Decode(bad.data(), bad.size(), out.data(), out.size()).IsCorruption());
  }
}

}  // namespace
}  // namespace lmc
