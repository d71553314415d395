// The GPU codec's pipeline (gpu_pipeline.h) on the host backend: the same
// planning, tables and kernel bodies the CUDA backend runs, checked against
// the CPU codec on machines without a GPU. tests/gpu/gpu_codec_test.cc runs
// the same checks on a real device (label gpu).
#include "gpu_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "gpu_codec_checks.h"
#include "hd/rans_hd.h"
#include "lmc/transform.h"
#include "rans.h"

namespace lmc {
namespace {

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

// A device failure in the middle of a host call (a kernel launch failing
// on one of the lanes, one throwing on a lane's thread, an allocation
// failing) is the call's error, with its reason, and the codec runs the
// next call as if nothing had happened: every frame the CPU's, every chunk
// decoded as the CPU decodes it. Without the lanes catching, the
// std::bad_alloc would end the process.
TEST(GpuPipeline, DeviceFailuresAreTheCallsErrorAndTheNextCallIsRight) {
  struct Fault {
    const char* what;
    gpu::EmulatedFaults faults;
    const char* message;
  };
  const Fault kFaults[] = {{"launch", {3, 0, 0}, "emulated: kernel launch failed"},
                           {"throw", {0, 3, 0}, "GPU lane: std::bad_alloc"},
                           {"alloc", {0, 0, 5}, "(emulated: out of device memory)"}};
  const auto cases = testing::Cases();
  std::vector<std::vector<uint8_t>> frames;
  {
    auto clean = gpu::OpenHostEmulatedCodec(testing::ManyLanes());
    auto items = testing::EncodeItems(cases, &frames);
    ASSERT_TRUE(clean->EncodeBatch(items.data(), items.size()).ok());
    for (size_t i = 0; i < items.size(); ++i) frames[i].resize(items[i].len);
  }
  for (const Fault& f : kFaults) {
    SCOPED_TRACE(f.what);
    auto codec = gpu::OpenHostEmulatedCodec(testing::ManyLanes(), f.faults);
    std::vector<std::vector<uint8_t>> out;
    auto items = testing::EncodeItems(cases, &out);
    Status st = codec->EncodeBatch(items.data(), items.size());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(f.message), std::string::npos) << st.ToString();
    testing::CheckEncodeMatchesCpu(codec.get());

    auto dcodec = gpu::OpenHostEmulatedCodec(testing::ManyLanes(), f.faults);
    std::vector<std::vector<uint8_t>> back(cases.size());
    std::vector<GpuDecodeItem> dec(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      back[i].resize(cases[i].src.size() + 1);
      dec[i].frame = frames[i].data();
      dec[i].len = frames[i].size();
      dec[i].base = cases[i].base.empty() ? nullptr : cases[i].base.data();
      dec[i].base_len = cases[i].base.size();
      dec[i].dst = back[i].data();
      dec[i].cap = back[i].size();
    }
    st = dcodec->DecodeBatch(dec.data(), dec.size());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(f.message), std::string::npos) << st.ToString();
    testing::CheckDecodeMatchesCpu(dcodec.get());
  }
}

// A frame changed on the device after the encoder wrote it (a faulty
// device, a kernel bug) at its start (the header), middle or end: with
// verify_encode (the default) the call still gives every chunk the CPU's
// frame, the changed one encoded again on the CPU and counted; without
// it, that frame would have been stored as it came back and could not be
// read. Host and device calls, several lanes, deltas and paired masters
// among the chunks.
TEST(GpuPipeline, EncodedFramesThatDoNotDecodeBackAreEncodedAgainOnTheCpu) {
  auto cases = testing::Cases();
  {
    testing::Case paired{DType::kF32, testing::Bf16Weights(65536, 21), {}};
    paired.base.resize(paired.src.size() / 2 + 64);  // bf16 twin, 32 elements ahead
    for (size_t i = 0; i + 4 <= paired.src.size(); i += 4) {
      paired.base[64 + i / 2] = paired.src[i + 2];
      paired.base[64 + i / 2 + 1] = paired.src[i + 3];
    }
    cases.push_back(paired);
  }
  const size_t paired_case = cases.size() - 1;
  size_t device_frames = 0;
  for (const auto& c : cases) device_frames += c.src.size() >= gpu::kMinGpuChunk;
  Workspace ws;
  std::vector<std::vector<uint8_t>> ref(cases.size());
  auto items_of = [&](std::vector<std::vector<uint8_t>>* out) {
    auto items = testing::EncodeItems(cases, out);
    items[paired_case].widened_base_offset = 32;
    items[paired_case].base_len = cases[paired_case].base.size();
    return items;
  };
  {
    std::vector<std::vector<uint8_t>> out;
    auto items = items_of(&out);
    for (size_t i = 0; i < cases.size(); ++i) {
      EncodeParams p{cases[i].dtype, items[i].base, EncodeProfile::kGpu};
      p.widened_base_offset = items[i].widened_base_offset;
      p.base_len = items[i].base_len;
      ref[i].resize(MaxEncodedSize(cases[i].src.size()));
      auto r = EncodeChunk(cases[i].src.data(), cases[i].src.size(), p, ref[i].data(), ref[i].size(), ws);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ref[i].resize(*r);
    }
  }
  for (bool device : {false, true}) {
    for (uint32_t permille : {0u, 5u, 500u, 999u}) {
      for (bool verify : {true, false}) {
        SCOPED_TRACE(::testing::Message() << (device ? "device call" : "host call") << ", byte at "
                                          << permille << "/1000, verify " << verify);
        GpuCodecOptions o = testing::ManyLanes();
        o.verify_encode = verify;
        gpu::EmulatedFaults f;
        f.flip_frame = 3;
        f.flip_at_permille = permille;
        auto codec = gpu::OpenHostEmulatedCodec(o, f);
        std::vector<std::vector<uint8_t>> out;
        auto items = items_of(&out);
        Status st = device ? codec->EncodeBatchDevice(items.data(), items.size())
                           : codec->EncodeBatch(items.data(), items.size());
        ASSERT_TRUE(st.ok()) << st.ToString();
        size_t differ = 0, unreadable = 0;
        for (size_t i = 0; i < cases.size(); ++i) {
          ASSERT_TRUE(items[i].status.ok()) << i << ": " << items[i].status.ToString();
          out[i].resize(items[i].len);
          if (out[i] == ref[i]) continue;
          differ++;
          std::vector<uint8_t> back(cases[i].src.size() + 1);
          auto r = DecodeChunk(out[i].data(), out[i].size(), items[i].base,
                               items[i].base ? cases[i].base.size() : 0, back.data(), back.size(), ws);
          unreadable += !r.ok() || std::vector<uint8_t>(back.begin(), back.begin() + *r) != cases[i].src;
        }
        const GpuCodecStats s = codec->stats();
        if (verify) {
          EXPECT_EQ(differ, 0u);
          EXPECT_EQ(s.encode_verify_failures, 1u);
          EXPECT_EQ(s.encode_verified_chunks, device_frames - 1);
          EXPECT_EQ(s.encode_chunks, device_frames - 1);
        } else {
          EXPECT_EQ(differ, 1u);
          EXPECT_EQ(unreadable, 1u);
          EXPECT_EQ(s.encode_verify_failures, 0u);
          EXPECT_EQ(s.encode_verified_chunks, 0u);
          EXPECT_EQ(s.encode_chunks, device_frames);
        }
      }
    }
  }
}

TEST(GpuPipeline, DeviceEntryPointsTakeTheSamePaths) {
  auto codec = gpu::OpenHostEmulatedCodec();
  testing::HostArrays mem;
  testing::CheckDeviceEntryPoints(codec.get(), &mem);
}

TEST(GpuPipeline, FusedDecoderWritesWhatTheMergePassWrites) {
  testing::HostArrays mem;
  testing::CheckFusedDecode([](const GpuCodecOptions& o) { return gpu::OpenHostEmulatedCodec(o); }, &mem);
}

TEST(GpuPipeline, HuffmanBlockSizesAreWrittenAndDecodedOnTheDevice) {
  testing::HostArrays mem;
  testing::CheckHuffmanBlockSizes([](const GpuCodecOptions& o) { return gpu::OpenHostEmulatedCodec(o); },
                                  &mem);
}

TEST(GpuPipeline, EncodesRansStreamsOnTheDevice) {
  auto codec = gpu::OpenHostEmulatedCodec();
  testing::CheckRansEncode(codec.get());
}

// RansEncodeBody on one stream: a table that fits the data codes the
// bytes the CPU coder writes with it; one so bad that the words overrun
// the stream's size leaves the stream raw, as the CPU coder's failure does.
TEST(GpuPipeline, RansEncoderWritesTheCpuBytesOrFallsBackToRaw) {
  const size_t n = 20000;
  for (bool fits : {true, false}) {
    SCOPED_TRACE(fits ? "fitting table" : "misfit table");
    std::vector<uint8_t> src = fits ? std::vector<uint8_t>(n, 0) : testing::RandomBytes(n, 5);
    std::mt19937 rng(9);
    if (fits)
      for (size_t i = 0; i < n; i += 1 + rng() % 17) src[i] = static_cast<uint8_t>(1 + rng() % 6);
    uint32_t hist[256];
    Histogram(src.data(), n, hist);
    std::vector<uint32_t> codes(256);
    if (fits) {
      hd::RansNormalizeGpu(hist, n, codes.data());
    } else {
      for (auto& f : codes) f = 1;  // every byte present, 0 taking the rest
      codes[0] = 4096 - 255;
    }
    gpu::EncStream s{};
    s.n = n;
    s.coder = hd::kCoderRans;
    std::vector<uint32_t> scratch(n / 4 + 4);
    gpu::EncArgs a{};
    a.streams = &s;
    a.ns = 1;
    a.codes = codes.data();
    a.sbuf = src.data();
    a.scratch = scratch.data();
    gpu::RansEncodeBody::Run(a, 0);
    std::vector<uint8_t> ref(rans::MaxEncodedSize(n));
    auto r = rans::EncodeWithFrequencies(src.data(), n, codes.data(), 4, ref.data(), n);
    if (!fits) {
      EXPECT_FALSE(r.ok());
      EXPECT_EQ(s.coder, hd::kCoderRaw);
      EXPECT_EQ(s.size, n);
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(s.coder, hd::kCoderRans);
    ASSERT_EQ(s.size, *r);
    const auto* payload = reinterpret_cast<const uint8_t*>(scratch.data()) + s.payload;
    EXPECT_EQ(std::vector<uint8_t>(payload, payload + s.size),
              std::vector<uint8_t>(ref.begin(), ref.begin() + *r));
    std::vector<uint8_t> back(n);
    ASSERT_TRUE(rans::Decode(payload, s.size, back.data(), n).ok());
    EXPECT_EQ(back, src);
  }
}

TEST(GpuPipeline, EncodesAndDecodesPairedFp32MastersOnTheDevice) {
  auto codec = gpu::OpenHostEmulatedCodec();
  testing::HostArrays mem;
  testing::CheckPairedFrames(codec.get(), &mem);
}

TEST(GpuPipeline, DecodesRansStreamsOnTheDevice) {
  auto codec = gpu::OpenHostEmulatedCodec();
  testing::CheckRansDecode(codec.get());
}

}  // namespace
}  // namespace lmc
