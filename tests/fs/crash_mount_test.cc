// The fault runs' bounded CI forms (issue 16, "Fault runs"): crashes, rot,
// many writers, and a soak of mixed file operations.
//
// The daemon killed with SIGKILL at random moments while real writers
// (torch.save with fsync, safetensors' save_file, transformers'
// save_pretrained with sharding) save a checkpoint series into the mount:
// the bounded CI form of scripts/crash_run.py (issue 16, "Fault runs", 1;
// the long form is `scripts/crash_run.py --kills 200`). After each kill the
// store passes lmcfs-fsck, every fsync'd file reads back byte-identical, a
// file being written is absent, empty or a prefix of what was written; at
// the end the rebases drain and lmcfs-gc leaves no dead byte.
//
// In 2 of about 100 kills of the long form, a safetensors file (temp file,
// ftruncate, write, rename over the target, close) came back at its full
// size over a hole; rename now commits its source's data first
// (FsCore.CrashAfterRenameOverLeavesTheWholeFileNeverAHole). A long run
// since (200 kills, seed 431486156) found no such file again, so this form
// fails on one too (--partial fail).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "mount_util.h"

namespace {

// Why a fault run cannot run here ("" where it can): it needs /dev/fuse and
// python3 with torch and safetensors.
std::string Unrunnable() {
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is not available";
  if (lmc::testing::Shell("python3 -c 'import torch, safetensors' 2>/dev/null") != 0)
    return "python3 with torch and safetensors is not installed";
  return "";
}

// scripts/SCRIPT --build BUILD ARGS, against this build's binaries.
std::string RunCommand(const std::string& script, const std::string& args) {
  // build/tools/mountlmcfs/mount.lmcfs -> build
  const std::string build =
      std::filesystem::path(LMC_MOUNT_BIN).parent_path().parent_path().parent_path().string();
  return "python3 " + std::string(LMC_SOURCE_DIR) + "/scripts/" + script + " --build " + build + " " + args;
}

TEST(MountCrashRun, KilledAtRandomMomentsLosesNothingFsyncd) {
  if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
  const std::string cmd = RunCommand("crash_run.py", "--kills 4 --seed 16 --partial fail");
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// Bytes flipped in the pack files and RocksDB's files of a populated store:
// the bounded CI form of scripts/rot_run.py (issue 16, "Fault runs", 4; the
// long form is `scripts/rot_run.py --flips 300`). Every read returns the
// right bytes or EIO with a log line naming the chunk, fsck lists exactly
// the files that fail, and --repair leaves a store that serves the rest.
TEST(MountRotRun, FlippedBytesNeverReadBackWrong) {
  if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
  const std::string cmd = RunCommand("rot_run.py", "--flips 9 --seed 7");
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// Eight data-parallel ranks save a checkpoint series into one mount while
// readers read it back, online lmcfs-gc deletes old steps (retention) and
// compacts, and rebases run: the bounded CI form of
// scripts/many_writers_run.py (issue 16, "Fault runs", 6; the long form is
// `--seconds 3600`). No shard reads back different, nothing stalls for 60 s,
// the daemon stays within its memory budget, fsck is clean at the end.
TEST(MountManyWriters, RanksReadersRetentionAndGcTogether) {
  if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitized daemon's RSS is mostly the sanitizer's (shadow memory,
  // quarantine, access history): its budget is checked by the plain build.
  const std::string slack = " --slack-mib 8192";
#else
  const std::string slack;
#endif
  const std::string cmd = RunCommand("many_writers_run.py", "--seconds 30 --seed 5" + slack);
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// Checkpoint series mixed with writes at random offsets, truncates, renames
// over other files, links, copy_file_range, shared mappings, lmcfs-gc,
// dropped caches and remounts, against the same operations on the plain
// disk, by one writer and by three at once: the bounded CI form of
// scripts/soak_run.py (the long form is `--ops 3000`). Every file matches
// its shadow, st_blocks its stored bytes, and the store is clean under
// lmcfs-fsck --deep with no stale stored size.
TEST(MountSoakRun, MixedOperationsMatchThePlainDisk) {
  if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitized daemon is several times slower: half the operations, within
  // the suite's 300 s.
  const auto forms = {"--ops 100 --seed 11", "--ops 150 --writers 3 --seed 12"};
#else
  const auto forms = {"--ops 200 --seed 11", "--ops 300 --writers 3 --seed 12"};
#endif
  for (const char* args : forms) {
    const std::string cmd = RunCommand("soak_run.py", args);
    EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
  }
}

// A checkpoint writer with a keep-last-3 rotation runs its store out of
// space again and again, on a 64 MiB tmpfs: the bounded CI form of
// scripts/full_run.py (the long form is `--rounds 20`). Every wall is ENOSPC
// at once, the file that hit it a prefix or nothing, every completed save
// reads back, the space comes back without lmcfs-gc, and the store is clean
// under lmcfs-fsck --deep at the end.
TEST(MountFullRun, RunOutOfSpaceAgainAndAgainLosesNothing) {
  if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
  if (geteuid() != 0) GTEST_SKIP() << "mounting the run's tmpfs needs root";
  const std::string cmd = RunCommand("full_run.py", "--rounds 4 --seed 21");
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// The crash and soak runs against a store in RADOS (label ceph: the
// single-host cluster of scripts/ceph-dev.sh; skips without one), each in
// a namespace of its own that the run empties when it passes. The crash
// run's mount after each kill takes the store over (-o takeover: the dead
// daemon's 3 s lease waited out, its address fenced) with the local index
// the killed daemon left, and checks it online with lmcfs-fsck.
class RadosFaultRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = lmc::testing::NoCephCluster(); !why.empty()) GTEST_SKIP() << why;
    if (const std::string why = Unrunnable(); !why.empty()) GTEST_SKIP() << why;
  }
  // A store of its own: rados:lmcfs/NAME-PID-RANDOM.
  static std::string Store(const std::string& name) {
    return "rados:lmcfs/" + name + "-" + std::to_string(getpid()) + "-" +
           std::to_string(std::random_device{}() % 100000);
  }
};

// With a follower: a read-only mount of the store, as another node's, reads
// what each new writer read back after its takeover.
TEST_F(RadosFaultRuns, KilledAtRandomMomentsAndTakenOverLosesNothingFsyncd) {
  const std::string cmd =
      RunCommand("crash_run.py", "--kills 3 --seed 16 --follower --store " + Store("crash"));
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// The soak run with a follower: a read-only mount of the store, as another
// node's, shows the writer's names and bytes at every check and its pack
// bytes on disk once the rebases are done, across the writer's remounts.
TEST_F(RadosFaultRuns, MixedOperationsMatchThePlainDisk) {
  const std::string cmd =
      RunCommand("soak_run.py", "--ops 200 --seed 11 --follower --store " + Store("soak"));
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

// The full-store run in a Ceph pool of its own with a quota of 32 MiB:
// the writer gets ENOSPC within 30 s each time (not held until the
// cluster's timeout), and the space comes back within 90 s of the
// rotation, in the same mount or after a remount.
TEST_F(RadosFaultRuns, AFullPoolAgainAndAgainLosesNothing) {
  const std::string cmd = RunCommand("full_run.py", "--rounds 2 --mib 32 --seed 22 --store rados");
  EXPECT_EQ(lmc::testing::Shell(cmd), 0) << cmd << " (its output above says what failed)";
}

}  // namespace
