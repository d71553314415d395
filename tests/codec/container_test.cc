#include "lmc/container.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>

#include "lmc/bytes.h"
#include "lmc/thread_pool.h"
#include "test_util.h"

namespace lmc {
namespace {

// A minimal valid safetensors file with one bf16 and one f32 tensor.
std::vector<uint8_t> MakeSafetensors(size_t bf16_count, size_t f32_count) {
  auto a = testing::Bf16Weights(bf16_count, 1);
  auto b = testing::F32Weights(f32_count, 2);
  std::string hdr =
      "{\"a\":{\"dtype\":\"BF16\",\"shape\":[" + std::to_string(bf16_count) + "],\"data_offsets\":[0," +
      std::to_string(a.size()) + "]},\"b\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(f32_count) +
      "],\"data_offsets\":[" + std::to_string(a.size()) + "," + std::to_string(a.size() + b.size()) + "]}}";
  while (hdr.size() % 8) hdr += ' ';
  std::vector<uint8_t> f(8 + hdr.size() + a.size() + b.size());
  StoreLE64(f.data(), hdr.size());
  std::memcpy(f.data() + 8, hdr.data(), hdr.size());
  std::memcpy(f.data() + 8 + hdr.size(), a.data(), a.size());
  std::memcpy(f.data() + 8 + hdr.size() + a.size(), b.data(), b.size());
  return f;
}

TEST(ContainerTest, RoundTripSafetensorsWithThreads) {
  auto file = MakeSafetensors(3 << 20, 300000);
  ThreadPool pool(3);
  for (size_t threads : {1, 3}) {
    CompressOptions co;
    co.threads = threads;
    co.pool = &pool;
    CompressStats st;
    auto c = CompressBuffer(file.data(), file.size(), co, &st);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(st.input_bytes, file.size());
    EXPECT_EQ(st.output_bytes, c->size());
    EXPECT_LT(c->size(), file.size() * 0.75);
    EXPECT_GE(st.bytes_by_dtype[DType::kBF16], 6u << 20) << "tensors were not coded as bf16";
    DecompressOptions dopt;
    dopt.threads = threads;
    dopt.pool = &pool;
    auto d = DecompressBuffer(c->data(), c->size(), dopt);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(*d, file);
  }
}

TEST(ContainerTest, EmptyAndTinyInputs) {
  for (size_t n : {0, 1, 7, 100}) {
    auto data = testing::RandomBytes(n, static_cast<uint32_t>(n));
    auto c = CompressBuffer(data.data(), data.size(), CompressOptions{});
    ASSERT_TRUE(c.ok());
    auto d = DecompressBuffer(c->data(), c->size());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(*d, data);
  }
}

TEST(ContainerTest, LyingHeaderStillRoundTrips) {
  auto file = MakeSafetensors(100000, 1000);
  // Make the header claim offsets far beyond the file.
  std::string s(file.begin(), file.begin() + 200);
  size_t p = s.find("data_offsets\":[0,");
  ASSERT_NE(p, std::string::npos);
  file[p + 15] = '9';
  auto c = CompressBuffer(file.data(), file.size(), CompressOptions{});
  ASSERT_TRUE(c.ok());
  auto d = DecompressBuffer(c->data(), c->size());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, file);
}

TEST(ContainerTest, TruncationAndCorruptionAreDetected) {
  auto file = MakeSafetensors(50000, 5000);
  auto c = CompressBuffer(file.data(), file.size(), CompressOptions{});
  ASSERT_TRUE(c.ok());
  for (size_t len : {size_t{0}, size_t{3}, size_t{16}, size_t{100}, c->size() / 2, c->size() - 1}) {
    auto d = DecompressBuffer(c->data(), len);
    EXPECT_FALSE(d.ok()) << "truncated at " << len;
  }
  std::vector<uint8_t> extra = *c;
  extra.push_back(0);
  EXPECT_TRUE(DecompressBuffer(extra.data(), extra.size()).status().IsCorruption());
  for (size_t pos = 0; pos < c->size(); pos += 997) {
    std::vector<uint8_t> bad = *c;
    bad[pos] ^= 0x10;
    auto d = DecompressBuffer(bad.data(), bad.size());
    if (d.ok()) {
      EXPECT_EQ(*d, file) << "corruption at " << pos << " produced different bytes";
    }
  }
}

TEST(ContainerTest, StreamingAndInMemoryWriteTheSameBytes) {
  auto file = MakeSafetensors(1 << 20, 70000);
  auto mem = CompressBuffer(file.data(), file.size(), CompressOptions{});
  ASSERT_TRUE(mem.ok());
  // Stream it through reads of odd, random sizes.
  std::mt19937 rng(42);
  size_t pos = 0;
  ReadFn rd = [&](uint8_t* buf, size_t want) -> Result<size_t> {
    size_t k = std::min({want, file.size() - pos, static_cast<size_t>(rng() % 300000 + 1)});
    std::memcpy(buf, file.data() + pos, k);
    pos += k;
    return k;
  };
  std::vector<uint8_t> streamed;
  WriteFn wr = [&](const uint8_t* b, size_t k) {
    streamed.insert(streamed.end(), b, b + k);
    return Status::Ok();
  };
  CompressStats st;
  ASSERT_TRUE(CompressStream(rd, wr, CompressOptions{}, &st).ok());
  EXPECT_EQ(streamed, *mem);
  EXPECT_EQ(st.input_bytes, file.size());
  EXPECT_EQ(st.format, Format::kSafetensors);
  // And back through the streaming decoder.
  size_t cpos = 0;
  ReadFn crd = [&](uint8_t* buf, size_t want) -> Result<size_t> {
    size_t k = std::min({want, streamed.size() - cpos, static_cast<size_t>(rng() % 5000 + 1)});
    std::memcpy(buf, streamed.data() + cpos, k);
    cpos += k;
    return k;
  };
  std::vector<uint8_t> back;
  ASSERT_TRUE(DecompressStream(
                  crd,
                  [&](const uint8_t* b, size_t k) {
                    back.insert(back.end(), b, b + k);
                    return Status::Ok();
                  },
                  DecompressOptions{})
                  .ok());
  EXPECT_EQ(back, file);
}

TEST(ContainerTest, OneThreadAndManyThreadsWriteTheSameBytes) {
  // One thread encodes straight into the output; several encode batches
  // into frame buffers, emitted by whichever worker finds the next frame
  // ready while the others keep encoding. Both must produce the same
  // container; small chunks make many batches of many frames.
  auto file = MakeSafetensors(3 << 20, 123457);
  ThreadPool pool(3);
  for (uint32_t chunk : {CompressOptions{}.chunk_size, 8192u}) {
    SCOPED_TRACE(chunk);
    CompressOptions one, many;
    one.threads = 1;
    many.threads = 3;
    one.pool = many.pool = &pool;
    one.chunk_size = many.chunk_size = chunk;
    std::vector<uint8_t> a, b;
    ASSERT_TRUE(CompressBufferInto(file.data(), file.size(), one, &a).ok());
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(CompressBufferInto(file.data(), file.size(), many, &b).ok());
      EXPECT_EQ(a, b) << "round " << round;
    }
    // Reusing the output vector (the benchmark's pattern) gives the same bytes.
    ASSERT_TRUE(CompressBufferInto(file.data(), file.size(), one, &b).ok());
    EXPECT_EQ(a, b);
    std::vector<uint8_t> back;
    DecompressOptions dopt;
    dopt.threads = 1;
    dopt.pool = &pool;
    ASSERT_TRUE(DecompressBufferInto(a.data(), a.size(), dopt, &back).ok());
    EXPECT_EQ(back, file);
  }
}

TEST(ContainerTest, StreamingWorkersWriteInOrderOneAtATimeAndStopAtAWriteError) {
  // The streaming compressor calls its WriteFn from the workers: never two
  // at once, in file order, and the first failure ends the call with it.
  auto file = MakeSafetensors(1 << 20, 200003);
  ThreadPool pool(3);
  CompressOptions many;
  many.threads = 3;
  many.pool = &pool;
  many.chunk_size = 8192;
  auto expected = CompressBuffer(file.data(), file.size(), many);
  ASSERT_TRUE(expected.ok());
  size_t pos = 0;
  ReadFn rd = [&](uint8_t* buf, size_t want) -> Result<size_t> {
    size_t k = std::min(want, file.size() - pos);
    std::memcpy(buf, file.data() + pos, k);
    pos += k;
    return k;
  };
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::vector<uint8_t> streamed;
  WriteFn wr = [&](const uint8_t* b, size_t k) {
    if (inside.fetch_add(1) != 0) overlapped = true;
    streamed.insert(streamed.end(), b, b + k);
    inside.fetch_sub(1);
    return Status::Ok();
  };
  ASSERT_TRUE(CompressStream(rd, wr, many).ok());
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(streamed, *expected);

  pos = 0;
  size_t written = 0;
  int calls_after_the_failure = 0;
  bool failed = false;
  const size_t fail_after = expected->size() / 2;
  WriteFn failing = [&](const uint8_t*, size_t k) {
    if (failed) ++calls_after_the_failure;
    if (written + k > fail_after) {
      failed = true;
      return Status::IOError("disk full (test)");
    }
    written += k;
    return Status::Ok();
  };
  Status st = CompressStream(rd, failing, many);
  EXPECT_EQ(st.code(), Code::kIOError) << st.ToString();
  EXPECT_NE(st.ToString().find("disk full (test)"), std::string::npos) << st.ToString();
  EXPECT_TRUE(failed);
  EXPECT_EQ(calls_after_the_failure, 0) << "nothing is written after the first failed write";
}

TEST(ContainerTest, PlanChunksCoversFile) {
  auto file = MakeSafetensors(1 << 20, 1000);
  Format fmt;
  auto chunks = PlanChunks(file.data(), file.size(), ChunkerOptions{}, &fmt);
  EXPECT_EQ(fmt, Format::kSafetensors);
  uint64_t pos = 0;
  for (auto& c : chunks) {
    EXPECT_EQ(c.offset, pos);
    pos += c.length;
  }
  EXPECT_EQ(pos, file.size());
}

}  // namespace
}  // namespace lmc
