// The .lmc container on a GpuCodec (`lmc compress|decompress --gpu`),
// without a GPU: a FakeGpuCodec (the CPU codec behind the interface) that
// can fail a batch as a device would.
#include <gtest/gtest.h>

#include <cstring>

#include "../fake_gpu_codec.h"
#include "gpu_pipeline.h"  // OpenHostEmulatedCodec
#include "lmc/container.h"
#include "test_util.h"

namespace lmc {
namespace {

using testing::FakeGpuCodec;

// 12 chunks of 64 KiB of bf16-like weights and a tail.
std::vector<uint8_t> Weights() { return testing::Bf16Weights((12 << 15) + 1000, 7); }

// Runs a streaming (de)compressor from `in` to a returned vector.
template <typename Run>
Result<std::vector<uint8_t>> Streamed(const std::vector<uint8_t>& in, Run run) {
  size_t pos = 0;
  std::vector<uint8_t> out;
  ReadFn read = [&](uint8_t* b, size_t n) -> Result<size_t> {
    n = std::min(n, in.size() - pos);
    std::memcpy(b, in.data() + pos, n);
    pos += n;
    return n;
  };
  WriteFn write = [&](const uint8_t* b, size_t n) {
    out.insert(out.end(), b, b + n);
    return Status::Ok();
  };
  Status s = run(read, write);
  if (!s.ok()) return s;
  return out;
}

Result<std::vector<uint8_t>> CompressStreamed(const std::vector<uint8_t>& in, const CompressOptions& co,
                                              CompressStats* st) {
  return Streamed(in, [&](const ReadFn& r, const WriteFn& w) { return CompressStream(r, w, co, st); });
}

Result<std::vector<uint8_t>> DecompressStreamed(const std::vector<uint8_t>& in, const DecompressOptions& o,
                                                DecompressStats* st) {
  return Streamed(in, [&](const ReadFn& r, const WriteFn& w) { return DecompressStream(r, w, o, st); });
}

TEST(ContainerGpuTest, BatchesOnTheGpuRoundTripThroughEitherPath) {
  const auto data = Weights();
  FakeGpuCodec gpu;
  CompressOptions co;
  co.chunk_size = 64 << 10;
  co.gpu = &gpu;
  CompressStats cs;
  auto packed = CompressStreamed(data, co, &cs);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(cs.chunks, 13u);
  EXPECT_EQ(cs.gpu_chunks, 13u);
  EXPECT_EQ(cs.gpu_failed_batches, 0u);
  EXPECT_EQ(gpu.calls(), 1u);  // 13 chunks fit one batch
  // The CPU decodes what the GPU encoded, and the GPU path decodes it too.
  auto back = DecompressBuffer(packed->data(), packed->size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  DecompressOptions dopt;
  dopt.gpu = &gpu;
  DecompressStats ds;
  auto back2 = DecompressStreamed(*packed, dopt, &ds);
  ASSERT_TRUE(back2.ok()) << back2.status().ToString();
  EXPECT_EQ(*back2, data);
  EXPECT_EQ(ds.gpu_chunks, 13u);
  std::vector<uint8_t> back3;
  ASSERT_TRUE(DecompressBufferInto(packed->data(), packed->size(), dopt, &back3, &ds).ok());
  EXPECT_EQ(back3, data);
  EXPECT_EQ(ds.gpu_chunks, 13u);
  // The in-memory compressor writes the same container.
  std::vector<uint8_t> mem;
  CompressStats ms;
  ASSERT_TRUE(CompressBufferInto(data.data(), data.size(), co, &mem, &ms).ok());
  EXPECT_EQ(mem, *packed);
  EXPECT_EQ(ms.gpu_chunks, 13u);
}

// The emulated GPU pipeline with its 3rd frame changed after the encoder
// wrote it: the codec's check (verify_encode) finds it, the CPU encodes
// that chunk, the container is whole and the GPU is not used again by the
// call (lmc warns).
TEST(ContainerGpuTest, AFrameThatDoesNotDecodeBackOnTheGpuIsEncodedOnTheCpu) {
  const auto data = Weights();
  gpu::EmulatedFaults faults;
  faults.flip_frame = 3;
  auto gpu = gpu::OpenHostEmulatedCodec({}, faults);
  CompressOptions co;
  co.chunk_size = 64 << 10;
  co.gpu = gpu.get();
  CompressStats cs;
  auto packed = CompressStreamed(data, co, &cs);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(cs.chunks, 13u);
  EXPECT_EQ(cs.gpu_verify_failures, 1u);
  EXPECT_EQ(cs.gpu_chunks, 12u);
  EXPECT_EQ(cs.gpu_failed_batches, 0u);
  EXPECT_EQ(gpu->stats().encode_verify_failures, 1u);
  auto back = DecompressBuffer(packed->data(), packed->size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
}

TEST(ContainerGpuTest, ADeviceFailureMovesTheBatchAndTheRestToTheCpu) {
  // A GPU batch holds kContainerGpuBatchBytes (64 MiB) of chunks: 66 MiB
  // make two.
  std::vector<uint8_t> big = testing::Bf16Weights(33 << 20, 8);
  FakeGpuCodec gpu(/*fail_batch=*/2);
  CompressOptions co;
  co.gpu = &gpu;
  CompressStats cs;
  auto packed = CompressStreamed(big, co, &cs);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(cs.gpu_failed_batches, 1u);
  EXPECT_NE(cs.gpu_failure.find("injected by the test"), std::string::npos) << cs.gpu_failure;
  EXPECT_EQ(gpu.calls(), 2u);  // nothing after the failure reaches the device
  EXPECT_GT(cs.gpu_chunks, 0u);
  EXPECT_LT(cs.gpu_chunks, cs.chunks);
  auto back = DecompressBuffer(packed->data(), packed->size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == big);

  // Decoding: the first batch fails, the CPU does it all.
  FakeGpuCodec dgpu(/*fail_batch=*/1);
  DecompressOptions dopt;
  dopt.gpu = &dgpu;
  DecompressStats ds;
  auto out = DecompressStreamed(*packed, dopt, &ds);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(*out == big);
  EXPECT_EQ(ds.gpu_failed_batches, 1u);
  EXPECT_EQ(ds.gpu_chunks, 0u);
  EXPECT_EQ(dgpu.calls(), 1u);
  FakeGpuCodec dgpu2(/*fail_batch=*/1);
  dopt.gpu = &dgpu2;
  std::vector<uint8_t> out2;
  ASSERT_TRUE(DecompressBufferInto(packed->data(), packed->size(), dopt, &out2, &ds).ok());
  EXPECT_TRUE(out2 == big);
  EXPECT_EQ(ds.gpu_failed_batches, 1u);
}

TEST(ContainerGpuTest, ACorruptFrameIsCorruptionOnTheGpuPathToo) {
  const auto data = Weights();
  CompressOptions co;
  co.chunk_size = 64 << 10;
  auto packed = CompressBuffer(data.data(), data.size(), co);
  ASSERT_TRUE(packed.ok());
  std::vector<uint8_t> bad = *packed;
  bad[bad.size() / 2] ^= 0x40;  // inside a frame's payload
  FakeGpuCodec gpu;
  DecompressOptions dopt;
  dopt.gpu = &gpu;
  DecompressStats ds;
  EXPECT_TRUE(DecompressStreamed(bad, dopt, &ds).status().IsCorruption());
  std::vector<uint8_t> out;
  EXPECT_TRUE(DecompressBufferInto(bad.data(), bad.size(), dopt, &out).IsCorruption());
}

}  // namespace
}  // namespace lmc
