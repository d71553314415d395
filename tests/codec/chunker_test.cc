#include "lmc/chunker.h"

#include <gtest/gtest.h>

namespace lmc {
namespace {

Region R(uint64_t off, uint64_t len, DType t, bool tensor) {
  Region r;
  r.offset = off;
  r.length = len;
  r.dtype = t;
  r.is_tensor = tensor;
  return r;
}

void ExpectCover(const std::vector<ChunkSpec>& cs, uint64_t total, uint32_t max) {
  uint64_t pos = 0;
  for (const auto& c : cs) {
    EXPECT_EQ(c.offset, pos);
    EXPECT_GT(c.length, 0u);
    EXPECT_LE(c.length, max);
    pos += c.length;
  }
  EXPECT_EQ(pos, total);
}

TEST(ChunkerTest, TensorChunksStartAtTensorStart) {
  Chunker ch(ChunkerOptions{1000, 100});
  std::vector<ChunkSpec> out;
  ch.Add(R(0, 37, DType::kBytes, false), &out);      // header
  ch.Add(R(37, 2500, DType::kBF16, true), &out);     // big tensor
  ch.Add(R(2537, 40, DType::kF32, true), &out);      // small tensor
  ch.Add(R(2577, 40, DType::kF32, true), &out);      // small tensor
  ch.Finish(&out);
  ExpectCover(out, 2617, 1000);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].length, 37u);  // header flushed alone before the tensor
  EXPECT_EQ(out[1].offset, 37u);
  EXPECT_EQ(out[1].dtype, DType::kBF16);
  EXPECT_EQ(out[2].offset, 1037u);
  EXPECT_EQ(out[3].length, 500u);
  EXPECT_EQ(out[4].dtype, DType::kF32);  // two small f32 tensors packed, same dtype kept
  EXPECT_EQ(out[4].length, 80u);
}

TEST(ChunkerTest, MixedSmallRegionsBecomeBytes) {
  Chunker ch(ChunkerOptions{1000, 100});
  std::vector<ChunkSpec> out;
  ch.Add(R(0, 10, DType::kF32, true), &out);
  ch.Add(R(10, 20, DType::kBF16, true), &out);
  ch.Finish(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, DType::kBytes);
}

TEST(ChunkerTest, LongNonTensorRegionIsSplitAtChunkSize) {
  Chunker ch(ChunkerOptions{1000, 100});
  std::vector<ChunkSpec> out;
  ch.Add(R(0, 2999, DType::kBytes, false), &out);
  ch.Finish(&out);
  ExpectCover(out, 2999, 1000);
  EXPECT_EQ(out.size(), 3u);
}

}  // namespace
}  // namespace lmc
