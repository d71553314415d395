// The GPU codec's CUDA kernels (codec/cuda/gpu_kernels.cuh), compiled by
// the host compiler and run on the SIMT emulator of simt.h: the same
// kernels and launch geometry as the CUDA backend, with the pipeline of
// gpu_pipeline.h around them, checked with the checks a real device passes
// (gpu_codec_checks.h; tests/gpu/gpu_codec_test.cc). The host backend
// (gpu_pipeline_test.cc) runs each kernel's scalar body in a loop; this one
// runs the warp-level kernels themselves: the XXH3 hashes with their
// shuffles, rANS encoding and decoding a warp a stream with ballots, the
// histogram's shared tables, Huffman decoding with its shared table, the
// paired masters' warp sums. Under ASan (scripts/test.sh builds these
// tests with it) an access outside a device buffer is caught as
// compute-sanitizer's memcheck would.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_codec_checks.h"
#include "gpu_host_memory.h"
#include "gpu_pipeline.h"
// The emulator's built-ins before the kernels.
// clang-format off
#include "simt.h"
#include "gpu_kernels.cuh"
// clang-format on

namespace lmc {
namespace {

// What the emulator reported, over all lanes of all codecs of a test.
struct SimtLog {
  std::mutex mu;
  std::vector<std::string> errors;
  uint64_t launches = 0;
};
SimtLog& Log() {
  static SimtLog log;
  return log;
}

// Device memory and copies as the host backend (gpu_emulator.cc) has them
// (gpu_host_memory.h); kernels run on the emulator.
class SimtBackend : public gpu::HostMemory {
 public:
  SimtBackend() = default;
  explicit SimtBackend(uint64_t seed) : seed_(seed) {}

  // gpu::LaunchBody's and Histograms' launches.
  template <typename... P, typename... A>
  void Kernel(unsigned grid, unsigned block, void (*kernel)(P...), const A&... args) {
    if (!error_.empty()) return;
    error_ = simt::Launch(grid, block, seed_++, kernel, args...);
    std::lock_guard lk(Log().mu);
    ++Log().launches;
  }
  template <typename Body, typename Args>
  Status Launch(size_t count, const Args& a) {
    if (count == 0) return Status::Ok();
    if constexpr (std::is_same_v<Body, gpu::PairedMissesBody>) return PairedMisses(count, a);
    gpu::LaunchBody<Body>(*this, count, a);
    return Taken();
  }
  Status Histograms(gpu::EncStream* dev, uint32_t* hist, const gpu::EncStream* host, size_t count,
                    const uint8_t* sbuf) {
    const std::vector<uint64_t> tiles = gpu::HistTiles(host, count);
    if (tiles.empty()) return Status::Ok();
    auto* dt = reinterpret_cast<uint64_t*>(Alloc(8 * tiles.size()));
    LMC_RETURN_IF_ERROR(ToDevice(dt, tiles.data(), 8 * tiles.size()));
    Kernel(static_cast<unsigned>(tiles.size()), gpu::kHistThreads, gpu::HistKernel, dev, hist, dt, sbuf);
    LMC_RETURN_IF_ERROR(Taken());
    // The counts against the CPU's: a wrong one would not fail the frame
    // checks at once, it would send the coder's planning far astray.
    uint32_t want[256];
    for (size_t s = 0; s < count; ++s) {
      Histogram(sbuf + host[s].buf, host[s].n, want);
      for (int c = 0; c < 256; ++c)
        if (hist[256 * s + c] != want[c])
          return Reported("HistKernel: stream " + std::to_string(s) + ", byte " + std::to_string(c) + ": " +
                          std::to_string(hist[256 * s + c]) + " counted, " + std::to_string(want[c]) +
                          " in it");
    }
    return Status::Ok();
  }
  void AfterEncode(uint8_t*, size_t) {}
  std::string AllocError() const { return ""; }
  void HostTime(const char*, std::chrono::steady_clock::time_point) {}
  std::string Describe() const { return "host SIMT emulation of the CUDA kernels"; }
  std::string Profile() const { return ""; }

 private:
  // The warp-summed miss counts against the body's, thread by thread:
  // they only pick between two predictions, so a wrong count could leave
  // every frame right.
  Status PairedMisses(size_t count, const gpu::EncArgs& a) {
    std::vector<std::pair<uint32_t, uint32_t>> before(a.nc), kernel(a.nc);
    for (uint32_t c = 0; c < a.nc; ++c)
      before[c] = {a.chunks[c].misses_predicted, a.chunks[c].misses_widened};
    gpu::LaunchBody<gpu::PairedMissesBody>(*this, count, a);
    LMC_RETURN_IF_ERROR(Taken());
    for (uint32_t c = 0; c < a.nc; ++c) {
      kernel[c] = {a.chunks[c].misses_predicted, a.chunks[c].misses_widened};
      std::tie(a.chunks[c].misses_predicted, a.chunks[c].misses_widened) = before[c];
    }
    for (size_t i = 0; i < count; ++i) gpu::PairedMissesBody::Run(a, i);
    for (uint32_t c = 0; c < a.nc; ++c) {
      const std::pair<uint32_t, uint32_t> body{a.chunks[c].misses_predicted, a.chunks[c].misses_widened};
      if (kernel[c] != body)
        return Reported("PairedMissesKernel: chunk " + std::to_string(c) + ": misses " +
                        std::to_string(kernel[c].first) + "/" + std::to_string(kernel[c].second) +
                        ", the body's " + std::to_string(body.first) + "/" + std::to_string(body.second));
    }
    return Status::Ok();
  }
  // An error for the test (GpuSimt::TearDown) and for the codec's call.
  Status Reported(const std::string& e) {
    std::lock_guard lk(Log().mu);
    Log().errors.push_back(e);
    return Status::IOError("SIMT emulator: " + e);
  }
  // The error of the launches since the last call, if any.
  Status Taken() {
    if (error_.empty()) return Status::Ok();
    const std::string e = std::move(error_);
    error_.clear();
    return Reported(e);
  }

  uint64_t seed_ = 1;
  std::string error_;
};

// LMC_SIMT_SEED picks the threads' orders (default 1), so that a failure
// seen once can be run again.
uint64_t BaseSeed() {
  const char* s = std::getenv("LMC_SIMT_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 1;
}

std::unique_ptr<GpuCodec> OpenSimt(const GpuCodecOptions& o) {
  if (!gpu::CheckGpuCodecOptions(o).ok()) return nullptr;
  std::vector<SimtBackend> lanes;
  for (int l = 0; l < std::max(1, o.lanes); ++l) lanes.emplace_back(BaseSeed() * 1000003 + 7919 * l);
  return std::make_unique<gpu::BatchCodec<SimtBackend>>(std::move(lanes), o);
}

// Every test: the emulator ran kernels, and none of them broke its rules.
class GpuSimt : public ::testing::Test {
 protected:
  void SetUp() override {
    std::lock_guard lk(Log().mu);
    Log().errors.clear();
    Log().launches = 0;
  }
  void TearDown() override {
    std::lock_guard lk(Log().mu);
    EXPECT_GT(Log().launches, 0u);
    for (const std::string& e : Log().errors) ADD_FAILURE() << e;
  }
};

TEST_F(GpuSimt, EncodesTheCpuGpuProfileFramesByteForByte) {
  auto codec = OpenSimt({0, size_t{3} << 20});
  testing::CheckEncodeMatchesCpu(codec.get());
}

TEST_F(GpuSimt, DecodesEveryCpuFrameAndRejectsWhatTheCpuRejects) {
  auto codec = OpenSimt({0, size_t{2} << 20});
  testing::CheckDecodeMatchesCpu(codec.get());
}

TEST_F(GpuSimt, LanesRunPiecesOfOneCallAtOnceWithTheSameResults) {
  auto codec = OpenSimt(testing::ManyLanes());
  testing::CheckLanes(codec.get());
}

TEST_F(GpuSimt, DeviceEntryPointsTakeTheSamePaths) {
  auto codec = OpenSimt({0, size_t{128} << 20});
  testing::HostArrays mem;
  testing::CheckDeviceEntryPoints(codec.get(), &mem);
}

TEST_F(GpuSimt, FusedDecoderWritesWhatTheMergePassWrites) {
  testing::HostArrays mem;
  testing::CheckFusedDecode(OpenSimt, &mem);
}

TEST_F(GpuSimt, HuffmanBlockSizesAreWrittenAndDecoded) {
  testing::HostArrays mem;
  testing::CheckHuffmanBlockSizes(OpenSimt, &mem);
}

TEST_F(GpuSimt, EncodesRansStreamsAWarpAStream) {
  auto codec = OpenSimt({0, size_t{128} << 20});
  testing::CheckRansEncode(codec.get());
}

TEST_F(GpuSimt, DecodesRansStreamsAWarpAStream) {
  auto codec = OpenSimt({0, size_t{128} << 20});
  testing::CheckRansDecode(codec.get());
}

TEST_F(GpuSimt, EncodesAndDecodesPairedFp32Masters) {
  auto codec = OpenSimt({0, size_t{128} << 20});
  testing::HostArrays mem;
  testing::CheckPairedFrames(codec.get(), &mem);
}

// The emulator itself: it must catch what a device would get wrong, or the
// checks above prove less than they seem to.
__global__ void LaneLeavesBeforeShuffle(uint32_t* out) {
  if (threadIdx.x % 32 == 5) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, threadIdx.x, 0);
}
__global__ void WarpsDisagree(uint32_t* out) {
  if (threadIdx.x % 2) {
    out[threadIdx.x] = __ballot_sync(0xffffffffu, 1);
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1u, 1);
  }
}
// Half of each warp at the block's barrier, the other half at a warp
// collective that needs the first half.
__global__ void HalfAWarpAtABarrier(uint32_t* out) {
  if (threadIdx.x % 32 < 16) {
    __syncthreads();
  } else {
    __syncwarp();
  }
  out[threadIdx.x] = 1;
}
// Reads a neighbour's shared value without a barrier: right in some orders.
__global__ void RacyNeighbour(uint32_t* out, uint32_t tag) {
  __shared__ uint32_t v[64];
  v[threadIdx.x] = tag + threadIdx.x;
  out[threadIdx.x] = v[(threadIdx.x + 1) % 64];
}
__global__ void Collectives(uint64_t* out) {
  const unsigned t = threadIdx.x, lane = t % 32;
  __shared__ uint32_t sum;
  if (t == 0) sum = 0;
  __syncthreads();
  atomicAdd(&sum, t);
  const int any_or = __syncthreads_or(t == 77);
  uint64_t v = uint64_t{t} << 33 | lane;
  for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const uint32_t up = __shfl_up_sync(0xffffffffu, lane * 10, 3);
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  out[5 * t] = v;
  out[5 * t + 1] = up;
  out[5 * t + 2] = ballot;
  out[5 * t + 3] = static_cast<uint64_t>(any_or) << 32 | __all_sync(0xffffffffu, lane < 32);
  __syncthreads();
  out[5 * t + 4] = sum + blockIdx.x * 1000 + blockDim.x * 1000000ull;
}

TEST(SimtEmulator, CollectivesGiveWhatCudaDefines) {
  for (uint64_t seed : {1, 2, 3}) {
    std::vector<uint64_t> out(5 * 128, 0);
    ASSERT_EQ(simt::Launch(2, 128, seed, Collectives, out.data()), "");
    for (unsigned t = 0; t < 128; ++t) {
      const unsigned lane = t % 32, w0 = t - lane;
      uint64_t v = 0;
      for (unsigned j = 0; j < 32; ++j) v += uint64_t{w0 + j} << 33 | j;
      EXPECT_EQ(out[5 * t], v) << t;
      EXPECT_EQ(out[5 * t + 1], lane >= 3 ? (lane - 3) * 10 : lane * 10) << t;
      EXPECT_EQ(out[5 * t + 2], 0x49249249u) << t;  // lanes 0, 3, 6, ... 30
      EXPECT_EQ(out[5 * t + 3], (uint64_t{1} << 32) | 1) << t;
      EXPECT_EQ(out[5 * t + 4], 127u * 128 / 2 + 1000 + 128000000ull) << t;  // the second block's
    }
  }
}

TEST(SimtEmulator, CatchesLanesThatLeaveDisagreeOrWaitForever) {
  std::vector<uint32_t> out(128, 0);
  for (uint64_t seed = 1; seed <= 6; ++seed) {  // the lane leaves before or after the others arrive
    const std::string left = simt::Launch(1, 64, seed, LaneLeavesBeforeShuffle, out.data());
    EXPECT_NE(left.find("1 of its lanes left the kernel"), std::string::npos) << left;
  }
  const std::string disagree = simt::Launch(1, 32, 1, WarpsDisagree, out.data());
  EXPECT_NE(disagree.find("lane 0 at"), std::string::npos) << disagree;
  const std::string stuck = simt::Launch(1, 128, 1, HalfAWarpAtABarrier, out.data());
  EXPECT_NE(stuck.find("cannot complete"), std::string::npos) << stuck;
  // and runs the next launch as if nothing had happened
  std::vector<uint64_t> ok(5 * 128, 0);
  EXPECT_EQ(simt::Launch(1, 128, 1, Collectives, ok.data()), "");
}

TEST(SimtEmulator, ThreadOrderVariesWithTheSeed) {
  // Each thread reads its neighbour's slot before or after the neighbour
  // wrote it, depending on the order: some seeds must show both.
  bool saw_written = false, saw_stale = false;
  for (uint64_t seed = 1; seed <= 8 && !(saw_written && saw_stale); ++seed) {
    std::vector<uint32_t> out(64, 0);
    const uint32_t tag = static_cast<uint32_t>(seed) << 16;
    ASSERT_EQ(simt::Launch(1, 64, seed, RacyNeighbour, out.data(), tag), "");
    for (unsigned t = 0; t < 64; ++t) {
      const uint32_t want = tag + (t + 1) % 64;
      (out[t] == want ? saw_written : saw_stale) = true;
    }
  }
  EXPECT_TRUE(saw_written);
  EXPECT_TRUE(saw_stale);
}

}  // namespace
}  // namespace lmc
