// Checks of a GpuCodec against the CPU codec, shared by the host-emulated
// pipeline's unit tests (tests/codec/gpu_pipeline_test.cc, label unit) and
// the real device's (tests/gpu/gpu_codec_test.cc, label gpu).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "hd/huffman_hd.h"
#include "hd/rans_hd.h"
#include "lmc/codec.h"
#include "lmc/dtype.h"
#include "lmc/gpu.h"
#include "test_util.h"

namespace lmc::testing {

// Memory the codec's *Device calls take: host memory for the emulation,
// device memory on a GPU.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual uint8_t* Alloc(size_t n) = 0;  // freed with the DeviceMemory
  virtual void Put(uint8_t* d, const void* h, size_t n) = 0;
  virtual void Get(void* h, const uint8_t* d, size_t n) = 0;
};

// Host memory as the device memory of the host backends' *Device calls.
class HostArrays : public DeviceMemory {
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

struct Case {
  DType dtype;
  std::vector<uint8_t> src, base;
};

inline std::vector<Case> Cases() {
  std::vector<Case> cases;
  uint32_t seed = 1;
  for (int t = 0; t < kNumDTypes; ++t) {
    for (size_t n : {size_t{4096}, size_t{4099}, size_t{70001}, size_t{1} << 20}) {
      Case c;
      c.dtype = static_cast<DType>(t);
      c.src = lmc::testing::Bf16Weights(n / 2 + 1, seed++);
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
  Case small{DType::kBF16, lmc::testing::Bf16Weights(100, 3), {}};
  cases.push_back(small);
  cases.push_back({DType::kF32, std::vector<uint8_t>(65536, 0x3c), {}});
  cases.push_back({DType::kBytes, lmc::testing::RandomBytes(100000, 4), {}});
  cases.push_back({DType::kBF16, {}, {}});
  return cases;
}

// An encode item a case, its frame going to (*out)[i] (MaxEncodedSize).
inline std::vector<GpuEncodeItem> EncodeItems(const std::vector<Case>& cases,
                                              std::vector<std::vector<uint8_t>>* out) {
  out->assign(cases.size(), {});
  std::vector<GpuEncodeItem> items(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    (*out)[i].resize(MaxEncodedSize(cases[i].src.size()));
    items[i].src = cases[i].src.data();
    items[i].n = cases[i].src.size();
    items[i].dtype = cases[i].dtype;
    items[i].base = cases[i].base.empty() ? nullptr : cases[i].base.data();
    items[i].dst = (*out)[i].data();
    items[i].cap = (*out)[i].size();
  }
  return items;
}

// GpuCodecOptions::verify_encode (on by default): the `chunks` the device
// encoded between `before` and now were all decoded back there, none
// failing (a failure would be a device fault or a kernel bug).
inline void ExpectVerified(GpuCodec* codec, const GpuCodecStats& before, size_t chunks) {
  const GpuCodecStats after = codec->stats();
  EXPECT_EQ(after.encode_verified_chunks - before.encode_verified_chunks, chunks);
  EXPECT_EQ(after.encode_verify_failures - before.encode_verify_failures, 0u);
}

// Every item's frame is the CPU's GPU-profile frame, byte for byte.
inline void CheckEncodeMatchesCpu(GpuCodec* codec) {
  auto cases = Cases();
  std::vector<std::vector<uint8_t>> out;
  std::vector<GpuEncodeItem> items = EncodeItems(cases, &out);
  const GpuCodecStats before = codec->stats();
  ASSERT_TRUE(codec->EncodeBatch(items.data(), items.size()).ok());
  size_t gpu_sized = 0;
  for (const Case& c : cases) gpu_sized += c.src.size() >= 4096;
  EXPECT_EQ(codec->stats().encode_chunks - before.encode_chunks, gpu_sized);
  ExpectVerified(codec, before, gpu_sized);
  Workspace ws;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << " dtype " << static_cast<int>(cases[i].dtype)
                                      << " n " << cases[i].src.size());
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

// Decodes frames[i] (of case of[i]; the first `clean` ones as encoded)
// in one DecodeBatch and checks each item against the CPU decoder: the
// same status, code and message, the same bytes, and the case's bytes for
// the clean frames. Returns how many decoded.
inline size_t DecodeLikeTheCpu(GpuCodec* codec, const std::vector<std::vector<uint8_t>>& frames,
                               const std::vector<const Case*>& of, size_t clean) {
  Workspace ws;
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
  EXPECT_TRUE(codec->DecodeBatch(items.data(), items.size()).ok());
  size_t good = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "frame " << i);
    std::vector<uint8_t> ref(out[i].size());
    auto r = DecodeChunk(frames[i].data(), frames[i].size(), items[i].base, items[i].base_len, ref.data(),
                         ref.size(), ws);
    EXPECT_EQ(items[i].status.code(), r.status().code())
        << items[i].status.ToString() << " vs " << r.status().ToString();
    EXPECT_EQ(items[i].status.message(), r.status().message());
    if (r.ok()) {
      ++good;
      EXPECT_EQ(items[i].out_len, *r);
      EXPECT_TRUE(std::equal(ref.begin(), ref.begin() + *r, out[i].begin()));
      if (i < clean) {
        EXPECT_TRUE(std::equal(of[i]->src.begin(), of[i]->src.end(), out[i].begin()));
      }
    }
  }
  return good;
}

// Every frame the CPU writes decodes to the same bytes, and every corrupt
// one gives the CPU's status, code and message.
inline void CheckDecodeMatchesCpu(GpuCodec* codec) {
  auto cases = Cases();
  Workspace ws;
  std::vector<std::vector<uint8_t>> frames;
  std::vector<const Case*> of;
  for (const Case& c : cases) {
    for (EncodeProfile p : {EncodeProfile::kCpu, EncodeProfile::kCpuQuarters, EncodeProfile::kGpu}) {
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
  DecodeLikeTheCpu(codec, frames, of, clean);
  EXPECT_GT(codec->stats().decode_chunks, 0u);
}

// A codec with several lanes and small pieces (GpuCodecOptions): host calls
// cut into many batches that the lanes run at once give the same frames and
// the same decoded bytes and statuses.
inline GpuCodecOptions ManyLanes() {
  GpuCodecOptions o;
  o.batch_bytes = size_t{1} << 20;
  o.lanes = 3;
  o.min_piece_bytes = size_t{256} << 10;
  return o;
}
inline void CheckLanes(GpuCodec* codec) {
  CheckEncodeMatchesCpu(codec);
  const uint64_t after_encode = codec->stats().batches;
  EXPECT_GE(after_encode, 6u) << "the encode call was not cut into pieces";
  CheckDecodeMatchesCpu(codec);
  EXPECT_GE(codec->stats().batches - after_encode, 6u) << "the decode call was not cut into pieces";
}

// The device-memory entry points on a real checkpoint-sized batch: encode
// on the device, decode on the device, bytes back equal, frames equal to
// the CPU's.
inline void CheckDeviceEntryPoints(GpuCodec* codec, DeviceMemory* mem) {
  Workspace ws;
  const size_t chunks = 24, n = size_t{1} << 20;
  std::vector<std::vector<uint8_t>> src(chunks);
  std::vector<GpuEncodeItem> e(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    src[c] = lmc::testing::Bf16Weights(n / 2, static_cast<uint32_t>(100 + c), 0.01f + 0.001f * c);
    e[c].src = mem->Alloc(n);
    mem->Put(const_cast<uint8_t*>(e[c].src), src[c].data(), n);
    e[c].n = n;
    e[c].dtype = c % 3 == 2 ? DType::kBytes : DType::kBF16;
    e[c].cap = MaxEncodedSize(n);
    e[c].dst = mem->Alloc(e[c].cap);
  }
  ASSERT_TRUE(codec->EncodeBatchDevice(e.data(), e.size()).ok());
  std::vector<GpuDecodeItem> d(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    ASSERT_TRUE(e[c].status.ok()) << e[c].status.ToString();
    std::vector<uint8_t> frame(e[c].len), ref(MaxEncodedSize(n));
    mem->Get(frame.data(), e[c].dst, e[c].len);
    auto r =
        EncodeChunk(src[c].data(), n, {e[c].dtype, nullptr, EncodeProfile::kGpu}, ref.data(), ref.size(), ws);
    ASSERT_TRUE(r.ok());
    ref.resize(*r);
    EXPECT_EQ(frame, ref) << "chunk " << c;
    d[c].frame = e[c].dst;
    d[c].len = e[c].len;
    d[c].cap = n;
    d[c].dst = mem->Alloc(n);
  }
  ASSERT_TRUE(codec->DecodeBatchDevice(d.data(), d.size()).ok());
  for (size_t c = 0; c < chunks; ++c) {
    ASSERT_TRUE(d[c].status.ok()) << d[c].status.ToString();
    std::vector<uint8_t> back(n);
    mem->Get(back.data(), d[c].dst, n);
    EXPECT_EQ(back, src[c]) << "chunk " << c;
  }
}

// The fused decoder (GpuCodecOptions::fuse_merge, FusedSink) writes the
// same bytes as the decoded stream and the merge pass: bf16 and f16 frames
// with a tail byte, a short last block, a last hash block exactly full, the
// raw stream at every alignment (the Huffman stream before it has any
// length), outputs 16-aligned (fused) and not (the merge pass); with
// fuse_hash its block sums pass the checksum (a frame that failed it would
// be redone on the CPU and not counted as fused); with the option off no
// frame is fused.
template <typename Open>
inline void CheckFusedDecode(Open open, DeviceMemory* mem) {
  Workspace ws;
  std::vector<std::vector<uint8_t>> src, frames;
  uint32_t seed = 7;
  // Written by the GPU profile and by the CPU's (blocked Huffman too: what
  // a store mostly holds).
  for (EncodeProfile p : {EncodeProfile::kGpu, EncodeProfile::kCpu})
    for (DType t : {DType::kBF16, DType::kF16})
      for (size_t n :
           {size_t{4096}, size_t{4099}, size_t{12346}, size_t{16384}, size_t{70001}, size_t{1} << 20}) {
        ++seed;
        src.push_back(lmc::testing::Bf16Weights(n / 2 + 1, seed, 0.002f * static_cast<float>(seed)));
        src.back().resize(n);
        std::vector<uint8_t> f(MaxEncodedSize(n));
        auto r = EncodeChunk(src.back().data(), n, {t, nullptr, p}, f.data(), f.size(), ws);
        ASSERT_TRUE(r.ok());
        f.resize(*r);
        frames.push_back(std::move(f));
      }
  std::set<size_t> raw_alignments;
  for (const auto& f : frames) {
    auto fi = ReadFrameInfo(f.data(), f.size());
    ASSERT_TRUE(fi.ok());
    ASSERT_EQ(fi->streams[0].coder, Coder::kHuffmanBlocked);
    ASSERT_EQ(fi->streams[1].coder, Coder::kRaw);
    raw_alignments.insert((fi->header_size + fi->streams[0].encoded_size) % 4);
  }
  EXPECT_GE(raw_alignments.size(), 3u) << "the raw streams should start at several alignments";
  for (int mode = 0; mode < 3; ++mode) {
    const bool fuse = mode < 2, hash = mode == 0;
    for (size_t shift : {size_t{0}, size_t{2}, size_t{16}}) {
      SCOPED_TRACE(::testing::Message()
                   << "fuse " << fuse << " hash " << hash << " output shifted by " << shift);
      GpuCodecOptions o;
      o.fuse_merge = fuse;
      o.fuse_hash = hash;
      std::unique_ptr<GpuCodec> codec = open(o);
      ASSERT_TRUE(codec);
      std::vector<GpuDecodeItem> items(frames.size());
      std::vector<uint8_t*> outs(frames.size());
      for (size_t i = 0; i < frames.size(); ++i) {
        uint8_t* fr = mem->Alloc(frames[i].size());
        mem->Put(fr, frames[i].data(), frames[i].size());
        outs[i] = mem->Alloc(src[i].size() + 32) + shift;
        mem->Put(outs[i], std::vector<uint8_t>(src[i].size(), 0xEE).data(), src[i].size());
        items[i].frame = fr;
        items[i].len = frames[i].size();
        items[i].dst = outs[i];
        items[i].cap = src[i].size();
      }
      ASSERT_TRUE(codec->DecodeBatchDevice(items.data(), items.size()).ok());
      for (size_t i = 0; i < frames.size(); ++i) {
        ASSERT_TRUE(items[i].status.ok()) << i << ": " << items[i].status.ToString();
        std::vector<uint8_t> back(src[i].size());
        mem->Get(back.data(), outs[i], back.size());
        EXPECT_EQ(back, src[i]) << "frame " << i;
      }
      EXPECT_EQ(codec->stats().decode_chunks, frames.size());
      EXPECT_EQ(codec->stats().decode_fused_chunks, fuse && shift % 16 == 0 ? frames.size() : 0u);
    }
  }
}

// The block size of a frame's blocked Huffman streams (k of docs/FORMAT.md
// 5.3), or 0 when it has none.
inline int BlockLog2Of(const std::vector<uint8_t>& f) {
  auto fi = ReadFrameInfo(f.data(), f.size());
  if (!fi.ok()) return -1;
  size_t off = fi->header_size;
  for (const StreamInfo& s : fi->streams) {
    if (s.coder == Coder::kHuffmanBlocked) {
      uint8_t lens[256];
      int lo = 0, hi = 0;
      const uint32_t lb = hd::HuffParseLengths(f.data() + off, s.encoded_size, lens, &lo, &hi);
      return lb && lb < s.encoded_size ? f[off + lb] : -1;
    }
    off += s.encoded_size;
  }
  return 0;
}

// The CPU's GPU-profile frame of src (n bytes of t, XOR base when given) in
// Huffman blocks of 2^log2 symbols.
inline std::vector<uint8_t> GpuProfileFrame(const uint8_t* src, size_t n, DType t, const uint8_t* base,
                                            int log2) {
  Workspace ws;
  EncodeParams p{t, base, EncodeProfile::kGpu};
  p.huffman_block_log2 = log2;
  std::vector<uint8_t> f(MaxEncodedSize(n));
  auto r = EncodeChunk(src, n, p, f.data(), f.size(), ws);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  f.resize(r.ok() ? *r : 0);
  return f;
}

// GpuCodecOptions::huffman_block_log2: a codec opened with each block size
// from 9 to 11 writes the CPU's GPU-profile frames of that size (host and
// device calls), decodes them on the device (fused with the hash sums, for
// bf16), and decodes frames of the default size there too (the plan reads
// each stream's size: host frames whole, device frames from their gathered
// heads); frames in blocks of 2^8 go to the CPU. open(o) may refuse (null)
// only sizes out of 9-12.
template <typename Open>
inline void CheckHuffmanBlockSizes(Open open, DeviceMemory* mem) {
  for (int bad : {8, 13}) {
    GpuCodecOptions o;
    o.huffman_block_log2 = bad;
    EXPECT_FALSE(open(o)) << bad;
  }
  auto cases = Cases();
  for (int log2 : {9, 10, 11}) {
    SCOPED_TRACE(::testing::Message() << "blocks of 2^" << log2);
    GpuCodecOptions o;
    o.huffman_block_log2 = log2;
    std::unique_ptr<GpuCodec> codec = open(o);
    ASSERT_TRUE(codec);
    std::vector<std::vector<uint8_t>> out;
    std::vector<GpuEncodeItem> items = EncodeItems(cases, &out);
    ASSERT_TRUE(codec->EncodeBatch(items.data(), items.size()).ok());
    size_t gpu_sized = 0;
    for (const Case& c : cases) gpu_sized += c.src.size() >= 4096;
    // All on the device (none redone on the CPU after a failed check).
    EXPECT_EQ(codec->stats().encode_chunks, gpu_sized);
    std::vector<std::vector<uint8_t>> frames, frames12;
    std::vector<const Case*> of;
    int sized = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "case " << i);
      ASSERT_TRUE(items[i].status.ok()) << items[i].status.ToString();
      out[i].resize(items[i].len);
      const Case& c = cases[i];
      EXPECT_EQ(out[i], GpuProfileFrame(c.src.data(), c.src.size(), c.dtype, items[i].base, log2));
      frames12.push_back(GpuProfileFrame(c.src.data(), c.src.size(), c.dtype, items[i].base, 12));
      const int k = BlockLog2Of(out[i]);
      EXPECT_TRUE(k == 0 || k == log2) << k;
      sized += k == log2;
      frames.push_back(out[i]);
      of.push_back(&cases[i]);
    }
    EXPECT_GE(sized, 8) << "too few frames with blocked streams";
    // On the device: every frame of a GPU-sized chunk, the bf16 ones fused.
    size_t bf16 = 0, default_blocked = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const bool device = cases[i].src.size() >= 4096;
      bf16 += device && cases[i].dtype == DType::kBF16 && cases[i].base.empty() && BlockLog2Of(out[i]) > 0;
      default_blocked += device && BlockLog2Of(frames12[i]) > 0;
    }
    GpuCodecStats before = codec->stats();
    DecodeLikeTheCpu(codec.get(), frames, of, frames.size());
    GpuCodecStats after = codec->stats();
    EXPECT_EQ(after.decode_chunks - before.decode_chunks, gpu_sized);
    EXPECT_GE(after.decode_fused_chunks - before.decode_fused_chunks, bf16);
    EXPECT_GT(bf16, 0u);
    // Frames of 2^12-symbol blocks: on the device too.
    before = after;
    DecodeLikeTheCpu(codec.get(), frames12, of, frames12.size());
    after = codec->stats();
    EXPECT_EQ(after.decode_chunks - before.decode_chunks, gpu_sized);
    EXPECT_GT(default_blocked, 0u);
    // Blocks of 2^8 (below a hash block): the CPU's.
    {
      std::vector<std::vector<uint8_t>> f8;
      std::vector<const Case*> of8;
      for (size_t i = 0; i < cases.size(); ++i) {
        if (cases[i].src.size() < 4096 || BlockLog2Of(frames12[i]) <= 0) continue;
        auto f = GpuProfileFrame(cases[i].src.data(), cases[i].src.size(), cases[i].dtype, items[i].base, 8);
        ASSERT_EQ(BlockLog2Of(f), 8);
        f8.push_back(f);
        of8.push_back(&cases[i]);
      }
      before = after;
      EXPECT_EQ(DecodeLikeTheCpu(codec.get(), f8, of8, f8.size()), f8.size());
      after = codec->stats();
      EXPECT_EQ(after.decode_chunks, before.decode_chunks);
    }
    // Device memory in and out: 4 chunks of 1 MiB of bf16 weights.
    const size_t n = size_t{1} << 20;
    std::vector<GpuEncodeItem> e(4);
    std::vector<std::vector<uint8_t>> src(4);
    for (size_t c = 0; c < e.size(); ++c) {
      src[c] = lmc::testing::Bf16Weights(n / 2, static_cast<uint32_t>(300 + c), 0.01f + 0.002f * c);
      e[c].src = mem->Alloc(n);
      mem->Put(const_cast<uint8_t*>(e[c].src), src[c].data(), n);
      e[c].n = n;
      e[c].dtype = DType::kBF16;
      e[c].cap = MaxEncodedSize(n);
      e[c].dst = mem->Alloc(e[c].cap);
    }
    before = codec->stats();
    ASSERT_TRUE(codec->EncodeBatchDevice(e.data(), e.size()).ok());
    EXPECT_EQ(codec->stats().encode_chunks - before.encode_chunks, e.size());
    ExpectVerified(codec.get(), before, e.size());
    std::vector<GpuDecodeItem> d(e.size());
    for (size_t c = 0; c < e.size(); ++c) {
      ASSERT_TRUE(e[c].status.ok()) << e[c].status.ToString();
      std::vector<uint8_t> frame(e[c].len);
      mem->Get(frame.data(), e[c].dst, e[c].len);
      EXPECT_EQ(frame, GpuProfileFrame(src[c].data(), n, DType::kBF16, nullptr, log2)) << "chunk " << c;
      EXPECT_EQ(BlockLog2Of(frame), log2);
      d[c].frame = e[c].dst;
      d[c].len = e[c].len;
      d[c].cap = n;
      d[c].dst = mem->Alloc(n);
    }
    // And the same chunks' frames of 2^12-symbol blocks, in the same call:
    // their block size comes from the gathered heads.
    for (size_t c = 0; c < e.size(); ++c) {
      const auto f = GpuProfileFrame(src[c].data(), n, DType::kBF16, nullptr, 12);
      ASSERT_EQ(BlockLog2Of(f), 12);
      GpuDecodeItem& x = d.emplace_back();
      x.frame = mem->Alloc(f.size());
      mem->Put(const_cast<uint8_t*>(x.frame), f.data(), f.size());
      x.len = f.size();
      x.cap = n;
      x.dst = mem->Alloc(n);
    }
    before = codec->stats();
    ASSERT_TRUE(codec->DecodeBatchDevice(d.data(), d.size()).ok());
    EXPECT_EQ(codec->stats().decode_chunks - before.decode_chunks, d.size());
    for (size_t c = 0; c < d.size(); ++c) {
      ASSERT_TRUE(d[c].status.ok()) << d[c].status.ToString();
      std::vector<uint8_t> back(n);
      mem->Get(back.data(), d[c].dst, n);
      EXPECT_EQ(back, src[c % e.size()]) << "item " << c;
    }
  }
}

// Chunks whose streams are skewed enough for rANS (with 32 states from 64
// Ki symbols on, 4 below): sparse XOR deltas of bf16 weights (few changed
// elements) and sparse bytes, 8 KiB to 1 MiB.
inline std::vector<Case> SparseCases() {
  std::vector<Case> cases;
  uint32_t seed = 40;
  for (size_t n : {size_t{8192}, size_t{70000}, size_t{1} << 20}) {
    Case c;
    c.dtype = DType::kBF16;
    c.base = lmc::testing::Bf16Weights(n / 2, seed++);
    c.src = c.base;
    std::mt19937 rng(seed);
    for (size_t i = 0; i < n / 2; i += 1 + rng() % 23) c.src[2 * i] ^= static_cast<uint8_t>(1 + rng() % 3);
    cases.push_back(c);
    Case b{DType::kBytes, std::vector<uint8_t>(n, 0), {}};
    for (size_t i = 0; i < n; i += 1 + rng() % 9) b.src[i] = static_cast<uint8_t>(1 + rng() % 5);
    cases.push_back(b);
  }
  return cases;
}

// rANS streams are encoded on the device too: SparseCases in one batch,
// every frame the CPU's GPU-profile frame byte for byte, with rANS streams
// of both kinds, decoding on the CPU to the input, within 0.5% of the CPU
// profile's frame (the GPU profile's tables are normalised with integers
// only, which the CPU profile's optimal tables beat by a hair).
inline void CheckRansEncode(GpuCodec* codec) {
  const std::vector<Case> cases = SparseCases();
  std::vector<std::vector<uint8_t>> out;
  std::vector<GpuEncodeItem> items = EncodeItems(cases, &out);
  const GpuCodecStats before = codec->stats();
  ASSERT_TRUE(codec->EncodeBatch(items.data(), items.size()).ok());
  EXPECT_EQ(codec->stats().encode_chunks - before.encode_chunks, cases.size());
  ExpectVerified(codec, before, cases.size());
  Workspace ws;
  std::set<Coder> coders;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(::testing::Message() << "case " << i << " n " << c.src.size());
    ASSERT_TRUE(items[i].status.ok()) << items[i].status.ToString();
    out[i].resize(items[i].len);
    std::vector<uint8_t> ref(MaxEncodedSize(c.src.size())), cpu(ref.size());
    auto r = EncodeChunk(c.src.data(), c.src.size(), {c.dtype, items[i].base, EncodeProfile::kGpu},
                         ref.data(), ref.size(), ws);
    auto rc = EncodeChunk(c.src.data(), c.src.size(), {c.dtype, items[i].base, EncodeProfile::kCpu},
                          cpu.data(), cpu.size(), ws);
    ASSERT_TRUE(r.ok() && rc.ok());
    ref.resize(*r);
    EXPECT_EQ(out[i], ref);
    EXPECT_LE(static_cast<double>(out[i].size()), *rc * 1.005) << "CPU profile: " << *rc;
    auto fi = ReadFrameInfo(out[i].data(), out[i].size());
    ASSERT_TRUE(fi.ok());
    bool rans = false;
    for (const StreamInfo& si : fi->streams) {
      coders.insert(si.coder);
      rans |= si.coder == Coder::kRans || si.coder == Coder::kRansX32;
    }
    EXPECT_TRUE(rans);
    std::vector<uint8_t> back(c.src.size());
    auto d = DecodeChunk(out[i].data(), out[i].size(), items[i].base, items[i].base ? c.src.size() : 0,
                         back.data(), back.size(), ws);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(back, c.src);
  }
  EXPECT_TRUE(coders.count(Coder::kRans) && coders.count(Coder::kRansX32));
}

// rANS streams (coders 3 and 5) decode on the device: the CPU profile's
// frames of SparseCases, every frame taken by the device path, the bytes
// and statuses the CPU's; corrupt copies (a word, a state, a frequency
// changed; a cut) give the CPU's status.
inline void CheckRansDecode(GpuCodec* codec) {
  Workspace ws;
  const std::vector<Case> cases = SparseCases();
  std::vector<std::vector<uint8_t>> frames;
  std::vector<const Case*> of;
  std::set<Coder> coders;
  for (const Case& c : cases) {
    std::vector<uint8_t> f(MaxEncodedSize(c.src.size()));
    auto r = EncodeChunk(c.src.data(), c.src.size(), {c.dtype, c.base.empty() ? nullptr : c.base.data()},
                         f.data(), f.size(), ws);
    ASSERT_TRUE(r.ok());
    f.resize(*r);
    auto fi = ReadFrameInfo(f.data(), f.size());
    ASSERT_TRUE(fi.ok());
    bool rans = false;
    for (const StreamInfo& si : fi->streams) {
      coders.insert(si.coder);
      rans |= si.coder == Coder::kRans || si.coder == Coder::kRansX32;
    }
    ASSERT_TRUE(rans) << "case of " << c.src.size() << " bytes has no rANS stream";
    frames.push_back(f);
    of.push_back(&c);
  }
  EXPECT_TRUE(coders.count(Coder::kRans) && coders.count(Coder::kRansX32));
  const size_t clean = frames.size();
  std::mt19937 rng(11);
  for (size_t i = 0; i < clean; ++i) {
    auto fi = ReadFrameInfo(frames[i].data(), frames[i].size());
    size_t off = fi->header_size;
    for (const StreamInfo& si : fi->streams) {
      if (si.coder == Coder::kRans || si.coder == Coder::kRansX32) {
        uint32_t freq[256];
        int k = 0;
        const uint32_t header = hd::RansParseHeader(frames[i].data() + off, si.encoded_size, freq, &k);
        ASSERT_GT(header, 0u);
        // The last word, the first state's low byte, the first frequency
        // (after k symbols or a 32-byte bitmap).
        const size_t first_freq = off + 1 + (k < 32 ? k : 32);
        for (size_t at : {off + si.encoded_size - 1, off + header, first_freq}) {
          auto f = frames[i];
          f[at] ^= static_cast<uint8_t>(1 + rng() % 255);
          frames.push_back(f);
          of.push_back(of[i]);
        }
      }
      off += si.encoded_size;
    }
    auto f = frames[i];
    f.resize(f.size() - 3);
    frames.push_back(f);
    of.push_back(of[i]);
  }
  const GpuCodecStats before = codec->stats();
  const size_t good = DecodeLikeTheCpu(codec, frames, of, clean);
  // Every frame that decodes was decoded on the device (the CPU decodes
  // only what the device marks bad).
  EXPECT_GE(good, clean);
  EXPECT_EQ(codec->stats().decode_chunks - before.decode_chunks, good);
}

// Paired fp32 masters (a bf16 twin chunk as the base, widened; the rounding
// predicted where that misses fewer upper halves) are encoded and decoded
// on the device: a master whose twin rounds to nearest (predicted), one
// whose twin truncates (the twin widened), at offsets in longer twin
// chunks, through the host calls (the twins' ranges staged) and the device
// calls (the whole twin chunks in device memory). The frames are the CPU's
// GPU-profile frames byte for byte; items whose range is not inside the
// twin go to the CPU, which reports them; corrupt copies decode with the
// CPU's status.
struct PairedCase {
  std::vector<uint8_t> master, twin;
  uint32_t offset;
  bool predicted;
};
inline std::vector<PairedCase> PairedCases() {
  std::vector<PairedCase> cases;
  uint32_t seed = 70;
  for (auto [elems, offset, nearest] :
       {std::tuple{size_t{1} << 18, 1000u, true}, std::tuple{size_t{17500}, 3u, false},
        std::tuple{size_t{2048}, 0u, true}, std::tuple{size_t{70001}, 9u, true}}) {
    PairedCase c;
    c.master = lmc::testing::F32Weights(elems, seed++);
    c.offset = offset;
    c.predicted = nearest;
    c.twin = lmc::testing::Bf16Weights(offset + elems + 500, seed++);
    for (size_t e = 0; e < elems; ++e) {
      uint32_t v;
      std::memcpy(&v, c.master.data() + 4 * e, 4);
      const uint32_t b = nearest ? (v + 0x7fffu + ((v >> 16) & 1)) >> 16 : v >> 16;
      c.twin[2 * (offset + e)] = static_cast<uint8_t>(b);
      c.twin[2 * (offset + e) + 1] = static_cast<uint8_t>(b >> 8);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

inline void CheckPairedFrames(GpuCodec* codec, DeviceMemory* mem) {
  Workspace ws;
  const std::vector<PairedCase> cases = PairedCases();
  const size_t nc = cases.size();
  // The CPU's frames, and one item more whose range runs past its twin.
  std::vector<std::vector<uint8_t>> ref(nc);
  for (size_t i = 0; i < nc; ++i) {
    const PairedCase& c = cases[i];
    EncodeParams p{DType::kF32, c.twin.data(), EncodeProfile::kGpu};
    p.widened_base_offset = c.offset;
    p.base_len = c.twin.size();
    ref[i].resize(MaxEncodedSize(c.master.size()));
    auto r = EncodeChunk(c.master.data(), c.master.size(), p, ref[i].data(), ref[i].size(), ws);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ref[i].resize(*r);
    auto fi = ReadFrameInfo(ref[i].data(), ref[i].size());
    ASSERT_TRUE(fi.ok());
    EXPECT_TRUE(fi->widened_base);
    EXPECT_EQ(fi->predicted, c.predicted) << "case " << i;
  }
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "device calls" : "host calls");
    std::vector<GpuEncodeItem> e(nc + 1);
    std::vector<std::vector<uint8_t>> out(nc + 1);
    for (size_t i = 0; i <= nc; ++i) {
      const PairedCase& c = cases[i < nc ? i : 0];
      out[i].resize(MaxEncodedSize(c.master.size()));
      e[i].n = c.master.size();
      e[i].dtype = DType::kF32;
      e[i].widened_base_offset = i < nc ? c.offset : static_cast<uint32_t>(c.twin.size() / 2 - 10);
      e[i].base_len = c.twin.size();
      e[i].cap = out[i].size();
      if (device) {
        uint8_t* src = mem->Alloc(c.master.size());
        uint8_t* twin = mem->Alloc(c.twin.size());
        mem->Put(src, c.master.data(), c.master.size());
        mem->Put(twin, c.twin.data(), c.twin.size());
        e[i].src = src;
        e[i].base = twin;
        e[i].dst = mem->Alloc(e[i].cap);
      } else {
        e[i].src = c.master.data();
        e[i].base = c.twin.data();
        e[i].dst = out[i].data();
      }
    }
    const GpuCodecStats before = codec->stats();
    ASSERT_TRUE(
        (device ? codec->EncodeBatchDevice(e.data(), e.size()) : codec->EncodeBatch(e.data(), e.size()))
            .ok());
    // Every case went to the device (the smallest is 8 KiB, over
    // kMinGpuChunk); the bad item to the CPU, which refused it.
    EXPECT_EQ(codec->stats().encode_chunks - before.encode_chunks, nc);
    ExpectVerified(codec, before, nc);
    EXPECT_EQ(e[nc].status.code(), Code::kInvalidArgument) << e[nc].status.ToString();
    std::vector<GpuDecodeItem> d(nc);
    for (size_t i = 0; i < nc; ++i) {
      SCOPED_TRACE(::testing::Message() << "case " << i);
      ASSERT_TRUE(e[i].status.ok()) << e[i].status.ToString();
      std::vector<uint8_t> frame(e[i].len);
      if (device) {
        mem->Get(frame.data(), e[i].dst, e[i].len);
      } else {
        frame.assign(out[i].begin(), out[i].begin() + e[i].len);
      }
      EXPECT_EQ(frame, ref[i]);
      d[i].frame = e[i].dst;
      d[i].len = e[i].len;  // equal to the CPU's (checked above), whose frame the host calls decode
      d[i].base = e[i].base;
      d[i].base_len = cases[i].twin.size();
      d[i].cap = cases[i].master.size();
      if (device) {
        d[i].dst = mem->Alloc(d[i].cap);
      } else {
        out[i].assign(d[i].cap, 0xEE);
        d[i].frame = ref[i].data();
        d[i].dst = out[i].data();
      }
    }
    const GpuCodecStats mid = codec->stats();
    ASSERT_TRUE(
        (device ? codec->DecodeBatchDevice(d.data(), d.size()) : codec->DecodeBatch(d.data(), d.size()))
            .ok());
    EXPECT_EQ(codec->stats().decode_chunks - mid.decode_chunks, nc);
    for (size_t i = 0; i < nc; ++i) {
      ASSERT_TRUE(d[i].status.ok()) << d[i].status.ToString();
      std::vector<uint8_t> back(cases[i].master.size());
      if (device) {
        mem->Get(back.data(), d[i].dst, back.size());
      } else {
        back.assign(out[i].begin(), out[i].begin() + back.size());
      }
      EXPECT_EQ(back, cases[i].master) << "case " << i;
    }
  }
  // Corrupt copies and short twins: the CPU's status, code and message.
  std::vector<Case> as_cases(nc);
  std::vector<std::vector<uint8_t>> frames;
  std::vector<const Case*> of;
  for (size_t i = 0; i < nc; ++i) {
    as_cases[i] = {DType::kF32, cases[i].master, cases[i].twin};
    frames.push_back(ref[i]);
    of.push_back(&as_cases[i]);
  }
  std::mt19937 rng(5);
  for (size_t i = 0; i < nc; ++i) {
    auto f = ref[i];
    auto fi = ReadFrameInfo(f.data(), f.size());
    f[fi->header_size + rng() % (f.size() - fi->header_size)] ^= 0x10;
    frames.push_back(f);
    of.push_back(&as_cases[i]);
  }
  std::vector<Case> short_twins(nc);
  for (size_t i = 0; i < nc; ++i) {
    short_twins[i] = as_cases[i];
    short_twins[i].base.resize(2 * (cases[i].offset + cases[i].master.size() / 4) - 2);
    frames.push_back(ref[i]);
    of.push_back(&short_twins[i]);
  }
  EXPECT_EQ(DecodeLikeTheCpu(codec, frames, of, nc), nc);
}

}  // namespace lmc::testing
