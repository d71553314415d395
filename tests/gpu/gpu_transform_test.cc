// The CUDA transforms against the CPU reference. Runs where a GPU is
// usable; elsewhere it checks that the GPU entry points refuse cleanly.
#include <gtest/gtest.h>

#include "../codec/test_util.h"
#include "lmc/gpu.h"
#include "lmc/transform.h"

namespace lmc {
namespace {

TEST(GpuTest, MatchesCpuReferenceOrRefusesCleanly) {
  std::vector<uint8_t> out(16);
  if (!GpuAvailable()) {
    auto src = testing::RandomBytes(16, 1);
    EXPECT_EQ(GpuSplitStreams(DType::kBF16, src.data(), src.size(), nullptr, out.data()).code(),
              Code::kUnsupported);
    EXPECT_FALSE(GpuDescription().empty());
    GTEST_SKIP() << "no usable GPU: " << GpuDescription();
  }
  // Sizes with every tail length of an 8-byte dtype, one block, and one
  // buffer of several MiB (many blocks, a grid larger than one wave).
  for (size_t size : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{7}, size_t{4096 + 5},
                      size_t{100003}, size_t{(8u << 20) + 3}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto src = testing::RandomBytes(size, 1);
    auto base = testing::RandomBytes(size, 2);
    for (int t = 0; t < kNumDTypes; ++t) {
      for (const uint8_t* b :
           {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(base.data())}) {
        DType d = static_cast<DType>(t);
        std::vector<uint8_t> cpu(src.size()), gpu(src.size()), back(src.size());
        SplitStreams(d, src.data(), src.size(), b, cpu.data());
        ASSERT_TRUE(GpuSplitStreams(d, src.data(), src.size(), b, gpu.data()).ok());
        EXPECT_EQ(cpu, gpu) << "split dtype " << t;
        ASSERT_TRUE(GpuMergeStreams(d, gpu.data(), gpu.size(), b, back.data()).ok());
        EXPECT_EQ(back, src) << "merge dtype " << t;
      }
    }
  }
}

}  // namespace
}  // namespace lmc
