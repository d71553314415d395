// Monitors out of reach under a mount of a RADOS store (suite
// RadosMonitorsAway, label ceph, run alone: it stops the monitor of
// scripts/ceph-dev.sh's single-host cluster for about 40 s, and skips
// against any other cluster). `df` asks the monitors for the pool's space;
// while they do not answer, statfs fails with EIO after the client's
// monitor timeout (30 s), that failure is kept 5 s like an answer (so a
// monitoring agent calling statfs every second does not queue a 30 s wait
// per call), the log says so once, and says once when they answer again.
// Files read back meanwhile: data goes to the OSDs, not the monitors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "mount_util.h"

namespace {

using namespace std::chrono_literals;
namespace lt = lmc::testing;

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class RadosMonitorsAway : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = lmc::testing::NoCephCluster(); !why.empty()) GTEST_SKIP() << why;
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not available";
    // Only the dev cluster's monitor is ever stopped: its pid file sits
    // next to its ceph.conf (scripts/ceph-dev.sh).
    const std::filesystem::path pid_file =
        std::filesystem::path(std::getenv("CEPH_CONF")).parent_path() / "run" / "mon.a.pid";
    std::ifstream pf(pid_file);
    if (!(pf >> mon_) || mon_ <= 0 || kill(mon_, 0) != 0)
      GTEST_SKIP() << "no running monitor of scripts/ceph-dev.sh's cluster (" << pid_file
                   << "); this test stops one and runs against no other";
    std::string tmpl = "/tmp/lmcfs_RadosMonitorsAway_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    mnt_ = root_ + "/mnt";
    std::filesystem::create_directories(mnt_);
    store_ = "rados:lmcfs/monitors-" + std::to_string(getpid()) + "-" +
             std::to_string(std::random_device{}() % 100000);
  }
  void TearDown() override {
    if (mon_stopped_) kill(mon_, SIGCONT);
    if (pid_ > 0) {
      lt::Shell("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (HasFailure() && !root_.empty()) lt::Shell("tail -n 25 " + root_ + "/log >&2");
    if (!root_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
    }
  }
  // statvfs of the mount: its errno (0 when it answered) and seconds taken.
  int Df(struct statvfs* s, double* took) const {
    const auto t0 = std::chrono::steady_clock::now();
    const int r = ::statvfs(mnt_.c_str(), s) == 0 ? 0 : errno;
    *took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  std::string root_, mnt_, store_;
  pid_t mon_ = -1, pid_ = -1;
  bool mon_stopped_ = false;
};

TEST_F(RadosMonitorsAway, DfFailsOncePerSpellAndReadsGoOn) {
  pid_ = lt::StartMount(LMC_MOUNT_BIN, store_, mnt_,
                        "log_file=" + root_ + "/log,log_level=info,local_dir=" + root_ + "/local");
  ASSERT_GT(pid_, 0);
  const std::string data = lt::RandomBytes(4u << 20, 31);
  ASSERT_EQ(lt::WriteSynced(mnt_ + "/a", data), 0);
  struct statvfs s {};
  double took = 0;
  ASSERT_EQ(Df(&s, &took), 0);
  ASSERT_GT(s.f_blocks, 0u) << "the cluster's manager reports no figures for pool lmcfs (ceph -s)";

  ASSERT_EQ(kill(mon_, SIGSTOP), 0) << std::strerror(errno);
  mon_stopped_ = true;
  std::this_thread::sleep_for(6s);  // past the 5 s that an answer is kept
  // The first statfs waits for the monitors (rados_mon_op_timeout, 30 s)
  // and fails; the next ones, within 5 s, fail at once.
  EXPECT_EQ(Df(&s, &took), EIO);
  EXPECT_LT(took, 45.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Df(&s, &took), EIO);
    EXPECT_LT(took, 2.0) << "statfs " << i + 2 << " asked the monitors again";
  }
  EXPECT_TRUE(FileBytes(mnt_ + "/a") == data) << "a file did not read back while the monitors were away";

  ASSERT_EQ(kill(mon_, SIGCONT), 0);
  mon_stopped_ = false;
  EXPECT_TRUE(lt::WaitUntil([&] { return Df(&s, &took) == 0 && s.f_blocks > 0; }, 30s, 1s))
      << "df still fails 30 s after the monitors came back";

  const std::string log = FileBytes(root_ + "/log");
  EXPECT_EQ(Count(log, "statfs on the mount fails (EIO) until the monitors answer"), 1u) << log;
  EXPECT_EQ(Count(log, "the monitors answer again"), 1u) << log;
  lt::StopMount(mnt_, pid_);
  pid_ = -1;
}

}  // namespace
