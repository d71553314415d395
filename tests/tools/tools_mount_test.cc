// The tools as processes against a real mount (mount.lmcfs -f as a child):
// stat agrees with du, gc refuses the mounted store offline and reclaims
// exactly the deleted file's bytes online, online gc during concurrent
// writes loses nothing, fsck online. Suite MountTools: label integration;
// always unmounts (fusermount3 -u -z); skips without /dev/fuse.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../fs/mount_util.h"
#include "tools_test_util.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;
using testing::PackBytesOnDisk;
using testing::RandomData;
namespace fsys = std::filesystem;

using lmc::testing::Shell;
int Sh(const std::string& cmd) { return Shell(cmd); }

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class MountTools : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not available";
    if (Sh("command -v fusermount3 >/dev/null") != 0) GTEST_SKIP() << "fusermount3 is not installed";
    char tmpl[] = "/tmp/lmcfs_toolsmnt_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    store_ = root_ + "/store";
    mnt_ = root_ + "/mnt";
    fsys::create_directories(mnt_);
    Mount();
  }
  void TearDown() override {
    if (root_.empty()) return;
    Unmount();
    if (HasFailure()) Sh("tail -20 " + root_ + "/log >&2");
    std::error_code ec;
    fsys::remove_all(root_, ec);
  }
  void Mount() {
    pid_ = lmc::testing::StartMount(LMC_MOUNT_BIN, store_, mnt_, "log_file=" + root_ + "/log,log_level=info");
    ASSERT_GT(pid_, 0);
    mounted_ = true;
    // The control socket starts right after the mount appears.
    for (int i = 0; i < 200 && !fsys::exists(store_ + "/control.sock"); i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(fsys::exists(store_ + "/control.sock")) << "no control socket in 10 s";
  }
  void Unmount() {
    if (!mounted_) return;
    mounted_ = false;
    lmc::testing::StopMount(mnt_, pid_);
    pid_ = -1;
  }
  void Remount() {
    Unmount();
    Mount();
  }
  // Runs a tool binary; returns its exit code, stdout in *out, stderr in *err.
  int Tool(const std::string& name, const std::string& args, std::string* out, std::string* err = nullptr) {
    const std::string o = root_ + "/tool.out", e = root_ + "/tool.err";
    int rc = Sh(std::string(LMC_TOOLS_BIN_DIR) + "/" + name + " " + args + " >" + o + " 2>" + e);
    *out = Slurp(o);
    if (err) *err = Slurp(e);
    return rc;
  }
  void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.close();
    ASSERT_TRUE(f.good()) << path;
  }

  std::string root_, store_, mnt_;
  pid_t pid_ = -1;
  bool mounted_ = false;
};

TEST_F(MountTools, StatAgreesWithDuAndGcReclaimsTheDeletedFile) {
  const std::string keep = RandomData(2 << 20, 11), gone = RandomData(3 << 20, 12);
  std::string zeros(4 << 20, '\0');
  fsys::create_directories(mnt_ + "/ck");
  WriteFile(mnt_ + "/ck/keep.bin", keep);
  WriteFile(mnt_ + "/ck/zeros.bin", zeros);
  WriteFile(mnt_ + "/gone.bin", gone);
  Remount();  // the pack written so far is no longer the active one

  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " --json", &out, &err), 0) << err;
  json j = json::parse(out);
  std::map<std::string, json> by;
  for (const auto& e : j["entries"]) by[e["path"]] = e;
  ASSERT_TRUE(by.count("/gone.bin")) << out;
  EXPECT_EQ(j["mountpoint"], mnt_);
  EXPECT_TRUE(j.contains("daemon"));
  // du (allocated blocks) and du --apparent-size agree with stored/logical.
  for (const char* p : {"/ck/keep.bin", "/ck/zeros.bin", "/gone.bin"}) {
    struct stat st;
    ASSERT_EQ(::stat((mnt_ + p).c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), by[p]["logical"].get<uint64_t>()) << p;
    const uint64_t du = static_cast<uint64_t>(st.st_blocks) * 512, stored = by[p]["stored"];
    EXPECT_LE(stored, du) << p;
    EXPECT_LT(du - stored, 512u) << p;
  }
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " " + mnt_ + "/ck --sort size", &out, &err), 0) << err;
  EXPECT_EQ(out.find("/gone.bin"), std::string::npos) << out;
  EXPECT_LT(out.find("/ck/zeros.bin"), out.find("/ck/keep.bin")) << out;

  // Offline gc on the mounted store is refused with the way out.
  ASSERT_EQ(Tool("lmcfs-gc", store_, &out, &err), 1);
  EXPECT_NE(err.find("is mounted at " + mnt_ + "; run lmcfs-gc on the mountpoint"), std::string::npos) << err;
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " --repair", &out, &err), 8);
  EXPECT_NE(err.find("is mounted at"), std::string::npos) << err;

  // Online gc reclaims exactly the deleted file's records.
  const uint64_t want = by["/gone.bin"]["stored"].get<uint64_t>() + 64 * by["/gone.bin"]["chunks"].get<uint64_t>();
  ASSERT_EQ(::unlink((mnt_ + "/gone.bin").c_str()), 0);
  const uint64_t before = PackBytesOnDisk(store_);
  ASSERT_EQ(Tool("lmcfs-gc", mnt_ + " --json --threshold 0.9", &out, &err), 0) << err;
  json g = json::parse(out);
  EXPECT_TRUE(g["online"].get<bool>());
  EXPECT_EQ(g["packs_rewritten"], 1u) << out;
  EXPECT_EQ(before - PackBytesOnDisk(store_), want) << out;
  EXPECT_EQ(g["pack_bytes_before"].get<uint64_t>() - g["pack_bytes_after"].get<uint64_t>(), want) << out;

  EXPECT_EQ(Slurp(mnt_ + "/ck/keep.bin"), keep);
  EXPECT_EQ(Slurp(mnt_ + "/ck/zeros.bin"), zeros);
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_ + " --json", &out, &err), 0) << out << err;
  EXPECT_EQ(json::parse(out)["exit_code"], 0);
  Unmount();
  ASSERT_EQ(Tool("lmcfs-fsck", store_, &out, &err), 0) << out << err;
  ASSERT_EQ(Tool("lmcfs-stat", store_ + " --json", &out, &err), 0) << err;
  EXPECT_EQ(json::parse(out)["totals"]["files"], 2u);
  Mount();
  EXPECT_EQ(Slurp(mnt_ + "/ck/keep.bin"), keep);
}

TEST_F(MountTools, OnlineGcDuringConcurrentWritesLosesNothing) {
  for (int i = 0; i < 8; i++) WriteFile(mnt_ + "/old" + std::to_string(i), RandomData(1 << 20, 300 + i));
  Remount();
  for (int i = 0; i < 8; i += 2) ASSERT_EQ(::unlink((mnt_ + "/old" + std::to_string(i)).c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop || i < 8; i++) {
      WriteFile(mnt_ + "/new" + std::to_string(i), RandomData((512 << 10) + i * 4099, 400 + i));
      written = i + 1;
    }
  });
  std::string out, err;
  const int rc = Tool("lmcfs-gc", mnt_ + " --threshold 0.9 --rate 1G --json", &out, &err);
  stop = true;
  writer.join();
  ASSERT_EQ(rc, 0) << err;
  EXPECT_GT(json::parse(out)["bytes_reclaimed"].get<uint64_t>(), 0u) << out;
  auto check = [&] {
    for (int i = 1; i < 8; i += 2)
      EXPECT_EQ(Slurp(mnt_ + "/old" + std::to_string(i)), RandomData(1 << 20, 300 + i)) << i;
    for (int i = 0; i < written; i++)
      EXPECT_EQ(Slurp(mnt_ + "/new" + std::to_string(i)), RandomData((512 << 10) + i * 4099, 400 + i)) << i;
  };
  check();
  Remount();
  check();
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_, &out, &err), 0) << out << err;
}

}  // namespace
}  // namespace lmc::tools
