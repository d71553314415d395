#include "lmc/delta_estimate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "lmc/codec.h"
#include "test_util.h"

namespace lmc {
namespace {

// "Next training step": every f32 weight moves by a small relative step,
// as an optimizer update with a small learning rate does.
std::vector<uint8_t> StepF32(const std::vector<uint8_t>& w, uint32_t seed, float rel) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, rel);
  std::vector<uint8_t> out(w.size());
  for (size_t i = 0; i < w.size(); i += 4) {
    float f;
    std::memcpy(&f, &w[i], 4);
    f *= 1.0f + nd(rng);
    std::memcpy(&out[i], &f, 4);
  }
  return out;
}

size_t FrameSize(const std::vector<uint8_t>& d, DType t, const uint8_t* base) {
  Workspace ws;
  std::vector<uint8_t> frame(MaxEncodedSize(d.size()));
  EncodeParams p;
  p.dtype = t;
  p.base = base;
  auto n = EncodeChunk(d.data(), d.size(), p, frame.data(), frame.size(), ws);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : 0;
}

TEST(DeltaEstimateTest, NearbyStepPrefersDeltaAndDeltaIsSmaller) {
  auto prev = testing::F32Weights(256 * 1024, 1);
  auto next = StepF32(prev, 2, 1e-4f);
  auto est = EstimateDelta(DType::kF32, next.data(), prev.data(), next.size());
  EXPECT_EQ(est.sampled, DeltaEstimateOptions{}.sample_bytes);
  EXPECT_TRUE(est.prefer_delta) << est.delta_bits << " vs " << est.standalone_bits;
  // The real frames agree with the estimate.
  EXPECT_LT(FrameSize(next, DType::kF32, prev.data()), FrameSize(next, DType::kF32, nullptr));
}

TEST(DeltaEstimateTest, UnrelatedBasePrefersStandalone) {
  auto a = testing::F32Weights(256 * 1024, 3);
  auto b = testing::F32Weights(256 * 1024, 4);
  auto est = EstimateDelta(DType::kF32, a.data(), b.data(), a.size());
  EXPECT_FALSE(est.prefer_delta) << est.delta_bits << " vs " << est.standalone_bits;
  EXPECT_GT(FrameSize(a, DType::kF32, b.data()), FrameSize(a, DType::kF32, nullptr));
}

TEST(DeltaEstimateTest, IdenticalDataIsAlmostFreeAsDelta) {
  auto a = testing::Bf16Weights(100000, 5);
  auto est = EstimateDelta(DType::kBF16, a.data(), a.data(), a.size());
  EXPECT_TRUE(est.prefer_delta);
  EXPECT_EQ(est.delta_bits, 0.0);
  EXPECT_GT(est.standalone_bits, 0.0);
}

TEST(DeltaEstimateTest, SmallChunkIsSampledWhole) {
  auto a = testing::Bf16Weights(1000, 6);
  auto b = testing::Bf16Weights(1000, 7);
  auto est = EstimateDelta(DType::kBF16, a.data(), b.data(), a.size());
  EXPECT_EQ(est.sampled, a.size());
  auto bound = ChunkEntropyBound(DType::kBF16, a.data(), b.data(), a.size());
  // Whole-chunk sample: the estimate is exactly the bound.
  EXPECT_DOUBLE_EQ(est.standalone_bits / 8.0, bound.standalone_bytes);
  EXPECT_DOUBLE_EQ(est.delta_bits / 8.0, bound.delta_bytes);
}

TEST(DeltaEstimateTest, BoundIsCloseToTheFrame) {
  auto prev = testing::F32Weights(256 * 1024, 8);
  auto next = StepF32(prev, 9, 1e-3f);
  auto bound = ChunkEntropyBound(DType::kF32, next.data(), prev.data(), next.size());
  EXPECT_LT(bound.delta_bytes, bound.standalone_bytes);
  // Order-0 coders land within a few percent above the order-0 bound.
  const double frame = static_cast<double>(FrameSize(next, DType::kF32, prev.data()));
  EXPECT_GE(frame, bound.delta_bytes * 0.99);
  EXPECT_LE(frame, bound.delta_bytes * 1.05);
  auto none = ChunkEntropyBound(DType::kF32, next.data(), nullptr, next.size());
  EXPECT_EQ(none.delta_bytes, none.standalone_bytes);
}

}  // namespace
}  // namespace lmc
