// Hole punching (StoreOptions::punch_dead; docs/ARCHITECTURE.md, "Hole
// punching"): the disk blocks of records that died (released, rebased,
// rewritten, moved) go back to the filesystem once the change is durable,
// without compaction; live records never lose a byte, readers that race the
// punches never fail, and where punching fails the space waits for
// compaction.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "fault_env.h"
#include "store_backend.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

constexpr size_t kFile = 256 << 10;  // incompressible: a record of about this size each
constexpr uint64_t kBlock = 4096;

// Bytes the pack files occupy on disk, as du counts them.
uint64_t PackDiskBytes(const TempDir& t) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/packs")) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += uint64_t(st.st_blocks) * 512;
  }
  return n;
}

FileModel WriteFiles(Store& s, uint64_t first, uint64_t count, uint64_t seed) {
  FileModel files;
  for (uint64_t i = first; i < first + count; ++i) {
    files[i] = RandomBytes(kFile, seed + i);
    Batch b;
    AddFileChunk(b, i, files[i]);
    EXPECT_TRUE(s.Commit(b).ok());
  }
  return files;
}

void Delete(Store& s, FileModel& files, uint64_t ino) {
  Batch d;
  d.Unref(KeyOf(files[ino]));
  d.Delete(Cf::kExtents, ExtentKey(ino, 0));
  ASSERT_TRUE(s.Commit(d).ok());
  files.erase(ino);
}

void ExpectClean(Store& s, const FileModel& files, const std::string& where) {
  ExpectFiles(s, files, {}, where);
  auto f = s.Fsck({});
  ASSERT_TRUE(f.ok()) << where << ": " << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u) << where << ": " << (f->Messages().empty() ? "" : f->Messages().front());
}

TEST(PunchTest, DeletedFilesGiveTheirBlocksBackWithoutCompaction) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  FileModel files = WriteFiles(*s, 1, 20, 100);
  s->PunchDeadRecords();
  const StoreStats full = s->Stats();
  const uint64_t disk_full = PackDiskBytes(t);
  ASSERT_GE(disk_full, 20 * kFile);
  EXPECT_EQ(full.pack_disk_bytes, disk_full);
  EXPECT_EQ(full.punched_bytes, 0u);

  for (uint64_t i = 1; i <= 20; i += 2) Delete(*s, files, i);  // ten records, none adjacent
  s->PunchDeadRecords();
  const StoreStats st = s->Stats();
  // Every dead record's whole blocks are gone; at most its two edge blocks
  // (shared with the live neighbours) stay.
  EXPECT_GE(st.punched_bytes, 10 * (kFile - 2 * kBlock));
  EXPECT_EQ(st.punched_holes, 10u);
  // (A few blocks of slack: the filesystem may take an extent-tree block
  // to describe the holes.)
  EXPECT_LE(PackDiskBytes(t), disk_full - st.punched_bytes + 4 * kBlock);
  EXPECT_LE(PackDiskBytes(t), disk_full - 10 * (kFile - 2 * kBlock) + 4 * kBlock);
  EXPECT_EQ(st.pack_disk_bytes, PackDiskBytes(t));
  // The committed sizes and live bytes are the index's, untouched: no copy.
  EXPECT_EQ(st.pack_bytes, full.pack_bytes);
  EXPECT_EQ(st.live_bytes + st.dead_bytes(), st.pack_bytes);
  EXPECT_LT(st.dead_disk_bytes(), 10 * 2 * kBlock + 2 * kBlock);
  EXPECT_EQ(st.compact_bytes_copied, 0u);
  ExpectClean(*s, files, "after punching");

  // Reopened: the same bytes, the holes stay holes, appends go on after them.
  s.reset();
  s = OpenOrDie(t.store(), TestOptions());
  ExpectClean(*s, files, "reopened");
  FileModel more = WriteFiles(*s, 100, 3, 900);
  files.insert(more.begin(), more.end());
  ExpectClean(*s, files, "appended after the holes");
}

// Adjacent records that die together make one hole, the blocks they share
// included; the store's own thread punches without being asked.
TEST(PunchTest, AdjacentDeadRecordsMakeOneHoleOnTheStoresOwnThread) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  FileModel files = WriteFiles(*s, 1, 12, 200);
  const uint64_t disk_full = PackDiskBytes(t);
  Batch d;
  for (uint64_t i = 3; i <= 10; ++i) {
    d.Unref(KeyOf(files[i]));
    d.Delete(Cf::kExtents, ExtentKey(i, 0));
    files.erase(i);
  }
  ASSERT_TRUE(s->Commit(d).ok());
  // Within the puncher's gathering delay (20 ms), with room for a slow machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (s->Stats().punched_holes == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.punched_holes, 1u);
  EXPECT_GE(st.punched_bytes, 8 * kFile - 2 * kBlock);  // only the two outer edges stay
  EXPECT_LE(PackDiskBytes(t), disk_full - 8 * kFile + 2 * kBlock);
  ExpectClean(*s, files, "one hole");
}

// Reverse deltas: a save's standalone records die when they are rebased as
// deltas on the next save; their blocks go at once.
TEST(PunchTest, RebasedRecordsArePunchedAndTheirChunksStillRead) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  FileModel v1 = WriteFiles(*s, 1, 4, 300), v2;
  for (auto& [ino, data] : v1) {
    v2[ino + 10] = data;
    for (size_t i = 0; i < data.size(); i += 4096) v2[ino + 10][i] ^= 0x5a;  // a close next version
    Batch b;
    AddFileChunk(b, ino + 10, v2[ino + 10]);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  s->PunchDeadRecords();
  const uint64_t before = PackDiskBytes(t);
  Batch r;
  for (auto& [ino, data] : v1) {
    const auto& next = v2[ino + 10];
    r.RebaseChunk(KeyOf(data), TestFrame(data, &next), KeyOf(next), 8);
  }
  ASSERT_TRUE(s->Commit(r).ok());
  s->PunchDeadRecords();
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.rebased, 4u);
  EXPECT_GE(st.punched_bytes, 4 * (kFile - 2 * kBlock));
  // The test codec's deltas are as large as the chunk (XOR): the rebase
  // appended as much as it punched, and the disk holds no more than before.
  EXPECT_LE(PackDiskBytes(t), before + 4 * 2 * kBlock);
  FileModel all = v1;
  all.insert(v2.begin(), v2.end());
  ExpectClean(*s, all, "after the rebase");
}

// Readers of chunks whose records are rewritten and punched under them
// read the new records: never an error, never a counted corruption.
TEST(PunchTest, ReadersRacingRewritesAndPunchesNeverFail) {
  TempDir t;
  auto o = TestOptions();
  o.base_cache_bytes = 0;  // every read goes to the pack
  auto s = OpenOrDie(t.store(), o);
  FileModel files = WriteFiles(*s, 1, 16, 400);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      Workspace ws;
      std::vector<uint8_t> buf(kFile);
      while (!stop) {
        for (auto it = files.begin(); it != files.end() && !stop; ++it) {
          const auto& data = r ? std::prev(files.end())->second : it->second;
          auto n = s->ReadChunk(KeyOf(data), buf.data(), buf.size(), ws);
          if (!n.ok() || *n != data.size() || std::memcmp(buf.data(), data.data(), data.size()) != 0)
            failures++;
          reads++;
        }
      }
    });
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  uint64_t rounds = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (auto& [ino, data] : files) {
      Batch b;
      b.RewriteChunk(KeyOf(data), TestFrame(data));  // the same bytes at a new place
      ASSERT_TRUE(s->Commit(b).ok());
      if (++rounds % 4 == 0) s->PunchDeadRecords();
    }
  }
  stop = true;
  for (auto& th : readers) th.join();
  s->PunchDeadRecords();
  const StoreStats st = s->Stats();
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(st.corruptions, 0u);
  EXPECT_GE(st.punched_bytes, rounds * (kFile - 2 * kBlock) / 2);
  ExpectClean(*s, files, "after the race");
}

// A failing punch changes nothing: the bytes stay, the store keeps working
// and compaction gives the space back; a filesystem that cannot punch turns
// punching off for the store.
TEST(PunchTest, FailedOrUnsupportedPunchesLeaveTheSpaceToCompaction) {
  TempDir t;
  FaultEnv env;
  auto s = OpenOrDie(t.store(), TestOptions(&env));
  FileModel files = WriteFiles(*s, 1, 8, 500);
  const uint64_t disk_full = PackDiskBytes(t);
  env.FailPunches(FaultEnv::PunchFault::kIOError);
  for (uint64_t i = 1; i <= 8; i += 2) Delete(*s, files, i);
  s->PunchDeadRecords();
  EXPECT_EQ(s->Stats().punched_bytes, 0u);
  EXPECT_EQ(PackDiskBytes(t), disk_full);
  ExpectClean(*s, files, "punch failed");

  env.FailPunches(FaultEnv::PunchFault::kUnsupported);
  const uint64_t calls = env.punch_calls();
  Delete(*s, files, 2);
  s->PunchDeadRecords();
  Delete(*s, files, 4);  // punching is off now: nothing queued, nothing tried
  s->PunchDeadRecords();
  EXPECT_EQ(s->Stats().punched_bytes, 0u);
  EXPECT_EQ(env.punch_calls(), calls + 1);
  EXPECT_EQ(s->Stats().pack_disk_bytes, s->Stats().pack_bytes);  // what the Env cannot tell either

  CompactOptions co;
  co.seal_active_dead_bytes = 1;
  auto r = s->Compact(co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->bytes_reclaimed, 0u);
  EXPECT_LT(PackDiskBytes(t), disk_full / 2);
  ExpectClean(*s, files, "compacted");
}

// Compaction punches the places it moved records from as it goes, and a
// pack left without a live record is deleted even under the dead-bytes
// target (no copy).
TEST(PunchTest, CompactionTakesEmptyPacksAndPunchesWhatItMoved) {
  TempDir t;
  auto o = TestOptions();
  o.pack_size_limit = 3 * kFile;  // three records a pack
  o.pack_size_floor = 3 * kFile;
  auto s = OpenOrDie(t.store(), o);
  FileModel files = WriteFiles(*s, 1, 12, 600);
  for (uint64_t i = 1; i <= 3; ++i) Delete(*s, files, i);  // the first pack: no live record
  Delete(*s, files, 5);
  s->PunchDeadRecords();
  const StoreStats before = s->Stats();
  ASSERT_GE(before.empty_packs, 1u);
  CompactOptions co;
  co.policy = CompactOptions::Policy::kCostBenefit;
  co.target_dead_fraction = 0.5;  // the holes left little dead on disk: under it
  co.judge_by_disk = true;
  auto r = s->Compact(co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packs_compacted, before.empty_packs);
  EXPECT_EQ(r->bytes_copied, 0u);
  EXPECT_EQ(s->Stats().empty_packs, 0u);
  ExpectClean(*s, files, "empty packs deleted");

  CompactOptions all;
  all.live_fraction_threshold = 1.01;  // every sealed pack
  auto m = s->Compact(all);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->bytes_copied, 0u);
  s->PunchDeadRecords();
  ExpectClean(*s, files, "everything moved");
}

// --- Journaled stores, local and in RADOS. A RADOS store punches by
// zeroing the object's range (BlueStore deallocates it) and counts what it
// gave back in an attribute of the object, which a later mount reads.

class PunchBackendTest : public ::testing::TestWithParam<Backend> {};

TEST_P(PunchBackendTest, DeadRecordsGoBackAndALaterMountKnowsTheHoles) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore ts(GetParam());
  StoreOptions o = ts.Options();
  o.pack_size_limit = 4 * kFile;  // four records a pack: several packs
  o.pack_size_floor = 4 * kFile;
  auto s = OpenOrDie(ts.spec(), o);
  FileModel files = WriteFiles(*s, 1, 16, 700);
  s->PunchDeadRecords();
  const StoreStats full = s->Stats();
  ASSERT_GE(full.packs, 4u);
  EXPECT_EQ(full.punched_bytes, 0u);

  for (uint64_t i = 1; i <= 16; i += 2) Delete(*s, files, i);  // eight records, none adjacent
  s->PunchDeadRecords();
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.punched_holes, 8u);
  EXPECT_GE(st.punched_bytes, 8 * (kFile - 2 * kBlock));
  // What the packs hold now, as the store reports it and as the backend
  // itself tells (st_blocks; the objects' sizes less their holes
  // attributes). A filesystem may take a block or two to describe holes.
  auto disk = ts.BaseEnv()->DiskBytes(ts.spec() + "/packs");
  ASSERT_TRUE(disk.ok()) << disk.status().ToString();
  EXPECT_EQ(st.pack_disk_bytes, *disk);
  EXPECT_LE(*disk, full.pack_disk_bytes - st.punched_bytes + 4 * kBlock);
  if (GetParam() == Backend::kRados) {
    EXPECT_EQ(*disk, st.pack_bytes - st.punched_bytes);
  }
  EXPECT_LT(st.dead_disk_bytes(), 8 * 2 * kBlock + 4 * kBlock);
  ExpectClean(*s, files, "after punching");

  // A later mount: the holes are known again before anything is copied. By
  // committed bytes half of each pack is dead; on disk almost nothing is.
  s.reset();
  s = OpenOrDie(ts.spec(), o);
  // The store's own thread reads the packs' holes at open: no compaction
  // needed for the stats to count them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (s->Stats().pack_disk_bytes != st.pack_disk_bytes && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s->Stats().pack_disk_bytes, st.pack_disk_bytes)
      << "the reopened store counts its holes as on disk";
  CompactOptions co;
  co.policy = CompactOptions::Policy::kCostBenefit;
  co.target_dead_fraction = 0.10;
  co.judge_by_disk = true;
  auto r = s->Compact(co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes_copied, 0u) << "the packs' holes were not known after reopening";
  EXPECT_LT(s->Stats().dead_disk_bytes(), 8 * 2 * kBlock + 4 * kBlock);
  ExpectClean(*s, files, "reopened");
  FileModel more = WriteFiles(*s, 100, 3, 900);
  files.insert(more.begin(), more.end());
  ExpectClean(*s, files, "appended after the holes");
}

// Records that end a pack die: their blocks go, but not the one holding
// the pack's last byte. In RADOS zeroing an object's tail truncates it;
// the store would then find its packs shorter than their committed bytes.
TEST_P(PunchBackendTest, ThePacksLastRecordsDieAndThePacksKeepTheirSize) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore ts(GetParam());
  StoreOptions o = ts.Options();
  o.pack_size_limit = kFile;  // one record a pack: each is its pack's last
  o.pack_size_floor = kFile;
  auto s = OpenOrDie(ts.spec(), o);
  auto sizes = [&] {
    std::map<std::string, uint64_t> m;
    auto names = ts.BaseEnv()->ListDir(ts.spec() + "/packs");
    EXPECT_TRUE(names.ok()) << names.status().ToString();
    for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
      auto f = ts.BaseEnv()->OpenFile(ts.spec() + "/packs/" + n, Env::OpenMode::kRead);
      EXPECT_TRUE(f.ok()) << f.status().ToString();
      if (f.ok()) m[n] = (*f)->Size();
    }
    return m;
  };
  // Records that end their packs on a block boundary (the worst case: the
  // dead record's last block is whole). A probe record tells the pack's
  // bytes besides the payload.
  FileModel files;
  files[1] = RandomBytes(kFile, 800);
  {
    Batch b;
    AddFileChunk(b, 1, files[1]);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  const uint64_t overhead = s->Stats().pack_bytes - kFile;
  const size_t aligned = kFile + (kBlock - (kFile + overhead) % kBlock) % kBlock;
  for (uint64_t i = 2; i <= 6; ++i) {
    files[i] = RandomBytes(i % 2 == 0 ? aligned : kFile, 800 + i);
    Batch b;
    AddFileChunk(b, i, files[i]);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  const auto before = sizes();
  uint64_t ends_aligned = 0;
  for (const auto& [name, size] : before) ends_aligned += size % kBlock == 0;
  EXPECT_GE(ends_aligned, 3u) << "the test meant three packs to end on a block boundary";
  for (uint64_t i : {2, 4, 6}) Delete(*s, files, i);  // 6: the active pack's last record
  s->PunchDeadRecords();
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.punched_holes, 3u);
  EXPECT_GE(st.punched_bytes, 3 * (kFile - 3 * kBlock));
  EXPECT_EQ(sizes(), before) << "a punch changed a pack's size";
  ExpectClean(*s, files, "after punching");
  s.reset();
  s = OpenOrDie(ts.spec(), o);
  ExpectClean(*s, files, "reopened");
  FileModel more = WriteFiles(*s, 100, 2, 900);
  files.insert(more.begin(), more.end());
  ExpectClean(*s, files, "appended");
}

INSTANTIATE_TEST_SUITE_P(Backends, PunchBackendTest, ::testing::Values(Backend::kJournaled, Backend::kRados),
                         [](const auto& info) { return BackendName(info.param); });

// The RADOS Env's hole itself: zeros where it was, every other byte and
// the size kept, the count added up; a missing object is not created.
TEST(RadosPunchTest, AHoleReadsAsZerosAndKeepsTheRest) {
  LMC_SKIP_WITHOUT_CLUSTER(Backend::kRados);
  TestStore ts(Backend::kRados);
  Env* env = ts.BaseEnv();
  ASSERT_NE(env, nullptr);
  const std::string path = ts.spec() + "/packs/obj";
  const std::vector<uint8_t> bytes = RandomBytes(64 << 10, 42);
  {
    auto f = env->OpenFile(path, Env::OpenMode::kCreate);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append(bytes.data(), bytes.size()).ok());
  }
  ASSERT_TRUE(env->PunchHole(path, 4096, 8192).ok());
  ASSERT_TRUE(env->PunchHole(path, 32768, 4096).ok());
  std::vector<uint8_t> want = bytes;
  std::fill(want.begin() + 4096, want.begin() + 4096 + 8192, 0);
  std::fill(want.begin() + 32768, want.begin() + 32768 + 4096, 0);
  auto f = env->OpenFile(path, Env::OpenMode::kRead);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->Size(), bytes.size());
  std::vector<uint8_t> got(bytes.size());
  auto n = (*f)->ReadAt(0, got.size(), got.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, bytes.size());
  EXPECT_TRUE(got == want) << "a hole's bytes or its neighbours' differ";
  auto d = env->FileDiskBytes(path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, bytes.size() - 8192 - 4096);

  // Several ranges in one request; then another client's punch changes the
  // count this one cached, and this one's next punch reads it again.
  const Env::Range three[] = {{16384, 4096}, {24576, 4096}, {49152, 8192}};
  size_t done = 0;
  ASSERT_TRUE(env->PunchHoles(path, three, &done).ok());
  EXPECT_EQ(done, 3u);
  auto other = RadosEnv::Open(ts.spec(), RadosOptions{});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE((*other)->PunchHole(path, 0, 4096).ok());
  ASSERT_TRUE(env->PunchHole(path, 57344, 4096).ok());
  for (const auto& [off, len] :
       {std::pair<size_t, size_t>{16384, 4096}, {24576, 4096}, {49152, 8192}, {0, 4096}, {57344, 4096}})
    std::fill(want.begin() + off, want.begin() + off + len, 0);
  std::fill(got.begin(), got.end(), 0xee);
  n = (*f)->ReadAt(0, got.size(), got.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, bytes.size()) << "the object lost its tail";
  EXPECT_TRUE(got == want) << "a hole's bytes or its neighbours' differ";
  d = env->FileDiskBytes(path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, bytes.size() - 8192 - 4096 - 16384 - 4096 - 4096) << "the holes' count lost a punch";

  const std::string gone = ts.spec() + "/packs/gone";
  Status st = env->PunchHole(gone, 0, 4096);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  EXPECT_FALSE(env->FileExists(gone)) << "punching a missing object created it";
}

}  // namespace
}  // namespace lmc::store::testing
