// The decoded-chunk cache (chunk_cache.h): LRU within its capacity, tags
// that keep the chunks of different stores sharing one cache apart, chunks
// demoted once read past, and the count of the readers sharing it.
#include "lmc/store/chunk_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace lmc::store {
namespace {

ChunkKey CacheKeyOf(uint8_t n) {
  ChunkKey k{};
  k.bytes[0] = n;
  k.bytes[9] = static_cast<uint8_t>(n * 7);
  return k;
}

ChunkBytes BytesOf(uint8_t fill, size_t n) {
  std::vector<uint8_t> v(n, fill);
  return CopyChunkBytes(v.data(), v.size());
}

TEST(ChunkCache, EvictsTheLeastRecentlyUsedBeyondItsCapacity) {
  ChunkCache c(3000);
  c.Put(CacheKeyOf(1), BytesOf(1, 1000));
  c.Put(CacheKeyOf(2), BytesOf(2, 1000));
  c.Put(CacheKeyOf(3), BytesOf(3, 1000));
  ASSERT_TRUE(c.Get(CacheKeyOf(1)));  // 1 is now the most recent
  c.Put(CacheKeyOf(4), BytesOf(4, 1000));
  EXPECT_FALSE(c.Get(CacheKeyOf(2))) << "the least recently used goes first";
  EXPECT_TRUE(c.Get(CacheKeyOf(1)));
  EXPECT_TRUE(c.Get(CacheKeyOf(3)));
  EXPECT_TRUE(c.Get(CacheKeyOf(4)));
  EXPECT_EQ(c.bytes(), 3000u);
  c.Put(CacheKeyOf(5), BytesOf(5, 3001));  // larger than the cache: not kept
  EXPECT_FALSE(c.Get(CacheKeyOf(5)));
  EXPECT_EQ(c.bytes(), 3000u);
}

TEST(ChunkCache, TagsKeepTheSameKeyOfDifferentStoresApartInOneCapacity) {
  ChunkCache c(4000);
  c.Put(CacheKeyOf(1), BytesOf(0xAA, 1000), /*tag=*/0);
  c.Put(CacheKeyOf(1), BytesOf(0xBB, 1000), /*tag=*/1);
  ChunkBytes a = c.Get(CacheKeyOf(1), 0), b = c.Get(CacheKeyOf(1), 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->data()[0], 0xAA);
  EXPECT_EQ(b->data()[0], 0xBB) << "a store must never get another store's chunk of the same key";
  EXPECT_FALSE(c.Get(CacheKeyOf(1), 2));
  EXPECT_EQ(c.bytes(), 2000u);
  // One capacity for every tag: the oldest entries go, whichever store's.
  c.Put(CacheKeyOf(2), BytesOf(2, 1000), 2);
  c.Put(CacheKeyOf(3), BytesOf(3, 1000), 3);
  c.Put(CacheKeyOf(4), BytesOf(4, 1000), 2);
  EXPECT_EQ(c.bytes(), 4000u);
  EXPECT_FALSE(c.Get(CacheKeyOf(1), 0));
  EXPECT_TRUE(c.Get(CacheKeyOf(1), 1));
  EXPECT_TRUE(c.Get(CacheKeyOf(4), 2));
}

// A chunk a sequential reader has read past is demoted: the next to go,
// before chunks decoded ahead that nobody has read yet, however recently
// it was used; a key not held, or held under another tag, changes nothing.
TEST(ChunkCache, ADemotedChunkIsEvictedFirst) {
  ChunkCache c(3000);
  c.Put(CacheKeyOf(1), BytesOf(1, 1000));
  c.Put(CacheKeyOf(2), BytesOf(2, 1000));
  c.Put(CacheKeyOf(3), BytesOf(3, 1000));
  ASSERT_TRUE(c.Get(CacheKeyOf(3)));   // read: the most recent
  c.Demote(CacheKeyOf(3));             // and read past
  c.Demote(CacheKeyOf(9));             // not held
  c.Demote(CacheKeyOf(1), /*tag=*/5);  // held under tag 0 only
  c.Put(CacheKeyOf(4), BytesOf(4, 1000));
  EXPECT_FALSE(c.Get(CacheKeyOf(3))) << "the demoted chunk goes first";
  EXPECT_TRUE(c.Get(CacheKeyOf(1)));
  EXPECT_TRUE(c.Get(CacheKeyOf(2)));
  EXPECT_TRUE(c.Get(CacheKeyOf(4)));
  // Used again after its demotion: recent again.
  c.Demote(CacheKeyOf(1));
  ASSERT_TRUE(c.Get(CacheKeyOf(1)));
  c.Put(CacheKeyOf(5), BytesOf(5, 1000));
  EXPECT_TRUE(c.Get(CacheKeyOf(1)));
  EXPECT_FALSE(c.Get(CacheKeyOf(2)));
}

// The readers sharing a cache: distinct (tag, id) pairs noted within the
// horizon, each counted once however often it reads.
TEST(ChunkCache, CountsTheReadersOfTheLastSecond) {
  ChunkCache c(1000);
  EXPECT_EQ(c.NoteReader(7), 1u);
  EXPECT_EQ(c.NoteReader(7), 1u);
  EXPECT_EQ(c.NoteReader(8), 2u);
  EXPECT_EQ(c.NoteReader(7, /*tag=*/1), 3u);  // another store's file 7
  std::this_thread::sleep_for(ChunkCache::kReaderHorizon + std::chrono::milliseconds(50));
  EXPECT_EQ(c.NoteReader(8), 1u) << "readers silent for longer than the horizon are no longer counted";
}

}  // namespace
}  // namespace lmc::store
