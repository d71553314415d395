// dedup=all|uid through a real mount with allow_other (suite Mount*, label
// integration; docs/ARCHITECTURE.md, "Store permissions"): two users write
// checkpoints PyTorch saved into one shared directory. With dedup=all a
// user's exact copy of another user's file is stored as references to the
// other's chunks, and the older save of a series is re-encoded as a delta
// on another user's newer one: both show in the stored size of files the
// user owns (user.lmcfs.dedup_bytes, delta_bytes). With dedup=uid neither
// happens across users and both still happen within one user's files.
// Every file reads back byte-identical, also after a remount, and fsck
// finds the store clean.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "lmc/fs/control.h"
#include "mount_util.h"

namespace {

constexpr uid_t kUserA = 1000, kUserB = 1001;

// Two saves of a small MLP trained with AdamW (lr 1e-4), safetensors' save_file.
constexpr char kDedupSaveScript[] = R"(
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(5)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
for n in (100, 200):
    loss = m(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f'{sys.argv[1]}/model_step_{n}.safetensors')
)";

class MountDedupScope : public lmc::testing::MountTest, public ::testing::WithParamInterface<const char*> {
 protected:
  MountDedupScope() {
    options_.mount_options = std::string("allow_other,dedup=") + GetParam();
    options_.wait_for_control_socket = true;
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "writing as two users needs root";
    if (!PythonHas("torch, safetensors"))
      GTEST_SKIP() << "python3 with torch and safetensors is not installed";
    MountTest::SetUp();
  }

  // Writes `data` to `path` as user `uid` (a child process that drops to
  // it, as cp run by that user would): the file is theirs.
  static void WriteAs(uid_t uid, const std::string& path, const std::string& data) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (!f) _exit(3);
      const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
      _exit(std::fclose(f) == 0 && ok ? 0 : 4);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << path << ": child status " << status;
  }

  static uid_t OwnerOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_uid;
  }

  bool per_owner() const { return std::string(GetParam()) == "uid"; }
};

TEST_P(MountDedupScope, SharingAcrossUsersFollowsTheMode) {
  ASSERT_EQ(Python(WriteScript("save.py", kDedupSaveScript), plain_), 0);
  const std::string v100 = ReadFile(plain_ + "/model_step_100.safetensors");
  const std::string v200 = ReadFile(plain_ + "/model_step_200.safetensors");
  ASSERT_GT(v100.size(), 2u << 20);

  // The users reach the mount through ROOT (mkdtemp made it 0700).
  ASSERT_EQ(Sh("chmod 0711 " + root_ + " && mkdir " + P("shared") + " && chmod 1777 " + P("shared")), 0);
  // A saves step 100; B saves step 200 of the same series and copies A's
  // file; A copies their own file.
  WriteAs(kUserA, P("shared/model_step_100.safetensors"), v100);
  WriteAs(kUserB, P("shared/model_step_200.safetensors"), v200);
  WriteAs(kUserB, P("shared/copy_b.safetensors"), v100);
  WriteAs(kUserA, P("shared/copy_a.safetensors"), v100);
  WaitRebases();
  // lmcfs-stat's daemon section names the mode.
  std::string stat;
  ASSERT_TRUE(
      lmc::fs::control::Call(lmc::fs::control::SocketPath(store_), R"({"op":"stat"})", {}, &stat).ok());
  EXPECT_NE(stat.find(std::string("\"dedup\":\"") + GetParam() + "\""), std::string::npos) << stat;
  EXPECT_EQ(OwnerOf(P("shared/model_step_100.safetensors")), kUserA);
  EXPECT_EQ(OwnerOf(P("shared/copy_b.safetensors")), kUserB);

  // A's own copy shares A's chunks in both modes (the whole file: same
  // chunks, header included).
  const uint64_t size = v100.size();
  EXPECT_GE(Xattr(P("shared/copy_a.safetensors"), "dedup_bytes"), size / 2);
  if (per_owner()) {
    // B's copy is stored anew, and A's step 100 stays standalone: nothing
    // B wrote changed what A's files occupy.
    EXPECT_EQ(Xattr(P("shared/copy_b.safetensors"), "dedup_bytes"), 0u);
    EXPECT_EQ(Xattr(P("shared/model_step_100.safetensors"), "delta_bytes"), 0u);
  } else {
    // The side channel dedup=uid closes: B learns from B's own file that
    // its chunks were already stored.
    EXPECT_GE(Xattr(P("shared/copy_b.safetensors"), "dedup_bytes"), size / 2);
    EXPECT_GT(Xattr(P("shared/model_step_100.safetensors"), "delta_bytes"), 0u);
  }
  for (const char* f : {"model_step_100", "copy_b", "copy_a"})
    EXPECT_TRUE(FileEquals(P(std::string("shared/") + f + ".safetensors"), v100)) << f;
  EXPECT_TRUE(FileEquals(P("shared/model_step_200.safetensors"), v200));

  Unmount();
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    ExpectFsckClean(*s);
  }
  Mount();
  for (const char* f : {"model_step_100", "copy_b", "copy_a"})
    EXPECT_TRUE(FileEquals(P(std::string("shared/") + f + ".safetensors"), v100)) << f;
  EXPECT_TRUE(FileEquals(P("shared/model_step_200.safetensors"), v200));
}

INSTANTIATE_TEST_SUITE_P(Modes, MountDedupScope, ::testing::Values("all", "uid"));

}  // namespace
