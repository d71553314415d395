// What background reclamation builds on: cost-benefit pack selection down
// to a dead-bytes target, sealing an active pack full of dead records, the
// index staying small, and the write counters.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

// Bytes the files under dir occupy on disk (allocated blocks, as du counts).
uint64_t DiskBytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += uint64_t(st.st_blocks) * 512;
  }
  return n;
}

// Writes `count` one-chunk files (inodes 1..count) of `size` bytes each.
std::map<uint64_t, std::vector<uint8_t>> WriteReclaimFiles(Store& s, uint64_t count, size_t size,
                                                           uint64_t seed) {
  std::map<uint64_t, std::vector<uint8_t>> files;
  for (uint64_t i = 1; i <= count; ++i) {
    files[i] = RandomBytes(size, seed + i);
    Batch b;
    AddFileChunk(b, i, files[i]);
    EXPECT_TRUE(s.Commit(b).ok());
  }
  return files;
}

void DeleteFile(Store& s, std::map<uint64_t, std::vector<uint8_t>>& files, uint64_t ino) {
  Batch d;
  d.Unref(KeyOf(files[ino]));
  d.Delete(Cf::kExtents, ExtentKey(ino, 0));
  ASSERT_TRUE(s.Commit(d).ok());
  files.erase(ino);
}

StoreOptions NoPunch() {
  auto o = TestOptions();
  o.punch_dead = false;  // compaction alone (as on RADOS)
  return o;
}

double DeadFraction(const StoreStats& st) {
  return st.pack_bytes ? static_cast<double>(st.dead_bytes()) / static_cast<double>(st.pack_bytes) : 0;
}

TEST(ReclaimTest, CostBenefitCompactsEmptiestPacksFirstUntilTheTarget) {
  TempDir t;
  auto o = TestOptions();
  o.punch_dead = false;      // compaction alone (as on RADOS): holes would change what it finds
  o.pack_size_limit = 8192;  // about 4 records of 2000 bytes per pack
  auto s = OpenOrDie(t.store(), o);
  auto files = WriteReclaimFiles(*s, 40, 2000, 100);
  // Packs of mixed fullness: files 1-12 all deleted (three empty packs),
  // then every second file of 13-40.
  for (uint64_t i = 1; i <= 40; ++i)
    if (i <= 12 || i % 2 == 0) DeleteFile(*s, files, i);
  const StoreStats before = s->Stats();
  ASSERT_GT(DeadFraction(before), 0.4);

  CompactOptions dry;
  dry.policy = CompactOptions::Policy::kCostBenefit;
  dry.target_dead_fraction = 0.10;
  dry.dry_run = true;
  auto plan = s->Compact(dry);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_FALSE(plan->candidates.empty());
  // The entirely dead packs come first: they free everything for nothing.
  auto info = s->GetChunkInfo(KeyOf(files.begin()->second));
  ASSERT_TRUE(info.ok());
  EXPECT_NE(plan->candidates.front(), info->pack_id);

  CompactOptions o2 = dry;
  o2.dry_run = false;
  auto r = s->Compact(o2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const StoreStats after = s->Stats();
  EXPECT_LE(DeadFraction(after), 0.10 + 1e-9) << after.dead_bytes() << " of " << after.pack_bytes;
  EXPECT_LT(after.pack_bytes, before.pack_bytes);
  EXPECT_EQ(after.compact_bytes_reclaimed, r->bytes_reclaimed);
  EXPECT_EQ(after.compact_bytes_copied, r->bytes_copied);
  for (auto& [ino, data] : files) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);

  // At the target already: nothing more to do.
  auto again = s->Compact(o2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->candidates.empty());
}

TEST(ReclaimTest, ActivePackFullOfDeadRecordsIsSealedAndReclaimed) {
  TempDir t;
  auto o = TestOptions();  // 256 MiB packs: everything stays in the active pack
  o.punch_dead = false;    // compaction alone (as on RADOS)
  auto s = OpenOrDie(t.store(), o);
  auto files = WriteReclaimFiles(*s, 20, 50000, 300);
  for (uint64_t i = 1; i <= 20; ++i) DeleteFile(*s, files, i);
  const StoreStats before = s->Stats();
  ASSERT_EQ(before.packs, 1u);
  ASSERT_GT(before.dead_bytes(), 20u * 50000);

  // Without sealing, the active pack is never a candidate.
  CompactOptions plain;
  plain.policy = CompactOptions::Policy::kCostBenefit;
  auto r0 = s->Compact(plain);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->packs_compacted, 0u);
  EXPECT_EQ(s->Stats().pack_bytes, before.pack_bytes);

  CompactOptions seal = plain;
  seal.seal_active_dead_bytes = 512 << 10;
  auto r = s->Compact(seal);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packs_compacted, 1u);
  EXPECT_EQ(s->Stats().pack_bytes, 0u);
  EXPECT_EQ(r->bytes_copied, 0u);

  // The store keeps working: the next commit starts a new pack.
  auto more = WriteReclaimFiles(*s, 3, 1000, 900);
  for (auto& [ino, data] : more) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  s.reset();
  s = OpenOrDie(t.store(), o);
  for (auto& [ino, data] : more) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

TEST(ReclaimTest, SealingNeedsTheDeadBytesThreshold) {
  TempDir t;
  auto s = OpenOrDie(t.store(), NoPunch());
  auto files = WriteReclaimFiles(*s, 4, 10000, 500);
  DeleteFile(*s, files, 1);  // 10 KB dead: under the bound below
  CompactOptions seal;
  seal.policy = CompactOptions::Policy::kCostBenefit;
  seal.target_dead_fraction = 0;
  seal.seal_active_dead_bytes = 1 << 20;
  auto r = s->Compact(seal);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->packs_compacted, 0u);
  for (auto& [ino, data] : files) EXPECT_EQ(*ReadAll(*s, KeyOf(data)), data);
}

TEST(ReclaimTest, EmptyIndexStaysSmallAndWritesAreCounted) {
  TempDir t;
  auto s = OpenOrDie(t.store(), NoPunch());
  auto files = WriteReclaimFiles(*s, 10, 4000, 700);
  // While open, with the WAL live: no preallocated megabytes.
  EXPECT_LT(DiskBytes(t.store()), uint64_t{1} << 20);
  const StoreStats st = s->Stats();
  EXPECT_GE(st.pack_bytes_written, st.pack_bytes);
  EXPECT_GT(st.index_bytes_written, 0u);
}

}  // namespace
}  // namespace lmc::store::testing
