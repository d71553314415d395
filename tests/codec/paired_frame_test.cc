// Frames of an fp32 chunk against its bf16 twin (docs/FORMAT.md, "Frame",
// flags 0x02 and 0x04): the XOR operand is a range of the bf16 chunk
// widened to fp32, or (version 4) with each upper half predicted from the
// value's own lower half as round to nearest even would have rounded it.
// Every kind of value round-trips, whether the bf16 values are the fp32
// ones rounded to nearest even or not (stochastic rounding, NaN payloads,
// -0.0, subnormals, infinities, unrelated values): losslessness never
// depends on the match, only the size does. A base too short, or a flag
// without the rest of what it needs, is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "frame_format.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"

namespace lmc {
namespace {

bool HasRansX32(const FrameInfo& fi) {
  for (const auto& st : fi.streams)
    if (st.coder == Coder::kRansX32) return true;
  return false;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Round to nearest even, as torch's .to(torch.bfloat16) does (NaN stays a quiet NaN).
uint16_t Bf16Rne(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// fp32 values of every kind, as little-endian bytes.
std::vector<uint32_t> Masters(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> w(0.0f, 0.02f);
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Bits(w(rng));
  const uint32_t special[] = {0x00000000u, 0x80000000u,   // +-0
                              0x00000001u, 0x807fffffu,   // subnormals
                              0x7f800000u, 0xff800000u,   // infinities
                              0x7fc00001u, 0xffa5a5a5u,   // NaNs with payloads (quiet, signalling)
                              0x3f808000u, 0x3f818000u,   // ties: round to even, down and up
                              0x7f7fffffu, 0x7f7f8000u};  // the largest finite, rounding to infinity
  for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; ++i) v[i * 7 % n] = special[i];
  return v;
}

std::vector<uint8_t> Bytes32(const std::vector<uint32_t>& v) {
  std::vector<uint8_t> b(4 * v.size());
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> Bytes16(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(2 * v.size());
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Encodes `master` against bf16[offset, ...) widened (predicting the
// rounding where the encoder finds it pays, with `predict`); the frame.
std::vector<uint8_t> EncodePaired(const std::vector<uint8_t>& master, const std::vector<uint8_t>& bf16,
                                  uint32_t offset, bool predict = true) {
  EncodeParams p{DType::kF32, bf16.data()};
  p.widened_base_offset = offset;
  p.base_len = bf16.size();
  p.predict_rounding = predict;
  std::vector<uint8_t> out(MaxEncodedSize(master.size()));
  Workspace ws;
  auto n = EncodeChunk(master.data(), master.size(), p, out.data(), out.size(), ws);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

Result<std::vector<uint8_t>> DecodeWith(const std::vector<uint8_t>& frame, const std::vector<uint8_t>& base) {
  auto fi = ReadFrameInfo(frame.data(), frame.size());
  if (!fi.ok()) return fi.status();
  std::vector<uint8_t> out(fi->decoded_size);
  Workspace ws;
  auto n = DecodeChunk(frame.data(), frame.size(), base.data(), base.size(), out.data(), out.size(), ws);
  if (!n.ok()) return n.status();
  return out;
}

size_t StandaloneSize(const std::vector<uint8_t>& master) {
  std::vector<uint8_t> out(MaxEncodedSize(master.size()));
  Workspace ws;
  return *EncodeChunk(master.data(), master.size(), EncodeParams{DType::kF32, nullptr}, out.data(),
                      out.size(), ws);
}

TEST(PairedFrame, RoundTripsAtEveryOffsetAndCostsLessThanStandalone) {
  constexpr size_t kN = 1 << 16;  // fp32 values of the chunk
  const std::vector<uint32_t> m = Masters(kN, 1);
  for (uint32_t offset : {0u, 1u, 4096u}) {
    // The bf16 twin holds the rounded masters from `offset` on, other values before.
    std::vector<uint16_t> b(offset + kN + 100, 0x3f80);
    for (size_t i = 0; i < kN; ++i) b[offset + i] = Bf16Rne(m[i]);
    const auto master = Bytes32(m), bf16 = Bytes16(b);
    const auto frame = EncodePaired(master, bf16, offset);
    auto fi = ReadFrameInfo(frame.data(), frame.size());
    ASSERT_TRUE(fi.ok());
    EXPECT_TRUE(fi->widened_base);
    EXPECT_TRUE(fi->predicted);
    EXPECT_EQ(fi->base_offset, offset);
    // 4 for the predicted base, or 5 when a stream is rANS with 32 states.
    EXPECT_EQ(fi->version, HasRansX32(*fi) ? 5 : 4);
    auto back = DecodeWith(frame, bf16);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, master) << "offset " << offset;
    // The plain widened base (version 3) round-trips too.
    const auto plain = EncodePaired(master, bf16, offset, /*predict=*/false);
    fi = ReadFrameInfo(plain.data(), plain.size());
    ASSERT_TRUE(fi.ok());
    EXPECT_FALSE(fi->predicted);
    EXPECT_EQ(fi->version, HasRansX32(*fi) ? 5 : 3);
    back = DecodeWith(plain, bf16);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, master) << "offset " << offset;
    // The upper half of each value is (nearly) free given its twin; with
    // the rounding predicted, so is the rounding: the frame is the lower
    // halves (2 bytes a value) and little else.
    EXPECT_LT(plain.size(), StandaloneSize(master) * 3 / 4)
        << plain.size() << " vs " << StandaloneSize(master);
    EXPECT_LT(frame.size(), plain.size() * 95 / 100) << frame.size() << " vs " << plain.size();
    EXPECT_LT(frame.size(), 2 * kN + 2048);
  }
}

TEST(PairedFrame, LosslessWhateverTheBf16ValuesAre) {
  constexpr size_t kN = 20000;
  const std::vector<uint32_t> m = Masters(kN, 2);
  std::mt19937 rng(3);
  // Stochastic rounding (up or down at random), truncation, and unrelated values.
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<uint16_t> b(kN);
    for (size_t i = 0; i < kN; ++i) {
      const uint16_t down = static_cast<uint16_t>(m[i] >> 16);
      b[i] = kind == 0   ? static_cast<uint16_t>(down + (rng() & 1))
             : kind == 1 ? down
                         : static_cast<uint16_t>(rng());
    }
    const auto master = Bytes32(m), bf16 = Bytes16(b);
    for (bool predict : {true, false}) {
      const auto frame = EncodePaired(master, bf16, 0, predict);
      auto back = DecodeWith(frame, bf16);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, master) << "kind " << kind << " predict " << predict;
      // Truncated twins are exact without the prediction: the encoder
      // keeps the plain widened base.
      if (kind == 1) {
        EXPECT_FALSE(ReadFrameInfo(frame.data(), frame.size())->predicted);
      }
    }
  }
}

TEST(PairedFrame, ShortBaseAndInconsistentHeadersAreRefused) {
  const std::vector<uint32_t> m = Masters(1000, 4);
  std::vector<uint16_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = Bf16Rne(m[i]);
  const auto master = Bytes32(m), bf16 = Bytes16(b);
  auto frame = EncodePaired(master, bf16, 0);
  // One element short.
  std::vector<uint8_t> shorter(bf16.begin(), bf16.end() - 2);
  EXPECT_EQ(DecodeWith(frame, shorter).status().code(), Code::kInvalidArgument);
  // An offset past the base's end (header checksum recomputed: a well-formed lie).
  const size_t ns = frame[7];
  auto lie = frame;
  StoreLE32(lie.data() + frame::kFixedHeader + ns * frame::kStreamEntry, 0xfffffff0u);
  const size_t crc_at = frame::HeaderSize(ns, true) - frame::kHeaderCrc;
  StoreLE32(lie.data() + crc_at, static_cast<uint32_t>(hd::Xxh3_64(lie.data(), crc_at)));
  EXPECT_EQ(DecodeWith(lie, bf16).status().code(), Code::kInvalidArgument);
  // The prediction flag without the widened one is corruption, and so is a
  // predicting frame that says it is of version 3.
  ASSERT_TRUE(ReadFrameInfo(frame.data(), frame.size())->predicted);
  auto no_widened = frame;
  no_widened[6] = frame::kFlagXorDelta | frame::kFlagRoundingPredicted;
  StoreLE32(no_widened.data() + crc_at, static_cast<uint32_t>(hd::Xxh3_64(no_widened.data(), crc_at)));
  EXPECT_EQ(ReadFrameInfo(no_widened.data(), no_widened.size()).status().code(), Code::kCorruption);
  auto v3 = frame;
  v3[4] = 3;
  StoreLE32(v3.data() + crc_at, static_cast<uint32_t>(hd::Xxh3_64(v3.data(), crc_at)));
  EXPECT_EQ(ReadFrameInfo(v3.data(), v3.size()).status().code(), Code::kCorruption);
  // The widened flag without the delta flag is corruption.
  auto no_delta = frame;
  no_delta[6] = frame::kFlagWidenedBase;
  StoreLE32(no_delta.data() + crc_at, static_cast<uint32_t>(hd::Xxh3_64(no_delta.data(), crc_at)));
  EXPECT_EQ(ReadFrameInfo(no_delta.data(), no_delta.size()).status().code(), Code::kCorruption);
  // The encoder refuses a widened base for a chunk that is not fp32, and a
  // base that does not hold the range.
  std::vector<uint8_t> out(MaxEncodedSize(master.size()));
  EncodeParams p{DType::kBF16, bf16.data()};
  p.widened_base_offset = 0;
  p.base_len = bf16.size();
  Workspace ws;
  EXPECT_EQ(EncodeChunk(bf16.data(), bf16.size(), p, out.data(), out.size(), ws).status().code(),
            Code::kInvalidArgument);
  p.dtype = DType::kF32;
  p.base_len = bf16.size() - 2;
  EXPECT_EQ(EncodeChunk(master.data(), master.size(), p, out.data(), out.size(), ws).status().code(),
            Code::kInvalidArgument);
  p.base_len = bf16.size();
  EXPECT_TRUE(EncodeChunk(master.data(), master.size(), p, out.data(), out.size(), ws).ok());
}

// Frames without a widened base keep the version they had (1 or 2).
TEST(PairedFrame, OtherFramesKeepTheirVersion) {
  const auto master = Bytes32(Masters(1000, 5));
  std::vector<uint8_t> out(MaxEncodedSize(master.size()));
  Workspace ws;
  auto n = EncodeChunk(master.data(), master.size(), EncodeParams{DType::kF32, nullptr}, out.data(),
                       out.size(), ws);
  ASSERT_TRUE(n.ok());
  EXPECT_LE(out[4], 2);
}

}  // namespace
}  // namespace lmc
