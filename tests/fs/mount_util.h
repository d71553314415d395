// Helpers for tests that run a real lmcfs mount (mount.lmcfs -f as a child
// process): start it and wait for the mount, unmount and reap the daemon;
// and MountTest, the one fixture of the Mount* suites. Header-only, since
// two test binaries include it (lmc_fs_tests, lmc_tools_tests); each
// defines LMC_MOUNT_BIN, the path of the mount.lmcfs it tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "lmc/store/store.h"

#ifndef LMC_MOUNT_BIN
#error "mount_util.h needs LMC_MOUNT_BIN (the path of mount.lmcfs) defined by the test target"
#endif

namespace lmc::testing {

// Runs a shell command; its exit status (128 if it did not exit).
inline int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// N pseudo-random (incompressible) bytes, the same for the same seed.
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(s.data() + i, &v, 8);
  }
  return s;
}

// Writes DATA to PATH (created or truncated) in writes of 1 MiB and fsyncs
// it: 0, or the errno of the first write, fsync or close that failed.
inline int WriteSynced(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  for (size_t off = 0; off < data.size() && err == 0;) {
    const ssize_t n = ::write(fd, data.data() + off, std::min<size_t>(data.size() - off, 1 << 20));
    if (n < 0)
      err = errno;
    else
      off += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// Why the tests of a store in RADOS (label ceph) cannot run here ("" where
// they can): they need the cluster CEPH_CONF names (scripts/ceph-dev.sh).
inline std::string NoCephCluster() {
  const char* conf = std::getenv("CEPH_CONF");
  if (!conf || !std::filesystem::exists(conf))
    return "no Ceph cluster: CEPH_CONF is unset or names no file (scripts/ceph-dev.sh start)";
  return "";
}

inline bool IsLmcfsMounted(const std::string& dir) {
  std::ifstream f("/proc/self/mounts");
  std::string line;
  while (std::getline(f, line))
    if (line.find(" " + dir + " fuse.lmcfs ") != std::string::npos) return true;
  return false;
}

// Starts `bin store mnt -f -o options` and waits up to 10 s for the mount.
// Returns the daemon's pid, or -1 after recording a test failure.
inline pid_t StartMount(const char* bin, const std::string& store, const std::string& mnt,
                        const std::string& options) {
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return -1;
  }
  if (pid == 0) {
    execl(bin, bin, store.c_str(), mnt.c_str(), "-f", "-o", options.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 200; i++) {
    if (IsLmcfsMounted(mnt)) return pid;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "mount.lmcfs exited with status " << status;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "mount did not appear in 10 s";
  return pid;
}

// Unmounts (lazily) and waits up to 30 s for the daemon to exit 0 (it
// flushes and closes the store); kills it and records a failure otherwise.
inline void StopMount(const std::string& mnt, pid_t pid) {
  Shell("fusermount3 -u -z " + mnt + " 2>/dev/null");
  if (pid <= 0) return;
  for (int i = 0; i < 600; i++) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "daemon status " << status;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ADD_FAILURE() << "daemon did not exit after unmount";
}

// Polls done() every `poll` until it returns true (then true) or `timeout`
// has passed (then false).
inline bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds poll) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

// What a suite chooses of MountTest (its constructor sets options_); the
// defaults suit most.
struct MountTestOptions {
  // Mount options after log_file=ROOT/log,log_level=info; empty: none.
  std::string mount_options;
  // false: SetUp only makes the directories; the test mounts itself.
  bool mount_in_setup = true;
  // Mount() also waits (10 s) for the daemon's STORE/control.sock.
  bool wait_for_control_socket = false;
};

// The fixture of the Mount* suites. SetUp skips the test where FUSE is not
// usable, makes ROOT = /tmp/lmcfs_<suite>_XXXXXX with store_ = ROOT/store,
// mnt_ = ROOT/mnt, plain_ = ROOT/plain (the same work outside lmcfs, to
// compare with) and mounts store_ at mnt_ (mount.lmcfs -f, logging to
// ROOT/log). TearDown always unmounts, prints the log's tail when the test
// failed, and removes ROOT. Mount, Unmount and the members belong to the
// test's thread; the static helpers may run on any thread.
class MountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/fuse", R_OK | W_OK) != 0)
      GTEST_SKIP() << "/dev/fuse is not available: no real mount here";
    if (Sh("command -v fusermount3 >/dev/null") != 0) GTEST_SKIP() << "fusermount3 (fuse3) is not installed";
    // A parameterized suite's name has a '/' (Prefix/Suite).
    std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    std::replace(suite.begin(), suite.end(), '/', '_');
    std::string tmpl = "/tmp/lmcfs_" + suite + "_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    store_ = root_ + "/store";
    mnt_ = root_ + "/mnt";
    plain_ = root_ + "/plain";
    std::filesystem::create_directories(mnt_);
    std::filesystem::create_directories(plain_);
    if (options_.mount_in_setup) Mount();
  }

  void TearDown() override {
    if (root_.empty()) return;
    Unmount();
    if (HasFailure()) Sh("tail -20 " + root_ + "/log >&2");
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  // Mounts store_ at mnt_ with the current mount options.
  void Mount() {
    ASSERT_FALSE(mounted_);
    std::string options = "log_file=" + root_ + "/log,log_level=info";
    if (!options_.mount_options.empty()) options += "," + options_.mount_options;
    pid_ = StartMount(LMC_MOUNT_BIN, store_, mnt_, options);
    ASSERT_GT(pid_, 0);
    mounted_ = true;
    ASSERT_TRUE(IsMounted(mnt_)) << "mount did not appear";
    if (options_.wait_for_control_socket) {
      // The control socket starts right after the mount appears.
      const std::string sock = store_ + "/control.sock";
      ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(sock); }, std::chrono::seconds(10),
                            std::chrono::milliseconds(50)))
          << "no control socket in 10 s";
    }
  }
  // Unmounts and waits for the daemon (which flushes and closes the store).
  void Unmount() {
    if (!mounted_) return;
    mounted_ = false;
    StopMount(mnt_, pid_);
    pid_ = -1;
  }
  void Remount() {
    Unmount();
    Mount();
  }
  // Remounts with other mount options, kept for later mounts.
  void Remount(const std::string& mount_options) {
    Unmount();
    options_.mount_options = mount_options;
    Mount();
  }

  // NAME's path inside the mount.
  std::string P(const std::string& name) const { return mnt_ + "/" + name; }

  static int Sh(const std::string& cmd) { return Shell(cmd); }
  static bool IsMounted(const std::string& dir) { return IsLmcfsMounted(dir); }

  // Whether python3 can import MODULES ("torch, safetensors").
  static bool PythonHas(const std::string& modules) {
    return Sh("python3 -c 'import " + modules + "' 2>/dev/null") == 0;
  }
  // Writes TEXT to ROOT/NAME; its path.
  std::string WriteScript(const std::string& name, const std::string& text) {
    const std::string path = root_ + "/" + name;
    WriteFile(path, text);
    return path;
  }
  // python3 SCRIPT ARGS; its exit status.
  static int Python(const std::string& script, const std::string& args) {
    return Sh("python3 " + script + " " + args);
  }

  static void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.close();
    ASSERT_TRUE(f.good()) << "writing " << path;
  }
  // The whole file; empty if it cannot be read.
  static std::string ReadFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Whether PATH holds exactly WANT; on failure says where they differ
  // (not the bytes: files here run to megabytes).
  static ::testing::AssertionResult FileEquals(const std::string& path, const std::string& want) {
    const std::string got = ReadFile(path);
    if (got == want) return ::testing::AssertionSuccess();
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
    return ::testing::AssertionFailure() << path << ": " << got.size() << " bytes, want " << want.size()
                                         << "; first difference at byte " << i;
  }

  // sha256 listing of every regular file under DIR (relative names).
  std::string Digest(const std::string& dir) {
    const std::string out = root_ + "/digest.txt";
    EXPECT_EQ(Sh("cd " + dir + " && find . -type f -print0 | sort -z | xargs -0 -r sha256sum > " + out), 0);
    return ReadFile(out);
  }
  // The tree SUB (relative; "" for all) is the same on the mount as in the
  // plain directory, and not empty.
  void ExpectSame(const std::string& sub) {
    const std::string want = Digest(plain_ + "/" + sub);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(Digest(mnt_ + "/" + sub), want) << sub;
  }

  // The virtual xattr user.lmcfs.NAME of PATH, as a number.
  static uint64_t Xattr(const std::string& path, const std::string& name) {
    char buf[64] = {};
    ssize_t n = getxattr(path.c_str(), ("user.lmcfs." + name).c_str(), buf, sizeof buf - 1);
    EXPECT_GT(n, 0) << path << " " << name;
    return n > 0 ? std::stoull(std::string(buf, static_cast<size_t>(n))) : 0;
  }
  // Waits (120 s at most) until the daemon's background rebases are done:
  // the mount root's user.lmcfs.pending_rebases reads 0.
  void WaitRebases() {
    if (!WaitUntil([&] { return Xattr(mnt_, "pending_rebases") == 0; }, std::chrono::seconds(120),
                   std::chrono::milliseconds(100)))
      ADD_FAILURE() << "background rebases still pending after 120 s";
  }
  // Waits (10 s at most) until no process holds the store's lock (a daemon
  // flushed and exited).
  void WaitStoreFree() {
    WaitUntil([&] { return Sh("fuser " + store_ + "/LOCK >/dev/null 2>&1") != 0; }, std::chrono::seconds(10),
              std::chrono::milliseconds(100));
  }

  // The store, opened while unmounted; null after recording a failure.
  std::unique_ptr<store::Store> OpenStore() {
    auto s = store::Store::Open(store_, {});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  static void ExpectFsckClean(store::Store& s) {
    auto f = s.Fsck({});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::string msgs;
    for (const auto& m : f->Messages()) msgs += m + "\n";
    EXPECT_EQ(f->errors(), 0u) << msgs;
  }

  MountTestOptions options_;
  std::string root_, store_, mnt_, plain_;
  pid_t pid_ = -1;  // the mount.lmcfs -f daemon while mounted_
  bool mounted_ = false;
};

}  // namespace lmc::testing
