// The CUDA transforms against the CPU reference. Runs where a GPU is
// usable; elsewhere it checks that the GPU entry points refuse cleanly.
#include "lmc/gpu.h"

#include <gtest/gtest.h>

#include "lmc/transform.h"
#include "test_util.h"

namespace lmc {
namespace {

TEST(GpuTest, MatchesCpuReferenceOrRefusesCleanly) {
  auto src = testing::RandomBytes(100003, 1);
  auto base = testing::RandomBytes(100003, 2);
  std::vector<uint8_t> out(src.size());
  if (!GpuAvailable()) {
    EXPECT_EQ(GpuSplitStreams(DType::kBF16, src.data(), src.size(), nullptr, out.data()).code(),
              Code::kUnsupported);
    EXPECT_FALSE(GpuDescription().empty());
    GTEST_SKIP() << "no usable GPU: " << GpuDescription();
  }
  for (int t = 0; t < kNumDTypes; ++t) {
    for (const uint8_t* b : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(base.data())}) {
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

}  // namespace
}  // namespace lmc
