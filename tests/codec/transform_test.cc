#include "lmc/transform.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "transform_internal.h"

namespace lmc {
namespace {

TEST(TransformTest, Bf16ExponentIsStreamZero) {
  // 1.0f in bf16 is 0x3F80: exponent 127, sign 0, mantissa 0.
  // -2.0 is 0xC000: exponent 128, sign 1.
  uint8_t src[4] = {0x80, 0x3F, 0x00, 0xC0};
  uint8_t out[4];
  SplitStreams(DType::kBF16, src, 4, nullptr, out);
  EXPECT_EQ(out[0], 127);  // stream 0: exponents
  EXPECT_EQ(out[1], 128);
  EXPECT_EQ(out[2], 0x00);  // stream 1: mantissa << 1 | sign
  EXPECT_EQ(out[3], 0x01);
}

TEST(TransformTest, F32ExponentIsStreamZero) {
  float f[2] = {1.0f, -0.5f};
  uint8_t out[8];
  SplitStreams(DType::kF32, reinterpret_cast<uint8_t*>(f), 8, nullptr, out);
  EXPECT_EQ(out[0], 127);
  EXPECT_EQ(out[1], 126);
  // The sign ends in the lowest bit of the last stream (the low byte).
  EXPECT_EQ(out[6] & 1, 0);
  EXPECT_EQ(out[7] & 1, 1);
}

TEST(TransformTest, RoundTripEveryDtypeAndOddLengths) {
  for (int t = 0; t < kNumDTypes; ++t) {
    for (size_t n : {0, 1, 2, 3, 5, 7, 8, 9, 15, 17, 1000, 4099}) {
      auto src = testing::RandomBytes(n, static_cast<uint32_t>(n * 31 + t));
      auto base = testing::RandomBytes(n, static_cast<uint32_t>(n * 7 + t));
      for (const uint8_t* b :
           {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(base.data())}) {
        std::vector<uint8_t> s(n + 1, 0xAA), back(n + 1, 0x55);
        SplitStreams(static_cast<DType>(t), src.data(), n, b, s.data());
        MergeStreams(static_cast<DType>(t), s.data(), n, b, back.data());
        EXPECT_TRUE(std::equal(src.begin(), src.end(), back.begin())) << "dtype " << t << " n " << n;
        EXPECT_EQ(s[n], 0xAA) << "wrote past the end";
        EXPECT_EQ(back[n], 0x55) << "wrote past the end";
      }
    }
  }
}

// Restores the transforms' AVX2 setting when a test ends.
class ScalarOnly {
 public:
  ScalarOnly() : was_(internal::SetTransformAvx2(false)) {}
  ~ScalarOnly() { internal::SetTransformAvx2(was_); }

 private:
  bool was_;
};

// The vector kernels (where the CPU has them) against the scalar reference,
// byte for byte: every dtype, lengths around the 32-element steps, with and
// without a base, and buffers at every offset within a vector.
TEST(TransformTest, VectorKernelsMatchScalarReference) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here: only the scalar kernels run";
  // The default where the CPU has AVX2 (else this test compares scalar with scalar).
  ASSERT_TRUE(internal::SetTransformAvx2(true));
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType dt = static_cast<DType>(t);
    for (size_t n : {0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 4099, 65536 + 13}) {
      for (size_t align : {0, 1, 3}) {
        auto src = testing::RandomBytes(n + align, static_cast<uint32_t>(n * 131 + t + align));
        auto base = testing::RandomBytes(n + align, static_cast<uint32_t>(n * 17 + t));
        for (const uint8_t* b :
             {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(base.data() + align)}) {
          std::vector<uint8_t> fast(n + align), slow(n + align), fast_back(n + align), slow_back(n + align);
          SplitStreams(dt, src.data() + align, n, b, fast.data() + align);
          MergeStreams(dt, fast.data() + align, n, b, fast_back.data() + align);
          {
            ScalarOnly scalar;
            SplitStreams(dt, src.data() + align, n, b, slow.data() + align);
            MergeStreams(dt, fast.data() + align, n, b, slow_back.data() + align);
          }
          ASSERT_EQ(fast, slow) << "split: dtype " << t << " n " << n << " align " << align;
          ASSERT_EQ(fast_back, slow_back) << "merge: dtype " << t << " n " << n << " align " << align;
          ASSERT_TRUE(std::equal(src.begin() + align, src.end(), fast_back.begin() + align));
        }
      }
    }
  }
}

// Ranges that cover the chunk between them give the whole-chunk result.
TEST(TransformTest, RangesComposeToTheWholeChunk) {
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType dt = static_cast<DType>(t);
    for (size_t n : {0, 7, 1000, 4099, 70001}) {
      auto src = testing::RandomBytes(n, static_cast<uint32_t>(n + t));
      auto base = testing::RandomBytes(n, static_cast<uint32_t>(n * 3 + t));
      for (const uint8_t* b :
           {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(base.data())}) {
        std::vector<uint8_t> whole(n), parts(n, 0xAA), back(n, 0x55);
        SplitStreams(dt, src.data(), n, b, whole.data());
        const StreamShape sh = ShapeFor(dt, n);
        const uint8_t* ptrs[9];
        for (size_t i = 0; i < sh.count(); ++i) ptrs[i] = parts.data() + sh.offset(i);
        for (size_t step : {size_t{8}, size_t{64}, size_t{4096}}) {
          std::fill(parts.begin(), parts.end(), 0xAA);
          std::fill(back.begin(), back.end(), 0x55);
          for (size_t a = 0; a < n; a += step)
            SplitStreamsRange(dt, src.data(), n, b, parts.data(), a, std::min(n, a + step));
          ASSERT_EQ(parts, whole) << "dtype " << t << " n " << n << " step " << step;
          for (size_t a = 0; a < n; a += step)
            MergeStreamsRange(dt, ptrs, n, b, back.data(), a, std::min(n, a + step));
          ASSERT_EQ(back, src) << "dtype " << t << " n " << n << " step " << step;
        }
      }
    }
  }
}

TEST(TransformTest, XorWithSelfGivesZeros) {
  auto w = testing::Bf16Weights(1000, 1);
  std::vector<uint8_t> s(w.size());
  SplitStreams(DType::kBF16, w.data(), w.size(), w.data(), s.data());
  for (uint8_t b : s) ASSERT_EQ(b, 0);
}

TEST(TransformTest, GroupingLowersBf16Entropy) {
  auto w = testing::Bf16Weights(1 << 16, 2);
  std::vector<uint8_t> scratch(w.size());
  double grouped = GroupedEntropyBits(DType::kBF16, w.data(), w.size(), nullptr, scratch.data());
  double bytes = GroupedEntropyBits(DType::kBytes, w.data(), w.size(), nullptr, scratch.data());
  EXPECT_LT(grouped, bytes * 0.95);
  // Exponents of N(0, 0.02) weights carry under 3 bits; sign+mantissa ~8.
  EXPECT_LT(grouped / (w.size() / 2), 11.5);
}

TEST(TransformTest, HistogramAndEntropy) {
  std::vector<uint8_t> p(1000, 7);
  for (size_t i = 0; i < 500; ++i) p[i] = 9;
  uint32_t h[256];
  Histogram(p.data(), p.size(), h);
  EXPECT_EQ(h[7], 500u);
  EXPECT_EQ(h[9], 500u);
  EXPECT_NEAR(EntropyBits(h, p.size()), 1000.0, 1e-9);
}

}  // namespace
}  // namespace lmc
