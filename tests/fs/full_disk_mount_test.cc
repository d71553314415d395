// A full backing disk (issue 16, "Full disk"): the store on a small real
// filesystem (a 48 MiB tmpfs) that a checkpoint writer fills. The writer
// gets ENOSPC, not EIO and not a hang; the mount stays up and serves what
// was written before; the file that hit the wall holds a prefix of its
// bytes or nothing, never other bytes; deleting files works on the full
// disk (the store keeps a reserve for the index: StoreOptions::space_reserve)
// and gives their space back at once (holes punched), so that writing works
// again without lmcfs-gc; fsck is clean and a remount serves the same bytes.
// Also: deleting, truncating or renaming over the very file whose data hit
// the wall; the disk filled by another program (the reserve gone too); the
// index's own writes failing (RocksDB's background error, resumed without a
// remount); and the backing filesystem going read-only under the mount.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mount_util.h"

namespace lmc::testing {
namespace {

using namespace std::chrono_literals;

// Helpers of the MountFullDisk* suites: the store lives in small_, a small
// filesystem the fixture mounts.
class FullDiskTest : public MountTest {
 protected:
  FullDiskTest() { options_.mount_in_setup = false; }

  static int WriteAll(int fd, const std::string& data) {
    for (size_t off = 0; off < data.size();) {
      const ssize_t n = ::write(fd, data.data() + off, std::min<size_t>(data.size() - off, 1 << 20));
      if (n < 0) return errno;
      off += static_cast<size_t>(n);
    }
    return 0;
  }
  uint64_t Avail() const {
    struct statvfs s {};
    if (::statvfs(small_.c_str(), &s) != 0) return 0;
    return uint64_t{s.f_bavail} * s.f_frsize;
  }
  // Another program fills small_ to its last block with a plain file next
  // to the store: the store's reserve is gone too.
  void Hog() {
    const std::string path = small_ + "/hog";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::string block(1 << 20, 'h');
    for (size_t piece : {size_t{1} << 20, size_t{4096}, size_t{1}})
      while (::write(fd, block.data(), piece) == static_cast<ssize_t>(piece)) {
      }
    ::close(fd);
    EXPECT_LT(Avail(), 64u << 10) << "the other program left room";
  }
  void Unhog() { ASSERT_EQ(::unlink((small_ + "/hog").c_str()), 0) << std::strerror(errno); }
  std::string Log() const { return ReadFile(root_ + "/log"); }
  void ExpectFsckClean() {
    const std::string out = root_ + "/fsck.out";
    EXPECT_EQ(Sh(std::string(LMC_TOOLS_BIN_DIR) + "/lmcfs-fsck " + store_ + " >" + out + " 2>&1"), 0)
        << ReadFile(out);
  }

  // FILES read back; after an unmount, lmcfs-fsck is clean and, mounted
  // again, they read back the same.
  void ExpectIntactAfterRemount(const std::map<std::string, std::string>& files) {
    for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
    Unmount();
    ExpectFsckClean();
    Mount();
    for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
  }

  std::string small_;
};

class MountFullDisk : public FullDiskTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    small_ = root_ + "/small";
    std::filesystem::create_directories(small_);
    if (::mount("tmpfs", small_.c_str(), "tmpfs", 0, "size=48m,mode=0700") != 0)
      GTEST_SKIP() << "cannot mount a 48 MiB tmpfs for the store (" << std::strerror(errno)
                   << "): this test needs root";
    small_mounted_ = true;
    store_ = small_ + "/store";
    Mount();
  }
  void TearDown() override {
    Unmount();
    if (small_mounted_) ::umount2(small_.c_str(), MNT_DETACH);
    MountTest::TearDown();
  }

  // A writer that hit the wall: its descriptor (still open), the bytes it
  // meant to write, and the errno of the write or fsync that failed.
  struct Wall {
    int fd = -1;
    int err = 0;
    std::string data;
  };
  // Writes up to 96 MiB of random bytes to NAME through one descriptor,
  // then fsyncs: the first write or fsync that fails ends it.
  Wall HitTheWall(const std::string& name, uint64_t seed) {
    Wall w;
    w.data = RandomBytes(96 << 20, seed);
    w.fd = ::open(P(name).c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) {
      w.err = errno;
      return w;
    }
    w.err = WriteAll(w.fd, w.data);
    if (w.err == 0 && ::fsync(w.fd) != 0) w.err = errno;
    return w;
  }

  bool small_mounted_ = false;
};

TEST_F(MountFullDisk, EnospcThenDeletesGiveTheSpaceBackWithoutGc) {
  constexpr size_t kFile = 4 << 20;  // random: stored about as large
  std::map<std::string, std::string> files;
  std::string failed_name, failed_data;
  int err = 0;
  for (int i = 0; i < 40 && err == 0; ++i) {
    const std::string name = "f" + std::to_string(i), data = RandomBytes(kFile, 1000 + i);
    err = WriteSynced(P(name), data);
    if (err == 0) {
      files[name] = data;
    } else {
      failed_name = name;
      failed_data = data;
    }
  }
  ASSERT_EQ(err, ENOSPC) << "the writer got " << std::strerror(err) << ", want ENOSPC";
  ASSERT_GE(files.size(), 5u);
  ASSERT_TRUE(IsMounted(mnt_));
  for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
  // What hit the wall: nothing, or a prefix of its bytes.
  const std::string got = ReadFile(P(failed_name));
  EXPECT_LE(got.size(), failed_data.size());
  EXPECT_EQ(got, failed_data.substr(0, got.size())) << failed_name << " holds other bytes";

  // Deletes work on the full disk, and their records' blocks come back at
  // once, without compaction (gc=auto could copy; nothing needs to).
  const uint64_t avail_full = Avail();
  std::vector<std::string> names;
  for (const auto& [name, data] : files) names.push_back(name);
  for (size_t i = 0; i < names.size(); i += 2) {
    ASSERT_EQ(::unlink(P(names[i]).c_str()), 0) << names[i] << ": " << std::strerror(errno);
    files.erase(names[i]);
  }
  const uint64_t freed = (names.size() + 1) / 2 * kFile;
  EXPECT_TRUE(WaitUntil([&] { return Avail() >= avail_full + freed - (1 << 20); }, 10s, 50ms))
      << Avail() << " bytes free, " << avail_full << " when full; deleted " << freed;

  // The file that hit the wall goes too (its uncommitted data is dropped).
  ASSERT_EQ(::unlink(P(failed_name).c_str()), 0) << std::strerror(errno);

  // Writing works again, without lmcfs-gc.
  for (int j = 0; j < 2; ++j) {
    const std::string name = "again" + std::to_string(j), data = RandomBytes(kFile, 2000 + j);
    ASSERT_EQ(WriteSynced(P(name), data), 0) << name;
    files[name] = data;
  }
  ExpectIntactAfterRemount(files);
}

// The very file whose data hit the wall can be unlinked (open or closed),
// truncated to 0 and renamed over: what it could not commit is dropped,
// not committed first, and what it did commit gives its space back.
TEST_F(MountFullDisk, TheFileThatHitTheWallCanBeDeletedTruncatedOrReplaced) {
  // Each writer commits two 16 MiB batches (FsOptions::batch_limit) of the
  // 44 MiB free before the third fails: at least this much comes back.
  constexpr uint64_t kFreed = 16 << 20;
  const std::string keep = RandomBytes(2 << 20, 1), src = RandomBytes(1 << 20, 2);
  ASSERT_EQ(WriteSynced(P("keep"), keep), 0);
  ASSERT_EQ(WriteSynced(P("src"), src), 0);
  auto gave_back = [&](uint64_t full) {
    return WaitUntil([&] { return Avail() >= full + kFreed; }, 10s, 50ms);
  };

  // 1. Unlinked while still open: its bytes stay readable through the
  // descriptor, close succeeds (no name left to make durable), and the
  // last release gives its space back.
  {
    Wall w = HitTheWall("w1", 11);
    ASSERT_EQ(w.err, ENOSPC) << std::strerror(w.err);
    const uint64_t full = Avail();
    ASSERT_EQ(::unlink(P("w1").c_str()), 0) << std::strerror(errno);
    // Read through the descriptor: its bytes, or ENOSPC where a chunk not
    // committed and no longer cached would have to be committed first.
    std::string head(1 << 20, '\0');
    const ssize_t n = ::pread(w.fd, head.data(), head.size(), 0);
    const int rerr = n < 0 ? errno : 0;
    EXPECT_TRUE(n == static_cast<ssize_t>(head.size()) || rerr == ENOSPC) << n << " " << std::strerror(rerr);
    if (n == static_cast<ssize_t>(head.size())) {
      EXPECT_TRUE(head == w.data.substr(0, head.size()));
    }
    EXPECT_EQ(::close(w.fd), 0) << std::strerror(errno);
    EXPECT_TRUE(gave_back(full)) << Avail() << " bytes free, " << full << " when full";
  }
  // 2. Closed (its close fails: the data is not committed), then truncated
  // to 0 by an open with O_TRUNC.
  {
    Wall w = HitTheWall("w2", 12);
    ASSERT_EQ(w.err, ENOSPC) << std::strerror(w.err);
    const int rc = ::close(w.fd) == 0 ? 0 : errno;
    EXPECT_TRUE(rc == 0 || rc == ENOSPC) << std::strerror(rc);
    const uint64_t full = Avail();
    const int fd = ::open(P("w2").c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "truncating the file that hit the wall: " << std::strerror(errno);
    EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
    struct stat st {};
    ASSERT_EQ(::stat(P("w2").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
    EXPECT_TRUE(gave_back(full)) << Avail() << " bytes free, " << full << " when full";
  }
  // 3. Another file renamed over it.
  {
    Wall w = HitTheWall("w3", 13);
    ASSERT_EQ(w.err, ENOSPC) << std::strerror(w.err);
    ::close(w.fd);
    const uint64_t full = Avail();
    ASSERT_EQ(::rename(P("src").c_str(), P("w3").c_str()), 0) << std::strerror(errno);
    EXPECT_TRUE(FileEquals(P("w3"), src));
    EXPECT_TRUE(gave_back(full)) << Avail() << " bytes free, " << full << " when full";
  }
  // 4. Unlinked after close.
  {
    Wall w = HitTheWall("w4", 14);
    ASSERT_EQ(w.err, ENOSPC) << std::strerror(w.err);
    ::close(w.fd);
    const uint64_t full = Avail();
    ASSERT_EQ(::unlink(P("w4").c_str()), 0) << std::strerror(errno);
    EXPECT_TRUE(gave_back(full)) << Avail() << " bytes free, " << full << " when full";
  }
  // Writing works again; nothing is half-written.
  const std::string again = RandomBytes(4 << 20, 3);
  ASSERT_EQ(WriteSynced(P("again"), again), 0);
  Unmount();
  ExpectFsckClean();
  Mount();
  EXPECT_TRUE(FileEquals(P("keep"), keep));
  EXPECT_TRUE(FileEquals(P("w3"), src));
  EXPECT_TRUE(FileEquals(P("again"), again));
  EXPECT_TRUE(FileEquals(P("w2"), ""));
  EXPECT_FALSE(std::filesystem::exists(P("w1")));
  EXPECT_FALSE(std::filesystem::exists(P("w4")));
}

// Another program fills the disk to its last block, so the store's
// reserve is gone too: writers through the mount get ENOSPC, reads work,
// a delete works or fails with ENOSPC (never EIO), and once the other
// program's file is gone deleting and writing work again, without a
// remount or lmcfs-gc.
TEST_F(MountFullDisk, AnotherProgramFillsTheDisk) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "f" + std::to_string(i), data = RandomBytes(4 << 20, 100 + i);
    ASSERT_EQ(WriteSynced(P(name), data), 0) << name;
    files[name] = data;
  }
  Hog();
  if (HasFatalFailure()) return;
  const int werr = WriteSynced(P("new"), RandomBytes(4 << 20, 200));
  EXPECT_EQ(werr, ENOSPC) << std::strerror(werr);
  ASSERT_TRUE(IsMounted(mnt_));
  for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
  const int uerr = ::unlink(P("f0").c_str()) == 0 ? 0 : errno;
  EXPECT_TRUE(uerr == 0 || uerr == ENOSPC)
      << "unlink on a disk full to the last block: " << std::strerror(uerr);
  Unhog();
  if (uerr != 0) {
    ASSERT_EQ(::unlink(P("f0").c_str()), 0) << "once there is room: " << std::strerror(errno);
  }
  files.erase("f0");
  const std::string again = RandomBytes(4 << 20, 201);
  ASSERT_EQ(WriteSynced(P("again"), again), 0);
  files["again"] = again;
  ExpectIntactAfterRemount(files);
}

// The index's own writes hit the full disk: with the disk full to the last
// block, metadata operations (creates with long names, xattrs) go on until
// an index write fails: the index journal's append, or RocksDB's (its WAL
// append, taken back from the journal; a flush, RocksDB's background
// error, after which it takes no writes until resumed). Metadata writes
// then fail with ENOSPC (a small one may still fit), never another error;
// reads are served; once there is room every write works again without a
// remount (DB::Resume where RocksDB stopped); fsck is clean afterwards and
// every operation that returned 0 is there after a remount.
TEST_F(MountFullDisk, TheIndexRunsOutOfSpaceAndResumesWithoutARemount) {
  const std::string f0 = RandomBytes(4 << 20, 300);
  ASSERT_EQ(WriteSynced(P("f0"), f0), 0);
  Hog();
  if (HasFatalFailure()) return;
  const std::string value(2048, 'v');
  std::vector<std::string> made;
  int err = 0;
  for (int i = 0; i < 20000 && err == 0; ++i) {
    const std::string name = "m" + std::to_string(i) + "_" + std::string(200, 'n');
    const int fd = ::open(P(name).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      err = errno;
      break;
    }
    ::close(fd);
    made.push_back(name);
    if (::setxattr(P(name).c_str(), "user.tag", value.data(), value.size(), 0) != 0) err = errno;
  }
  ASSERT_EQ(err, ENOSPC) << "after " << made.size() << " files: " << std::strerror(err);
  // An index write itself failed (not lmcfs's reserve check).
  const std::string log = Log();
  const bool rocks_stopped = log.find("the index (RocksDB) stopped accepting writes") != std::string::npos;
  EXPECT_TRUE(rocks_stopped || log.find("index commit failed: No space") != std::string::npos) << log;
  // While full: metadata writes fail with ENOSPC or fit, reads are served.
  std::vector<std::string> dirs;
  for (int i = 0; i < 20; ++i) {
    const std::string d = "d" + std::to_string(i) + "_" + std::string(200, 'd');
    const int merr = ::mkdir(P(d).c_str(), 0755) == 0 ? 0 : errno;
    EXPECT_TRUE(merr == 0 || merr == ENOSPC) << std::strerror(merr);
    if (merr == 0) dirs.push_back(d);
  }
  EXPECT_LT(dirs.size(), 20u) << "the disk had room for every mkdir";
  EXPECT_TRUE(FileEquals(P("f0"), f0));
  for (const std::string& name : made) EXPECT_TRUE(std::filesystem::exists(P(name))) << name;
  // Room again: the next write works (and resumes RocksDB where it stopped).
  Unhog();
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0) << std::strerror(errno);
  dirs.push_back("d");
  if (rocks_stopped) {
    EXPECT_NE(Log().find("the index takes writes again"), std::string::npos);
  }
  const std::string again = RandomBytes(4 << 20, 301);
  ASSERT_EQ(WriteSynced(P("again"), again), 0);
  Unmount();
  ExpectFsckClean();
  Mount();
  EXPECT_TRUE(FileEquals(P("f0"), f0));
  EXPECT_TRUE(FileEquals(P("again"), again));
  for (const std::string& d : dirs) EXPECT_TRUE(std::filesystem::is_directory(P(d))) << d;
  for (const std::string& name : made) EXPECT_TRUE(std::filesystem::exists(P(name))) << name;
}

// The backing filesystem goes read-only under the mount. A plain
// `mount -o remount,ro` is refused while lmcfs holds files open for
// writing (EBUSY: the kernel counts the mount's writers), so the forced
// kind is tested: ext4 with errors=remount-ro after an error (sysfs
// trigger_fs_error). Writes get EROFS with a log line saying what to do,
// reads keep working, nothing crashes; after unmounting lmcfs, e2fsck and
// mounting the filesystem again read-write, a remount of lmcfs serves
// every fsynced file and fsck is clean.
class MountFullDiskReadOnly : public FullDiskTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (Sh("command -v mkfs.ext4 >/dev/null && command -v e2fsck >/dev/null") != 0)
      GTEST_SKIP() << "mkfs.ext4 and e2fsck are needed";
    image_ = root_ + "/ext4.img";
    small_ = root_ + "/small";
    std::filesystem::create_directories(small_);
    if (Sh("truncate -s 96M " + image_ + " && mkfs.ext4 -q -F " + image_ + " >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "cannot make an ext4 image";
    if (!MountImage())
      GTEST_SKIP() << "cannot loop-mount an ext4 image: this test needs root and loop devices";
    const std::string dev = Trim(Output("findmnt -n -o SOURCE " + small_));
    trigger_ = "/sys/fs/ext4/" + dev.substr(dev.rfind('/') + 1) + "/trigger_fs_error";
    if (::access(trigger_.c_str(), W_OK) != 0) GTEST_SKIP() << "no " << trigger_ << " on this kernel";
    store_ = small_ + "/store";
    Mount();
  }
  void TearDown() override {
    Unmount();
    if (image_mounted_) ::umount2(small_.c_str(), MNT_DETACH);
    MountTest::TearDown();
  }
  bool MountImage() {
    image_mounted_ = Sh("mount -o loop,errors=remount-ro " + image_ + " " + small_) == 0;
    return image_mounted_;
  }
  std::string Output(const std::string& cmd) {
    const std::string out = root_ + "/cmd.out";
    Sh(cmd + " >" + out + " 2>&1");
    return ReadFile(out);
  }
  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  // ext4 forced read-only (emergency_ro) does not set ST_RDONLY: a file
  // it refuses to create tells.
  bool ReadOnlyNow() const {
    const int fd = ::open((small_ + "/probe").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
    return fd < 0 && errno == EROFS;
  }

  std::string image_, trigger_;
  bool image_mounted_ = false;
};

TEST_F(MountFullDiskReadOnly, WritesGetErofsReadsWorkAndARemountRecovers) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "f" + std::to_string(i), data = RandomBytes(3 << 20, 400 + i);
    ASSERT_EQ(WriteSynced(P(name), data), 0) << name;
    files[name] = data;
  }
  // A writer with bytes not yet fsynced when the filesystem goes.
  const int wfd = ::open(P("open").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(wfd, 0);
  ASSERT_EQ(WriteAll(wfd, RandomBytes(2 << 20, 410)), 0);

  EXPECT_NE(Sh("mount -o remount,ro " + small_ + " 2>/dev/null"), 0)
      << "a plain read-only remount went through while lmcfs writes there";
  ASSERT_EQ(Sh("echo 1 > " + trigger_), 0);
  ASSERT_TRUE(WaitUntil([&] { return ReadOnlyNow(); }, 10s, 50ms)) << "ext4 did not go read-only";

  // Writes: EROFS, never EIO or a hang.
  EXPECT_EQ(WriteSynced(P("new"), RandomBytes(1 << 20, 420)), EROFS);
  const int ferr = ::fsync(wfd) == 0 ? 0 : errno;
  EXPECT_EQ(ferr, EROFS) << std::strerror(ferr);
  ::close(wfd);
  const int uerr = ::unlink(P("f0").c_str()) == 0 ? 0 : errno;
  EXPECT_EQ(uerr, EROFS) << std::strerror(uerr);
  const int merr = ::mkdir(P("d").c_str(), 0755) == 0 ? 0 : errno;
  EXPECT_EQ(merr, EROFS) << std::strerror(merr);
  EXPECT_NE(Log().find("went read-only"), std::string::npos) << Log();
  // Reads: as before.
  ASSERT_TRUE(IsMounted(mnt_));
  for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;

  // Unmount: the daemon exits (its last commit fails: status 8, logged).
  mounted_ = false;
  Sh("fusermount3 -u -z " + mnt_);
  int status = 0;
  ASSERT_TRUE(WaitUntil([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 30s, 50ms))
      << "the daemon did not exit";
  pid_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 8)) << status;
  // The operator repairs the filesystem and mounts it read-write again.
  ASSERT_EQ(::umount2(small_.c_str(), 0), 0) << std::strerror(errno);
  image_mounted_ = false;
  EXPECT_LE(Sh("e2fsck -fy " + image_ + " >/dev/null 2>&1"), 1);
  ASSERT_TRUE(MountImage());
  ExpectFsckClean();
  Mount();
  for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
  const std::string again = RandomBytes(2 << 20, 430);
  ASSERT_EQ(WriteSynced(P("again"), again), 0);
  EXPECT_TRUE(FileEquals(P("again"), again));
}

}  // namespace
}  // namespace lmc::testing
