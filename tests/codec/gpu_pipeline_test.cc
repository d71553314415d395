// The GPU codec's pipeline (gpu_pipeline.h) on the host backend: the same
// planning, tables and kernel bodies the CUDA backend runs, checked against
// the CPU codec on machines without a GPU. tests/gpu/ runs the same checks
// on a real device.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gpu_pipeline.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "test_util.h"

namespace lmc {
namespace {

struct Case {
  DType dtype;
  std::vector<uint8_t> src, base;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  uint32_t seed = 1;
  for (int t = 0; t < kNumDTypes; ++t) {
    for (size_t n : {size_t{4096}, size_t{4099}, size_t{70001}, size_t{1} << 20}) {
      Case c;
      c.dtype = static_cast<DType>(t);
      c.src = testing::Bf16Weights(n / 2 + 1, seed++);
      c.src.resize(n);
      cases.push_back(c);
      if (n == 70001) {  // and as a delta against a slightly different base
        Case d = c;
        d.base = c.src;
        for (size_t i = 0; i < n; i += 5) d.base[i] ^= 0x21;
        cases.push_back(d);
      }
    }
  }
  // Small chunks (CPU inside the batch), constant and random data.
  Case small{DType::kBF16, testing::Bf16Weights(100, 3), {}};
  cases.push_back(small);
  cases.push_back({DType::kF32, std::vector<uint8_t>(65536, 0x3c), {}});
  cases.push_back({DType::kBytes, testing::RandomBytes(100000, 4), {}});
  cases.push_back({DType::kBF16, {}, {}});
  return cases;
}

TEST(GpuPipeline, EncodesTheCpuGpuProfileFramesByteForByte) {
  auto codec = gpu::OpenHostEmulatedCodec({0, size_t{3} << 20});  // several batches
  auto cases = Cases();
  std::vector<std::vector<uint8_t>> out(cases.size());
  std::vector<GpuEncodeItem> items(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    out[i].resize(MaxEncodedSize(cases[i].src.size()));
    items[i].src = cases[i].src.data();
    items[i].n = cases[i].src.size();
    items[i].dtype = cases[i].dtype;
    items[i].base = cases[i].base.empty() ? nullptr : cases[i].base.data();
    items[i].dst = out[i].data();
    items[i].cap = out[i].size();
  }
  ASSERT_TRUE(codec->EncodeBatch(items.data(), items.size()).ok());
  Workspace ws;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << " dtype " << static_cast<int>(cases[i].dtype) << " n "
                                      << cases[i].src.size());
    ASSERT_TRUE(items[i].status.ok()) << items[i].status.ToString();
    std::vector<uint8_t> ref(MaxEncodedSize(cases[i].src.size()));
    auto r = EncodeChunk(cases[i].src.data(), cases[i].src.size(),
                         {cases[i].dtype, items[i].base, EncodeProfile::kGpu}, ref.data(), ref.size(), ws);
    ASSERT_TRUE(r.ok());
    ref.resize(*r);
    out[i].resize(items[i].len);
    EXPECT_EQ(out[i], ref);
  }
  EXPECT_GT(codec->stats().encode_chunks, 0u);
}

TEST(GpuPipeline, DecodesEveryCpuFrameAndRejectsWhatTheCpuRejects) {
  auto codec = gpu::OpenHostEmulatedCodec({0, size_t{2} << 20});
  auto cases = Cases();
  Workspace ws;
  std::vector<std::vector<uint8_t>> frames;
  std::vector<const Case*> of;
  for (const Case& c : cases) {
    for (EncodeProfile p : {EncodeProfile::kCpu, EncodeProfile::kGpu}) {
      std::vector<uint8_t> f(MaxEncodedSize(c.src.size()));
      auto r = EncodeChunk(c.src.data(), c.src.size(), {c.dtype, c.base.empty() ? nullptr : c.base.data(), p},
                           f.data(), f.size(), ws);
      ASSERT_TRUE(r.ok());
      f.resize(*r);
      frames.push_back(f);
      of.push_back(&c);
    }
  }
  // Corrupt copies: a flipped payload byte, a flipped header byte, a cut.
  std::mt19937 rng(5);
  const size_t clean = frames.size();
  for (size_t i = 0; i < clean; ++i) {
    if (frames[i].size() < 200) continue;
    auto f = frames[i];
    f[100 + rng() % (f.size() - 100)] ^= 0x10;
    frames.push_back(f);
    of.push_back(of[i]);
    f = frames[i];
    f[rng() % 60] ^= 0x01;
    frames.push_back(f);
    of.push_back(of[i]);
    f = frames[i];
    f.resize(f.size() / 2);
    frames.push_back(f);
    of.push_back(of[i]);
  }
  std::vector<GpuDecodeItem> items(frames.size());
  std::vector<std::vector<uint8_t>> out(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    out[i].assign(of[i]->src.size() + 1, 0xEE);
    items[i].frame = frames[i].data();
    items[i].len = frames[i].size();
    items[i].base = of[i]->base.empty() ? nullptr : of[i]->base.data();
    items[i].base_len = of[i]->base.size();
    items[i].dst = out[i].data();
    items[i].cap = out[i].size();
  }
  ASSERT_TRUE(codec->DecodeBatch(items.data(), items.size()).ok());
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "frame " << i);
    std::vector<uint8_t> ref(out[i].size());
    auto r = DecodeChunk(frames[i].data(), frames[i].size(), items[i].base, items[i].base_len, ref.data(),
                         ref.size(), ws);
    EXPECT_EQ(items[i].status.code(), r.status().code()) << items[i].status.ToString() << " vs "
                                                         << r.status().ToString();
    EXPECT_EQ(items[i].status.message(), r.status().message());
    if (r.ok()) {
      ASSERT_EQ(items[i].out_len, *r);
      EXPECT_TRUE(std::equal(ref.begin(), ref.begin() + *r, out[i].begin()));
      if (i < clean) {
        EXPECT_TRUE(std::equal(of[i]->src.begin(), of[i]->src.end(), out[i].begin()));
      }
    }
  }
  EXPECT_GT(codec->stats().decode_chunks, 0u);
}

TEST(GpuPipeline, DeviceEntryPointsTakeTheSamePaths) {
  // On the host backend "device" pointers are host pointers: the *Device
  // calls run their own staging-free path.
  auto codec = gpu::OpenHostEmulatedCodec();
  auto src = testing::Bf16Weights(300000, 8);
  std::vector<uint8_t> frame(MaxEncodedSize(src.size()));
  GpuEncodeItem e;
  e.src = src.data();
  e.n = src.size();
  e.dtype = DType::kBF16;
  e.dst = frame.data();
  e.cap = frame.size();
  ASSERT_TRUE(codec->EncodeBatchDevice(&e, 1).ok());
  ASSERT_TRUE(e.status.ok());
  std::vector<uint8_t> back(src.size());
  GpuDecodeItem d;
  d.frame = frame.data();
  d.len = e.len;
  d.dst = back.data();
  d.cap = back.size();
  ASSERT_TRUE(codec->DecodeBatchDevice(&d, 1).ok());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(back, src);
}

}  // namespace
}  // namespace lmc
