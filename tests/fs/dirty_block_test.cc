// The dirty blocks writes land in (fs/core/src/file_data.h): a sealed
// block gives the pages past its written bytes back to the system, and
// the process-wide counters follow what may hold pages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "file_data.h"
#include "lmc/fs/filesystem.h"

namespace lmc::fs {
namespace {

const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

// Resident pages of the whole pages inside [p, p+n), all mapped.
size_t ResidentPages(const uint8_t* p, size_t n) {
  const testing::PageCount c = testing::CountPages(p, n);
  EXPECT_FALSE(c.error);
  return c.resident;
}
size_t WholePages(const uint8_t* p, size_t n) { return testing::CountPages(p, n).whole; }

// The pool's free blocks taken out and held, so that a block dropped in a
// test is the pool's only one (the pool is process-wide), with the
// default limit (a Filesystem made by an earlier test sets its own).
struct DrainedPool {
  std::vector<std::shared_ptr<DirtyBlock>> held;
  DrainedPool() {
    SetDirtyBlockPoolLimit(FsOptions{}.write_budget);
    while (DirtyBlockPoolBytes() > 0) held.push_back(NewDirtyBlock(1, true));
  }
  ~DrainedPool() { SetDirtyBlockPoolLimit(FsOptions{}.write_budget); }
};

constexpr size_t kBlock = DirtyBlock::kDirtyBlockSize;

TEST(DirtyBlocks, SealingGivesBackThePagesPastTheWrittenBytes) {
  DrainedPool drained;
  const std::string data = testing::Bf16Like((3 << 20) + 123, 7);
  auto b = NewDirtyBlock(4096, true);
  ASSERT_EQ(b->cap, kBlock);
  ASSERT_EQ(b->backed, kBlock);
  std::memset(b->mem.get(), 0x5a, kBlock);  // every page touched, as a pooled block's are
  AppendToDirtyBlock(*b, reinterpret_cast<const uint8_t*>(data.data()), data.size());
  ASSERT_EQ(b->used, data.size());
  const uint8_t* tail = b->mem.get() + b->used;
  const size_t tail_len = kBlock - b->used;
  ASSERT_EQ(ResidentPages(tail, tail_len), WholePages(tail, tail_len));

  const uint64_t before = DirtyBlockBytes();
  auto slice = b;  // a cache's chunk, sliced from the block
  SealDirtyBlock(*b, slice.use_count() > 1);
  EXPECT_EQ(ResidentPages(tail, tail_len), 0u);
  EXPECT_EQ(ResidentPages(b->mem.get(), b->used), WholePages(b->mem.get(), b->used));
  EXPECT_EQ(std::memcmp(b->mem.get(), data.data(), data.size()), 0);
  // The counter drops by what was given back: the block's capacity past
  // its written bytes, less at most the page they end in.
  const uint64_t given = before - DirtyBlockBytes();
  EXPECT_LE(given, tail_len);
  EXPECT_GE(given, tail_len - kPage);
  EXPECT_EQ(b->backed, kBlock - given);
  SealDirtyBlock(*b, true);  // again: nothing more
  EXPECT_EQ(before - DirtyBlockBytes(), given);

  // Back in the pool with what it holds; taken again, the pages it gets
  // back as it fills are counted, and what it is given reads back.
  const size_t backed = b->backed;
  b.reset();
  slice.reset();
  EXPECT_EQ(DirtyBlockPoolBytes(), backed);
  EXPECT_EQ(DirtyBlockBytes(), before - kBlock);
  auto again = NewDirtyBlock(1, true);
  EXPECT_EQ(again->used, 0u);
  EXPECT_EQ(DirtyBlockPoolBytes(), 0u);
  EXPECT_EQ(again->backed, backed);
  EXPECT_EQ(DirtyBlockBytes(), before - kBlock + backed);
  const std::string more = testing::Bf16Like(6 << 20, 8);
  AppendToDirtyBlock(*again, reinterpret_cast<const uint8_t*>(more.data()), more.size());
  EXPECT_EQ(again->backed, more.size());
  EXPECT_EQ(DirtyBlockBytes(), before - kBlock + more.size());
  EXPECT_EQ(std::memcmp(again->mem.get(), more.data(), more.size()), 0);
}

TEST(DirtyBlocks, ABlockNoOneElseHoldsGoesBackToThePoolWhole) {
  DrainedPool drained;
  auto b = NewDirtyBlock(4096, true);
  std::memset(b->mem.get(), 1, kBlock);
  const uint8_t one = 9;
  AppendToDirtyBlock(*b, &one, 1);
  const uint64_t before = DirtyBlockBytes();
  SealDirtyBlock(*b, false);
  EXPECT_EQ(b->backed, kBlock);
  EXPECT_EQ(DirtyBlockBytes(), before);
  EXPECT_EQ(ResidentPages(b->mem.get() + 1, kBlock - 1), WholePages(b->mem.get() + 1, kBlock - 1));
  b.reset();
  EXPECT_EQ(DirtyBlockPoolBytes(), kBlock);
}

TEST(DirtyBlocks, ASmallTailIsKept) {
  DrainedPool drained;
  auto b = NewDirtyBlock(4096, true);
  std::vector<uint8_t> data(kBlock - DirtyBlock::kMinGiveBack / 2, 3);
  AppendToDirtyBlock(*b, data.data(), data.size());
  auto slice = b;
  const uint64_t before = DirtyBlockBytes();
  SealDirtyBlock(*b, true);
  EXPECT_EQ(b->backed, kBlock);
  EXPECT_EQ(DirtyBlockBytes(), before);
}

TEST(DirtyBlocks, ABlockAllocatedToSizeHasNoTail) {
  auto b = NewDirtyBlock(kBlock + 1, true);  // larger than a pooled block
  EXPECT_EQ(b->cap, kBlock + 1);
  auto c = NewDirtyBlock(1000, false);  // not a stream: exactly its size
  EXPECT_EQ(c->cap, 1000u);
  EXPECT_EQ(c->backed, 1000u);
}

// The pool keeps up to 32 free blocks while files are written; trimmed
// (a mount gone quiet) it keeps 8 and frees the rest.
TEST(DirtyBlocks, ThePoolKeeps32FreeBlocksAndEightOnceTrimmed) {
  DrainedPool drained;
  EXPECT_EQ(DirtyBlockPoolCapacity(), 32 * kBlock);
  std::vector<std::shared_ptr<DirtyBlock>> blocks;
  for (int i = 0; i < 40; ++i) {
    blocks.push_back(NewDirtyBlock(4096, true));
    ASSERT_EQ(blocks.back()->backed, kBlock);
  }
  EXPECT_EQ(DirtyBlockPoolBytes(), 0u);
  blocks.clear();  // 40 dropped: the pool keeps 32, the others are freed
  EXPECT_EQ(DirtyBlockPoolBytes(), 32 * kBlock);
  EXPECT_EQ(TrimDirtyBlockPool(), 24 * kBlock);
  EXPECT_EQ(DirtyBlockPoolBytes(), 8 * kBlock);
  EXPECT_EQ(TrimDirtyBlockPool(), 0u);  // again: nothing more
  EXPECT_EQ(DirtyBlockPoolBytes(), 8 * kBlock);
  // The 8 kept are taken before any new block is made.
  for (int i = 0; i < 8; ++i) blocks.push_back(NewDirtyBlock(4096, true));
  EXPECT_EQ(DirtyBlockPoolBytes(), 0u);
}

// A smaller write budget keeps fewer free blocks: no more than it holds,
// whole blocks, and the quiet mount's 8 no more than that either.
TEST(DirtyBlocks, TheWriteBudgetBoundsThePool) {
  DrainedPool drained;
  std::vector<std::shared_ptr<DirtyBlock>> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(NewDirtyBlock(4096, true));
  blocks.clear();
  EXPECT_EQ(DirtyBlockPoolBytes(), 6 * kBlock);
  // Lowered below what it holds: the blocks past the limit go at once.
  SetDirtyBlockPoolLimit(3 * kBlock + kBlock / 2);
  EXPECT_EQ(DirtyBlockPoolCapacity(), 3 * kBlock);
  EXPECT_EQ(DirtyBlockPoolBytes(), 3 * kBlock);
  for (int i = 0; i < 5; ++i) blocks.push_back(NewDirtyBlock(4096, true));
  blocks.clear();
  EXPECT_EQ(DirtyBlockPoolBytes(), 3 * kBlock);
  EXPECT_EQ(TrimDirtyBlockPool(), 0u);  // 3 is under the quiet mount's 8
  // Under one block: none kept.
  SetDirtyBlockPoolLimit(kBlock - 1);
  EXPECT_EQ(DirtyBlockPoolCapacity(), 0u);
  EXPECT_EQ(DirtyBlockPoolBytes(), 0u);
  blocks.push_back(NewDirtyBlock(4096, true));
  blocks.clear();
  EXPECT_EQ(DirtyBlockPoolBytes(), 0u);
  // More than the default: still 32.
  SetDirtyBlockPoolLimit(uint64_t{1} << 40);
  EXPECT_EQ(DirtyBlockPoolCapacity(), 32 * kBlock);
}

}  // namespace
}  // namespace lmc::fs
