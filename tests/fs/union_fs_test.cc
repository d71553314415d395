// fs::UnionFs without a mount: node "A" serves a union of its own store
// (writable) and store B, which node "B" writes; B is followed through a
// read-only store and filesystem (journaled POSIX stores stand in for
// RADOS ones here, so that this runs everywhere). Directories merge by
// path, writes go to A (its directories made along the path), B's files are
// read-only, a truncating open of B's file makes it A's, and the rule for a
// name both hold is kept and counted.
#include "lmc/fs/union_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "lmc/fs/filesystem.h"
#include "lmc/store/store.h"

namespace lmc::fs {
namespace {

constexpr uint64_t kRoot = 1;

struct Node {
  std::unique_ptr<store::Store> store;
  std::unique_ptr<Filesystem> fs;
  void Close() {
    if (fs) {
      EXPECT_TRUE(fs->Shutdown().ok());
    }
    fs.reset();
    store.reset();
  }
};

class UnionFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lmcfs_union_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    a_ = Open("A", "a-writer", false);
    b_ = Open("B", "b-writer", false);
    b_follow_ = Open("B", "a-follows-b", true);
    ASSERT_TRUE(a_.fs && b_.fs && b_follow_.fs);
    u_ = std::make_unique<UnionFs>(
        std::vector<UnionMember>{{"A", a_.fs.get(), true}, {"B", b_follow_.fs.get(), false}});
  }
  void TearDown() override {
    // A test's listener may be gone (a failed assertion).
    for (Node* n : {&a_, &b_follow_})
      if (n->fs) {
        n->fs->SetAttrListener(nullptr);
        n->fs->SetEntryListener(nullptr);
      }
    u_.reset();
    b_follow_.Close();
    b_.Close();
    a_.Close();
    std::filesystem::remove_all(dir_);
  }
  Node Open(const std::string& store, const std::string& local, bool follower) {
    Node n;
    store::StoreOptions so;
    so.journal = true;
    so.local_dir = dir_ + "/" + local;
    so.read_only = follower;
    so.create_if_missing = !follower;
    auto s = store::Store::Open(dir_ + "/" + store, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return n;
    n.store = std::move(s).value();
    FsOptions fo;
    fo.chunk_size = 64 << 10;
    fo.read_only = follower;
    auto f = Filesystem::Open(n.store.get(), dir_ + "/" + store, fo);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (f.ok()) n.fs = std::move(f).value();
    return n;
  }
  // Writes a file through fs (mkdir -p of its directory first), durably.
  static void Put(FsOps& fs, const std::string& path, const std::string& data) {
    uint64_t dir = kRoot;
    size_t pos = 0;
    for (size_t slash; (slash = path.find('/', pos)) != std::string::npos; pos = slash + 1) {
      struct stat st;
      const std::string comp = path.substr(pos, slash - pos);
      if (fs.Lookup(dir, comp, &st) != 0) {
        ASSERT_EQ(fs.Mkdir(dir, comp, 0755, {0, 0}, &st), 0) << path;
      }
      dir = st.st_ino;
    }
    struct stat st;
    ASSERT_EQ(fs.Create(dir, path.substr(pos), 0644, {0, 0}, &st), 0) << path;
    ASSERT_EQ(fs.Write(st.st_ino, 0, data.data(), data.size()), 0);
    ASSERT_EQ(fs.Fsync(st.st_ino, false), 0);
    ASSERT_EQ(fs.Release(st.st_ino, true), 0);
  }
  static std::string RandomBytes(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string d(n, '\0');
    for (char& c : d) c = static_cast<char>(rng() >> 56);
    return d;
  }
  // The inode at path in fs (0: none).
  static uint64_t Find(FsOps& fs, const std::string& path, struct stat* out = nullptr) {
    uint64_t ino = kRoot;
    size_t pos = 0;
    while (pos <= path.size()) {
      size_t slash = path.find('/', pos);
      if (slash == std::string::npos) slash = path.size();
      struct stat st;
      if (fs.Lookup(ino, path.substr(pos, slash - pos), &st) != 0) return 0;
      ino = st.st_ino;
      if (out) *out = st;
      pos = slash + 1;
    }
    return ino;
  }
  static std::string Get(FsOps& fs, const std::string& path) {
    struct stat st;
    const uint64_t ino = Find(fs, path, &st);
    if (!ino || fs.Open(ino, O_RDONLY) != 0) return "<missing>";
    std::vector<ReadPiece> pieces;
    std::string out;
    if (fs.ReadPieces(ino, 0, static_cast<size_t>(st.st_size), &pieces) == 0)
      for (auto& p : pieces)
        out +=
            p.data ? std::string(reinterpret_cast<const char*>(p.data), p.size) : std::string(p.size, '\0');
    fs.Release(ino, false);
    return out;
  }
  static std::vector<std::string> List(FsOps& fs, const std::string& path) {
    const uint64_t ino = path.empty() ? kRoot : Find(fs, path);
    std::vector<DirEntry> entries;
    EXPECT_EQ(fs.ReadDir(ino, &entries), 0) << path;
    std::vector<std::string> names;
    for (auto& e : entries)
      if (e.name != "." && e.name != "..") names.push_back(e.name);
    std::sort(names.begin(), names.end());
    return names;
  }
  // What node A sees of B after B's writes: the follower applies them.
  // As the mount's follower thread does (Filesystem::FollowerRefreshed).
  void Follow() {
    Filesystem::Refreshed changed;
    auto n = b_follow_.store->Refresh(
        [&](store::Cf cf, std::string_view key, store::Store::KeyChange how) { changed.Add(cf, key, how); });
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    b_follow_.fs->FollowerRefreshed(changed);
  }

  std::string dir_;
  Node a_, b_, b_follow_;
  std::unique_ptr<UnionFs> u_;
};

TEST_F(UnionFsTest, DirectoriesMergeWritesGoToTheWritableStore) {
  Put(*b_.fs, "step100/rank1.pt", "rank one shard");
  Follow();
  EXPECT_EQ(Get(*u_, "step100/rank1.pt"), "rank one shard");
  // A's rank writes into the directory only B has so far: A makes it.
  Put(*u_, "step100/rank0.pt", "rank zero shard");
  EXPECT_EQ(List(*u_, "step100"), (std::vector<std::string>{"rank0.pt", "rank1.pt"}));
  EXPECT_EQ(Get(*a_.fs, "step100/rank0.pt"), "rank zero shard") << "written to A's store";
  EXPECT_EQ(Get(*b_.fs, "step100/rank0.pt"), "<missing>") << "never to B's";
  // B's file is read-only here; A's own goes.
  const uint64_t step = Find(*u_, "step100");
  const uint64_t r1 = Find(*u_, "step100/rank1.pt");
  EXPECT_EQ(u_->Unlink(step, "rank1.pt"), EROFS);
  EXPECT_EQ(u_->Open(r1, O_WRONLY), EROFS);
  EXPECT_EQ(u_->Write(r1, 0, "x", 1), EROFS);
  EXPECT_EQ(u_->Rmdir(kRoot, "step100"), ENOTEMPTY);
  EXPECT_EQ(u_->Unlink(step, "rank0.pt"), 0);
  EXPECT_EQ(List(*u_, "step100"), (std::vector<std::string>{"rank1.pt"}));
  // Removing the directory removes A's part; B's keeps it visible.
  EXPECT_EQ(u_->Rmdir(kRoot, "step100"), EROFS);
  EXPECT_EQ(Find(*a_.fs, "step100"), 0u);
  EXPECT_EQ(Get(*u_, "step100/rank1.pt"), "rank one shard");
  // A new file on B appears after the follower catches up.
  Put(*b_.fs, "step200/rank1.pt", "later");
  EXPECT_EQ(Find(*u_, "step200"), 0u);
  Follow();
  EXPECT_EQ(Get(*u_, "step200/rank1.pt"), "later");
  EXPECT_EQ(List(*u_, ""), (std::vector<std::string>{"step100", "step200"}));
}

TEST_F(UnionFsTest, TheFirstHolderOfANameWinsAndIsReported) {
  Put(*a_.fs, "same.txt", "from A");
  Put(*b_.fs, "same.txt", "from B");
  Put(*a_.fs, "mixed/inner", "A's directory");
  Put(*b_.fs, "mixed", "B's file");
  Follow();
  EXPECT_EQ(Get(*u_, "same.txt"), "from A");
  EXPECT_EQ(List(*u_, ""), (std::vector<std::string>{"mixed", "same.txt"}));
  EXPECT_EQ(Get(*u_, "mixed/inner"), "A's directory");
  EXPECT_GE(u_->shadowed(), 2u);
  std::string report;
  ASSERT_EQ(u_->GetXattr(kRoot, "user.lmcfs.union", &report), 0);
  EXPECT_NE(report.find("same.txt"), std::string::npos) << report;
  EXPECT_NE(report.find("mixed"), std::string::npos) << report;
  EXPECT_NE(report.find("A (rw)"), std::string::npos) << report;
}

// Saving over another node's file (open with O_TRUNC, as torch.save does)
// makes a new file in the writable store that hides the other from then on.
TEST_F(UnionFsTest, TruncatingOpenOfAnotherNodesFileMakesItLocal) {
  Put(*b_.fs, "ckpt/latest.pt", "B's old save");
  Follow();
  struct stat st;
  const uint64_t ino = Find(*u_, "ckpt/latest.pt", &st);
  ASSERT_NE(ino, 0u);
  EXPECT_EQ(u_->Open(ino, O_WRONLY | O_APPEND), EROFS) << "without O_TRUNC the bytes would need copying";
  ASSERT_EQ(u_->Open(ino, O_WRONLY | O_TRUNC), 0);
  const std::string mine = "A's new save";
  ASSERT_EQ(u_->Write(ino, 0, mine.data(), mine.size()), 0);
  ASSERT_EQ(u_->Fsync(ino, false), 0);
  ASSERT_EQ(u_->Release(ino, true), 0);
  ASSERT_EQ(u_->GetAttr(ino, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(mine.size()));
  u_->Forget(ino, 1);
  EXPECT_EQ(Get(*u_, "ckpt/latest.pt"), mine);
  EXPECT_EQ(Get(*a_.fs, "ckpt/latest.pt"), mine);
  EXPECT_EQ(Get(*b_.fs, "ckpt/latest.pt"), "B's old save") << "B's store is untouched";
}

// The kernel may keep the attributes of the writable member's files (the
// mount tells it of each change the filesystem makes on its own, by union
// inode), and of the followers' (below), but not those of a follower's
// file that a truncating open made the writable member's.
TEST_F(UnionFsTest, TheWritableMembersChangesAreToldByUnionInode) {
  Put(*b_.fs, "theirs.pt", "B's save");
  Follow();
  testing::AttrNotices notices;
  ASSERT_TRUE(u_->SetAttrListener(notices.Listener()));
  auto take = [&] { return notices.Take(); };
  std::string data(256 << 10, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7) % 13);
  struct stat st;
  ASSERT_EQ(u_->Mkdir(kRoot, "d", 0755, {0, 0}, &st), 0);
  ASSERT_EQ(u_->Create(st.st_ino, "mine.pt", 0644, {0, 0}, &st), 0);
  const uint64_t mine = st.st_ino;
  ASSERT_EQ(u_->Write(mine, 0, data.data(), data.size()), 0);
  ASSERT_EQ(u_->Flush(mine), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{mine});
  ASSERT_EQ(u_->GetAttr(mine, &st), 0);
  EXPECT_EQ(st.st_ino, static_cast<ino_t>(mine));
  EXPECT_GT(st.st_blocks, 0);
  ASSERT_EQ(u_->Release(mine, true), 0);
  EXPECT_TRUE(u_->TellsAttrOf(mine));
  const uint64_t theirs = Find(*u_, "theirs.pt");
  ASSERT_NE(theirs, 0u);
  EXPECT_TRUE(u_->TellsAttrOf(theirs));
  EXPECT_FALSE(u_->TellsAttrOf(kRoot)) << "every member's root is in it";
  // Saved over here: the writable member's new file answers for the
  // follower's union inode, which its notices do not name.
  ASSERT_EQ(u_->Open(theirs, O_WRONLY | O_TRUNC), 0);
  ASSERT_EQ(u_->Write(theirs, 0, data.data(), data.size()), 0);
  ASSERT_EQ(u_->Flush(theirs), 0);
  ASSERT_EQ(u_->Release(theirs, true), 0);
  const std::vector<uint64_t> after = take();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], theirs);
  EXPECT_FALSE(u_->TellsAttrOf(theirs)) << "redirected to a file whose notices name another inode";
  ASSERT_TRUE(u_->SetAttrListener(nullptr));
}

// A follower's refresh tells the listener of each file another node
// changed, by union inode, with its bytes when they changed (so that the
// kernel drops its pages too: another node may rewrite a file in place
// with its old size and mtime, as `cp -p` does); a file open here is told
// of again once closed, since the kernel cached the version it opened.
TEST_F(UnionFsTest, AFollowersRefreshTellsOfWhatAnotherNodeChanged) {
  Put(*b_.fs, "theirs.pt", "B's first save");
  Put(*b_.fs, "other.pt", "untouched");
  Follow();
  testing::AttrNotices notices;
  ASSERT_TRUE(u_->SetAttrListener(notices.Listener()));
  const uint64_t theirs = Find(*u_, "theirs.pt"), other = Find(*u_, "other.pt");
  ASSERT_NE(theirs, 0u);
  ASSERT_NE(other, 0u);
  EXPECT_EQ(Get(*u_, "theirs.pt"), "B's first save");
  const uint64_t b_ino = Find(*b_.fs, "theirs.pt");
  auto overwrite = [&](const std::string& data) {
    ASSERT_EQ(b_.fs->Open(b_ino, O_WRONLY | O_TRUNC), 0);
    ASSERT_EQ(b_.fs->Write(b_ino, 0, data.data(), data.size()), 0);
    ASSERT_EQ(b_.fs->Fsync(b_ino, false), 0);
    ASSERT_EQ(b_.fs->Release(b_ino, true), 0);
  };
  overwrite("B's later save");  // the same length
  Follow();
  EXPECT_EQ(notices.TakeData(), std::vector<uint64_t>{theirs});
  std::vector<uint64_t> told = notices.Take();
  EXPECT_EQ(std::count(told.begin(), told.end(), theirs), 1);
  EXPECT_EQ(std::count(told.begin(), told.end(), other), 0) << "a file nobody changed";
  EXPECT_EQ(Get(*u_, "theirs.pt"), "B's later save");
  // Attributes only: no page to drop.
  struct stat st {};
  ASSERT_EQ(b_.fs->GetAttr(b_ino, &st), 0);
  st.st_mode = 0600;
  ASSERT_EQ(b_.fs->SetAttr(b_ino, st, kSetMode, &st), 0);
  ASSERT_EQ(b_.fs->Fsync(b_ino, false), 0);
  Follow();
  told = notices.Take();
  EXPECT_EQ(std::count(told.begin(), told.end(), theirs), 1) << "chmod";
  EXPECT_TRUE(notices.TakeData().empty());
  // Changed while open here: told now and once closed, then no more.
  ASSERT_EQ(u_->Open(theirs, O_RDONLY), 0);
  overwrite("B's third save!");
  Follow();
  EXPECT_EQ(notices.TakeData(), std::vector<uint64_t>{theirs});
  notices.Take();
  Follow();
  EXPECT_TRUE(notices.Take().empty()) << "still open";
  ASSERT_EQ(u_->Release(theirs, false), 0);
  Follow();
  EXPECT_EQ(notices.TakeData(), std::vector<uint64_t>{theirs}) << "closed";
  EXPECT_EQ(notices.Take(), std::vector<uint64_t>{theirs});
  Follow();
  EXPECT_TRUE(notices.Take().empty());
  EXPECT_EQ(Get(*u_, "theirs.pt"), "B's third save!");
  ASSERT_TRUE(u_->SetAttrListener(nullptr));
  // A union of followers only tells too.
  UnionFs followers(std::vector<UnionMember>{{"B", b_follow_.fs.get(), false}});
  EXPECT_TRUE(followers.SetAttrListener([](uint64_t, bool) {}));
  EXPECT_TRUE(followers.SetAttrListener(nullptr));
}

// The union's counters (lmcfs-stat's daemon figures on a union mount) are
// its members' summed: a read of another node's file is counted by the
// follower's filesystem, which the mount's figures left out before.
TEST_F(UnionFsTest, CountersAreTheMembersSummed) {
  Put(*b_.fs, "theirs.pt", RandomBytes(300000, 1));
  Put(*u_, "mine.pt", RandomBytes(200000, 2));
  Follow();
  auto value = [](const std::vector<std::pair<std::string, uint64_t>>& v, const std::string& name) {
    for (const auto& [k, n] : v)
      if (k == name) return n;
    ADD_FAILURE() << "no counter " << name;
    return uint64_t{0};
  };
  ASSERT_EQ(Get(*u_, "theirs.pt").size(), 300000u);
  ASSERT_EQ(Get(*u_, "mine.pt").size(), 200000u);
  // Read when no read-ahead task is still counting (the members' figures
  // the same before and after the union's).
  std::vector<std::pair<std::string, uint64_t>> a, b, sum;
  for (int i = 0; i < 200; ++i) {
    a = a_.fs->NamedCounters();
    b = b_follow_.fs->NamedCounters();
    sum = u_->NamedCounters();
    if (a == a_.fs->NamedCounters() && b == b_follow_.fs->NamedCounters()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sum.size(), a.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    EXPECT_EQ(sum[i].first, a[i].first);
    EXPECT_EQ(sum[i].second, a[i].second + b[i].second) << sum[i].first;
  }
  EXPECT_GT(value(b, "read_calls"), 0u) << "the follower counts the union's reads of B's file";
  EXPECT_GT(value(a, "read_calls"), 0u);
  EXPECT_EQ(value(sum, "write_bytes"), 200000u) << "A's write alone";
  EXPECT_GT(value(b, "cpu_decode_bytes"), 0u);
}

// A follower's refresh tells the entry listener of each name another node
// made, removed or renamed, by the union inode the kernel knows its
// directory by (a directory both nodes hold included; its attributes are
// told by those inodes too), and before any attribute notice of that
// refresh: a name saved over must be looked up
// again before the kernel asks for its old file's attributes, which are
// gone (ENOENT for a name that exists). The union's own changes are not
// told (the kernel made them), nor names in a directory the union never
// handed out.
TEST_F(UnionFsTest, AFollowersRefreshTellsOfEachNameAnotherNodeChanged) {
  Put(*b_.fs, "theirs.pt", "B's");
  Put(*b_.fs, "runs/old.pt", "B's old");
  Put(*b_.fs, "runs/keep.pt", "B's new");
  Follow();
  // runs/ as the kernel first looked it up (B's alone); then the writable
  // member makes runs/ too, and a later lookup names the merged directory
  // by A's inode. The kernel may hold both: both are told.
  const uint64_t runs_b = Find(*u_, "runs");
  Put(*u_, "runs/mine.pt", "A's");
  const uint64_t runs = Find(*u_, "runs");
  ASSERT_NE(runs, 0u);
  ASSERT_NE(runs_b, 0u);
  ASSERT_NE(runs, runs_b);
  std::vector<std::string> log;  // both listeners, in order
  std::mutex mu;
  ASSERT_TRUE(u_->SetEntryListener([&](uint64_t parent, std::string_view name) {
    std::lock_guard l(mu);
    log.push_back("entry " + std::to_string(parent) + " " + std::string(name));
  }));
  ASSERT_TRUE(u_->SetAttrListener([&](uint64_t ino, bool) {
    std::lock_guard l(mu);
    log.push_back("attr " + std::to_string(ino));
  }));
  auto take = [&] {
    std::lock_guard l(mu);
    return std::exchange(log, {});
  };
  const uint64_t b_runs = Find(*b_.fs, "runs");
  ASSERT_NE(b_runs, 0u);
  ASSERT_EQ(b_.fs->Unlink(kRoot, "theirs.pt"), 0);
  ASSERT_EQ(b_.fs->Rename(b_runs, "keep.pt", b_runs, "old.pt", 0), 0);  // saved over
  Put(*b_.fs, "runs/new.pt", "B's newest");
  Put(*b_.fs, "elsewhere/x.pt", "never looked up here");
  Follow();
  const std::vector<std::string> told = take();
  std::vector<std::string> entries, want = {"entry 1 elsewhere", "entry 1 theirs.pt"};
  for (const uint64_t dir : {runs, runs_b})
    for (const char* name : {"keep.pt", "new.pt", "old.pt"})
      want.push_back("entry " + std::to_string(dir) + " " + name);
  size_t last_entry = 0, first_attr = told.size();
  for (size_t i = 0; i < told.size(); ++i) {
    if (told[i].rfind("entry ", 0) == 0) {
      entries.push_back(told[i]);
      last_entry = i;
    } else {
      first_attr = std::min(first_attr, i);
    }
  }
  std::sort(entries.begin(), entries.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(entries, want);
  EXPECT_LT(last_entry, first_attr) << "entries before attributes";
  EXPECT_LT(first_attr, told.size()) << "the refresh told attributes too";
  // runs/ changed (its entries, so its times and size): its attributes are
  // told by both union inodes too (before, by B's member inode's alone,
  // which the kernel does not know the merged directory by).
  for (const uint64_t dir : {runs, runs_b})
    EXPECT_NE(std::find(told.begin(), told.end(), "attr " + std::to_string(dir)), told.end())
        << "runs/ as " << dir;
  EXPECT_EQ(Get(*u_, "runs/old.pt"), "B's new");
  EXPECT_EQ(Find(*u_, "theirs.pt"), 0u);
  // The union's own change: the kernel made it, nobody is told.
  take();
  ASSERT_EQ(u_->Unlink(runs, "mine.pt"), 0);
  Follow();
  for (const std::string& t : take()) EXPECT_NE(t.rfind("entry ", 0), 0u) << t;
  // The kernel forgets runs/ by both inodes: B's next change in it is told
  // by neither (no entry notice; its attributes by B's own inode alone).
  u_->Forget(runs, 1000);
  u_->Forget(runs_b, 1000);
  Put(*b_.fs, "runs/later.pt", "B's later");
  Follow();
  for (const std::string& t : take()) {
    EXPECT_NE(t, "entry " + std::to_string(runs) + " later.pt");
    EXPECT_NE(t, "entry " + std::to_string(runs_b) + " later.pt");
    EXPECT_NE(t, "attr " + std::to_string(runs)) << "a directory the kernel forgot";
  }
  ASSERT_TRUE(u_->SetEntryListener(nullptr));
  ASSERT_TRUE(u_->SetAttrListener(nullptr));
}

// Random changes on node B (new files, ranges overwritten in place, some
// with the file's old length, truncations, renames over other names,
// unlinks), each committed; after every few, node A's follower refreshes:
// every file reads through the union as B wrote it, the listing matches,
// and each file whose bytes B changed in place since the last refresh was
// told with its pages, by its union inode.
TEST_F(UnionFsTest, AFollowerMatchesTheWriterAfterEachRefresh) {
  std::mt19937_64 rng(20261206);
  auto bytes = [&](size_t n) { return RandomBytes(n, rng()); };
  testing::AttrNotices notices;
  ASSERT_TRUE(u_->SetAttrListener(notices.Listener()));
  std::map<std::string, std::string> model;  // what B holds
  std::set<std::string> rewritten;           // bytes changed in place since the last refresh
  int refreshes = 0, in_place = 0;
  for (int step = 0; step < 160; ++step) {
    const std::string name = "f" + std::to_string(rng() % 8);
    const uint64_t ino = Find(*b_.fs, name);
    const int op = static_cast<int>(rng() % 4);
    if (!ino) {
      model[name] = bytes(rng() % (96 << 10));
      Put(*b_.fs, name, model[name]);
    } else if (op == 0 || op == 1) {
      // A range written over (op 0: within the file, its length kept).
      std::string& m = model[name];
      const size_t off = m.empty() ? 0 : rng() % m.size();
      size_t n = 1 + rng() % (32 << 10);
      if (op == 0 && !m.empty()) n = std::min(n, m.size() - off);
      const std::string d = bytes(n);
      ASSERT_EQ(b_.fs->Open(ino, O_WRONLY), 0);
      ASSERT_EQ(b_.fs->Write(ino, off, d.data(), d.size()), 0);
      ASSERT_EQ(b_.fs->Fsync(ino, false), 0);
      ASSERT_EQ(b_.fs->Release(ino, true), 0);
      if (m.size() < off + n) m.resize(off + n);
      m.replace(off, n, d);
      rewritten.insert(name);
    } else if (op == 2) {
      std::string& m = model[name];
      struct stat st {};
      st.st_size = static_cast<off_t>(rng() % (m.size() + 1));
      ASSERT_EQ(b_.fs->SetAttr(ino, st, kSetSize, &st), 0);
      ASSERT_EQ(b_.fs->Fsync(ino, false), 0);
      m.resize(static_cast<size_t>(st.st_size));
      rewritten.insert(name);
    } else if (rng() % 2) {
      const std::string to = "f" + std::to_string(rng() % 8);
      if (to != name) {
        ASSERT_EQ(b_.fs->Rename(kRoot, name, kRoot, to, 0), 0);
        ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
        model[to] = model[name];
        model.erase(name);
        rewritten.erase(to);  // another inode under that name now
        if (rewritten.erase(name)) rewritten.insert(to);
      }
    } else {
      ASSERT_EQ(b_.fs->Unlink(kRoot, name), 0);
      ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
      model.erase(name);
      rewritten.erase(name);
    }
    if (step % 5 != 4) continue;
    Follow();
    refreshes++;
    const std::vector<uint64_t> data = notices.TakeData();
    notices.Take();
    for (const std::string& n : rewritten) {
      const uint64_t u = Find(*u_, n);
      ASSERT_NE(u, 0u) << n;
      EXPECT_EQ(std::count(data.begin(), data.end(), u), 1) << n << " changed in place, step " << step;
      in_place++;
    }
    rewritten.clear();
    std::vector<std::string> names;
    for (const auto& [n, d] : model) {
      names.push_back(n);
      EXPECT_TRUE(Get(*u_, n) == d) << n << " after step " << step;
    }
    EXPECT_EQ(List(*u_, ""), names) << "after step " << step;
    if (HasFailure()) return;
  }
  EXPECT_EQ(refreshes, 32);
  EXPECT_GT(in_place, 20) << "the changes this test is about";
  ASSERT_TRUE(u_->SetAttrListener(nullptr));
}

// A file open on node A that node B removes (its records released and
// their blocks punched) before A's follower refreshes: A's read finds the
// record gone, catches up with B's journal, and fails with ESTALE (NFS's
// answer), not as corruption (EIO, a store error logged and counted).
TEST_F(UnionFsTest, AFileTheWriterRemovedWhileOpenHereReadsAsStale) {
  const std::string big = RandomBytes(16 << 20, 7);
  Put(*b_.fs, "ck.pt", big);
  Follow();
  const uint64_t u = Find(*u_, "ck.pt");
  ASSERT_EQ(u_->Open(u, O_RDONLY), 0);
  std::vector<ReadPiece> pieces;
  ASSERT_EQ(u_->ReadPieces(u, 0, 4096, &pieces), 0);
  const uint64_t bi = Find(*b_.fs, "ck.pt");
  ASSERT_EQ(b_.fs->Unlink(kRoot, "ck.pt"), 0);
  b_.fs->Forget(bi, 2);  // Put's create and Find's lookup
  ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
  b_.store->PunchDeadRecords();
  ASSERT_GT(b_.store->Stats().punched_bytes, 8u << 20) << "the records this test reads are gone";
  pieces.clear();
  EXPECT_EQ(u_->ReadPieces(u, 14 << 20, 1 << 20, &pieces), ESTALE);
  EXPECT_EQ(b_follow_.store->Stats().corruptions, 0u) << "a record another node released is not corrupt";
  EXPECT_EQ(u_->Release(u, false), 0);
  Follow();
  EXPECT_EQ(Find(*u_, "ck.pt"), 0u);
}

// Node B saves over a name while its kernel still holds the old file (a
// lookup: B keeps it as an orphan, its record at link count 0, until it is
// forgotten there). Node A opens that old file after the refresh, and the
// kernel forgets it, then the reader closes: A drops the inode and purges
// nothing, which is B's to do in its store. Before, A tried to commit the
// purge to its read-only store: the close failed with the store's error
// logged ("purge (inode N): ... open read-only"), as the stress of saves
// over names on B and reads on A showed.
TEST_F(UnionFsTest, AFollowerClosingAFileTheWriterRemovedPurgesNothing) {
  const std::string v1 = RandomBytes(200000, 1);
  Put(*b_.fs, "latest.pt", v1);
  Follow();
  const uint64_t u = Find(*u_, "latest.pt");
  ASSERT_NE(u, 0u);
  const uint64_t old_bi = Find(*b_.fs, "latest.pt");  // B's kernel's lookup: kept as an orphan
  Put(*b_.fs, ".latest.pt.tmp", RandomBytes(100000, 2));
  ASSERT_EQ(b_.fs->Rename(kRoot, ".latest.pt.tmp", kRoot, "latest.pt", 0), 0);
  ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
  Follow();
  ASSERT_EQ(u_->Open(u, O_RDONLY), 0);
  struct stat st;
  ASSERT_EQ(u_->GetAttr(u, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u) << "B's orphan, as A loaded it";
  const auto cached = [&] {
    for (const auto& [k, n] : b_follow_.fs->MemoryCounters())
      if (k == "inodes_cached") return n;
    return uint64_t{0};
  };
  const uint64_t before = cached();
  u_->Forget(u, 1);  // the kernel forgets it (the name now leads elsewhere)
  EXPECT_EQ(u_->Release(u, false), 0);
  EXPECT_EQ(cached(), before - 1) << "the closed orphan is dropped here";
  b_.fs->Forget(old_bi, 2);  // Put's create and Find's lookup: B purges it
  ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
  Follow();
  EXPECT_EQ(Get(*u_, "latest.pt").size(), 100000u);
}

// Node A opens node B's files and has not read them yet when B saves over
// one (a new file renamed onto the name: the file opened is removed),
// rewrites one in place and appends to one. A's first read of the removed
// file fails with ESTALE; the others read as they are now, whole, at
// their new sizes, as an open after the change would (and as NFS reads).
// Before f8cda5e, A loaded the extents the index held at its first read
// under the size of its open: a stress of saves over names on B and reads
// on A read all-zero files. Until 2026-12-07 a file changed in place, an
// append included, failed with ESTALE too.
TEST_F(UnionFsTest, AFileOpenedHereAndChangedThereBeforeItsFirstReadReadsAsItIsNow) {
  const std::string v1 = RandomBytes(200000, 2), log1 = RandomBytes(70000, 5);
  Put(*b_.fs, "latest.pt", RandomBytes(300000, 1));
  Put(*b_.fs, "inplace.pt", v1);
  Put(*b_.fs, "train.log", log1);
  Put(*b_.fs, "seeked.log", log1);
  Follow();
  const uint64_t latest = Find(*u_, "latest.pt"), inplace = Find(*u_, "inplace.pt"),
                 log = Find(*u_, "train.log"), seeked = Find(*u_, "seeked.log");
  ASSERT_NE(latest, 0u);
  ASSERT_NE(inplace, 0u);
  ASSERT_NE(log, 0u);
  ASSERT_NE(seeked, 0u);
  for (uint64_t ino : {latest, inplace, log, seeked}) ASSERT_EQ(u_->Open(ino, O_RDONLY), 0);
  const uint64_t old_bi = Find(*b_.fs, "latest.pt");
  Put(*b_.fs, ".latest.pt.tmp", RandomBytes(100000, 3));
  ASSERT_EQ(b_.fs->Rename(kRoot, ".latest.pt.tmp", kRoot, "latest.pt", 0), 0);
  b_.fs->Forget(old_bi, 2);  // Put's create and Find's lookup: the old file goes
  ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
  const auto write = [&](const std::string& name, int flags, uint64_t off, const std::string& data) {
    const uint64_t bi = Find(*b_.fs, name);
    ASSERT_EQ(b_.fs->Open(bi, O_WRONLY | flags), 0);
    ASSERT_EQ(b_.fs->Write(bi, off, data.data(), data.size()), 0);
    ASSERT_EQ(b_.fs->Fsync(bi, false), 0);
    ASSERT_EQ(b_.fs->Release(bi, true), 0);
  };
  const std::string v2 = RandomBytes(150000, 4), log2 = RandomBytes(50000, 6);
  write("inplace.pt", O_TRUNC, 0, v2);
  write("train.log", O_APPEND, log1.size(), log2);
  write("seeked.log", O_APPEND, log1.size(), log2);
  Follow();
  // SEEK_HOLE before any read: the end of the file as it is now.
  uint64_t hole = 0;
  ASSERT_EQ(u_->Seek(seeked, 0, SEEK_HOLE, &hole), 0);
  EXPECT_EQ(hole, log1.size() + log2.size());
  std::vector<ReadPiece> pieces;
  EXPECT_EQ(u_->ReadPieces(latest, 0, 4096, &pieces), ESTALE) << "saved over: the file opened is gone";
  const auto read = [&](uint64_t ino, size_t n) {
    std::vector<ReadPiece> got;
    std::string out;
    EXPECT_EQ(u_->ReadPieces(ino, 0, n, &got), 0);
    for (auto& p : got)
      out += p.data ? std::string(reinterpret_cast<const char*>(p.data), p.size) : std::string(p.size, '\0');
    return out;
  };
  const std::string now_inplace = read(inplace, 300000), now_log = read(log, 300000);
  EXPECT_EQ(now_inplace.size(), v2.size());
  EXPECT_TRUE(now_inplace == v2) << "rewritten in place: not the new version";
  EXPECT_EQ(now_log.size(), log1.size() + log2.size());
  EXPECT_TRUE(now_log == log1 + log2) << "appended to: not the new version";
  struct stat st;
  ASSERT_EQ(u_->GetAttr(inplace, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(v2.size()));
  ASSERT_EQ(u_->GetAttr(log, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(log1.size() + log2.size()));
  for (uint64_t ino : {latest, inplace, log, seeked}) EXPECT_EQ(u_->Release(ino, false), 0);
  Follow();
  EXPECT_EQ(Get(*u_, "inplace.pt"), v2) << "opened again";
  EXPECT_EQ(Get(*u_, "latest.pt").size(), 100000u);
}

// Node B's compaction moves a file's records to a new pack and deletes the
// old one before node A's follower refreshes: A's read of the file finds
// the pack gone, catches up with B's journal, and reads the records where
// they are now.
TEST_F(UnionFsTest, AFollowerReadsRecordsTheWriterMovedSinceItsLastRefresh) {
  const std::string keep = RandomBytes(1 << 20, 8);
  Put(*b_.fs, "keep.pt", keep);
  Put(*b_.fs, "gone.pt", RandomBytes(1 << 20, 9));
  Follow();
  const uint64_t u = Find(*u_, "keep.pt");
  ASSERT_NE(u, 0u);
  const uint64_t bi = Find(*b_.fs, "gone.pt");
  ASSERT_EQ(b_.fs->Unlink(kRoot, "gone.pt"), 0);
  b_.fs->Forget(bi, 2);
  ASSERT_EQ(b_.fs->FsyncDir(kRoot), 0);
  store::CompactOptions co;
  co.live_fraction_threshold = 0.9;
  co.seal_active_dead_bytes = 1;
  auto rep = b_.store->Compact(co);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_GT(rep->chunks_moved, 0u) << "keep.pt's records moved";
  ASSERT_GT(rep->packs_compacted, 0u) << "and the pack they were in is gone";
  EXPECT_EQ(Get(*u_, "keep.pt"), keep);
  EXPECT_EQ(b_follow_.store->Stats().corruptions, 0u);
}

// A member whose store does not exist yet joins when it is attached.
TEST_F(UnionFsTest, AMemberAttachedLaterJoins) {
  UnionFs u(std::vector<UnionMember>{{"A", a_.fs.get(), true}, {"B", nullptr, false}});
  Put(*b_.fs, "from_b", "b");
  Follow();
  struct stat st;
  EXPECT_EQ(u.Lookup(kRoot, "from_b", &st), ENOENT);
  u.Attach(1, b_follow_.fs.get());
  EXPECT_EQ(Get(u, "from_b"), "b");
}

// The follower drops its cached inodes while the kernel looks files up and
// forgets them: a forget holds the inode's mutex and then the table's, so
// the drop must take them in that order too (TSan reports the inversion;
// without it the two threads could hang each other).
TEST_F(UnionFsTest, DroppingCachedInodesBesideForgetsHangsNothing) {
  for (int i = 0; i < 4; i++) Put(*b_.fs, "f" + std::to_string(i), "shard " + std::to_string(i));
  Follow();
  Filesystem& fs = *b_follow_.fs;
  const int rounds = 2000;
  std::atomic<bool> done{false};
  Filesystem::Refreshed something;  // as after a refresh that applied records
  something.attrs.insert(kRoot);
  std::thread dropper([&] {
    while (!done.load()) fs.FollowerRefreshed(something);
  });
  int seen = 0;
  for (int r = 0; r < rounds; r++) {
    struct stat st;
    const std::string name = "f" + std::to_string(r % 4);
    if (fs.Lookup(kRoot, name, &st) != 0) continue;
    seen++;
    fs.Forget(st.st_ino, 1);
  }
  done = true;
  dropper.join();
  EXPECT_EQ(seen, rounds);
  // What the drop left still reads as written.
  for (int i = 0; i < 4; i++) EXPECT_EQ(Get(fs, "f" + std::to_string(i)), "shard " + std::to_string(i));
}

}  // namespace
}  // namespace lmc::fs
