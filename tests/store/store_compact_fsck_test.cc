// Compaction reclaims dead packs and keeps every live chunk; fsck finds and
// repairs wrong counts, leaks and orphans without touching good data;
// recovery cuts uncommitted tails and deletes never-committed packs.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "format.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

TEST(CompactTest, ReclaimsDeadPacksKeepsLiveChunks) {
  TempDir t;
  auto o = TestOptions();
  o.punch_dead = false;  // compaction alone (as on RADOS): holes would change what it selects
  o.pack_size_limit = 8192;
  auto s = OpenOrDie(t.store(), o);
  std::map<uint64_t, std::vector<uint8_t>> files;
  for (uint64_t i = 1; i <= 30; ++i) {
    files[i] = RandomBytes(2000, 50 + i);
    Batch b;
    AddFileChunk(b, i, files[i]);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  const uint64_t before = s->Stats().pack_bytes;
  Batch d;
  for (uint64_t i = 1; i <= 30; ++i) {
    if (i % 4 == 0) continue;
    d.Unref(KeyOf(files[i]));
    d.Delete(Cf::kExtents, ExtentKey(i, 0));
    files.erase(i);
  }
  ASSERT_TRUE(s->Commit(d).ok());

  CompactOptions dry;
  dry.dry_run = true;
  auto plan = s->Compact(dry);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->candidates.size(), 3u);
  EXPECT_EQ(plan->packs_compacted, 0u);

  std::vector<CompactProgress> seen;
  auto r = s->Compact({}, [&](const CompactProgress& p) {
    seen.push_back(p);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packs_compacted, plan->candidates.size());
  EXPECT_EQ(seen.size(), plan->candidates.size());
  EXPECT_EQ(r->chunks_moved, files.size());
  EXPECT_LT(s->Stats().pack_bytes, before / 2);
  for (auto& [ino, data] : files) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);

  // Cancelling stops between packs with everything so far committed.
  Batch more;
  for (uint64_t i = 100; i < 130; ++i) AddFileChunk(more, i, RandomBytes(2000, i));
  ASSERT_TRUE(s->Commit(more).ok());
  Batch drop;
  for (uint64_t i = 100; i < 130; ++i) {
    drop.Unref(KeyOf(RandomBytes(2000, i)));
    drop.Delete(Cf::kExtents, ExtentKey(i, 0));
  }
  ASSERT_TRUE(s->Commit(drop).ok());
  CompactOptions all;
  all.live_fraction_threshold = 0.99;
  auto c = s->Compact(all, [](const CompactProgress&) { return false; });
  EXPECT_EQ(c.status().code(), Code::kAborted);
  for (auto& [ino, data] : files) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  s.reset();
  s = OpenOrDie(t.store(), o);
  for (auto& [ino, data] : files) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

TEST(CompactTest, ReadersRaceCompaction) {
  TempDir t;
  auto o = TestOptions();
  o.pack_size_limit = 4096;
  auto s = OpenOrDie(t.store(), o);
  std::vector<std::vector<uint8_t>> keep;
  for (uint64_t i = 1; i <= 40; ++i) {
    auto d = RandomBytes(1500, 7000 + i);
    Batch b;
    AddFileChunk(b, i, d);
    ASSERT_TRUE(s->Commit(b).ok());
    if (i % 5 == 0)
      keep.push_back(d);
    else {
      Batch u;
      u.Unref(KeyOf(d));
      u.Delete(Cf::kExtents, ExtentKey(i, 0));
      ASSERT_TRUE(s->Commit(u).ok());
    }
  }
  std::atomic<bool> stop{false}, bad{false};
  std::thread reader([&] {
    Workspace ws;
    std::vector<uint8_t> buf(2000);
    while (!stop)
      for (auto& d : keep) {
        auto n = s->ReadChunk(KeyOf(d), buf.data(), buf.size(), ws);
        if (!n.ok() || std::memcmp(buf.data(), d.data(), d.size()) != 0) bad = true;
      }
  });
  ASSERT_TRUE(s->Compact({}).ok());
  stop = true;
  reader.join();
  EXPECT_FALSE(bad);
}

// Compaction copies records without the commit lock: commits that release,
// re-reference and add chunks of the packs being compacted meanwhile must
// leave every live chunk readable and the index consistent (fsck clean).
TEST(CompactTest, WritersRaceCompaction) {
  TempDir t;
  auto o = TestOptions();
  o.pack_size_limit = 64 * 1024;
  auto s = OpenOrDie(t.store(), o);
  std::vector<std::vector<uint8_t>> data;
  for (uint64_t i = 1; i <= 200; ++i) {
    data.push_back(RandomBytes(3000, 9100 + i));
    Batch b;
    AddFileChunk(b, i, data.back());
    ASSERT_TRUE(s->Commit(b).ok());
  }
  // Two thirds dead before compaction starts.
  for (uint64_t i = 1; i <= 200; ++i) {
    if (i % 3 == 0) continue;
    Batch u;
    u.Unref(KeyOf(data[i - 1]));
    u.Delete(Cf::kExtents, ExtentKey(i, 0));
    ASSERT_TRUE(s->Commit(u).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<bool> live(201, false);  // written by the writer thread only
  for (uint64_t i = 3; i <= 200; i += 3) live[i] = true;
  std::thread writer([&] {
    uint64_t round = 0;
    while (!stop && round < 2000) {
      ++round;
      // Release a live chunk, or bring a dead one back (re-added: new
      // record in the active pack), or add a new one.
      uint64_t i = 1 + (round * 37) % 200;
      Batch b;
      if (live[i]) {
        b.Unref(KeyOf(data[i - 1]));
        b.Delete(Cf::kExtents, ExtentKey(i, 0));
      } else {
        AddFileChunk(b, i, data[i - 1]);
      }
      if (!s->Commit(b).ok())
        failures++;
      else
        live[i] = !live[i];
    }
  });
  for (int k = 0; k < 5; ++k) {
    CompactOptions co;
    co.live_fraction_threshold = 0.9;
    auto r = s->Compact(co);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  stop = true;
  writer.join();
  EXPECT_EQ(failures, 0);
  for (uint64_t i = 1; i <= 200; ++i) {
    if (!live[i]) continue;
    auto d = ReadAll(*s, KeyOf(data[i - 1]));
    ASSERT_TRUE(d.ok()) << i << ": " << d.status().ToString();
    EXPECT_EQ(*d, data[i - 1]) << i;
  }
  FsckOptions fo;
  auto f = s->Fsck(fo);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages().front());
}

TEST(FsckTest, RepairsCountsAndLeaksButNotMissingData) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  auto a = RandomBytes(1000, 1), b = RandomBytes(1000, 2), c = RandomBytes(1000, 3);
  Batch x;
  AddFileChunk(x, 1, a);
  AddFileChunk(x, 2, b);
  x.Ref(KeyOf(b));                           // a reference no extent holds: count too high
  x.AddChunk(KeyOf(c), TestFrame(c), 1000);  // a chunk nothing references: a leak
  Extent e;
  e.length = 10;
  e.chunk = KeyOf(a);
  x.Put(Cf::kExtents, ExtentKey(3, 0), EncodeExtent(e));  // a reference never declared: too low
  ASSERT_TRUE(s->Commit(x).ok());

  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Count(FsckProblem::Kind::kRefcountMismatch), 3u);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  FsckOptions fix;
  fix.repair = true;
  f = s->Fsck(fix);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->ExitCode(), kFsckCorrected) << f->Messages().size();
  EXPECT_EQ(s->GetChunkInfo(KeyOf(a))->refcount, 2u);
  EXPECT_EQ(s->GetChunkInfo(KeyOf(b))->refcount, 1u);
  EXPECT_TRUE(s->GetChunkInfo(KeyOf(c)).status().IsNotFound());
  EXPECT_EQ(*ReadAll(*s, KeyOf(a)), a);
  EXPECT_EQ(*ReadAll(*s, KeyOf(b)), b);
  EXPECT_EQ(s->Fsck({})->ExitCode(), kFsckOk);

  // A dangling reference cannot be repaired: reported, nothing dropped.
  Extent ghost;
  ghost.length = 1;
  ghost.chunk = KeyOf(RandomBytes(5, 5));
  Batch g;
  g.Put(Cf::kExtents, ExtentKey(9, 0), EncodeExtent(ghost));
  ASSERT_TRUE(s->Commit(g).ok());
  f = s->Fsck(fix);
  EXPECT_EQ(f->Count(FsckProblem::Kind::kMissingChunk), 1u);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  EXPECT_EQ(*ReadAll(*s, KeyOf(a)), a);
}

TEST(RecoveryTest, CutsUncommittedTailsAndDropsUncommittedPacks) {
  TempDir t;
  auto d = RandomBytes(2000, 1);
  ChunkInfo info;
  {
    auto s = OpenOrDie(t.store(), TestOptions());
    Batch b;
    AddFileChunk(b, 1, d);
    ASSERT_TRUE(s->Commit(b).ok());
    info = *s->GetChunkInfo(KeyOf(d));
  }
  const std::string pack = t.store() + "/packs/" + fmt::PackFileName(info.pack_id);
  const auto committed = std::filesystem::file_size(pack);
  {
    // Synced pack bytes whose index batch never committed, and a pack
    // created by a commit that never finished.
    std::ofstream(pack, std::ios::app) << std::string(777, 'x');
    std::ofstream(t.store() + "/packs/" + fmt::PackFileName(info.pack_id + 5)) << std::string(100, 'y');
  }
  auto s = OpenOrDie(t.store(), TestOptions());
  EXPECT_EQ(std::filesystem::file_size(pack), committed);
  EXPECT_FALSE(std::filesystem::exists(t.store() + "/packs/" + fmt::PackFileName(info.pack_id + 5)));
  EXPECT_EQ(*ReadAll(*s, KeyOf(d)), d);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
  // New packs never reuse an id seen on disk.
  Batch b;
  AddFileChunk(b, 2, RandomBytes(100, 2));
  ASSERT_TRUE(s->Commit(b).ok());
  EXPECT_GT(s->GetChunkInfo(KeyOf(RandomBytes(100, 2)))->pack_id, info.pack_id + 5);
}

}  // namespace
}  // namespace lmc::store::testing
