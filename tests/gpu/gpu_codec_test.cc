// The batched GPU codec on a real CUDA device (label gpu): the checks the
// host-emulated pipeline passes in CI (tests/codec/gpu_codec_checks.h), now
// with the kernels on the device. Skips with the reason where no GPU is
// usable; run by scripts/gpu_check.sh, also under compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "../codec/gpu_codec_checks.h"

namespace lmc {
namespace {

class CudaMemory : public testing::DeviceMemory {
 public:
  ~CudaMemory() override {
    for (uint8_t* p : bufs_) cudaFree(p);
  }
  uint8_t* Alloc(size_t n) override {
    uint8_t* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n ? n : 1), cudaSuccess);
    bufs_.push_back(p);
    return p;
  }
  void Put(uint8_t* d, const void* h, size_t n) override {
    EXPECT_EQ(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void Get(void* h, const uint8_t* d, size_t n) override {
    EXPECT_EQ(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  std::vector<uint8_t*> bufs_;
};

std::unique_ptr<GpuCodec> OpenOrSkip(size_t batch_bytes) {
  auto c = GpuCodec::Open({0, batch_bytes});
  if (!c.ok()) return nullptr;
  return std::move(*c);
}

#define LMC_OPEN_OR_SKIP(var, batch)                                           \
  auto var = OpenOrSkip(batch);                                                \
  if (!var) {                                                                  \
    GTEST_SKIP() << "no usable GPU: " << GpuCodec::Open().status().ToString(); \
  }

TEST(GpuCodec, EncodesTheCpuGpuProfileFramesByteForByte) {
  LMC_OPEN_OR_SKIP(codec, size_t{3} << 20);
  testing::CheckEncodeMatchesCpu(codec.get());
}

TEST(GpuCodec, DecodesEveryCpuFrameAndRejectsWhatTheCpuRejects) {
  LMC_OPEN_OR_SKIP(codec, size_t{2} << 20);
  testing::CheckDecodeMatchesCpu(codec.get());
}

TEST(GpuCodec, LanesRunPiecesOfOneCallAtOnceWithTheSameResults) {
  auto c = GpuCodec::Open(testing::ManyLanes());
  if (!c.ok()) GTEST_SKIP() << "no usable GPU: " << c.status().ToString();
  testing::CheckLanes(c->get());
}

TEST(GpuCodec, DeviceEntryPointsTakeTheSamePaths) {
  LMC_OPEN_OR_SKIP(codec, size_t{128} << 20);
  CudaMemory mem;
  testing::CheckDeviceEntryPoints(codec.get(), &mem);
}

TEST(GpuCodec, FusedDecoderWritesWhatTheMergePassWrites) {
  LMC_OPEN_OR_SKIP(probe, size_t{1} << 20);
  CudaMemory mem;
  testing::CheckFusedDecode(
      [](const GpuCodecOptions& o) -> std::unique_ptr<GpuCodec> {
        auto c = GpuCodec::Open(o);
        return c.ok() ? std::move(*c) : nullptr;
      },
      &mem);
}

TEST(GpuCodec, HuffmanBlockSizesAreWrittenAndDecodedOnTheDevice) {
  LMC_OPEN_OR_SKIP(probe, size_t{1} << 20);
  CudaMemory mem;
  testing::CheckHuffmanBlockSizes(
      [](const GpuCodecOptions& o) -> std::unique_ptr<GpuCodec> {
        auto c = GpuCodec::Open(o);
        if (c.ok()) return std::move(*c);
        EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
        return nullptr;
      },
      &mem);
}

TEST(GpuCodec, OpenRefusesCleanlyWithoutAGpu) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is usable: " << GpuDescription();
  auto c = GpuCodec::Open();
  EXPECT_EQ(c.status().code(), Code::kUnsupported);
  EXPECT_FALSE(c.status().message().empty());
}

TEST(GpuCodec, EncodesRansStreamsOnTheDevice) {
  LMC_OPEN_OR_SKIP(codec, size_t{128} << 20);
  testing::CheckRansEncode(codec.get());
}

TEST(GpuCodec, EncodesAndDecodesPairedFp32MastersOnTheDevice) {
  LMC_OPEN_OR_SKIP(codec, size_t{128} << 20);
  CudaMemory mem;
  testing::CheckPairedFrames(codec.get(), &mem);
}

TEST(GpuCodec, DecodesRansStreamsOnTheDevice) {
  LMC_OPEN_OR_SKIP(codec, size_t{128} << 20);
  testing::CheckRansDecode(codec.get());
}

}  // namespace
}  // namespace lmc
