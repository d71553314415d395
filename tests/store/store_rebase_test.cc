// Reverse deltas: Batch::RebaseChunk, exact delta depths, the dependants
// index (docs/FORMAT.md, "Dependants index"), Store::SubtreeHeight, and
// fsck's and Open's handling of that index. Frames are real LMC frames.
#include <gtest/gtest.h>

#include <thread>

#include "fault_env.h"
#include "format.h"
#include "lmc/codec.h"
#include "lmc/store/extent.h"
#include "store_test_util.h"

namespace lmc::store {
namespace {

using testing::KeyOf;
using testing::OpenOrDie;
using testing::RandomBytes;
using testing::ReadAll;
using testing::TempDir;
using testing::WithRawIndex;

constexpr uint32_t kLen = 1 << 16;

StoreOptions RealCodec(Env* env = nullptr) {
  StoreOptions o;                  // LMC codec
  o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
  o.env = env;
  o.verify_content_hash = true;
  return o;
}

std::vector<uint8_t> Encode(const std::vector<uint8_t>& d, const std::vector<uint8_t>* base) {
  thread_local Workspace ws;
  std::vector<uint8_t> f(MaxEncodedSize(d.size()));
  EncodeParams p;
  p.dtype = DType::kBF16;
  p.base = base ? base->data() : nullptr;
  auto n = EncodeChunk(d.data(), d.size(), p, f.data(), f.size(), ws);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  f.resize(n.ok() ? *n : 0);
  return f;
}

// Versions v[0..n) of one tensor chunk, each a small change of the one
// before; file i + 1 holds v[i].
struct Versions {
  std::vector<std::vector<uint8_t>> v;
  std::vector<ChunkKey> k;
  explicit Versions(int n) {
    std::vector<uint8_t> d(kLen);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    for (int i = 0; i < n; ++i) {
      for (size_t j = static_cast<size_t>(i); j < d.size(); j += 89) d[j] ^= static_cast<uint8_t>(i + 1);
      v.push_back(d);
      k.push_back(KeyOf(d));
    }
  }
  // Adds v[i] as file i + 1, standalone or (forward) a delta on v[base].
  void AddFile(Batch& b, int i, std::optional<int> base = std::nullopt) const {
    if (base)
      b.AddChunk(k[i], Encode(v[i], &v[*base]), kLen, k[*base]);
    else
      b.AddChunk(k[i], Encode(v[i], nullptr), kLen);
    Extent e;
    e.length = kLen;
    e.chunk = k[i];
    b.Put(Cf::kExtents, ExtentKey(static_cast<uint64_t>(i) + 1, 0), EncodeExtent(e));
  }
  // Writes v[i] standalone as file i + 1 (the newest version of a chunk).
  void AddFile(Store& s, int i) const {
    Batch b;
    AddFile(b, i);
    ASSERT_TRUE(s.Commit(b).ok());
  }
  // Re-encodes v[i] as a delta on v[j].
  void Rebase(Batch& b, int i, int j, uint8_t max_depth = fmt::kMaxDeltaDepth) const {
    b.RebaseChunk(k[i], Encode(v[i], &v[j]), k[j], max_depth);
  }
  Status Rebase(Store& s, int i, int j, uint8_t max_depth = fmt::kMaxDeltaDepth) const {
    Batch b;
    Rebase(b, i, j, max_depth);
    return s.Commit(b);
  }
  // Files 1..n written newest-standalone, each older one rebased onto the
  // next: v[0] -> v[1] -> ... -> v[n-1].
  void WriteReverseChain(Store& s, int n) const {
    AddFile(s, 0);
    for (int i = 1; i < n; ++i) {
      AddFile(s, i);
      ASSERT_TRUE(Rebase(s, i - 1, i).ok());
    }
  }
};

int Depth(Store& s, const ChunkKey& k) {
  auto i = s.GetChunkInfo(k);
  EXPECT_TRUE(i.ok()) << i.status().ToString();
  return i.ok() ? i->delta_depth : -1;
}

uint32_t Height(Store& s, const ChunkKey& k) {
  auto h = s.SubtreeHeight(k);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : 999;
}

void ExpectFsckClean(Store& s) {
  auto f = s.Fsck({});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
}

size_t DependantRecords(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* def) {
  size_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), def));
  for (it->Seek(fmt::kDependantPrefix); it->Valid() && it->key().starts_with(fmt::kDependantPrefix);
       it->Next())
    n++;
  return n;
}

// A store holding the reverse chain of vs's first n versions, closed (for
// tests that then change its index with WithRawIndex).
void WriteChainAndClose(const TempDir& t, const Versions& vs, int n) {
  auto s = OpenOrDie(t.store(), RealCodec());
  vs.WriteReverseChain(*s, n);
}

// Rewrites chunk key's entry with another depth (an older store's upper
// bound, or damage).
void SetRawDepth(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* chunks, const ChunkKey& key, uint8_t depth) {
  std::string v;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), chunks, key.view(), &v).ok());
  auto e = fmt::DecodeChunkEntry(key, v);
  ASSERT_TRUE(e.ok());
  e->depth = depth;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), chunks, key.view(), fmt::EncodeChunkEntry(key, *e)).ok());
}

TEST(StoreRebaseTest, ReverseChainReadsBackWithExactDepths) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(6);
  vs.AddFile(*s, 0);
  for (int i = 1; i < 6; ++i) {
    vs.AddFile(*s, i);
    const uint64_t frame_before = s->GetChunkInfo(vs.k[i - 1])->frame_len;
    ASSERT_TRUE(vs.Rebase(*s, i - 1, i).ok());
    EXPECT_EQ(s->Stats().rebased, static_cast<uint64_t>(i));
    EXPECT_LT(s->GetChunkInfo(vs.k[i - 1])->frame_len, frame_before);  // a real delta
    EXPECT_EQ(s->GetChunkInfo(vs.k[i - 1])->base, vs.k[i]);
    EXPECT_EQ(s->GetChunkInfo(vs.k[i])->refcount, 2u);  // file + dependant
    for (int j = 0; j <= i; ++j) {
      EXPECT_EQ(Depth(*s, vs.k[j]), i - j) << "step " << i << " chunk " << j;
      EXPECT_EQ(Height(*s, vs.k[j]), static_cast<uint32_t>(j)) << "step " << i << " chunk " << j;
      EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
    }
  }
  EXPECT_EQ(s->Stats().rebase_skipped, 0u);
  ExpectFsckClean(*s);
  // Old records are garbage: live bytes are the chunks' current records.
  uint64_t live = 0;
  for (const ChunkKey& k : vs.k) live += s->GetChunkInfo(k)->frame_len + fmt::kRecordHeaderSize;
  EXPECT_EQ(s->Stats().live_bytes, live);
  EXPECT_TRUE(s->SubtreeHeight(KeyOf(RandomBytes(16, 1))).status().IsNotFound());
}

TEST(StoreRebaseTest, SkippedWhenTheChainLimitWouldBeExceeded) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(11);
  vs.WriteReverseChain(*s, 4);  // v0 -> v1 -> v2 -> v3: v0 is 3 deep
  vs.AddFile(*s, 4);
  // v3 onto v4 makes v0 4 deep: over a limit of 3, within 4.
  ASSERT_TRUE(vs.Rebase(*s, 3, 4, 3).ok());
  EXPECT_EQ(s->Stats().rebase_skipped, 1u);
  EXPECT_FALSE(s->GetChunkInfo(vs.k[3])->base.has_value());
  EXPECT_EQ(s->GetChunkInfo(vs.k[4])->refcount, 1u);
  EXPECT_EQ(Depth(*s, vs.k[0]), 3);
  ASSERT_TRUE(vs.Rebase(*s, 3, 4, 4).ok());
  EXPECT_EQ(s->GetChunkInfo(vs.k[3])->base, vs.k[4]);
  EXPECT_EQ(Depth(*s, vs.k[0]), 4);
  // Up to kMaxDeltaDepth whatever max_depth says.
  for (int i = 5; i < 9; ++i) {
    vs.AddFile(*s, i);
    ASSERT_TRUE(vs.Rebase(*s, i - 1, i, 255).ok());
  }
  EXPECT_EQ(Depth(*s, vs.k[0]), 8);
  EXPECT_EQ(Height(*s, vs.k[8]), 8u);
  vs.AddFile(*s, 9);
  const uint64_t skipped = s->Stats().rebase_skipped;
  ASSERT_TRUE(vs.Rebase(*s, 8, 9, 255).ok());
  EXPECT_EQ(s->Stats().rebase_skipped, skipped + 1);
  EXPECT_FALSE(s->GetChunkInfo(vs.k[8])->base.has_value());
  for (int j = 0; j < 10; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, SkippedWhenItsConditionsDoNotHoldWhileTheRestOfTheBatchApplies) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(5);
  vs.WriteReverseChain(*s, 2);  // v0 -> v1
  vs.AddFile(*s, 2);
  vs.AddFile(*s, 3);
  uint64_t skipped = 0;
  auto expect_skipped = [&](Batch& b, const char* what) {
    b.Put(Cf::kMeta, what, "x");
    ASSERT_TRUE(s->Commit(b).ok()) << what;
    EXPECT_EQ(s->Stats().rebase_skipped, ++skipped) << what;
    EXPECT_EQ(*s->Get(Cf::kMeta, what), "x") << what;
  };
  {
    Batch b;  // v0 already has a base
    vs.Rebase(b, 0, 2);
    expect_skipped(b, "has a base");
    EXPECT_EQ(s->GetChunkInfo(vs.k[0])->base, vs.k[1]);
  }
  {
    Batch b;  // base not in the store
    std::vector<uint8_t> absent = vs.v[2];
    absent[0] ^= 0xff;
    b.RebaseChunk(vs.k[2], Encode(vs.v[2], &absent), KeyOf(absent), 8);
    expect_skipped(b, "base missing");
  }
  {
    Batch b;  // v1 onto v0 would be a loop (v0 is built on v1)
    vs.Rebase(b, 1, 0);
    expect_skipped(b, "loop");
    EXPECT_FALSE(s->GetChunkInfo(vs.k[1])->base.has_value());
  }
  {
    Batch b;  // onto itself
    b.RebaseChunk(vs.k[2], Encode(vs.v[2], nullptr), vs.k[2], 8);
    expect_skipped(b, "itself");
  }
  {
    Batch b;  // key not in the store
    vs.Rebase(b, 4, 2);
    expect_skipped(b, "key missing");
  }
  {
    Batch b;  // base of another size
    const std::vector<uint8_t> small = RandomBytes(4096, 3);
    b.AddChunk(KeyOf(small), Encode(small, nullptr), 4096);
    b.RebaseChunk(vs.k[2], Encode(vs.v[2], nullptr), KeyOf(small), 8);
    b.Unref(KeyOf(small));
    expect_skipped(b, "size");
  }
  {
    Batch b;  // base released earlier in the same batch (file 4 deleted)
    b.Unref(vs.k[3]);
    b.Delete(Cf::kExtents, ExtentKey(4, 0));
    vs.Rebase(b, 2, 3);
    expect_skipped(b, "base released");
    EXPECT_TRUE(s->GetChunkInfo(vs.k[3]).status().IsNotFound());
    EXPECT_FALSE(s->GetChunkInfo(vs.k[2])->base.has_value());
  }
  EXPECT_EQ(s->Stats().rebased, 1u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, AppliesOntoAPinnedDeadBase) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(2);
  vs.AddFile(*s, 0);
  vs.AddFile(*s, 1);
  ASSERT_TRUE(s->PinChunk(vs.k[1]).ok());
  Batch b;
  b.Unref(vs.k[1]);
  b.Delete(Cf::kExtents, ExtentKey(2, 0));
  ASSERT_TRUE(s->Commit(b).ok());
  EXPECT_EQ(s->PinnedDeadChunks(), 1u);
  Batch r;
  vs.Rebase(r, 0, 1);
  r.Unpin(vs.k[1]);
  ASSERT_TRUE(s->Commit(r).ok());
  EXPECT_EQ(s->Stats().rebased, 1u);
  EXPECT_EQ(s->PinnedDeadChunks(), 0u);
  EXPECT_EQ(s->GetChunkInfo(vs.k[1])->refcount, 1u);
  EXPECT_EQ(*ReadAll(*s, vs.k[0]), vs.v[0]);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, RewriteOfAMiddleChunkMakesItsDependantsShallower) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(5);
  vs.WriteReverseChain(*s, 5);  // v0 (4 deep) -> v1 -> v2 -> v3 -> v4
  Batch b;
  b.RewriteChunk(vs.k[2], Encode(vs.v[2], nullptr));
  ASSERT_TRUE(s->Commit(b).ok());
  EXPECT_EQ(Depth(*s, vs.k[2]), 0);
  EXPECT_EQ(Depth(*s, vs.k[1]), 1);
  EXPECT_EQ(Depth(*s, vs.k[0]), 2);
  EXPECT_EQ(Height(*s, vs.k[4]), 1u);
  EXPECT_EQ(Height(*s, vs.k[2]), 2u);
  EXPECT_EQ(s->GetChunkInfo(vs.k[3])->refcount, 1u);
  // And back onto v3 with a base: deeper again.
  Batch d;
  d.RewriteChunk(vs.k[2], Encode(vs.v[2], &vs.v[3]), vs.k[3]);
  ASSERT_TRUE(s->Commit(d).ok());
  EXPECT_EQ(Depth(*s, vs.k[0]), 4);
  // A rewrite that would build v3 on its own dependant is refused.
  Batch loop;
  loop.RewriteChunk(vs.k[3], Encode(vs.v[3], &vs.v[0]), vs.k[0]);
  EXPECT_EQ(s->Commit(loop).code(), Code::kInvalidArgument);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, RewriteThatWouldMakeADependantTooDeepFails) {
  TempDir t;
  auto s = OpenOrDie(t.store(), RealCodec());
  Versions vs(10);
  vs.WriteReverseChain(*s, 5);  // v0 (4 deep) -> v1 -> v2 -> v3 -> v4
  vs.AddFile(*s, 5);
  for (int i = 6; i < 9; ++i) {  // forward deltas: v8 -> v7 -> v6 -> v5, v8 3 deep
    Batch b;
    vs.AddFile(b, i, i - 1);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  vs.AddFile(*s, 9);
  // v4 onto v8: v0 becomes 4 + 4 = 8 deep, the limit.
  Batch ok;
  ok.RewriteChunk(vs.k[4], Encode(vs.v[4], &vs.v[8]), vs.k[8]);
  ASSERT_TRUE(s->Commit(ok).ok());
  EXPECT_EQ(Depth(*s, vs.k[0]), 8);
  EXPECT_EQ(Height(*s, vs.k[5]), 8u);
  // v5 (the root) onto v9 would make v0 9 deep.
  Batch bad;
  bad.RewriteChunk(vs.k[5], Encode(vs.v[5], &vs.v[9]), vs.k[9]);
  EXPECT_EQ(s->Commit(bad).code(), Code::kInvalidArgument);
  EXPECT_FALSE(s->GetChunkInfo(vs.k[5])->base.has_value());
  EXPECT_EQ(s->GetChunkInfo(vs.k[9])->refcount, 1u);
  for (int j = 0; j < 10; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, DependantsIndexSurvivesReopen) {
  TempDir t;
  Versions vs(5);
  WriteChainAndClose(t, vs, 4);
  WithRawIndex(t.store(), [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
    EXPECT_EQ(DependantRecords(db, h[0]), 3u);
  });
  auto s = OpenOrDie(t.store(), RealCodec());
  EXPECT_EQ(Height(*s, vs.k[3]), 3u);
  // The index found the dependants: the rewrite reaches them.
  Batch b;
  b.RewriteChunk(vs.k[2], Encode(vs.v[2], nullptr));
  ASSERT_TRUE(s->Commit(b).ok());
  EXPECT_EQ(Depth(*s, vs.k[0]), 2);
  vs.AddFile(*s, 4);
  ASSERT_TRUE(vs.Rebase(*s, 3, 4).ok());
  EXPECT_EQ(Depth(*s, vs.k[0]), 2);  // under v2, standalone now
  EXPECT_EQ(Height(*s, vs.k[4]), 1u);
  ExpectFsckClean(*s);
}

TEST(StoreRebaseTest, OpenBuildsTheIndexOfAStoreWithoutIt) {
  TempDir t;
  Versions vs(5);
  WriteChainAndClose(t, vs, 4);
  // Make it look like a store from before the index: no marker, no dep/
  // records, and v0's depth a stale upper bound (as RewriteChunk left it).
  WithRawIndex(t.store(), [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h[0], fmt::kDepsIndexMarker).ok());
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), h[0]));
    for (it->Seek(fmt::kDependantPrefix); it->Valid() && it->key().starts_with(fmt::kDependantPrefix);
         it->Next())
      ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h[0], it->key()).ok());
    EXPECT_EQ(DependantRecords(db, h[0]), 0u);
    SetRawDepth(db, h[1], vs.k[0], 7);
  });
  {
    auto s = OpenOrDie(t.store(), RealCodec());
    EXPECT_EQ(Depth(*s, vs.k[0]), 3);
    EXPECT_EQ(Height(*s, vs.k[3]), 3u);
    ExpectFsckClean(*s);
    Batch b;
    b.RewriteChunk(vs.k[1], Encode(vs.v[1], nullptr));
    ASSERT_TRUE(s->Commit(b).ok());
    EXPECT_EQ(Depth(*s, vs.k[0]), 1);
  }
  WithRawIndex(t.store(), [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
    EXPECT_EQ(DependantRecords(db, h[0]), 2u);
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), h[0], fmt::kDepsIndexMarker, &v).ok());
    EXPECT_EQ(v, "1");
  });
}

TEST(StoreRebaseTest, FsckFindsAndRepairsTheDependantsIndexAndDepths) {
  TempDir t;
  Versions vs(4);
  WriteChainAndClose(t, vs, 4);
  const ChunkKey stranger = KeyOf(RandomBytes(64, 9));
  WithRawIndex(t.store(), [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
    // v1's record goes; one that names an absent chunk comes; v0's depth is wrong.
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h[0], fmt::DependantKey(vs.k[2], vs.k[1])).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h[0], fmt::DependantKey(vs.k[3], stranger), "").ok());
    SetRawDepth(db, h[1], vs.k[0], 5);
  });
  auto s = OpenOrDie(t.store(), RealCodec());
  // The store's own checks and repairs (what a store without an index
  // journal gets); the index no longer matches its journal, which
  // compare_journal would report and refuse to repair from.
  FsckOptions check;
  check.compare_journal = false;
  auto f = s->Fsck(check);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Count(FsckProblem::Kind::kDependantIndex), 2u);
  EXPECT_EQ(f->Count(FsckProblem::Kind::kDepth), 1u);
  EXPECT_EQ(f->errors(), 3u);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  auto compared = s->Fsck({});
  ASSERT_TRUE(compared.ok());
  EXPECT_EQ(compared->Count(FsckProblem::Kind::kIndexJournalMismatch), 2u);  // default (dep/), chunks (depth)
  EXPECT_EQ(compared->fixed(), 0u);
  FsckOptions repair = check;
  repair.repair = true;
  auto r = s->Fsck(repair);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->errors(), 3u);
  EXPECT_EQ(r->fixed(), 3u);
  EXPECT_EQ(r->ExitCode(), kFsckCorrected);
  ExpectFsckClean(*s);
  EXPECT_EQ(Depth(*s, vs.k[0]), 3);
  EXPECT_EQ(Height(*s, vs.k[3]), 3u);
  EXPECT_EQ(Height(*s, vs.k[2]), 2u);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
}

TEST(StoreRebaseTest, FailedBatchInAGroupLeavesTheIndexConsistent) {
  TempDir t;
  testing::FaultEnv env;
  auto s = OpenOrDie(t.store(), RealCodec(&env));
  Versions vs(8);
  vs.WriteReverseChain(*s, 3);  // v0 -> v1 -> v2
  vs.AddFile(*s, 3);
  vs.AddFile(*s, 4);
  const uint64_t groups = s->Stats().commit_groups;

  // The leader of the first group stalls in its pack sync while a good and
  // a failing batch queue behind it; they commit as one group.
  env.HoldSyncs(true);
  std::thread first([&] { vs.AddFile(*s, 5); });
  env.WaitForHeldSyncs(1);
  Status bad_status, good_status;
  std::thread bad([&] {
    Batch b;
    // Every kind of dependants change, then a failure.
    vs.AddFile(b, 6, 2);                                // adds 2 <- 6
    b.RewriteChunk(vs.k[1], Encode(vs.v[1], nullptr));  // removes 2 <- 1
    vs.Rebase(b, 3, 4);                                 // adds 4 <- 3
    b.Unref(vs.k[0]);                                   // removes 1 <- 0
    b.Ref(KeyOf(RandomBytes(8, 5)));                    // not in the store
    bad_status = s->Commit(b);
  });
  std::thread good([&] {
    Batch b;
    vs.Rebase(b, 2, 4);  // v0 -> v1 -> v2 -> v4
    good_status = s->Commit(b);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  env.HoldSyncs(false);
  first.join();
  bad.join();
  good.join();
  EXPECT_EQ(bad_status.code(), Code::kInvalidArgument) << bad_status.ToString();
  EXPECT_TRUE(good_status.ok()) << good_status.ToString();
  EXPECT_EQ(s->Stats().commit_groups, groups + 2);  // the two batches shared a group

  EXPECT_EQ(s->GetChunkInfo(vs.k[2])->base, vs.k[4]);
  EXPECT_FALSE(s->GetChunkInfo(vs.k[3])->base.has_value());
  EXPECT_TRUE(s->GetChunkInfo(vs.k[6]).status().IsNotFound());
  EXPECT_EQ(Depth(*s, vs.k[0]), 3);
  EXPECT_EQ(Height(*s, vs.k[4]), 3u);
  EXPECT_EQ(Height(*s, vs.k[2]), 2u);
  ExpectFsckClean(*s);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(*ReadAll(*s, vs.k[j]), vs.v[j]);
}

}  // namespace
}  // namespace lmc::store
