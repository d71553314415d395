// Pinned delta bases and garbage collection of dead bases (Store::PinChunk,
// Batch::RewriteChunk, Store::RewriteDeadBases).
#include <gtest/gtest.h>

#include "lmc/codec.h"
#include "lmc/store/extent.h"
#include "store_test_util.h"

namespace lmc::store {
namespace {

using testing::AddFileChunk;
using testing::KeyOf;
using testing::OpenOrDie;
using testing::RandomBytes;
using testing::ReadAll;
using testing::TempDir;
using testing::TestFrame;
using testing::TestOptions;

std::vector<uint8_t> Perturb(std::vector<uint8_t> v, uint8_t x) {
  for (size_t i = 0; i < v.size(); i += 97) v[i] ^= x;
  return v;
}

void PutExtent(Batch& b, uint64_t inode, const ChunkKey& k, uint32_t len) {
  Extent e;
  e.length = len;
  e.chunk = k;
  b.Put(Cf::kExtents, ExtentKey(inode, 0), EncodeExtent(e));
}

void DropFile(Store& s, uint64_t inode, const ChunkKey& k) {
  Batch b;
  b.Unref(k);
  b.Delete(Cf::kExtents, ExtentKey(inode, 0));
  ASSERT_TRUE(s.Commit(b).ok());
}

// file 1: base; file 2: next (delta on base); file 3: third (delta on next).
struct Chain {
  std::vector<uint8_t> base = RandomBytes(4096, 11), next = Perturb(base, 0x21), third = Perturb(next, 0x42);
  ChunkKey kb = KeyOf(base), kn = KeyOf(next), kt = KeyOf(third);
  void Write(Store& s) {
    Batch b;
    AddFileChunk(b, 1, base);
    b.AddChunk(kn, TestFrame(next, &base), 4096, kb);
    PutExtent(b, 2, kn, 4096);
    b.AddChunk(kt, TestFrame(third, &next), 4096, kn);
    PutExtent(b, 3, kt, 4096);
    ASSERT_TRUE(s.Commit(b).ok());
  }
};

DeadBaseOptions TestReencode() {
  DeadBaseOptions o;
  o.reencode = [](const ChunkKey&, const uint8_t* p, size_t n, DType) -> Result<std::vector<uint8_t>> {
    return TestFrame(std::vector<uint8_t>(p, p + n));
  };
  return o;
}

TEST(StoreBaseCacheTest, ASeriesReadInOrderDecodesEachBaseOnce) {
  TempDir d;
  auto s = OpenOrDie(d.path(), TestOptions());
  Chain c;
  c.Write(*s);
  // third -> next -> base: the first read decodes both bases...
  ASSERT_EQ(ReadAll(*s, c.kt).value(), c.third);
  EXPECT_EQ(s->Stats().base_cache_misses, 2u);
  EXPECT_EQ(s->Stats().base_cache_hits, 0u);
  // ...reading `next` (whose base is cached) and `third` again decodes none.
  ASSERT_EQ(ReadAll(*s, c.kn).value(), c.next);
  ASSERT_EQ(ReadAll(*s, c.kt).value(), c.third);
  EXPECT_EQ(s->Stats().base_cache_misses, 2u);
  EXPECT_EQ(s->Stats().base_cache_hits, 2u);
  // The keyframe, decoded as a base by the first read, is not decoded again.
  ASSERT_EQ(ReadAll(*s, c.kb).value(), c.base);
  EXPECT_EQ(s->Stats().base_cache_hits, 3u);
  EXPECT_EQ(s->Stats().base_cache_misses, 2u);
}

// What the store holds in memory (StoreStats, lmcfs-stat's "memory"): the
// bases it decoded, and the index's memtables and block caches.
TEST(StoreBaseCacheTest, StatsReportTheMemoryOfTheBaseCacheAndTheIndex) {
  TempDir d;
  StoreOptions o = TestOptions();
  o.base_cache_bytes = 1 << 20;
  auto s = OpenOrDie(d.path(), o);
  StoreStats st = s->Stats();
  EXPECT_EQ(st.base_cache_bytes, 0u);
  EXPECT_EQ(st.base_cache_capacity, uint64_t{1} << 20);
  EXPECT_EQ(st.index_block_cache_capacity, uint64_t{72} << 20);
  Chain c;
  c.Write(*s);
  ASSERT_EQ(ReadAll(*s, c.kt).value(), c.third);
  st = s->Stats();
  EXPECT_EQ(st.base_cache_bytes, 3 * 4096u);  // the chain, each link kept as a base of the next read
  EXPECT_GT(st.index_memtable_bytes, 0u);     // the commit
  EXPECT_LE(st.index_block_cache_bytes, st.index_block_cache_capacity);
}

TEST(StoreBaseCacheTest, ZeroCapacityDecodesEveryChainAndABaseOverCapacityIsNotKept) {
  for (uint64_t cap : {uint64_t{0}, uint64_t{4095}}) {
    TempDir d;
    StoreOptions o = TestOptions();
    o.base_cache_bytes = cap;
    auto s = OpenOrDie(d.path(), o);
    Chain c;
    c.Write(*s);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(ReadAll(*s, c.kt).value(), c.third);
    EXPECT_EQ(s->Stats().base_cache_hits, 0u) << cap;
    EXPECT_EQ(s->Stats().base_cache_misses, 6u) << cap;
  }
}

TEST(StorePinTest, PinnedBaseOutlivesItsLastReferenceUntilTheBatchThatUsesItCommits) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  auto base = RandomBytes(4096, 1), next = Perturb(base, 3);
  const ChunkKey kb = KeyOf(base), kn = KeyOf(next);
  {
    Batch b;
    AddFileChunk(b, 1, base);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  ASSERT_TRUE(s->PinChunk(kb).ok());  // the policy chose kb as a base
  DropFile(*s, 1, kb);                // a concurrent unlink releases it
  auto info = s->GetChunkInfo(kb);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->refcount, 0u);
  EXPECT_EQ(s->PinnedDeadChunks(), 1u);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);  // not a leak

  Batch b;
  b.AddChunk(kn, TestFrame(next, &base), 4096, kb);
  PutExtent(b, 2, kn, 4096);
  b.Unpin(kb);
  ASSERT_TRUE(s->Commit(b).ok());
  EXPECT_EQ(s->GetChunkInfo(kb)->refcount, 1u);  // resurrected by its dependant
  EXPECT_EQ(s->PinnedDeadChunks(), 0u);
  EXPECT_EQ(*ReadAll(*s, kn), next);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);

  DropFile(*s, 2, kn);
  EXPECT_TRUE(s->GetChunkInfo(kb).status().IsNotFound());
  EXPECT_EQ(s->Stats().live_bytes, 0u);
}

TEST(StorePinTest, PinnedDeadChunkGoesWithTheNextCommitAfterItsLastPin) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  auto base = RandomBytes(4096, 2);
  const ChunkKey kb = KeyOf(base);
  {
    Batch b;
    AddFileChunk(b, 1, base);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  ASSERT_TRUE(s->PinChunk(kb).ok());
  ASSERT_TRUE(s->PinChunk(kb).ok());  // counted
  DropFile(*s, 1, kb);
  s->UnpinChunk(kb);
  Batch other;
  other.Put(Cf::kMeta, "x", "y");
  ASSERT_TRUE(s->Commit(other).ok());
  EXPECT_TRUE(s->GetChunkInfo(kb).ok()) << "one pin is left";
  s->UnpinChunk(kb);
  ASSERT_TRUE(s->Commit(other).ok());
  EXPECT_TRUE(s->GetChunkInfo(kb).status().IsNotFound());
  EXPECT_EQ(s->PinnedDeadChunks(), 0u);
  EXPECT_EQ(s->Stats().live_bytes, 0u);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

TEST(StorePinTest, PinnedDeadChunkLeftByACrashIsDroppedAtOpen) {
  TempDir t;
  Chain c;
  {
    auto s = OpenOrDie(t.store(), TestOptions());
    c.Write(*s);
    ASSERT_TRUE(s->PinChunk(c.kt).ok());
    DropFile(*s, 3, c.kt);
    EXPECT_EQ(s->PinnedDeadChunks(), 1u);
  }  // closed with the pin held
  auto s = OpenOrDie(t.store(), TestOptions());
  EXPECT_EQ(s->PinnedDeadChunks(), 0u);
  EXPECT_TRUE(s->GetChunkInfo(c.kt).status().IsNotFound());
  EXPECT_EQ(s->GetChunkInfo(c.kn)->refcount, 1u);  // its base reference went with it
  EXPECT_EQ(*ReadAll(*s, c.kn), c.next);
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
}

TEST(StorePinTest, PinOfAnAbsentChunkIsNotFound) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  EXPECT_TRUE(s->PinChunk(KeyOf(RandomBytes(10, 1))).IsNotFound());
  s->UnpinChunk(KeyOf(RandomBytes(10, 1)));  // harmless
}

TEST(StoreRewriteTest, RewriteKeepsKeyAndReferencesAndMovesTheBaseReference) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  Chain c;
  c.Write(*s);
  EXPECT_EQ(s->GetChunkInfo(c.kb)->refcount, 2u);
  Batch b;
  b.RewriteChunk(c.kn, TestFrame(c.next));
  ASSERT_TRUE(s->Commit(b).ok());
  auto info = s->GetChunkInfo(c.kn);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->base.has_value());
  EXPECT_EQ(info->delta_depth, 0);
  EXPECT_EQ(info->refcount, 2u);  // file 2 + third's base reference
  EXPECT_EQ(s->GetChunkInfo(c.kb)->refcount, 1u);
  EXPECT_EQ(*ReadAll(*s, c.kn), c.next);
  EXPECT_EQ(*ReadAll(*s, c.kt), c.third);
  // And back to a delta against the base.
  Batch d;
  d.RewriteChunk(c.kn, TestFrame(c.next, &c.base), c.kb);
  ASSERT_TRUE(s->Commit(d).ok());
  EXPECT_EQ(s->GetChunkInfo(c.kb)->refcount, 2u);
  EXPECT_EQ(s->GetChunkInfo(c.kn)->delta_depth, 1);
  EXPECT_EQ(*ReadAll(*s, c.kt), c.third);
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
}

TEST(StoreDeadBaseTest, DeletingTheOldestFileFreesItsBaseAfterGc) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  Chain c;
  c.Write(*s);
  DropFile(*s, 1, c.kb);
  EXPECT_EQ(s->GetChunkInfo(c.kb)->refcount, 1u);  // kept by its dependant only

  DeadBaseOptions dry = TestReencode();
  dry.dry_run = true;
  auto r0 = s->RewriteDeadBases(dry);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ(r0->dead_bases, 1u);
  EXPECT_EQ(r0->rewritten, 0u);
  EXPECT_TRUE(s->GetChunkInfo(c.kb).ok());

  auto r = s->RewriteDeadBases(TestReencode());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dead_bases, 1u);
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_TRUE(s->GetChunkInfo(c.kb).status().IsNotFound());
  EXPECT_FALSE(s->GetChunkInfo(c.kn)->base.has_value());
  EXPECT_EQ(*ReadAll(*s, c.kn), c.next);
  EXPECT_EQ(*ReadAll(*s, c.kt), c.third);
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
  // Nothing left to do.
  EXPECT_EQ(s->RewriteDeadBases(TestReencode())->dead_bases, 0u);
}

TEST(StoreDeadBaseTest, DeadMiddleOfAChainGoesWithoutRewritingIt) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  Chain c;
  c.Write(*s);
  DropFile(*s, 1, c.kb);
  DropFile(*s, 2, c.kn);
  auto r = s->RewriteDeadBases(TestReencode());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dead_bases, 2u);
  EXPECT_EQ(r->rewritten, 1u);  // only the live top
  EXPECT_TRUE(s->GetChunkInfo(c.kb).status().IsNotFound());
  EXPECT_TRUE(s->GetChunkInfo(c.kn).status().IsNotFound());
  EXPECT_EQ(*ReadAll(*s, c.kt), c.third);
  EXPECT_EQ(s->Stats().live_bytes, s->GetChunkInfo(c.kt)->frame_len + 64u);
  // Compaction gives the space back.
  CompactOptions co;
  co.live_fraction_threshold = 1.0;
  ASSERT_TRUE(s->Compact(co).ok());
  EXPECT_EQ(*ReadAll(*s, c.kt), c.third);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

TEST(StoreDeadBaseTest, DefaultReencodeUsesTheLmcCodec) {
  TempDir t;
  StoreOptions o;                  // real codec
  o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
  o.verify_content_hash = true;
  auto s = OpenOrDie(t.store(), o);
  std::vector<uint8_t> base(1 << 16), next;
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  next = Perturb(base, 1);
  const ChunkKey kb = KeyOf(base), kn = KeyOf(next);
  Workspace ws;
  auto encode = [&](const std::vector<uint8_t>& d, const std::vector<uint8_t>* b) {
    std::vector<uint8_t> f(MaxEncodedSize(d.size()));
    EncodeParams p;
    p.dtype = DType::kBF16;
    p.base = b ? b->data() : nullptr;
    auto n = EncodeChunk(d.data(), d.size(), p, f.data(), f.size(), ws);
    EXPECT_TRUE(n.ok());
    f.resize(*n);
    return f;
  };
  {
    Batch b;
    b.AddChunk(kb, encode(base, nullptr), static_cast<uint32_t>(base.size()));
    PutExtent(b, 1, kb, static_cast<uint32_t>(base.size()));
    b.AddChunk(kn, encode(next, &base), static_cast<uint32_t>(next.size()), kb);
    PutExtent(b, 2, kn, static_cast<uint32_t>(next.size()));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  DropFile(*s, 1, kb);
  auto r = s->RewriteDeadBases({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_TRUE(s->GetChunkInfo(kb).status().IsNotFound());
  EXPECT_EQ(*ReadAll(*s, kn), next);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

}  // namespace
}  // namespace lmc::store
