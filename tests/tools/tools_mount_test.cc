// The tools as processes against a real mount (mount.lmcfs -f as a child):
// stat agrees with du, gc refuses the mounted store offline and reclaims
// exactly the deleted file's bytes online, online gc during concurrent
// writes loses nothing, fsck online. Suite MountTools: label integration;
// always unmounts (fusermount3 -u -z); skips without /dev/fuse.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../fs/mount_util.h"
#include "tools_test_util.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;
using testing::PackBytesOnDisk;
using testing::RandomData;
namespace fsys = std::filesystem;

class MountTools : public lmc::testing::MountTest {
 protected:
  MountTools() { options_.wait_for_control_socket = true; }

  // Runs a tool binary; returns its exit code, stdout in *out, stderr in *err.
  int Tool(const std::string& name, const std::string& args, std::string* out, std::string* err = nullptr) {
    const std::string o = root_ + "/tool.out", e = root_ + "/tool.err";
    int rc = Sh(std::string(LMC_TOOLS_BIN_DIR) + "/" + name + " " + args + " >" + o + " 2>" + e);
    *out = ReadFile(o);
    if (err) *err = ReadFile(e);
    return rc;
  }
};

TEST_F(MountTools, StatAgreesWithDuAndGcReclaimsTheDeletedFile) {
  const std::string keep = RandomData(2 << 20, 11), gone = RandomData(3 << 20, 12);
  std::string zeros(4 << 20, '\0');
  fsys::create_directories(P("ck"));
  WriteFile(P("ck/keep.bin"), keep);
  WriteFile(P("ck/zeros.bin"), zeros);
  WriteFile(P("gone.bin"), gone);
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
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " " + P("ck") + " --sort size", &out, &err), 0) << err;
  EXPECT_EQ(out.find("/gone.bin"), std::string::npos) << out;
  EXPECT_LT(out.find("/ck/zeros.bin"), out.find("/ck/keep.bin")) << out;

  // Offline gc on the mounted store is refused with the way out.
  ASSERT_EQ(Tool("lmcfs-gc", store_, &out, &err), 1);
  EXPECT_NE(err.find("is mounted at " + mnt_ + "; run lmcfs-gc on the mountpoint"), std::string::npos) << err;
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " --repair", &out, &err), 8);
  EXPECT_NE(err.find("is mounted at"), std::string::npos) << err;

  // Online gc reclaims exactly the deleted file's records.
  const uint64_t want = by["/gone.bin"]["stored"].get<uint64_t>() + 64 * by["/gone.bin"]["chunks"].get<uint64_t>();
  ASSERT_EQ(::unlink(P("gone.bin").c_str()), 0);
  const uint64_t before = PackBytesOnDisk(store_);
  ASSERT_EQ(Tool("lmcfs-gc", mnt_ + " --json --threshold 0.9", &out, &err), 0) << err;
  json g = json::parse(out);
  EXPECT_TRUE(g["online"].get<bool>());
  EXPECT_EQ(g["packs_rewritten"], 1u) << out;
  EXPECT_EQ(before - PackBytesOnDisk(store_), want) << out;
  EXPECT_EQ(g["pack_bytes_before"].get<uint64_t>() - g["pack_bytes_after"].get<uint64_t>(), want) << out;

  EXPECT_TRUE(FileEquals(P("ck/keep.bin"), keep));
  EXPECT_TRUE(FileEquals(P("ck/zeros.bin"), zeros));
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_ + " --json", &out, &err), 0) << out << err;
  EXPECT_EQ(json::parse(out)["exit_code"], 0);
  Unmount();
  ASSERT_EQ(Tool("lmcfs-fsck", store_, &out, &err), 0) << out << err;
  ASSERT_EQ(Tool("lmcfs-stat", store_ + " --json", &out, &err), 0) << err;
  EXPECT_EQ(json::parse(out)["totals"]["files"], 2u);
  Mount();
  EXPECT_TRUE(FileEquals(P("ck/keep.bin"), keep));
}

TEST_F(MountTools, OnlineGcDuringConcurrentWritesLosesNothing) {
  for (int i = 0; i < 8; i++) WriteFile(P("old" + std::to_string(i)), RandomData(1 << 20, 300 + i));
  Remount();
  for (int i = 0; i < 8; i += 2) ASSERT_EQ(::unlink(P("old" + std::to_string(i)).c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop || i < 8; i++) {
      WriteFile(P("new" + std::to_string(i)), RandomData((512 << 10) + i * 4099, 400 + i));
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
      EXPECT_TRUE(FileEquals(P("old" + std::to_string(i)), RandomData(1 << 20, 300 + i))) << i;
    for (int i = 0; i < written; i++)
      EXPECT_TRUE(FileEquals(P("new" + std::to_string(i)), RandomData((512 << 10) + i * 4099, 400 + i))) << i;
  };
  check();
  Remount();
  check();
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_, &out, &err), 0) << out << err;
}

}  // namespace
}  // namespace lmc::tools
