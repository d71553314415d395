// The decoded-chunk cache (chunk_cache.h): LRU within its capacity, and
// tags that keep the chunks of different stores sharing one cache apart.
#include "lmc/store/chunk_cache.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace lmc::store
