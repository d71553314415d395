// The GPU codec's pipeline (gpu_pipeline.h) on the host backend: the same
// planning, tables and kernel bodies the CUDA backend runs, checked against
// the CPU codec on machines without a GPU. tests/gpu/gpu_codec_test.cc runs
// the same checks on a real device (label gpu).
#include "gpu_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "gpu_codec_checks.h"

namespace lmc {
namespace {

class HostMemory : public testing::DeviceMemory {
 public:
  uint8_t* Alloc(size_t n) override {
    bufs_.push_back(std::make_unique<uint8_t[]>(n ? n : 1));
    return bufs_.back().get();
  }
  void Put(uint8_t* d, const void* h, size_t n) override { std::memcpy(d, h, n); }
  void Get(void* h, const uint8_t* d, size_t n) override { std::memcpy(h, d, n); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> bufs_;
};

TEST(GpuPipeline, EncodesTheCpuGpuProfileFramesByteForByte) {
  auto codec = gpu::OpenHostEmulatedCodec({0, size_t{3} << 20});  // several batches
  testing::CheckEncodeMatchesCpu(codec.get());
}

TEST(GpuPipeline, DecodesEveryCpuFrameAndRejectsWhatTheCpuRejects) {
  auto codec = gpu::OpenHostEmulatedCodec({0, size_t{2} << 20});
  testing::CheckDecodeMatchesCpu(codec.get());
}

TEST(GpuPipeline, LanesRunPiecesOfOneCallAtOnceWithTheSameResults) {
  auto codec = gpu::OpenHostEmulatedCodec(testing::ManyLanes());
  testing::CheckLanes(codec.get());
}

TEST(GpuPipeline, OneLaneRunsTheSameCalls) {
  GpuCodecOptions o = testing::ManyLanes();
  o.lanes = 1;
  auto codec = gpu::OpenHostEmulatedCodec(o);
  testing::CheckLanes(codec.get());
}

TEST(GpuPipeline, DeviceEntryPointsTakeTheSamePaths) {
  auto codec = gpu::OpenHostEmulatedCodec();
  HostMemory mem;
  testing::CheckDeviceEntryPoints(codec.get(), &mem);
}

TEST(GpuPipeline, FusedDecoderWritesWhatTheMergePassWrites) {
  HostMemory mem;
  testing::CheckFusedDecode([](const GpuCodecOptions& o) { return gpu::OpenHostEmulatedCodec(o); }, &mem);
}

TEST(GpuPipeline, DecodesRansStreamsOnTheDevice) {
  auto codec = gpu::OpenHostEmulatedCodec();
  testing::CheckRansDecode(codec.get());
}

}  // namespace
}  // namespace lmc
