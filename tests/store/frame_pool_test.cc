// The frame buffer pool (frame_pool.h) and Batch's use of it.
#include "lmc/store/frame_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "lmc/store/store.h"

namespace lmc::store {
namespace {

ChunkKey KeyN(uint8_t n) {
  ChunkKey k{};
  k.bytes[0] = n;
  return k;
}

// The pool is process-wide: tests run before these in the same process
// (lmc_store_tests run as one binary, not under ctest) may have filled it
// to kFramePoolBytes, and then every buffer given here would be freed.
// Each test starts from an empty pool.
class FramePool : public ::testing::Test {
 protected:
  void SetUp() override {
    while (FramePoolIdleBytes() > 0) std::string drop = TakeFrameBuffer(kFramePoolMinBytes);
  }
};

TEST_F(FramePool, ABufferGivenBackIsTakenAgain) {
  std::string a = TakeFrameBuffer(1 << 20);
  EXPECT_GE(a.capacity(), size_t{1} << 20);
  EXPECT_TRUE(a.empty());
  a.assign(1000, 'x');
  const char* mem = a.data();
  const size_t idle = FramePoolIdleBytes();
  GiveFrameBuffer(std::move(a));
  EXPECT_TRUE(a.empty());
  EXPECT_GE(FramePoolIdleBytes(), idle + (size_t{1} << 20));
  std::string b = TakeFrameBuffer(512 << 10);  // smaller requests take a larger buffer
  EXPECT_EQ(b.data(), mem);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(FramePoolIdleBytes(), idle);
}

// A new buffer is rounded up, so the next frame a few bytes longer fits it.
TEST_F(FramePool, NewBuffersAreRoundedUpForTheNextFrames) {
  std::string a = TakeFrameBuffer((700 << 10) + 3);
  EXPECT_GE(a.capacity(), size_t{704} << 10);
  const char* mem = a.data();
  GiveFrameBuffer(std::move(a));
  std::string b = TakeFrameBuffer((700 << 10) + 1000);
  EXPECT_EQ(b.data(), mem);
}

TEST_F(FramePool, SmallBuffersAndOverflowAreFreed) {
  const size_t idle = FramePoolIdleBytes();
  std::string small = TakeFrameBuffer(100);
  GiveFrameBuffer(std::move(small));
  EXPECT_EQ(FramePoolIdleBytes(), idle);  // below kFramePoolMinBytes: not kept
  // More than the pool keeps: the idle bytes never pass kFramePoolBytes.
  const size_t each = size_t{16} << 20;
  for (size_t i = 0; i < kFramePoolBytes / each + 4; ++i) {
    std::string s;
    s.reserve(each);
    GiveFrameBuffer(std::move(s));
    EXPECT_LE(FramePoolIdleBytes(), kFramePoolBytes);
  }
  // Drain what this test added, so other tests see the pool as it was.
  while (FramePoolIdleBytes() > idle) std::string drop = TakeFrameBuffer(kFramePoolMinBytes);
}

TEST_F(FramePool, BatchGivesItsFramesBackWhenClearedOrDestroyed) {
  std::string f = TakeFrameBuffer(256 << 10);
  f.assign(200 << 10, 'f');
  const char* mem = f.data();
  {
    Batch b;
    b.AddChunk(KeyN(1), std::move(f), 300 << 10);
    EXPECT_EQ(b.frame_bytes(), size_t{200} << 10);
    Batch moved = std::move(b);  // a moved-from batch holds nothing
    EXPECT_EQ(b.frame_bytes(), 0u);
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(moved.ops().at(0).frame.data(), mem);
  }
  std::string again = TakeFrameBuffer(256 << 10);
  EXPECT_EQ(again.data(), mem);

  again.assign(100 << 10, 'g');
  mem = again.data();
  Batch c;
  c.AddChunk(KeyN(2), std::move(again), 300 << 10);
  c.Clear();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.frame_bytes(), 0u);
  std::string third = TakeFrameBuffer(64 << 10);
  EXPECT_EQ(third.data(), mem);
}

}  // namespace
}  // namespace lmc::store
