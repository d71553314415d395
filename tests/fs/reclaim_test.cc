// Background reclamation (lmc/fs/reclaim.h) over a real store and
// filesystem core: passes give dead bytes back only when over the bound and
// idle, stop for foreground work, and never touch live data.
#include "lmc/fs/reclaim.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "lmc/fs/filesystem.h"
#include "lmc/store/store.h"

namespace lmc::fs {
namespace {

using namespace std::chrono_literals;

class ReclaimCore : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lmcfs_reclaim_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    store::StoreOptions so;
    so.pack_size_limit = 1 << 20;  // several packs for a few MiB
    // Compaction is what these tests measure (the whole of reclamation
    // where holes cannot be punched, as on RADOS); holes punched at times
    // of the store thread's choosing would change the dead bytes it sees.
    so.punch_dead = false;
    auto s = store::Store::Open(dir_, so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    FsOptions fo;
    fo.chunk_size = 64 << 10;
    auto f = Filesystem::Open(store_.get(), dir_, fo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  void TearDown() override {
    if (fs_) {
      EXPECT_TRUE(fs_->Shutdown().ok());
    }
    fs_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  ReclaimActivityFn Activity() {
    Filesystem* f = fs_.get();
    return [f] {
      const FsCounters& c = f->counters();
      return ReclaimActivity{c.write_calls + c.read_calls + c.removals, c.removals};
    };
  }
  // Random (incompressible) bytes: stored about as large as written.
  static std::string Bytes(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  }
  void Write(const std::string& name, const std::string& data) {
    struct stat st;
    ASSERT_EQ(fs_->Create(kRootIno, name, 0644, {0, 0}, &st), 0);
    ASSERT_EQ(fs_->Write(st.st_ino, 0, data.data(), data.size()), 0);
    ASSERT_EQ(fs_->Fsync(st.st_ino, false), 0);
    ASSERT_EQ(fs_->Release(st.st_ino, true), 0);
    fs_->Forget(st.st_ino, 1);
  }
  std::string Read(const std::string& name) {
    struct stat st;
    EXPECT_EQ(fs_->Lookup(kRootIno, name, &st), 0);
    std::string out;
    EXPECT_EQ(fs_->Read(st.st_ino, 0, static_cast<size_t>(st.st_size), &out), 0);
    fs_->Forget(st.st_ino, 1);
    return out;
  }
  static double Dead(const store::StoreStats& st) {
    return st.pack_bytes ? double(st.dead_bytes()) / double(st.pack_bytes) : 0;
  }

  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(ReclaimCore, PassGivesDeadBytesBackDownToHalfTheBound) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 12; ++i) {
    files["f" + std::to_string(i)] = Bytes(400 << 10, i);
    Write("f" + std::to_string(i), files["f" + std::to_string(i)]);
  }
  ReclaimOptions o;
  o.min_dead_bytes = 64 << 10;
  Reclaimer r(store_.get(), o, Activity());
  // Under the bound: nothing to do.
  auto none = r.RunOnce();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);
  for (int i = 0; i < 12; i += 2) {
    ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
    files.erase("f" + std::to_string(i));
  }
  ASSERT_GT(Dead(store_->Stats()), 0.3);
  auto got = r.RunOnce();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(*got, 0u);
  EXPECT_LE(Dead(store_->Stats()), 0.05 + 0.01);
  EXPECT_EQ(r.Stats().passes, 2u);
  EXPECT_EQ(r.Stats().bytes_reclaimed, *got);
  for (auto& [name, data] : files) EXPECT_EQ(Read(name), data) << name;
  auto f = store_->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

TEST_F(ReclaimCore, ThreadWaitsForIdleThenReclaimsEverythingDeleted) {
  for (int i = 0; i < 6; ++i) Write("f" + std::to_string(i), Bytes(300 << 10, 100 + i));
  ReclaimOptions o;
  o.idle = 300ms;
  o.poll = 50ms;
  o.min_dead_bytes = 1;
  o.pressure_fraction = 2;  // never: this test is about waiting for idle
  Reclaimer r(store_.get(), o, Activity());
  r.Start();
  // Keep the filesystem busy: no pass may start while reads go on.
  for (int i = 0; i < 6; ++i) ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
  Write("keep", Bytes(100 << 10, 7));
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_EQ(Read("keep").size(), size_t{100 << 10});
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(r.Stats().passes, 0u) << "a pass ran while reads went on";
  // Idle: the deleted files' bytes go, the active pack's included.
  for (int i = 0; i < 100 && store_->Stats().dead_bytes() > 64 * 1024; ++i) std::this_thread::sleep_for(50ms);
  r.Stop();
  EXPECT_GE(r.Stats().passes, 1u);
  EXPECT_LE(store_->Stats().dead_bytes(), uint64_t{64} << 10);
  EXPECT_EQ(Read("keep"), Bytes(100 << 10, 7));
  auto f = store_->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

TEST_F(ReclaimCore, UnderPressureOnePackPerPollEvenWhileBusy) {
  // Reopen with small packs: about one per file.
  ASSERT_TRUE(fs_->Shutdown().ok());
  fs_.reset();
  store_.reset();
  store::StoreOptions so;
  so.pack_size_limit = 256 << 10;
  so.punch_dead = false;  // as in SetUp
  store_ = std::move(store::Store::Open(dir_, so)).value();
  FsOptions fo;
  fo.chunk_size = 64 << 10;
  fs_ = std::move(Filesystem::Open(store_.get(), dir_, fo)).value();
  for (int i = 0; i < 8; ++i) Write("f" + std::to_string(i), Bytes(300 << 10, 400 + i));
  Write("keep", Bytes(100 << 10, 9));
  for (int i = 0; i < 8; ++i) ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
  const uint64_t dead = store_->Stats().dead_bytes();
  ReclaimOptions o;
  o.idle = 10s;  // never idle here
  o.poll = 20ms;
  o.min_dead_bytes = 1;
  Reclaimer r(store_.get(), o, Activity());
  r.Start();
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until && store_->Stats().dead_bytes() > dead / 2)
    EXPECT_EQ(Read("keep"), Bytes(100 << 10, 9));
  r.Stop();
  EXPECT_GE(r.Stats().passes, 1u);
  EXPECT_LE(store_->Stats().dead_bytes(), dead / 2);
  auto f = store_->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

// Everything deleted: over the pressure bound at once, but all the garbage
// is in the active pack, which pressure passes leave alone; the idle pass
// that follows must still come (pressure passes are not activity) and
// seal and free it.
TEST_F(ReclaimCore, IdleAfterPressurePassesStillFreesTheActivePack) {
  for (int i = 0; i < 3; ++i) Write("f" + std::to_string(i), Bytes(300 << 10, 600 + i));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
  ASSERT_EQ(store_->Stats().packs, 1u);  // under the 1 MiB pack limit: all in the active pack
  ReclaimOptions o;
  o.idle = 200ms;
  o.poll = 20ms;
  o.min_dead_bytes = 256 << 10;
  Reclaimer r(store_.get(), o, Activity());
  r.Start();
  for (int i = 0; i < 150 && store_->Stats().pack_bytes > 0; ++i) std::this_thread::sleep_for(20ms);
  r.Stop();
  EXPECT_EQ(store_->Stats().pack_bytes, 0u);
}

// A pass that cannot help (busy, all garbage in the active pack) is not run
// again at every poll while the store stays as it was.
TEST_F(ReclaimCore, APassThatChangedNothingIsNotRepeatedUntilTheStoreChanges) {
  for (int i = 0; i < 3; ++i) Write("f" + std::to_string(i), Bytes(300 << 10, 700 + i));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
  ASSERT_EQ(store_->Stats().packs, 1u);
  ReclaimOptions o;
  o.idle = 10s;  // never idle: only pressure passes
  o.poll = 10ms;
  o.min_dead_bytes = 256 << 10;
  std::atomic<uint64_t> ops{0};
  Reclaimer r(store_.get(), o, [&] { return ReclaimActivity{++ops, 0}; });
  r.Start();
  std::this_thread::sleep_for(500ms);
  r.Stop();
  EXPECT_EQ(r.Stats().passes, 1u);
  EXPECT_EQ(r.Stats().bytes_reclaimed, 0u);
}

TEST_F(ReclaimCore, ForegroundWorkStopsAPassBetweenPacks) {
  for (int i = 0; i < 16; ++i) Write("f" + std::to_string(i), Bytes(300 << 10, 200 + i));
  for (int i = 0; i < 16; ++i)
    if (i % 4) {
      ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
    }
  ReclaimOptions o;
  o.min_dead_bytes = 1;
  // RunOnce runs whatever the activity says.
  uint64_t n = 0;
  Reclaimer r(store_.get(), o, [&n] { return ReclaimActivity{++n, 0}; });
  const uint64_t packs_before = store_->Stats().packs;
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_LT(store_->Stats().packs, packs_before);

  // Through the thread: quiet when it polls, busy as soon as the pass
  // looks again: the pass stops before compacting anything, and says so.
  for (int i = 0; i < 16; i += 4) ASSERT_EQ(fs_->Unlink(kRootIno, "f" + std::to_string(i)), 0);
  ReclaimOptions fast = o;
  fast.idle = 0ms;
  fast.poll = 10ms;
  std::atomic<uint64_t> calls{0};
  Reclaimer busy(store_.get(), fast, [&] {
    const uint64_t c = ++calls;
    return ReclaimActivity{c <= 3 ? 0 : c, 1};  // 1: loop start, 2: poll, 3: pass start
  });
  const uint64_t pack_bytes = store_->Stats().pack_bytes;
  busy.Start();
  for (int i = 0; i < 200 && busy.Stats().passes == 0; ++i) std::this_thread::sleep_for(10ms);
  busy.Stop();
  // Every pass met foreground work (each asks again after its start).
  EXPECT_GE(busy.Stats().passes, 1u);
  EXPECT_EQ(busy.Stats().passes_stopped, busy.Stats().passes);
  EXPECT_EQ(store_->Stats().pack_bytes, pack_bytes);
  auto f = store_->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

TEST(ReclaimOptionsTest, ParsesGcAndBound) {
  ReclaimOptions o;
  EXPECT_TRUE(ParseReclaimOption("gc", "off", &o).value());
  EXPECT_FALSE(o.enabled);
  EXPECT_TRUE(ParseReclaimOption("gc", "auto", &o).value());
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(ParseReclaimOption("gc_dead", "25", &o).value());
  EXPECT_DOUBLE_EQ(o.max_dead_fraction, 0.25);
  EXPECT_FALSE(ParseReclaimOption("gc", "sometimes", &o).ok());
  EXPECT_FALSE(ParseReclaimOption("gc_dead", "0", &o).ok());
  EXPECT_FALSE(ParseReclaimOption("gc_dead", "95", &o).ok());
  EXPECT_FALSE(ParseReclaimOption("gc_dead", "1x", &o).ok());
  EXPECT_FALSE(ParseReclaimOption("delta", "on", &o).value());
}

}  // namespace
}  // namespace lmc::fs
