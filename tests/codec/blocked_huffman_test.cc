// Blocked Huffman streams (coder 4) and the GPU encode profile on the CPU,
// and the host-device pieces (hd/) the GPU kernels run, checked on the host
// against the CPU coder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "hd/frame_hd.h"
#include "hd/huffman_hd.h"
#include "huffman.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/transform.h"
#include "test_util.h"

namespace lmc {
namespace {

std::vector<uint8_t> Skewed(size_t n, uint32_t seed, int spread) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int> g(1.0 / spread);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(120 + std::min(g(rng), 100));
  return v;
}

std::vector<uint8_t> EncodeBlockedOrDie(const std::vector<uint8_t>& s, int log2) {
  uint32_t hist[256];
  Histogram(s.data(), s.size(), hist);
  std::vector<uint8_t> out(huff::MaxEncodedSize(s.size()) + 2 * (s.size() >> 8) + 64);
  auto r = huff::EncodeBlocked(s.data(), s.size(), hist, log2, out.data(), out.size());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  out.resize(r.ok() ? *r : 0);
  EXPECT_EQ(out.size(), huff::BlockedEncodedSize(hist, s.size(), log2));
  return out;
}

TEST(BlockedHuffman, RoundTripsEverySizeAndBlockSize) {
  for (int log2 : {8, 10, 12}) {
    for (size_t n : {size_t{2}, size_t{3}, size_t{255}, size_t{256}, size_t{257}, size_t{4095}, size_t{4096},
                     size_t{4097}, size_t{12345}, size_t{1} << 20, (size_t{513} << 12) + 7}) {
      SCOPED_TRACE(::testing::Message() << "log2 " << log2 << " n " << n);
      auto s = Skewed(n, static_cast<uint32_t>(n + log2), 3);
      s[0] = 7;  // at least two symbols
      auto enc = EncodeBlockedOrDie(s, log2);
      std::vector<uint8_t> back(n);
      ASSERT_TRUE(huff::DecodeBlocked(enc.data(), enc.size(), back.data(), n).ok());
      EXPECT_EQ(back, s);
    }
  }
}

TEST(BlockedHuffman, PayloadIsTheSingleStreamOfAllCodes) {
  // Block boundaries change nothing in the bit string: the payload equals
  // the 4-sub-stream coder's payload for the same codes, which is also all
  // codes in order.
  auto s = Skewed(100000, 5, 4);
  auto blocked = EncodeBlockedOrDie(s, 12);
  uint32_t hist[256];
  Histogram(s.data(), s.size(), hist);
  std::vector<uint8_t> plain(huff::MaxEncodedSize(s.size()));
  auto r = huff::Encode(s.data(), s.size(), hist, plain.data(), plain.size());
  ASSERT_TRUE(r.ok());
  const size_t lens = 2 + (plain[1] - plain[0] + 2) / 2;
  const size_t plain_payload = lens + 16;
  const size_t blocked_payload = lens + 1 + 2 * hd::HuffBlocks(s.size(), 12);
  ASSERT_EQ(*r - plain_payload, blocked.size() - blocked_payload);
  EXPECT_TRUE(std::equal(blocked.begin() + blocked_payload, blocked.end(), plain.begin() + plain_payload));
}

TEST(BlockedHuffman, HostDeviceWriterAndReaderMatchTheCpuCoder) {
  // What a GPU thread per block does, run here block by block in reverse
  // order: the same payload as the CPU coder, and each block decodes alone.
  for (size_t n : {size_t{5000}, size_t{1} << 18, (size_t{1} << 18) + 77, size_t{130} * 4096 + 5}) {
    auto s = Skewed(n, 11, 5);
    auto enc = EncodeBlockedOrDie(s, 12);
    uint8_t len[256];
    uint32_t hist[256];
    Histogram(s.data(), n, hist);
    hd::HuffBuildLengths(hist, len);
    uint32_t codes[256];
    hd::HuffBuildCodes(len, codes);
    const uint32_t blocks = hd::HuffBlocks(n, 12);
    std::vector<uint64_t> start(blocks + 1, 0);
    std::vector<uint32_t> bits(blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint32_t count = static_cast<uint32_t>(std::min<size_t>(4096, n - size_t{b} * 4096));
      bits[b] = hd::HuffBlockBits(s.data() + size_t{b} * 4096, count, codes);
      start[b + 1] = start[b] + bits[b];
    }
    std::vector<uint32_t> words((start[blocks] + 31) / 32 + 1, 0);
    for (uint32_t b = blocks; b-- > 0;) {
      const uint32_t count = static_cast<uint32_t>(std::min<size_t>(4096, n - size_t{b} * 4096));
      hd::HuffEncodeBlockWords(s.data() + size_t{b} * 4096, count, codes, start[b], bits[b], words.data(),
                               hd::PlainOr{});
    }
    const size_t plen = (start[blocks] + 7) / 8;
    const size_t header = enc.size() - plen;
    ASSERT_EQ(0, std::memcmp(enc.data() + header, words.data(), plen)) << "n " << n;
    for (uint32_t b = 0; b < blocks; ++b)
      ASSERT_EQ(LoadLE16(enc.data() + header - 2 * blocks + 2 * b), bits[b]);

    uint16_t single[hd::kHuffTableSize];
    hd::HuffBuildDecodeTable(len, single);
    std::vector<uint8_t> back(n);
    for (uint32_t b = blocks; b-- > 0;) {
      const uint32_t count = static_cast<uint32_t>(std::min<size_t>(4096, n - size_t{b} * 4096));
      ASSERT_TRUE(hd::HuffDecodeRangeWords(enc.data() + header, plen, start[b], start[b + 1], single,
                                           back.data() + size_t{b} * 4096, count));
      // A wrong end is caught.
      EXPECT_FALSE(hd::HuffDecodeRangeWords(enc.data() + header, plen, start[b], start[b + 1] + 1, single,
                                            back.data() + size_t{b} * 4096, count));
    }
    EXPECT_EQ(back, s);
  }
}

TEST(BlockedHuffman, CanonicalEntriesAndWordReaderMatchTheTables) {
  // The GPU builds its tables one entry per thread from the canonical code,
  // and decodes with aligned 16-byte loads and, where the output is
  // 16-aligned, 16-byte stores: the same results for every payload and
  // output alignment.
  for (int spread : {1, 3, 40}) {
    auto s = Skewed(30001, static_cast<uint32_t>(spread), spread);
    s[1] = 3;
    uint32_t hist[256];
    Histogram(s.data(), s.size(), hist);
    uint8_t len[256];
    hd::HuffBuildLengths(hist, len);
    uint16_t single[hd::kHuffTableSize];
    hd::HuffBuildDecodeTable(len, single);
    hd::HuffCanonical canon;
    hd::HuffBuildCanonical(len, &canon);
    for (uint32_t x = 0; x < hd::kHuffTableSize; ++x)
      ASSERT_EQ(hd::HuffSingleEntryAt(canon, x), single[x]) << x;
    auto enc = EncodeBlockedOrDie(s, 12);
    const uint32_t blocks = hd::HuffBlocks(s.size(), 12);
    const size_t header = 2 + (enc[1] - enc[0] + 2) / 2 + 1 + 2 * blocks;
    for (size_t shift = 0; shift < 16; ++shift) {
      // The payload at every alignment, the stream header before it.
      std::vector<uint8_t> moved(shift + enc.size() + 8, 0xCC);
      std::memcpy(moved.data() + shift, enc.data(), enc.size());
      const uint8_t* payload = moved.data() + shift + header;
      const size_t plen = enc.size() - header;
      for (size_t out_shift : {size_t{0}, size_t{1}, size_t{4}, size_t{8}}) {
        std::vector<uint8_t> back(s.size() + 8, 0);
        uint64_t start = 0;
        for (uint32_t b = 0; b < blocks; ++b) {
          const uint64_t bits = LoadLE16(enc.data() + header - 2 * blocks + 2 * b);
          const uint32_t count = static_cast<uint32_t>(std::min<size_t>(4096, s.size() - size_t{b} * 4096));
          ASSERT_TRUE(hd::HuffDecodeRangeWords(payload, plen, start, start + bits, single,
                                               back.data() + out_shift + size_t{b} * 4096, count))
              << "block " << b << " shift " << shift;
          EXPECT_FALSE(hd::HuffDecodeRangeWords(payload, plen, start, start + bits + 1, single,
                                                back.data() + out_shift + size_t{b} * 4096, count));
          start += bits;
        }
        EXPECT_TRUE(std::equal(s.begin(), s.end(), back.begin() + out_shift));
      }
    }
  }
}

TEST(BlockedHuffman, CorruptStreamsNeverDecodeWrongOrOutOfBounds) {
  auto s = Skewed(20000, 3, 3);
  auto enc = EncodeBlockedOrDie(s, 10);
  std::mt19937 rng(9);
  int caught = 0;
  for (int t = 0; t < 3000; ++t) {
    auto bad = enc;
    const size_t at = rng() % bad.size();
    bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    std::vector<uint8_t> back(s.size());
    Status st = huff::DecodeBlocked(bad.data(), bad.size(), back.data(), back.size());
    if (!st.ok()) {
      ++caught;
      EXPECT_EQ(st.code(), Code::kCorruption);
    }
  }
  // A flipped payload bit can still decode (to other symbols, caught by the
  // frame checksum); flips in the header and most payload flips are caught.
  EXPECT_GT(caught, 500);
  // Truncation is always caught.
  for (size_t cut = 0; cut < enc.size(); cut += 97) {
    std::vector<uint8_t> back(s.size());
    EXPECT_FALSE(huff::DecodeBlocked(enc.data(), cut, back.data(), back.size()).ok());
  }
}

// The CPU decoder reads a run of blocks straight through and checks the
// block table after (DecodeRuns); a table whose entries still add up but
// put a boundary in the wrong place decodes the same symbols on the CPU
// and garbage on a GPU, which starts a thread at every entry. So the CPU
// must reject it, like the GPU, at every kind of boundary: inside a run,
// at a run's start, in the second run of 256 blocks, before a short last
// block, in a stream of fewer blocks than readers.
TEST(BlockedHuffman, ATableThatMovesABoundaryIsCorruptEvenWhenItsSumHolds) {
  struct Case {
    size_t n;
    std::vector<uint32_t> moved;  // b: d bits move from block b - 1 to block b
  };
  const std::vector<Case> cases = {
      {size_t{130} << 12, {1, 2, 5, 31, 32, 33, 65, 66, 100, 129}},
      {(size_t{300} << 12) + 9, {3, 64, 75, 255, 256, 257, 280, 299, 300}},
      {(size_t{3} << 12) + 100, {1, 2, 3}},
      {(size_t{1} << 12) + 2, {1}},
  };
  for (const Case& c : cases) {
    auto s = Skewed(c.n, static_cast<uint32_t>(c.n), 3);
    auto enc = EncodeBlockedOrDie(s, 12);
    const uint32_t blocks = hd::HuffBlocks(c.n, 12);
    const size_t table = 2 + (enc[1] - enc[0] + 2) / 2 + 1;  // lengths, log2, then the block table
    std::vector<uint8_t> back(c.n);
    ASSERT_TRUE(huff::DecodeBlocked(enc.data(), enc.size(), back.data(), c.n).ok());
    ASSERT_EQ(back, s);
    for (uint32_t b : c.moved) {
      ASSERT_LT(b, blocks);
      for (int d : {1, -1, 3}) {
        SCOPED_TRACE(::testing::Message() << "n " << c.n << " boundary " << b << " moved by " << d);
        auto bad = enc;
        uint8_t* prev = bad.data() + table + 2 * (b - 1);
        uint8_t* cur = prev + 2;
        StoreLE16(prev, static_cast<uint16_t>(LoadLE16(prev) + d));
        StoreLE16(cur, static_cast<uint16_t>(LoadLE16(cur) - d));
        Status st = huff::DecodeBlocked(bad.data(), bad.size(), back.data(), c.n);
        EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
      }
    }
  }
}

// HistogramRuns at BlockedCuts gives the histograms the 4-writer encoder
// takes: the same bytes as from the whole stream's histogram, for runs of
// equal and unequal lengths, and a wrong histogram is refused.
TEST(BlockedHuffman, RunHistogramsGiveTheSameBytes) {
  for (size_t n :
       {size_t{3}, size_t{5000}, size_t{128} << 12, (size_t{130} << 12) + 5, (size_t{7} << 12) + 1}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    auto s = Skewed(n, static_cast<uint32_t>(n + 1), 4);
    s[0] = 1;
    auto whole = EncodeBlockedOrDie(s, 12);
    size_t cuts[5];
    huff::BlockedCuts(n, 12, cuts);
    EXPECT_EQ(cuts[0], 0u);
    EXPECT_EQ(cuts[4], n);
    for (int j = 0; j < 4; ++j) {
      EXPECT_LE(cuts[j], cuts[j + 1]);
      EXPECT_TRUE(cuts[j] % 4096 == 0 || cuts[j] == n);
    }
    uint32_t runs[4][256], hist[256], plain[256];
    HistogramRuns(s.data(), cuts, runs, hist);
    Histogram(s.data(), n, plain);
    ASSERT_EQ(0, std::memcmp(hist, plain, sizeof(hist)));
    for (int j = 0; j < 4; ++j) {
      uint32_t h[256];
      Histogram(s.data() + cuts[j], cuts[j + 1] - cuts[j], h);
      ASSERT_EQ(0, std::memcmp(h, runs[j], sizeof(h))) << "run " << j;
    }
    std::vector<uint8_t> out(whole.size() + 64);
    auto r = huff::EncodeBlocked(s.data(), n, runs, 12, out.data(), out.size());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    out.resize(*r);
    EXPECT_EQ(out, whole);
    if (n > 4096) {
      // Two symbols of different code lengths swapped between the first and
      // the last non-empty run: the sums still hold, the runs' bits do not.
      int a = 0, b = 3;
      while (cuts[a + 1] == cuts[a]) ++a;
      while (cuts[b + 1] == cuts[b]) --b;
      ASSERT_LT(a, b);
      uint8_t len[256];
      hd::HuffBuildLengths(hist, len);
      int from = -1, to = -1;
      for (int c = 0; c < 256 && to < 0; ++c) {
        if (runs[a][c] == 0) continue;
        for (int d = 0; d < 256 && to < 0; ++d)
          if (runs[b][d] && len[d] != len[c]) from = c, to = d;
      }
      ASSERT_GE(to, 0);
      --runs[a][from], ++runs[a][to];
      ++runs[b][from], --runs[b][to];
      std::vector<uint8_t> o2(whole.size() + 64);
      EXPECT_FALSE(huff::EncodeBlocked(s.data(), n, runs, 12, o2.data(), o2.size()).ok());
    }
  }
}

// What the CPU writes: blocked Huffman for bf16 exponents (version-2
// frames), which the GPU decodes a block a thread; the frames of before
// (EncodeProfile::kCpuQuarters, 4 sub-streams) still decode.
TEST(CpuProfile, WritesBlockedHuffmanAndTheFramesOfBeforeStillDecode) {
  Workspace ws;
  auto src = testing::Bf16Weights(size_t{1} << 19, 23);  // 1 MiB
  size_t size[2] = {};
  for (EncodeProfile p : {EncodeProfile::kCpu, EncodeProfile::kCpuQuarters}) {
    SCOPED_TRACE(static_cast<int>(p));
    std::vector<uint8_t> f(MaxEncodedSize(src.size()));
    auto len = EncodeChunk(src.data(), src.size(), {DType::kBF16, nullptr, p}, f.data(), f.size(), ws);
    ASSERT_TRUE(len.ok()) << len.status().ToString();
    auto fi = ReadFrameInfo(f.data(), *len);
    ASSERT_TRUE(fi.ok());
    const bool blocked = p == EncodeProfile::kCpu;
    EXPECT_EQ(fi->streams[0].coder, blocked ? Coder::kHuffmanBlocked : Coder::kHuffman);
    EXPECT_EQ(fi->version, blocked ? 2 : 1);
    std::vector<uint8_t> back(src.size());
    auto d = DecodeChunk(f.data(), *len, nullptr, 0, back.data(), back.size(), ws);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(back, src);
    size[blocked ? 0 : 1] = *len;
  }
  // The block table: 2 bytes a 4096 symbols against 16 bytes a stream.
  const double points = 100.0 * (static_cast<double>(size[0]) - static_cast<double>(size[1])) / src.size();
  EXPECT_GT(points, 0.0);
  EXPECT_LT(points, 0.05) << size[0] << " vs " << size[1];
}

TEST(GpuProfile, FramesRoundTripAndUseBlockedHuffmanForExponentsAndRansForDeltas) {
  Workspace ws;
  bool delta_rans = false;
  for (int t = 0; t < kNumDTypes; ++t) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{300}, size_t{4096 + 3}, size_t{1} << 20}) {
      for (bool with_base : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dtype " << t << " n " << n << " base " << with_base);
        auto src = testing::Bf16Weights(n / 2 + 1, static_cast<uint32_t>(n + t));
        src.resize(n);
        auto base = src;
        for (size_t i = 0; i < base.size(); i += 7) base[i] ^= 1;
        EncodeParams p{static_cast<DType>(t), with_base ? base.data() : nullptr, EncodeProfile::kGpu};
        std::vector<uint8_t> frame(MaxEncodedSize(n));
        auto len = EncodeChunk(src.data(), n, p, frame.data(), frame.size(), ws);
        ASSERT_TRUE(len.ok()) << len.status().ToString();
        auto fi = ReadFrameInfo(frame.data(), *len);
        ASSERT_TRUE(fi.ok());
        bool blocked = false, x32 = false;
        for (const auto& s : fi->streams) {
          EXPECT_NE(s.coder, Coder::kHuffman);
          blocked |= s.coder == Coder::kHuffmanBlocked;
          x32 |= s.coder == Coder::kRansX32;
          // 32 states from 64 Ki symbols on, as the CPU profile.
          if (s.coder == Coder::kRansX32) {
            EXPECT_GE(s.decoded_size, 64u << 10);
          } else if (s.coder == Coder::kRans) {
            EXPECT_LT(s.decoded_size, 64u << 10);
          }
          if (with_base) delta_rans |= s.coder == Coder::kRans || s.coder == Coder::kRansX32;
        }
        EXPECT_EQ(fi->version, x32 ? 5 : blocked ? 2 : 1);
        if (static_cast<DType>(t) == DType::kBF16 && n == (size_t{1} << 20) && !with_base) {
          EXPECT_EQ(fi->streams[0].coder, Coder::kHuffmanBlocked);
        }
        std::vector<uint8_t> back(n);
        auto d = DecodeChunk(frame.data(), *len, with_base ? base.data() : nullptr, n, back.data(), n, ws);
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        EXPECT_EQ(back, src);
      }
    }
  }
  // Deltas that change one byte in 7 by one bit: skewed streams, rANS.
  EXPECT_TRUE(delta_rans);
}

TEST(GpuProfile, CostsUnderATenthOfAPointOfRatioOnBf16Weights) {
  Workspace ws;
  auto src = testing::Bf16Weights(size_t{1} << 20, 17);
  std::vector<uint8_t> a(MaxEncodedSize(src.size())), b(a.size());
  auto cpu = EncodeChunk(src.data(), src.size(), {DType::kBF16, nullptr, EncodeProfile::kCpuQuarters},
                         a.data(), a.size(), ws);
  auto gpu = EncodeChunk(src.data(), src.size(), {DType::kBF16, nullptr, EncodeProfile::kGpu}, b.data(),
                         b.size(), ws);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  const double points = 100.0 * (static_cast<double>(*gpu) - static_cast<double>(*cpu)) / src.size();
  EXPECT_LT(points, 0.1) << "cpu " << *cpu << " gpu " << *gpu;
}

TEST(GpuProfile, OldReadersAreToldToUpgradeAndVersionOneRejectsCoderFour) {
  Workspace ws;
  auto src = testing::Bf16Weights(50000, 2);
  std::vector<uint8_t> f(MaxEncodedSize(src.size()));
  auto len = EncodeChunk(src.data(), src.size(), {DType::kBF16, nullptr, EncodeProfile::kGpu}, f.data(),
                         f.size(), ws);
  ASSERT_TRUE(len.ok());
  ASSERT_EQ(f[4], 2);
  // The same bytes labelled version 1 (header checksum fixed up) are
  // corrupt: coder 4 does not exist in version 1.
  auto v1 = f;
  v1[4] = 1;
  const size_t hsize = 24 + 5 * v1[7];
  StoreLE32(v1.data() + hsize - 4, static_cast<uint32_t>(Checksum64(v1.data(), hsize - 4)));
  auto r = ReadFrameInfo(v1.data(), *len);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  // A version from the future is Unsupported.
  auto v6 = f;
  v6[4] = 6;
  StoreLE32(v6.data() + hsize - 4, static_cast<uint32_t>(Checksum64(v6.data(), hsize - 4)));
  EXPECT_EQ(ReadFrameInfo(v6.data(), *len).status().code(), Code::kUnsupported);
}

// A long skewed stream is rANS with 32 states, in a version-5 frame; the
// same bytes labelled version 4 are corrupt (coder 5 does not exist there).
TEST(RansX32Frame, LongSkewedStreamsUseItInVersionFiveAndVersionFourRejectsIt) {
  std::mt19937 rng(3);
  std::vector<uint8_t> src(200000, 0);
  for (auto& b : src)
    if (rng() % 10 == 0) b = static_cast<uint8_t>(1 + rng() % 8);
  Workspace ws;
  std::vector<uint8_t> f(MaxEncodedSize(src.size()));
  auto len = EncodeChunk(src.data(), src.size(), {DType::kBytes, nullptr}, f.data(), f.size(), ws);
  ASSERT_TRUE(len.ok()) << len.status().ToString();
  auto fi = ReadFrameInfo(f.data(), *len);
  ASSERT_TRUE(fi.ok()) << fi.status().ToString();
  ASSERT_EQ(fi->streams.size(), 1u);
  EXPECT_EQ(fi->streams[0].coder, Coder::kRansX32);
  EXPECT_EQ(fi->version, 5);
  std::vector<uint8_t> back(src.size());
  auto n = DecodeChunk(f.data(), *len, nullptr, 0, back.data(), back.size(), ws);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(back, src);
  auto v4 = f;
  v4[4] = 4;
  const size_t hsize = 24 + 5 * v4[7];
  StoreLE32(v4.data() + hsize - 4, static_cast<uint32_t>(Checksum64(v4.data(), hsize - 4)));
  EXPECT_EQ(ReadFrameInfo(v4.data(), *len).status().code(), Code::kCorruption);
  // A short one keeps the 4-state coder and version 1.
  src.resize(30000);
  len = EncodeChunk(src.data(), src.size(), {DType::kBytes, nullptr}, f.data(), f.size(), ws);
  ASSERT_TRUE(len.ok());
  fi = ReadFrameInfo(f.data(), *len);
  ASSERT_TRUE(fi.ok());
  EXPECT_EQ(fi->streams[0].coder, Coder::kRans);
  EXPECT_EQ(fi->version, 1);
}

}  // namespace
}  // namespace lmc
