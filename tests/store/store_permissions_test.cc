// The store belongs to its owner (docs/ARCHITECTURE.md, "Store permissions"):
// everything the store creates, RocksDB's index files included, has no group
// or other bits whatever the umask; fsck reports and repairs loosened modes
// (never owners); a symbolic link planted anywhere in the store (a pack, or
// a directory on the way to one) is never followed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "format.h"
#include "lmc/store/permissions.h"
#include "no_links.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

namespace fsys = std::filesystem;

// Every path under `dir` (and `dir`) with a group or other bit, as
// "PATH mode"; symbolic links are not followed.
std::vector<std::string> LooseModes(const std::string& dir) {
  std::vector<std::string> out;
  auto check = [&](const std::string& p) {
    struct stat st;
    if (::lstat(p.c_str(), &st) == 0 && !S_ISLNK(st.st_mode) && (st.st_mode & 077))
      out.push_back(p + " " + std::to_string(st.st_mode & 0777));
  };
  check(dir);
  for (const auto& e : fsys::recursive_directory_iterator(dir)) check(e.path().string());
  return out;
}

mode_t ModeOf(const std::string& p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

std::string PackPathOf(const std::string& store, uint64_t id) {
  return store + "/" + fmt::kPackDir + "/" + fmt::PackFileName(id);
}

// A pack file the store holds (compaction retires the first ones).
std::string SomePack(const std::string& store) {
  std::vector<std::string> packs;
  for (const auto& e : fsys::directory_iterator(store + "/" + fmt::kPackDir)) packs.push_back(e.path());
  EXPECT_FALSE(packs.empty());
  std::sort(packs.begin(), packs.end());
  return packs.empty() ? std::string() : packs.back();
}

std::string ReadBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Commits, reopens (new WAL, MANIFEST, OPTIONS, info log), compacts and
// runs fsck --repair, so the store creates every kind of file it makes.
void ExerciseStore(const std::string& dir) {
  auto o = TestOptions();
  o.pack_size_limit = 8192;
  {
    auto s = OpenOrDie(dir, o);
    ASSERT_TRUE(s);
    for (uint64_t i = 1; i <= 12; ++i) {
      Batch b;
      AddFileChunk(b, i, RandomBytes(3000, i));
      ASSERT_TRUE(s->Commit(b).ok());
    }
  }
  auto s = OpenOrDie(dir, o);
  ASSERT_TRUE(s);
  Batch d;
  for (uint64_t i = 1; i <= 6; ++i) {
    d.Unref(KeyOf(RandomBytes(3000, i)));
    d.Delete(Cf::kExtents, ExtentKey(i, 0));
  }
  ASSERT_TRUE(s->Commit(d).ok());
  ASSERT_TRUE(s->Compact({}).ok());
  FsckOptions fo;
  fo.repair = true;
  auto f = s->Fsck(fo);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u);
}

class StorePermissionsUmask : public ::testing::TestWithParam<mode_t> {};

TEST_P(StorePermissionsUmask, NothingTheStoreCreatesHasGroupOrOtherBits) {
  TempDir t;
  // umask is process-wide: set around the whole store's life here, while
  // this test is the only thread that creates files (RocksDB's background
  // threads belong to the store and end with it).
  const mode_t old = ::umask(GetParam());
  ExerciseStore(t.store());
  ::umask(old);
  EXPECT_EQ(LooseModes(t.store()), std::vector<std::string>{});
  EXPECT_EQ(ModeOf(t.store()), 0700u);
  EXPECT_EQ(ModeOf(t.store() + "/" + fmt::kIndexDir), 0700u);
  EXPECT_EQ(ModeOf(t.store() + "/" + fmt::kPackDir), 0700u);
  EXPECT_EQ(ModeOf(t.store() + "/" + fmt::kConfigName), 0600u);
  // RocksDB's own files are there and were checked.
  for (const char* f : {"CURRENT", "LOCK", "IDENTITY"})
    EXPECT_TRUE(fsys::exists(t.store() + "/" + fmt::kIndexDir + "/" + f)) << f;
  auto loose = FindLoosePaths(t.store(), ::geteuid());
  ASSERT_TRUE(loose.ok());
  EXPECT_TRUE(loose->empty());
}

INSTANTIATE_TEST_SUITE_P(Umasks, StorePermissionsUmask, ::testing::Values(mode_t{0}, mode_t{022}));

TEST(StorePermissions, FsckReportsLoosenedModesAndRepairTightensThem) {
  TempDir t;
  ExerciseStore(t.store());
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  const std::string pack = SomePack(t.store());
  ASSERT_EQ(::chmod(pack.c_str(), 0640), 0);
  ASSERT_EQ(::chmod(t.store().c_str(), 0701), 0);

  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Count(FsckProblem::Kind::kLoosePermissions), 2u);
  EXPECT_EQ(f->fixed(), 0u);
  std::vector<std::string> paths;
  for (const auto& p : f->problems) paths.push_back(p.path);
  EXPECT_EQ(paths, (std::vector<std::string>{t.store(), pack}));
  EXPECT_STREQ(FsckProblemKindName(FsckProblem::Kind::kLoosePermissions), "loose_permissions");
  EXPECT_NE(f->problems[1].message.find("0640"), std::string::npos) << f->problems[1].message;

  FsckOptions fo;
  fo.repair = true;
  f = s->Fsck(fo);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Count(FsckProblem::Kind::kLoosePermissions), 2u);
  EXPECT_EQ(f->fixed(), 2u);
  EXPECT_EQ(f->ExitCode(), kFsckCorrected);
  EXPECT_EQ(ModeOf(pack), 0600u);
  EXPECT_EQ(ModeOf(t.store()), 0700u);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

TEST(StorePermissions, AnotherOwnerIsReportedAndNeverChowned) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  TempDir t;
  ExerciseStore(t.store());
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  const std::string pack = SomePack(t.store());
  ASSERT_EQ(::chown(pack.c_str(), 65534, static_cast<gid_t>(-1)), 0);
  FsckOptions fo;
  fo.repair = true;
  auto f = s->Fsck(fo);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->Count(FsckProblem::Kind::kLoosePermissions), 1u);
  EXPECT_FALSE(f->problems[0].repaired);
  EXPECT_EQ(f->problems[0].path, pack);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  struct stat st;
  ASSERT_EQ(::stat(pack.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  auto loose = FindLoosePaths(t.store(), 0);
  ASSERT_TRUE(loose.ok());
  ASSERT_EQ(loose->size(), 1u);
  const std::string m = LoosePathsMessage(t.store(), *loose);
  EXPECT_NE(m.find("owned by uid 65534"), std::string::npos) << m;
  EXPECT_NE(m.find("chown"), std::string::npos) << m;
}

TEST(StorePermissions, SymlinkPlantedAsTheNextPackIsNotFollowed) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  // The first commit creates pack 1; it is a link to a file outside.
  const std::string victim = t.path() + "/victim";
  std::ofstream(victim) << "not lmcfs's";
  ASSERT_EQ(::symlink(victim.c_str(), PackPathOf(t.store(), 1).c_str()), 0);
  Batch b;
  AddFileChunk(b, 1, RandomBytes(3000, 1));
  Status st = s->Commit(b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadBytes(victim), "not lmcfs's");
  EXPECT_TRUE(fsys::is_symlink(PackPathOf(t.store(), 1)));  // left as it was
}

TEST(StorePermissions, PackReplacedBySymlinkIsNotFollowedAtOpen) {
  TempDir t;
  {
    auto s = OpenOrDie(t.store(), TestOptions());
    ASSERT_TRUE(s);
    Batch b;
    AddFileChunk(b, 1, RandomBytes(3000, 1));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  // A copy of the pack outside, with bytes past the committed size that
  // recovery would cut if it opened the file through the link.
  const std::string pack = PackPathOf(t.store(), 1), victim = t.path() + "/victim";
  std::string bytes = ReadBytes(pack) + "tail the store never committed";
  std::ofstream(victim, std::ios::binary) << bytes;
  ASSERT_EQ(::unlink(pack.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), pack.c_str()), 0);
  auto s = Store::Open(t.store(), TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(pack), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("symbolic link"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(ReadBytes(victim), bytes);
}

// Every regular file under `dir` and its bytes, to show a directory was
// left exactly as it was.
std::vector<std::pair<std::string, std::string>> Snapshot(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fsys::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.emplace_back(e.path().string(), ReadBytes(e.path().string()));
  std::sort(out.begin(), out.end());
  return out;
}

// packs/ or index/ moved out of the store and a link left in its place:
// the store does not open through it, names the link, and the directory it
// points to is not touched (no recovery cut, no RocksDB write).
class LinkedStoreDir : public ::testing::TestWithParam<const char*> {};

TEST_P(LinkedStoreDir, IsNotFollowedAtOpen) {
  TempDir t;
  ExerciseStore(t.store());
  const std::string sub = t.store() + "/" + GetParam(), moved = t.path() + "/elsewhere";
  fsys::rename(sub, moved);
  ASSERT_EQ(::symlink(moved.c_str(), sub.c_str()), 0);
  const auto before = Snapshot(moved);
  ASSERT_FALSE(before.empty());
  auto s = Store::Open(t.store(), TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(sub), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("symbolic link"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(Snapshot(moved), before);
  EXPECT_TRUE(fsys::is_symlink(sub));
  // Put back, the store opens and checks clean.
  fsys::remove(sub);
  fsys::rename(moved, sub);
  auto again = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->Fsck({})->errors(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Dirs, LinkedStoreDir, ::testing::Values(fmt::kPackDir, fmt::kIndexDir));

// A store directory prepared by someone else with packs/ linked to their
// own directory: creating the store there writes nothing through the link.
TEST(StorePermissions, NewStoreDoesNotCreateThroughALinkedPackDirectory) {
  TempDir t;
  const std::string theirs = t.path() + "/theirs";
  fsys::create_directories(theirs);
  fsys::create_directories(t.store());
  ASSERT_EQ(::symlink(theirs.c_str(), (t.store() + "/" + fmt::kPackDir).c_str()), 0);
  auto s = Store::Open(t.store(), TestOptions());
  if (s.ok()) {  // the pack directory is first used at the first commit
    Batch b;
    AddFileChunk(b, 1, RandomBytes(3000, 1));
    Status st = (*s)->Commit(b);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.ToString();
  } else {
    EXPECT_NE(s.status().message().find("symbolic link"), std::string::npos) << s.status().ToString();
  }
  EXPECT_TRUE(fsys::is_empty(theirs));
}

// The path a user names may go through links of their own (a store on
// another disk): the store is opened by its real path.
TEST(StorePermissions, StoreNamedThroughALinkOpensByItsRealPath) {
  TempDir t;
  ExerciseStore(t.store());
  const std::string alias = t.path() + "/alias";
  ASSERT_EQ(::symlink(t.store().c_str(), alias.c_str()), 0);
  auto s = OpenOrDie(alias, TestOptions());
  ASSERT_TRUE(s);
  Batch b;
  AddFileChunk(b, 100, RandomBytes(5000, 100));
  ASSERT_TRUE(s->Commit(b).ok());
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u);
}

// fsck and the mount's check name a link anywhere in the store; --repair
// leaves it (it cannot know what the link stands for) and says what to do.
TEST(StorePermissions, FsckReportsALinkAndLeavesIt) {
  TempDir t;
  ExerciseStore(t.store());
  const std::string victim = t.path() + "/victim", link = t.store() + "/" + fmt::kPackDir + "/planted";
  std::ofstream(victim) << "theirs";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  FsckOptions fo;
  fo.repair = true;
  auto f = s->Fsck(fo);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->Count(FsckProblem::Kind::kLoosePermissions), 1u);
  EXPECT_EQ(f->problems[0].path, link);
  EXPECT_FALSE(f->problems[0].repaired);
  EXPECT_NE(f->problems[0].message.find("symbolic link"), std::string::npos) << f->problems[0].message;
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  EXPECT_TRUE(fsys::is_symlink(link));
  EXPECT_EQ(ReadBytes(victim), "theirs");
  auto loose = FindLoosePaths(t.store(), ::geteuid());
  ASSERT_TRUE(loose.ok());
  ASSERT_EQ(loose->size(), 1u);
  EXPECT_TRUE((*loose)[0].link);
  const std::string m = LoosePathsMessage(t.store(), *loose);
  EXPECT_NE(m.find("remove the symbolic links"), std::string::npos) << m;
}

// OpenNoLinks and its fallback walk: a link in any component is refused
// with ELOOP; real directories, "/" and trailing slashes open.
TEST(NoLinks, ALinkInAnyComponentIsRefused) {
  TempDir t;
  const std::string real = t.path() + "/real";
  fsys::create_directories(real + "/sub");
  std::ofstream(real + "/sub/file") << "x";
  ASSERT_EQ(::symlink(real.c_str(), (t.path() + "/link").c_str()), 0);
  ASSERT_EQ(::symlink((real + "/sub/file").c_str(), (real + "/sub/flink").c_str()), 0);
  for (auto open : {&OpenNoLinks, &OpenNoLinksByWalk}) {
    SCOPED_TRACE(open == &OpenNoLinks ? "openat2" : "walk");
    for (const std::string& ok : {real + "/sub/file", real + "/sub/", std::string("/"), t.path()}) {
      const int fd = open(ok, O_RDONLY, 0);
      EXPECT_GE(fd, 0) << ok << ": " << std::strerror(errno);
      if (fd >= 0) ::close(fd);
    }
    for (const std::string& bad :
         {t.path() + "/link/sub/file", t.path() + "/link", real + "/sub/flink", t.path() + "/link/sub"}) {
      errno = 0;
      EXPECT_EQ(open(bad, O_RDONLY, 0), -1) << bad;
      EXPECT_EQ(errno, ELOOP) << bad;
    }
    // O_CREAT through a linked directory creates nothing.
    EXPECT_EQ(open(t.path() + "/link/new", O_RDWR | O_CREAT | O_EXCL, 0600), -1);
    EXPECT_FALSE(fsys::exists(real + "/new"));
  }
  EXPECT_EQ(FirstLinkOn(t.path() + "/link/sub/file"), t.path() + "/link");
  EXPECT_EQ(FirstLinkOn(real + "/sub/file"), "");
  std::string name;
  EXPECT_EQ(OpenParentNoLinks(t.path() + "/link/x", &name), -1);
  const int dir = OpenParentNoLinks(real + "/sub/file", &name);
  EXPECT_GE(dir, 0);
  EXPECT_EQ(name, "file");
  if (dir >= 0) ::close(dir);
}

}  // namespace
}  // namespace lmc::store::testing
