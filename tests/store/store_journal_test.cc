// Journaled stores, on a POSIX directory (everywhere) and in RADOS (with a
// cluster): the index journal is the truth, any node rebuilds its local
// index from it (snapshot + records), torn tails are cut, crashes at every
// step of a commit lose nothing acknowledged, and a RADOS store has one
// fenced writer.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "fault_env.h"
#include "format.h"
#include "store_backend.h"

namespace lmc::store::testing {
namespace {

using Model = std::map<uint64_t, std::vector<uint8_t>>;

void WriteRound(Store& s, Model& m, int round, int files = 5) {
  Batch b;
  for (uint64_t i = 1; i <= static_cast<uint64_t>(files); ++i) {
    auto it = m.find(i);
    if (it != m.end()) b.Unref(KeyOf(it->second));
    auto d = RandomBytes(3000 + 17 * i, 1000 * round + i);
    AddFileChunk(b, i, d);
    m[i] = d;
  }
  ASSERT_TRUE(s.Commit(b).ok());
}

// Every file of the model reads back from s.
void ExpectReads(Store& s, const Model& m, const std::string& where) {
  for (const auto& [ino, data] : m) {
    auto v = s.Get(Cf::kExtents, ExtentKey(ino, 0));
    ASSERT_TRUE(v.ok()) << where << " inode " << ino << ": " << v.status().ToString();
    auto e = DecodeExtent(*v);
    ASSERT_TRUE(e.has_value());
    auto r = ReadAll(s, e->chunk);
    ASSERT_TRUE(r.ok()) << where << ": " << r.status().ToString();
    EXPECT_EQ(*r, data) << where << " inode " << ino;
  }
}

// ExpectReads, and the store is clean under fsck.
void ExpectModel(Store& s, const Model& m, const std::string& where) {
  ExpectReads(s, m, where);
  auto f = s.Fsck({});
  ASSERT_TRUE(f.ok()) << where << ": " << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u) << where << ": " << (f->Messages().empty() ? "" : f->Messages()[0]);
}

class JournalTest : public ::testing::TestWithParam<Backend> {};

// Opens node 0 of t as the writer and commits a first round into m.
std::unique_ptr<Store> WriterWithARound(TestStore& t, Model& m) {
  auto w = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  if (w) WriteRound(*w, m, 1);
  return w;
}

// Options for node n of t as a follower (read-only).
StoreOptions FollowerOptions(TestStore& t, Env* env, int node) {
  StoreOptions o = t.Options(env, node);
  o.read_only = true;
  return o;
}

// Node 0 writes; node 1 (no local index) and node 0 again see the same
// store, byte for byte.
TEST_P(JournalTest, AnyNodeRebuildsTheIndexFromTheJournal) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  {
    auto o = t.Options();
    o.journal_snapshot_bytes = uint64_t{1} << 40;  // no snapshot: records only
    auto s = OpenOrDie(t.spec(), o);
    ASSERT_TRUE(s);
    for (int r = 0; r < 4; ++r) WriteRound(*s, m, r);
  }
  {
    auto s = OpenOrDie(t.spec(), t.Options(nullptr, 1));
    ASSERT_TRUE(s);
    ExpectModel(*s, m, "node 1 from the records");
    WriteRound(*s, m, 10);
  }
  {
    auto s = OpenOrDie(t.spec(), t.Options(nullptr, 0));  // behind by node 1's commit
    ASSERT_TRUE(s);
    ExpectModel(*s, m, "node 0 caught up");
  }
}

// A snapshot at close bounds replay: the segments before it go, and a new
// node loads the snapshot and the records after it.
TEST_P(JournalTest, SnapshotsBoundReplayAndTrimTheJournal) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  for (int session = 0; session < 3; ++session) {
    auto o = t.Options(nullptr, session);
    o.journal_snapshot_bytes = 1;  // a snapshot at every close
    auto s = OpenOrDie(t.spec(), o);
    ASSERT_TRUE(s);
    ExpectModel(*s, m, "session " + std::to_string(session));
    for (int r = 0; r < 3; ++r) WriteRound(*s, m, 100 * session + r);
  }
  Env* env = t.BaseEnv();
  auto names = env->ListDir(t.spec() + "/journal");
  ASSERT_TRUE(names.ok());
  int segs = 0, parts = 0;
  for (auto& n : *names) {
    segs += n.rfind("seg-", 0) == 0;
    parts += n.rfind("snap-", 0) == 0;
  }
  EXPECT_EQ(segs, 0) << "the segments a writer's snapshot holds are deleted, the last one too";
  EXPECT_GE(parts, 1);
  auto o = t.Options(nullptr, 7);
  auto s = OpenOrDie(t.spec(), o);
  ASSERT_TRUE(s);
  ExpectModel(*s, m, "a new node from the snapshot");
}

// A record whose write never completed (torn) is cut off at open; a
// damaged record before the end is Corruption, never silently skipped.
TEST_P(JournalTest, TornTailIsCutDamageInsideIsCorruption) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  {
    auto o = t.Options();
    o.journal_snapshot_bytes = uint64_t{1} << 40;
    auto s = OpenOrDie(t.spec(), o);
    ASSERT_TRUE(s);
    for (int r = 0; r < 3; ++r) WriteRound(*s, m, r);
  }
  Env* env = t.BaseEnv();
  auto names = env->ListDir(t.spec() + "/journal");
  ASSERT_TRUE(names.ok());
  std::string seg;
  for (auto& n : *names)
    if (n.rfind("seg-", 0) == 0) seg = t.spec() + "/journal/" + n;
  ASSERT_FALSE(seg.empty());
  {
    auto f = env->OpenFile(seg, Env::OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const uint8_t torn[] = {'L', 'M', 'J', 'R', 200, 0, 0, 0, 9};
    ASSERT_TRUE((*f)->Append(torn, sizeof torn).ok());
  }
  {
    auto s = OpenOrDie(t.spec(), t.Options(nullptr, 1));
    ASSERT_TRUE(s);
    ExpectModel(*s, m, "after a torn tail");
    WriteRound(*s, m, 50);
  }
  // Damage the first record's data: the records after it cannot be
  // trusted, so a node without a local index refuses to open.
  {
    auto f = env->OpenFile(seg, Env::OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok());
    const uint64_t size = (*f)->Size();
    std::vector<uint8_t> all(size);
    ASSERT_TRUE((*f)->ReadAt(0, size, all.data()).ok());
    all[30] ^= 0x40;
    ASSERT_TRUE((*f)->Truncate(0).ok());
    ASSERT_TRUE((*f)->Append(all.data(), all.size()).ok());
  }
  auto s = Store::Open(t.spec(), t.Options(nullptr, 2));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsCorruption()) << s.status().ToString();
}

// Crash at every step of a commit (pack and journal writes alike), then a
// node without the local index and the node with it both open a clean
// store with every acknowledged file.
TEST_P(JournalTest, CrashAtEveryStepOfCommit) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  int steps = 0;
  for (int64_t k = 0;; ++k) {
    TestStore t(GetParam());
    FaultEnv env(t.BaseEnv());
    Model acked, maybe;
    bool finished = false;
    {
      auto o = t.Options(&env);
      o.pack_size_limit = 6000;
      o.journal_snapshot_bytes = 1;  // the close writes a snapshot too
      auto s = OpenOrDie(t.spec(), o);
      ASSERT_TRUE(s);
      WriteRound(*s, acked, 0, 3);
      env.CrashAfter(k);
      for (int round = 1; round < 4; ++round) {
        Batch b;
        Model next = acked;
        for (uint64_t i = 1; i <= 4; ++i) {
          auto it = next.find(i);
          if (it != next.end()) b.Unref(KeyOf(it->second));
          next[i] = RandomBytes(1200 + i * 10, 100 * round + i);
          AddFileChunk(b, i, next[i]);
        }
        if (!s->Commit(b).ok()) {
          for (auto& [ino, d] : next) maybe[ino] = d;
          break;
        }
        acked = next;
      }
      finished = !env.crashed();
    }
    env.DropUnsynced();
    env.Heal();
    const std::string where = "crash after " + std::to_string(k) + " ops";
    for (int node : {1, 0}) {
      auto s = Store::Open(t.spec(), t.Options(&env, node));
      ASSERT_TRUE(s.ok()) << where << " node " << node << ": " << s.status().ToString();
      auto f = (*s)->Fsck({});
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(f->errors(), 0u) << where << ": " << (f->Messages().empty() ? "" : f->Messages()[0]);
      ExpectFiles(**s, acked, maybe, where + " node " + std::to_string(node));
    }
    if (::testing::Test::HasFailure()) return;
    ++steps;
    if (finished) break;
  }
  EXPECT_GT(steps, 10);
}

// A follower (read-only, no lock, its own local index) sees each commit of
// the writer after Refresh, reads the same bytes, and changes nothing; a
// RADOS follower hears of each commit through watch/notify.
TEST_P(JournalTest, FollowerSeesTheWritersCommits) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  auto w = WriterWithARound(t, m);
  ASSERT_TRUE(w);
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, nullptr, 1));
  ASSERT_TRUE(f);
  ExpectModel(*f, m, "follower at open");
  std::mutex mu;
  std::condition_variable cv;
  int notified = 0;
  std::unique_ptr<FileLock> watch;
  if (GetParam() == Backend::kRados) {
    auto wr = f->WatchChanges([&] {
      std::lock_guard l(mu);
      notified++;
      cv.notify_all();
    });
    ASSERT_TRUE(wr.ok()) << wr.status().ToString();
    watch = std::move(wr).value();
  }
  for (int r = 2; r < 5; ++r) {
    const int before = notified;
    const auto t0 = std::chrono::steady_clock::now();
    WriteRound(*w, m, r);
    if (watch) {
      std::unique_lock l(mu);
      ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(2), [&] { return notified > before; }))
          << "no notify within 2 s of a commit";
      std::printf("notify after commit: %.2f ms\n",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    // Each extent the round wrote is reported with its column family
    // (a file's in the filesystem's keys), nothing else of the fs's.
    std::set<std::pair<Cf, std::string>> keys;
    auto n = f->Refresh(
        [&](Cf cf, std::string_view key, Store::KeyChange) { keys.emplace(cf, std::string(key)); });
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_GT(*n, 0u);
    std::set<std::pair<Cf, std::string>> want;
    for (uint64_t i = 1; i <= 5; ++i) want.emplace(Cf::kExtents, ExtentKey(i, 0));
    EXPECT_EQ(keys, want) << "round " << r;
    ExpectModel(*f, m, "follower after round " + std::to_string(r));
  }
  int told = 0;
  auto again = f->Refresh([&](Cf, std::string_view, Store::KeyChange) { told++; });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u) << "nothing new";
  EXPECT_EQ(told, 0);
  Batch b;
  AddFileChunk(b, 50, RandomBytes(100, 50));
  EXPECT_FALSE(f->Commit(b).ok()) << "a follower cannot commit";
  watch.reset();
  f.reset();
  w.reset();
  auto s = OpenOrDie(t.spec(), t.Options(nullptr, 2));
  ASSERT_TRUE(s);
  ExpectModel(*s, m, "after the follower");
}

// A follower refreshes after each of the writer's commits (and once a
// second): it reads on from its cursor and lists nothing, since a listing
// of a RADOS store visits every object of the pool's placement groups (a
// follower listing the journal at every refresh took 7 times the OSD's
// CPU of the writer's own operations). It finds the segment a reopened
// writer starts by the next record's number, and lists only when its own
// segment is gone (a snapshot deleted it).
TEST_P(JournalTest, AFollowerReadsOnFromItsCursorWithoutListing) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  auto w = WriterWithARound(t, m);
  ASSERT_TRUE(w);
  FaultEnv env(t.BaseEnv());
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, &env, 1));
  ASSERT_TRUE(f);
  int listed = 0;  // by the follower's refreshes (its fsck in ExpectModel lists the packs)
  auto refresh = [&](const std::string& where) {
    const int before = env.Listings();
    auto n = f->Refresh();
    listed += env.Listings() - before;
    ASSERT_TRUE(n.ok()) << where << ": " << n.status().ToString();
    ExpectReads(*f, m, where);
  };
  refresh("at open");
  ExpectModel(*f, m, "at open");
  for (int r = 2; r < 6; ++r) {
    WriteRound(*w, m, r);
    refresh("after round " + std::to_string(r));
  }
  refresh("nothing new");
  EXPECT_EQ(listed, 0) << "refreshes listed the store";
  // The writer reopens: it starts a new segment after its replay.
  w.reset();
  w = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(w);
  WriteRound(*w, m, 6);
  refresh("in the reopened writer's segment");
  WriteRound(*w, m, 7);
  refresh("after round 7");
  EXPECT_EQ(listed, 0) << "the next segment was found by listing";
  // A writer that opens after replaying enough writes a snapshot, which
  // deletes every segment, the follower's too (it had read them all).
  w.reset();
  auto snapshotting = t.Options(nullptr, 0);
  snapshotting.journal_snapshot_bytes = 1;
  w = OpenOrDie(t.spec(), snapshotting);
  ASSERT_TRUE(w);
  refresh("after the snapshot deleted the follower's segment");
  w.reset();
  w = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(w);
  WriteRound(*w, m, 8);
  refresh("in the segment after the snapshot");
  ExpectModel(*f, m, "the follower's index against the journal after the snapshot");
  EXPECT_GT(listed, 0) << "a follower whose segment is gone lists the journal";
}

// A follower that had not read the records a snapshot took with their
// segments (it was slow, or away) makes its index the snapshot's, in one
// write of what differs, is told of exactly the keys that changed, and
// follows on. Before, it saw nothing new (no segment), then it was only
// told to open the store again.
TEST_P(JournalTest, AFollowerBehindTheSnapshotCatchesUpFromIt) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  Model m;
  auto w = WriterWithARound(t, m);
  ASSERT_TRUE(w);
  WriteRound(*w, m, 2, 8);
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, nullptr, 1));
  ASSERT_TRUE(f);
  ExpectReads(*f, m, "at open");
  // While the follower reads nothing: files 1-3 rewritten, 4-5 untouched,
  // 6 made again with only its extent's trailer changed, 7 removed, 9 new;
  // then a snapshot at close takes every segment.
  w.reset();
  auto snapshotting = t.Options(nullptr, 0);
  snapshotting.journal_snapshot_bytes = 1;
  w = OpenOrDie(t.spec(), snapshotting);
  ASSERT_TRUE(w);
  WriteRound(*w, m, 3, 3);
  {
    Batch b;
    auto v = w->Get(Cf::kExtents, ExtentKey(6, 0));
    ASSERT_TRUE(v.ok());
    auto e = DecodeExtent(*v);
    ASSERT_TRUE(e.has_value());
    e->trailer = std::string("\x07\x00\x01\x00", 4);
    b.Put(Cf::kExtents, ExtentKey(6, 0), EncodeExtent(*e));
    b.Unref(KeyOf(m[7]));
    b.Delete(Cf::kExtents, ExtentKey(7, 0));
    m.erase(7);
    m[9] = RandomBytes(5000, 9);
    AddFileChunk(b, 9, m[9]);
    ASSERT_TRUE(w->Commit(b).ok());
  }
  w.reset();
  std::map<std::string, Store::KeyChange> told;
  const auto tell = [&](Cf cf, std::string_view key, Store::KeyChange how) {
    if (cf == Cf::kExtents) told[std::string(key)] = how;
  };
  auto n = f->Refresh(tell);
  ASSERT_TRUE(n.ok()) << "a follower behind the snapshot: " << n.status().ToString();
  EXPECT_GT(*n, 0u);
  const std::map<std::string, Store::KeyChange> want = {
      {ExtentKey(1, 0), Store::KeyChange::kChanged}, {ExtentKey(2, 0), Store::KeyChange::kChanged},
      {ExtentKey(3, 0), Store::KeyChange::kChanged}, {ExtentKey(6, 0), Store::KeyChange::kTrailerOnly},
      {ExtentKey(7, 0), Store::KeyChange::kChanged}, {ExtentKey(9, 0), Store::KeyChange::kChanged},
  };
  EXPECT_EQ(told, want);
  EXPECT_TRUE(f->Get(Cf::kExtents, ExtentKey(7, 0)).status().IsNotFound())
      << "the removed file's extent stayed";
  ExpectModel(*f, m, "caught up from the snapshot");
  // And it follows on from the snapshot's record.
  w = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(w);
  WriteRound(*w, m, 4);
  told.clear();
  n = f->Refresh(tell);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(told.size(), 5u);
  ExpectModel(*f, m, "after the next round");
}

// A follower's refresh says how each extent changed: an extent put over
// one that names the same bytes of the file (flags, length, chunk, offset)
// with another trailer (the filesystem's: a rebase's new frame length) is
// kTrailerOnly, so the follower's kernel may keep that file's pages; a new
// extent, one naming another chunk or offset, and a deleted one are
// kChanged.
TEST_P(JournalTest, FollowerToldWhichExtentsKeptTheirBytes) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  auto w = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(w);
  Batch first;
  AddFileChunk(first, 1, RandomBytes(3000, 1));
  AddFileChunk(first, 2, RandomBytes(3000, 2));
  AddFileChunk(first, 3, RandomBytes(3000, 3));
  ASSERT_TRUE(w->Commit(first).ok());
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, nullptr, 1));
  ASSERT_TRUE(f);
  auto extent = [&](uint64_t ino) {
    auto v = w->Get(Cf::kExtents, ExtentKey(ino, 0));
    EXPECT_TRUE(v.ok());
    auto e = DecodeExtent(v.ok() ? *v : std::string());
    EXPECT_TRUE(e.has_value());
    return e.value_or(Extent{});
  };
  Batch second;
  Extent same = extent(1);
  same.trailer = std::string("\x07\x00\x01\x00", 4);  // a new frame length
  second.Put(Cf::kExtents, ExtentKey(1, 0), EncodeExtent(same));
  Extent moved = extent(2);
  moved.chunk_offset = 1;
  moved.length -= 1;
  moved.trailer = same.trailer;
  second.Put(Cf::kExtents, ExtentKey(2, 0), EncodeExtent(moved));
  second.Delete(Cf::kExtents, ExtentKey(3, 0));
  second.Put(Cf::kExtents, ExtentKey(4, 0), EncodeExtent(same));
  ASSERT_TRUE(w->Commit(second).ok());
  std::map<std::string, Store::KeyChange> told;
  auto n = f->Refresh([&](Cf cf, std::string_view key, Store::KeyChange how) {
    if (cf == Cf::kExtents) told[std::string(key)] = how;
  });
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const std::map<std::string, Store::KeyChange> want = {
      {ExtentKey(1, 0), Store::KeyChange::kTrailerOnly},
      {ExtentKey(2, 0), Store::KeyChange::kChanged},
      {ExtentKey(3, 0), Store::KeyChange::kChanged},
      {ExtentKey(4, 0), Store::KeyChange::kChanged},
  };
  EXPECT_EQ(told, want);
  // The trailer-only put is applied all the same.
  auto v = f->Get(Cf::kExtents, ExtentKey(1, 0));
  ASSERT_TRUE(v.ok());
  auto e = DecodeExtent(*v);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->trailer, same.trailer);
}

// statfs (df) and the mount root's attributes ask the store's disk usage
// often: for a RADOS store KnownDiskUsage lists nothing (GetDiskUsage lists
// the pool three times and reads the size of every object), and agrees
// with the listing: the packs to the byte, with the holes punched for dead
// records, the journal and the rest within the few small objects it does
// not count (HEAD, LOCK, the store's configuration).
TEST_P(JournalTest, KnownDiskUsageListsNothingAndAgreesWithTheListing) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  FaultEnv env(t.BaseEnv());
  auto w = OpenOrDie(t.spec(), t.Options(&env, 0));
  ASSERT_TRUE(w);
  Model m;
  for (int r = 1; r <= 4; ++r) WriteRound(*w, m, r, 8);
  w->PunchDeadRecords();
  ASSERT_GT(w->Stats().punched_bytes, 0u) << "nothing was punched: the test checks no holes";
  const int before = env.Listings();
  auto known = w->KnownDiskUsage();
  ASSERT_TRUE(known.ok()) << known.status().ToString();
  if (GetParam() == Backend::kRados) {
    EXPECT_EQ(env.Listings(), before) << "KnownDiskUsage listed the store";
  }
  auto exact = w->GetDiskUsage();
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(known->packs, exact->packs);
  EXPECT_LE(known->index, exact->index);
  EXPECT_LE(exact->index - known->index, 4096u) << "journal: " << known->index << " of " << exact->index;
  EXPECT_LE(known->total, exact->total);
  EXPECT_LE(exact->total - known->total, 8192u) << known->total << " of " << exact->total;
}

// A follower's pack figures are the writer's: packs the writer's
// compaction retired and deleted leave the follower's count at its next
// refresh, and in RADOS the follower reads the holes the writer punched
// (its own thread, shortly after the refresh that showed the change).
// Before, a follower kept every pack it had ever seen and counted each
// whole: df on a node that only followed a store showed several times
// what the store held.
TEST_P(JournalTest, AFollowersPackFiguresFollowTheWritersPunchesAndCompaction) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  TestStore t(GetParam());
  StoreOptions wo = t.Options(nullptr, 0);
  wo.pack_size_limit = 16 << 10;  // many small packs, several to compact
  wo.pack_size_floor = 16 << 10;
  auto w = OpenOrDie(t.spec(), wo);
  ASSERT_TRUE(w);
  Model m;
  WriteRound(*w, m, 1, 8);
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, nullptr, 1));
  ASSERT_TRUE(f);
  const uint64_t packs_seen = f->Stats().packs;
  for (int r = 2; r <= 5; ++r) WriteRound(*w, m, r, 8);
  w->PunchDeadRecords();
  auto c = w->Compact({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_GT(c->packs_compacted, 0u) << "nothing was compacted: the test checks no retired packs";
  WriteRound(*w, m, 6, 8);
  w->PunchDeadRecords();
  ASSERT_GT(w->Stats().punched_bytes, 0u) << "nothing was punched: the test checks no holes";
  ASSERT_TRUE(f->Refresh().ok());
  ExpectReads(*f, m, "follower");
  const StoreStats ws = w->Stats(), fs = f->Stats();
  EXPECT_GT(packs_seen, 0u);
  EXPECT_EQ(fs.packs, ws.packs) << "the follower counts packs the writer compacted away";
  EXPECT_EQ(fs.pack_bytes, ws.pack_bytes);
  EXPECT_EQ(fs.live_bytes, ws.live_bytes);
  EXPECT_EQ(fs.empty_packs, ws.empty_packs);
  auto wk = w->KnownDiskUsage();
  ASSERT_TRUE(wk.ok()) << wk.status().ToString();
  ASSERT_LT(wk->packs, ws.pack_bytes) << "the writer's holes do not show in its own figure";
  // The follower reads the holes in the background: its figure comes down
  // to the writer's within seconds.
  uint64_t fk = 0;
  for (int i = 0; i < 200; ++i) {
    auto k = f->KnownDiskUsage();
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    fk = k->packs;
    if (fk == wk->packs) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(fk, wk->packs)
      << "the follower's pack bytes on disk, 10 s after its refresh, against the writer's";
}

// A follower counts the journal as the writer's snapshots leave it: the
// records a snapshot took leave its figure (their segments are deleted),
// as they leave the writer's. Before, a follower counted every record it
// had read since it opened, so `df` on a node following a busy store grew
// without end while the store's journal stayed bounded.
TEST_P(JournalTest, AFollowerCountsTheJournalAsTheWritersSnapshotsLeaveIt) {
  LMC_SKIP_WITHOUT_CLUSTER(GetParam());
  if (GetParam() != Backend::kRados)
    GTEST_SKIP() << "a follower of a POSIX store counts its journal by listing it (GetDiskUsage)";
  TestStore t(GetParam());
  StoreOptions wo = t.Options(nullptr, 0);
  wo.journal_snapshot_bytes = 1;  // a snapshot at every close
  Model m;
  auto w = OpenOrDie(t.spec(), wo);
  ASSERT_TRUE(w);
  WriteRound(*w, m, 1, 8);
  auto f = OpenOrDie(t.spec(), FollowerOptions(t, nullptr, 1));
  ASSERT_TRUE(f);
  uint64_t read = 0;
  // Four writer sessions of three rounds, each closed with a snapshot that
  // deletes the segments it holds, then a fifth session's round.
  for (int session = 0; session < 5; ++session) {
    if (session > 0) {
      w = OpenOrDie(t.spec(), wo);
      ASSERT_TRUE(w);
    }
    for (int r = 0; r < (session < 4 ? 3 : 1); ++r) {
      WriteRound(*w, m, 10 * session + r + 2, 8);
      auto n = f->Refresh();
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      read += *n;
    }
    if (session < 4) w.reset();
  }
  ExpectReads(*f, m, "follower");
  // The journal part of each node's figure: its index figure less its own
  // local index.
  const auto journal_part = [&](Store& s, int node) -> uint64_t {
    auto k = s.KnownDiskUsage();
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    auto local = Env::Default()->DiskBytes(t.local(node) + "/" + fmt::kIndexDir);
    EXPECT_TRUE(local.ok()) << local.status().ToString();
    return k.ok() && local.ok() ? k->index - *local : 0;
  };
  const uint64_t want = journal_part(*w, 0);
  uint64_t got = 0;
  for (int i = 0; i < 300; ++i) {  // the follower reads HEAD again every 5 s
    got = journal_part(*f, 1);
    if (got == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(got, want) << "the follower's journal bytes, 15 s after its last refresh (" << read
                       << " records read), against the writer's";
}

INSTANTIATE_TEST_SUITE_P(Backends, JournalTest, ::testing::Values(Backend::kJournaled, Backend::kRados),
                         [](const auto& info) { return BackendName(info.param); });

// --- RADOS only: one writer, fenced.

class RadosLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RadosUnavailable().empty()) GTEST_SKIP() << RadosUnavailable();
  }
  // Writes a round into t's store and closes it, then leaves the store's
  // lock as a node that died holding it would: taken for `lease` seconds
  // by a client that exits without unlocking (the rados command), with
  // `description` as LOCK's content unless empty.
  void HeldByADeadNode(TestStore& t, Model& m, int lease, const std::string& description = "") {
    {
      auto a = OpenOrDie(t.spec(), t.Options(nullptr, 0));
      ASSERT_TRUE(a);
      WriteRound(*a, m, 1);
    }
    const std::string rados = "rados -p lmcfs -N " + t.spec().substr(t.spec().find('/') + 1);
    std::string cmd = rados + " lock get LOCK lmcfs --lock-cookie deadnode --lock-duration " +
                      std::to_string(lease) + " --lock-type exclusive";
    if (!description.empty()) cmd = "printf '" + description + "' | " + rados + " put LOCK - && " + cmd;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
};

TEST_F(RadosLockTest, SecondWriterIsRefusedNamingTheHolder) {
  TestStore t(Backend::kRados);
  auto a = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(a);
  auto b = Store::Open(t.spec(), t.Options(nullptr, 1));
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(b.status().code() == Code::kBusy) << b.status().ToString();
  EXPECT_NE(b.status().message().find("held by"), std::string::npos) << b.status().ToString();
  EXPECT_NE(b.status().message().find("takeover"), std::string::npos) << b.status().ToString();
}

// A live holder that keeps renewing: takeover after the lease is refused;
// takeover=force fences it, and everything it committed reads back on the
// new node while its later writes fail.
TEST_F(RadosLockTest, ForcedTakeoverFencesTheHolder) {
  TestStore t(Backend::kRados);
  Model m;
  auto a = OpenOrDie(t.spec(), t.Options(nullptr, 0));
  ASSERT_TRUE(a);
  for (int r = 0; r < 3; ++r) WriteRound(*a, m, r);

  auto lease = t.Options(nullptr, 1);
  lease.rados.takeover = Takeover::kLease;
  auto refused = Store::Open(t.spec(), lease);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("alive"), std::string::npos) << refused.status().ToString();

  auto force = t.Options(nullptr, 1);
  force.rados.takeover = Takeover::kForce;
  auto b = Store::Open(t.spec(), force);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectModel(**b, m, "the new holder");
  // The old holder can no longer change the store.
  Model stale = m;
  Batch batch;
  AddFileChunk(batch, 99, RandomBytes(5000, 99));
  Status st = a->Commit(batch);
  EXPECT_FALSE(st.ok()) << "a fenced holder's commit must fail";
  WriteRound(**b, m, 77);
  b->reset();
  a.reset();
  auto c = OpenOrDie(t.spec(), t.Options(nullptr, 2));
  ASSERT_TRUE(c);
  ExpectModel(*c, m, "after the takeover");
  EXPECT_FALSE(c->Get(Cf::kExtents, ExtentKey(99, 0)).ok()) << "the fenced commit left no trace";
}

// A union's followers share one connection: two stores read through it,
// one closes and the other keeps reading, and fencing a writer that was
// offered the same connection (a writer keeps its own) cuts neither.
TEST_F(RadosLockTest, FollowersShareOneClientThatFencingAWriterDoesNotCut) {
  TestStore t1(Backend::kRados), t2(Backend::kRados);
  auto shared = RadosClient::Connect(t1.Options().rados);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  Model m1, m2;
  auto wo = t1.Options(nullptr, 0);
  wo.rados.client = *shared;  // ignored by a writer
  auto a = OpenOrDie(t1.spec(), wo);
  ASSERT_TRUE(a);
  WriteRound(*a, m1, 1);
  {
    auto b = OpenOrDie(t2.spec(), t2.Options(nullptr, 0));
    ASSERT_TRUE(b);
    WriteRound(*b, m2, 2);
  }
  auto follower = [&](TestStore& t) {
    auto o = t.Options(nullptr, 1);
    o.read_only = true;
    o.rados.client = *shared;
    return OpenOrDie(t.spec(), o);
  };
  auto f1 = follower(t1);
  auto f2 = follower(t2);
  ASSERT_TRUE(f1 && f2);
  ExpectModel(*f1, m1, "first follower");
  ExpectModel(*f2, m2, "second follower");

  auto force = t1.Options(nullptr, 2);
  force.rados.takeover = Takeover::kForce;
  auto c = Store::Open(t1.spec(), force);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Batch batch;
  AddFileChunk(batch, 99, RandomBytes(5000, 99));
  EXPECT_FALSE(a->Commit(batch).ok()) << "the fenced writer's commit must fail";
  WriteRound(**c, m1, 3);
  auto n = f1->Refresh();
  ASSERT_TRUE(n.ok()) << "a follower sharing a connection the fenced writer was offered: "
                      << n.status().ToString();
  EXPECT_GT(*n, 0u);
  ExpectModel(*f1, m1, "first follower after the takeover");

  f1.reset();
  ExpectModel(*f2, m2, "second follower after the first closed");
  auto again = f2->Refresh();
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

// A holder that stopped renewing (dead): takeover waits out its lease.
TEST_F(RadosLockTest, TakeoverAfterTheLeaseOfADeadHolder) {
  TestStore t(Backend::kRados);
  Model m;
  HeldByADeadNode(t, m, 3);
  if (HasFatalFailure()) return;
  auto refused = Store::Open(t.spec(), t.Options(nullptr, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().code() == Code::kBusy) << refused.status().ToString();
  auto o = t.Options(nullptr, 1);
  o.rados.takeover = Takeover::kLease;
  const auto t0 = std::chrono::steady_clock::now();
  auto b = Store::Open(t.spec(), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ExpectModel(**b, m, "after waiting out the lease");
}

// A dead holder whose lease is longer than the new node's: the refusal
// names the holder's lease, and takeover waits out that lease, not its
// own. Before, a takeover with a lease of 2 s gave up after 4 s and
// called the dead node alive.
TEST_F(RadosLockTest, TakeoverWaitsOutTheDeadHoldersOwnLease) {
  TestStore t(Backend::kRados);
  Model m;
  // What a holder with lease=8 leaves (its description as Acquire writes it).
  const auto locked = std::chrono::steady_clock::now();
  HeldByADeadNode(t, m, 8, "deadnode pid 1 v1:127.0.0.1:0/1 lease 8 s");
  if (HasFatalFailure()) return;
  auto o = t.Options(nullptr, 1);
  o.rados.lease_seconds = 2;
  auto refused = Store::Open(t.spec(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().code() == Code::kBusy) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("lapses within 8 s"), std::string::npos)
      << refused.status().ToString();
  o.rados.takeover = Takeover::kLease;
  auto b = Store::Open(t.spec(), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - locked, std::chrono::seconds(7))
      << "taken before the lease lapsed";
  ExpectModel(**b, m, "after waiting out the dead holder's lease");
}

}  // namespace
}  // namespace lmc::store::testing
