// A full Ceph pool under a mount (suite RadosFullPool, label ceph: the
// single-host cluster of scripts/ceph-dev.sh, whose manager reports the
// pools' figures; skips without a cluster). The test makes a pool of its
// own with a quota and fills it through a mount: the writer gets ENOSPC at
// once, not a write held until the cluster's operation timeout (two
// minutes) and then EIO with the store's lock lost; what was fsync'd
// before reads back; `df` shows the quota and then nothing left; removing
// files frees the pool, and writing works again without a remount.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lmc/store/rados.h"
#include "mount_util.h"

namespace {

using namespace std::chrono_literals;
using lmc::testing::IsLmcfsMounted;
using lmc::testing::RandomBytes;
using lmc::testing::Shell;
using lmc::testing::StartMount;
using lmc::testing::StopMount;
using lmc::testing::WaitUntil;
using lmc::testing::WriteSynced;

constexpr uint64_t kQuota = 48ull << 20;
constexpr size_t kFile = 4u << 20;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class RadosFullPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = lmc::testing::NoCephCluster(); !why.empty()) GTEST_SKIP() << why;
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not available";
    std::string tmpl = "/tmp/lmcfs_RadosFullPool_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    mnt_ = root_ + "/mnt";
    std::filesystem::create_directories(mnt_);
    pool_ = "lmcfs-full-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}() % 100000);
    ASSERT_EQ(Ceph("osd pool create " + pool_ + " 1 1 replicated --size 1"), 0);
    pool_made_ = true;
    ASSERT_EQ(Ceph("osd pool application enable " + pool_ + " rados"), 0);
    ASSERT_EQ(Ceph("osd pool set-quota " + pool_ + " max_bytes " + std::to_string(kQuota)), 0);
    // The quota is enforced from the manager's figures of the pool.
    ASSERT_TRUE(
        WaitUntil([&] { return Ceph("df -f json | grep -q '\"name\":\"" + pool_ + "\"'") == 0; }, 60s, 500ms))
        << "the cluster's manager reports no figures for pool " << pool_
        << " after 60 s (scripts/ceph-dev.sh starts one: ceph -s)";
  }
  void TearDown() override {
    if (pid_ > 0) {
      Shell("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (HasFailure() && !root_.empty()) Shell("tail -n 25 " + root_ + "/log >&2");
    if (pool_made_) Ceph("osd pool rm " + pool_ + " " + pool_ + " --yes-i-really-really-mean-it");
    if (!root_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
    }
  }
  static int Ceph(const std::string& args) { return Shell("timeout 30 ceph " + args + " >/dev/null 2>&1"); }
  void Mount() {
    pid_ = StartMount(LMC_MOUNT_BIN, "rados:" + pool_ + "/s", mnt_,
                      "log_file=" + root_ + "/log,log_level=info,lease=4,local_dir=" + root_ + "/local");
    ASSERT_GT(pid_, 0);
  }
  void Unmount() {
    StopMount(mnt_, pid_);
    pid_ = -1;
  }
  std::string P(const std::string& name) const { return mnt_ + "/" + name; }
  struct statvfs Df() const {
    struct statvfs s {};
    EXPECT_EQ(::statvfs(mnt_.c_str(), &s), 0) << std::strerror(errno);
    return s;
  }

  std::string root_, mnt_, pool_;
  bool pool_made_ = false;
  pid_t pid_ = -1;
};

TEST_F(RadosFullPool, WritesGetEnospcAtOnceAndRemovingFilesFreesThePool) {
  Mount();
  // df: the quota is the pool's size.
  const struct statvfs empty = Df();
  EXPECT_EQ(uint64_t{empty.f_blocks} * empty.f_frsize, kQuota);
  EXPECT_GT(uint64_t{empty.f_bavail} * empty.f_frsize, kQuota - (4u << 20));

  // Incompressible files of 4 MiB until the pool is full (enforced once
  // the manager reports the pool past its quota, a few seconds late).
  std::vector<std::string> files;
  int err = 0;
  double slowest = 0, failed_after = 0;
  for (int i = 0; i < 100 && err == 0; ++i) {
    const std::string data = RandomBytes(kFile, 100 + i);
    const auto t0 = std::chrono::steady_clock::now();
    err = WriteSynced(P("f" + std::to_string(i)), data);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (err == 0) {
      files.push_back(data);
      slowest = std::max(slowest, took);
    } else {
      failed_after = took;
    }
    if (err == 0 && files.size() * kFile > kQuota) std::this_thread::sleep_for(1s);  // the flag comes
  }
  ASSERT_EQ(err, ENOSPC) << "the writer got " << std::strerror(err) << " after " << files.size()
                         << " files, want ENOSPC";
  EXPECT_LT(failed_after, 20.0) << "the write into the full pool was held, not refused";
  EXPECT_LT(slowest, 20.0);
  ASSERT_GE(files.size() * kFile, kQuota) << "ENOSPC before the pool reached its quota";
  ASSERT_TRUE(IsLmcfsMounted(mnt_));
  const std::string failed = "f" + std::to_string(files.size());

  // While full: df says nothing is left, and every fsync'd file reads back.
  EXPECT_TRUE(WaitUntil([&] { return Df().f_bavail == 0; }, 10s, 250ms)) << Df().f_bavail << " blocks left";
  for (size_t i = 0; i < files.size(); ++i)
    EXPECT_TRUE(ReadAll(P("f" + std::to_string(i))) == files[i]) << "f" << i;
  // The file that hit the wall holds a prefix of its bytes or nothing.
  const std::string want_failed = RandomBytes(kFile, 100 + files.size());
  const std::string got_failed = ReadAll(P(failed));
  EXPECT_TRUE(got_failed.size() <= want_failed.size() &&
              got_failed == want_failed.substr(0, got_failed.size()))
      << failed << " holds other bytes";

  // Removing files is what frees a full pool; writing works again in the
  // same mount (its lock was kept), once the manager reports the space.
  ASSERT_EQ(::unlink(P(failed).c_str()), 0) << std::strerror(errno);
  for (size_t i = 2; i < files.size(); ++i)
    ASSERT_EQ(::unlink(P("f" + std::to_string(i)).c_str()), 0) << "f" << i << ": " << std::strerror(errno);
  files.resize(2);
  const std::string after = RandomBytes(kFile, 7);
  int again = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        again = WriteSynced(P("after"), after);
        if (again != 0) ::unlink(P("after").c_str());
        return again == 0;
      },
      60s, 1s))
      << "still " << std::strerror(again) << " 60 s after the files were removed";
  EXPECT_TRUE(WaitUntil([&] { return Df().f_bavail > 0; }, 10s, 250ms));
  const std::string log = ReadAll(root_ + "/log");
  EXPECT_NE(log.find("the Ceph pool is full"), std::string::npos) << "the log does not say why";
  EXPECT_EQ(log.find("lost the store's lock"), std::string::npos) << log;

  // A remount serves the same bytes.
  Unmount();
  Mount();
  for (size_t i = 0; i < files.size(); ++i)
    EXPECT_TRUE(ReadAll(P("f" + std::to_string(i))) == files[i]) << "f" << i;
  EXPECT_TRUE(ReadAll(P("after")) == after);
  Unmount();
}

}  // namespace
