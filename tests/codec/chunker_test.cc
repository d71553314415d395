#include "lmc/chunker.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace lmc {
namespace {

Region R(uint64_t off, uint64_t len, DType t, bool tensor, std::string name = "") {
  Region r;
  r.name = std::move(name);
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
  ch.Add(R(0, 37, DType::kBytes, false), &out);   // header
  ch.Add(R(37, 2500, DType::kBF16, true), &out);  // big tensor
  ch.Add(R(2537, 40, DType::kF32, true), &out);   // small tensor
  ch.Add(R(2577, 40, DType::kF32, true), &out);   // small tensor
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

TEST(ChunkerTest, TensorChunksCarryRegionLineage) {
  Chunker ch(ChunkerOptions{1000, 100});
  std::vector<ChunkSpec> out;
  ch.Add(R(0, 37, DType::kBytes, false, "hdr"), &out);
  ch.Add(R(37, 2500, DType::kBF16, true, "layer.0.weight"), &out);
  ch.Add(R(2537, 40, DType::kF32, true, "layer.0.bias"), &out);
  ch.Add(R(2577, 1200, DType::kF32, true, "layer.1.weight"), &out);
  ch.Finish(&out);
  ExpectCover(out, 3777, 1000);
  ASSERT_EQ(out.size(), 7u);
  // Header: mixed chunk, no lineage fields.
  EXPECT_FALSE(out[0].tensor_chunk);
  EXPECT_TRUE(out[0].region_name.empty());
  EXPECT_EQ(out[0].region_length, 0u);
  // The big tensor's three chunks.
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(out[i].tensor_chunk);
    EXPECT_EQ(out[i].region_name, "layer.0.weight");
    EXPECT_EQ(out[i].region_length, 2500u);
    EXPECT_EQ(out[i].region_offset, 1000u * (i - 1));
    EXPECT_EQ(out[i].offset, 37u + out[i].region_offset);
  }
  // The small bias is flushed alone as a mixed chunk before layer.1.
  EXPECT_FALSE(out[4].tensor_chunk);
  EXPECT_TRUE(out[4].region_name.empty());
  EXPECT_EQ(out[4].length, 40u);
  EXPECT_EQ(out[5].region_name, "layer.1.weight");
  EXPECT_EQ(out[5].region_offset, 0u);
  EXPECT_EQ(out[6].region_offset, 1000u);
  EXPECT_EQ(out[6].length, 200u);
  EXPECT_EQ(out[6].region_length, 1200u);
}

TEST(ChunkerTest, SameTensorAtDifferentOffsetsGivesSameRegionFields) {
  Chunker a(ChunkerOptions{1000, 100}), b(ChunkerOptions{1000, 100});
  std::vector<ChunkSpec> oa, ob;
  a.Add(R(0, 10, DType::kBytes, false), &oa);
  a.Add(R(10, 1500, DType::kF16, true, "w"), &oa);
  a.Finish(&oa);
  b.Add(R(0, 333, DType::kBytes, false), &ob);
  b.Add(R(333, 1500, DType::kF16, true, "w"), &ob);
  b.Finish(&ob);
  ASSERT_EQ(oa.size(), 3u);
  ASSERT_EQ(ob.size(), 3u);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(oa[i].length, ob[i].length);
    EXPECT_EQ(oa[i].region_offset, ob[i].region_offset);
    EXPECT_EQ(oa[i].region_name, ob[i].region_name);
    EXPECT_EQ(oa[i].offset - 10, ob[i].offset - 333);
  }
}

TEST(ChunkerTest, PiecesOfALongTensorContinueItsLineage) {
  // The layout emits a 9 MiB tensor as pieces of 4, 4 and 1 MiB.
  constexpr uint64_t P = kRegionPieceBytes, M = 1u << 20;
  Chunker ch(ChunkerOptions{static_cast<uint32_t>(M), 64 * 1024});
  std::vector<ChunkSpec> out;
  ch.Add(R(0, 100, DType::kBytes, false), &out);
  ch.Add(R(100, P, DType::kBF16, true, "wte"), &out);
  ch.Add(R(100 + P, P, DType::kBF16, true, "wte"), &out);
  ch.Add(R(100 + 2 * P, M, DType::kBF16, true, "wte"), &out);
  // The same name right after: another tensor (the previous piece was short).
  ch.Add(R(100 + 2 * P + M, 2 * M, DType::kBF16, true, "wte"), &out);
  ch.Finish(&out);
  ASSERT_EQ(out.size(), 1u + 9u + 2u);
  for (int i = 0; i < 9; ++i) {
    const ChunkSpec& c = out[1 + i];
    EXPECT_EQ(c.region_offset, uint64_t{M} * i) << i;
    EXPECT_EQ(c.region_length, i < 4 ? P : i < 8 ? 2 * P : 2 * P + M) << i;
  }
  EXPECT_EQ(out[10].region_offset, 0u);
  EXPECT_EQ(out[11].region_offset, M);
  EXPECT_EQ(out[11].region_length, 2 * M);
}

}  // namespace
}  // namespace lmc
