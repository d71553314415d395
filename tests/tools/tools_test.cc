// lmcfs-gc, lmcfs-stat, lmcfs-fsck in-process against offline stores
// written through fs::Filesystem (no mount), and the control channel served
// in-process (ControlServer over a Filesystem, without FUSE).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "../fake_gpu_codec.h"
#include "fault_env.h"
#include "lmc/fs/control.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/inspect.h"
#include "lmc/fs/records.h"
#include "lmc/store/store.h"
#include "lmc/text.h"
#include "lmc/version.h"
#include "lmcfs_tools.h"
#include "store_test_util.h"
#include "tools_test_util.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;
using testing::PackBytesOnDisk;
using testing::RandomData;
using testing::RunTool;
using testing::TempDir;

// A store with a filesystem on it, opened in-process.
class ToolsOffline : public ::testing::Test {
 protected:
  void SetUp() override {
    store_dir_ = tmp_.path() + "/store";
    fo_.chunk_size = 256 << 10;
    fo_.batch_limit = 1 << 20;
    Open();
  }
  void TearDown() override { Close(); }
  void Open(uint64_t pack_limit = uint64_t{256} << 20, bool punch = true) {
    store::StoreOptions so;
    so.pack_size_limit = pack_limit;
    so.punch_dead = punch;
    auto s = store::Store::Open(store_dir_, so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto f = fs::Filesystem::Open(store_.get(), store_dir_, fo_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  void Close() {
    if (fs_) {
      EXPECT_TRUE(fs_->Shutdown().ok());
    }
    fs_.reset();
    store_.reset();
  }
  uint64_t Mkdir(uint64_t parent, const std::string& name) {
    struct stat st;
    EXPECT_EQ(fs_->Mkdir(parent, name, 0755, {0, 0}, &st), 0);
    return st.st_ino;
  }
  uint64_t Write(uint64_t parent, const std::string& name, const std::string& data) {
    struct stat st;
    EXPECT_EQ(fs_->Create(parent, name, 0644, {0, 0}, &st), 0);
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      size_t n = std::min<size_t>(1 << 20, data.size() - off);
      EXPECT_EQ(fs_->Write(st.st_ino, off, data.data() + off, n), 0);
    }
    EXPECT_EQ(fs_->Fsync(st.st_ino, false), 0);
    EXPECT_EQ(fs_->Release(st.st_ino, true), 0);
    fs_->Forget(st.st_ino, 1);  // as the kernel does: unlink then frees the data
    return st.st_ino;
  }
  std::string Read(uint64_t parent, const std::string& name) {
    struct stat st;
    EXPECT_EQ(fs_->Lookup(parent, name, &st), 0);
    std::string out;
    EXPECT_EQ(fs_->Read(st.st_ino, 0, static_cast<size_t>(st.st_size), &out), 0);
    return out;
  }
  // Chunk keys of an inode's extents.
  std::set<store::ChunkKey> ChunksOf(uint64_t ino) {
    std::set<store::ChunkKey> keys;
    EXPECT_TRUE(store_
                    ->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ino),
                           [&](std::string_view, std::string_view v) {
                             auto e = store::DecodeExtent(v);
                             if (e && !e->hole()) keys.insert(e->chunk);
                             return true;
                           })
                    .ok());
    return keys;
  }
  // Flips one bit in the middle of the frame of the chunk `info` describes
  // (info taken while the store was open; the store closed now).
  void FlipBitInFrame(const store::ChunkInfo& info) {
    const std::string pack = store_dir_ + "/packs/" + [&] {
      for (const auto& e : std::filesystem::directory_iterator(store_dir_ + "/packs"))
        if (e.path().filename().string().find(std::to_string(info.pack_id)) != std::string::npos)
          return e.path().filename().string();
      return std::string();
    }();
    int fd = ::open(pack.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << pack;
    const off_t at = static_cast<off_t>(info.offset + 64 + info.frame_len / 2);
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::close(fd);
  }
  // Closes the filesystem and flips a bit in the frame of the first chunk
  // of `ino`; returns that chunk.
  store::ChunkKey CloseAndCorruptFirstChunkOf(uint64_t ino) {
    const store::ChunkKey k = *ChunksOf(ino).begin();
    auto info = store_->GetChunkInfo(k);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    Close();
    if (info.ok()) FlipBitInFrame(*info);
    return k;
  }
  // The store alone (no filesystem) and its fsck report.
  struct Checked {
    std::unique_ptr<store::Store> store;
    store::FsckReport report;
  };
  Checked OpenAndFsck() {
    Checked c;
    auto s = store::Store::Open(store_dir_, {});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return c;
    c.store = std::move(s).value();
    auto r = c.store->Fsck({});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) c.report = std::move(r).value();
    return c;
  }
  json Json(const testing::ToolResult& r) {
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out << r.err;
    return j;
  }

  TempDir tmp_;
  std::string store_dir_;
  fs::FsOptions fo_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<fs::Filesystem> fs_;
};

TEST_F(ToolsOffline, StatFiguresPerFileDirectoryAndDedup) {
  const uint64_t d = Mkdir(fs::kRootIno, "ckpt");
  const std::string a = RandomData(3 << 20, 1);
  std::string zeros(2 << 20, '\0');
  Write(d, "a.bin", a);
  Write(d, "zeros.bin", zeros);
  Write(fs::kRootIno, "copy.bin", a);  // same bytes: deduplicated
  Close();

  auto r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = Json(r);
  std::map<std::string, json> by_path;
  for (const auto& e : j["entries"]) by_path[e["path"]] = e;
  ASSERT_TRUE(by_path.count("/ckpt/a.bin") && by_path.count("/ckpt") && by_path.count("/copy.bin"));
  EXPECT_EQ(by_path["/ckpt/a.bin"]["logical"], a.size());
  EXPECT_EQ(by_path["/ckpt/zeros.bin"]["logical"], zeros.size());
  // Zeros compress; random bytes do not.
  EXPECT_LT(by_path["/ckpt/zeros.bin"]["stored"].get<uint64_t>(), zeros.size() / 50);
  EXPECT_GT(by_path["/ckpt/a.bin"]["stored"].get<uint64_t>(), a.size() * 99 / 100);
  // The two copies share chunks: each is charged half, the rest is dedup.
  const uint64_t stored_a = by_path["/ckpt/a.bin"]["stored"];
  EXPECT_EQ(by_path["/copy.bin"]["stored"].get<uint64_t>(), stored_a);
  EXPECT_NEAR(by_path["/ckpt/a.bin"]["saved_dedup"].get<double>(), stored_a / 2.0, 64.0);
  // A directory sums its subtree.
  EXPECT_EQ(by_path["/ckpt"]["logical"].get<uint64_t>(), a.size() + zeros.size());
  EXPECT_EQ(by_path["/ckpt"]["stored"].get<uint64_t>(),
            stored_a + by_path["/ckpt/zeros.bin"]["stored"].get<uint64_t>());
  // Savings add up to logical - charged, per entry.
  for (const auto& [p, e] : by_path) {
    if (e["type"] != "file") continue;
    EXPECT_EQ(
        e["saved_codec"].get<int64_t>() + e["saved_delta"].get<int64_t>() + e["saved_dedup"].get<int64_t>(),
        e["logical"].get<int64_t>() - e["charged"].get<int64_t>())
        << p;
  }
  // Totals count every chunk once.
  const json& t = j["totals"];
  EXPECT_EQ(t["files"], 3u);
  EXPECT_EQ(t["logical"].get<uint64_t>(), 2 * a.size() + zeros.size());
  EXPECT_LT(t["unique_frame_bytes"].get<uint64_t>(), t["stored"].get<uint64_t>());
  EXPECT_GT(t["packs"].get<uint64_t>(), 0u);
  EXPECT_GT(t["index_bytes"].get<uint64_t>(), 0u);

  // Paths limit the entries; the table sorts by stored size.
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "/ckpt", "--sort", "stored", "--bytes"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("/copy.bin"), std::string::npos) << r.out;
  const size_t pa = r.out.find("/ckpt/a.bin"), pz = r.out.find("/ckpt/zeros.bin");
  ASSERT_NE(pa, std::string::npos);
  ASSERT_NE(pz, std::string::npos);
  EXPECT_LT(pa, pz) << r.out;
  EXPECT_NE(r.out.find(std::to_string(a.size())), std::string::npos) << r.out;

  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "/nope"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nope"), std::string::npos) << r.err;
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "--sort", "colour"});
  EXPECT_EQ(r.rc, 2);
}

TEST_F(ToolsOffline, GcReclaimsExactlyTheDeletedFilesBytes) {
  Close();
  // Every commit seals its pack: one file, one pack. No holes: this
  // measures what gc itself gives back (holes would have given most of it
  // back before it runs: PunchTest).
  Open(/*pack_limit=*/1, /*punch=*/false);
  const std::string keep = RandomData(1 << 20, 2), gone = RandomData(1536 << 10, 3);
  const uint64_t ik = Write(fs::kRootIno, "keep.bin", keep);
  const uint64_t ig = Write(fs::kRootIno, "gone.bin", gone);
  // What the deleted file occupies: its records, in packs of their own.
  uint64_t want = 0;
  std::set<uint64_t> packs_gone, packs_keep;
  for (const auto& k : ChunksOf(ik)) packs_keep.insert(store_->GetChunkInfo(k)->pack_id);
  for (const auto& k : ChunksOf(ig)) {
    auto info = store_->GetChunkInfo(k);
    ASSERT_TRUE(info.ok());
    want += 64 + info->frame_len;  // record header + frame (docs/FORMAT.md, "Chunk records")
    packs_gone.insert(info->pack_id);
  }
  for (uint64_t p : packs_gone) ASSERT_FALSE(packs_keep.count(p)) << "files share pack " << p;
  want += 32 * packs_gone.size();  // their pack headers
  ASSERT_EQ(fs_->Unlink(fs::kRootIno, "gone.bin"), 0);
  Close();

  const uint64_t before = PackBytesOnDisk(store_dir_);
  auto dry = RunTool(GcMain, "lmcfs-gc", {store_dir_, "--dry-run", "--json", "--threshold", "1"});
  ASSERT_EQ(dry.rc, 0) << dry.err;
  EXPECT_EQ(Json(dry)["bytes_reclaimed"], 0u);
  EXPECT_EQ(Json(dry)["candidates"].size(), packs_gone.size());
  EXPECT_EQ(PackBytesOnDisk(store_dir_), before);

  auto r = RunTool(GcMain, "lmcfs-gc", {store_dir_, "--json", "--threshold", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = Json(r);
  EXPECT_EQ(j["bytes_reclaimed"].get<uint64_t>(), want);
  EXPECT_EQ(j["packs_rewritten"].get<uint64_t>(), packs_gone.size());
  EXPECT_EQ(j["bytes_copied"], 0u);
  EXPECT_EQ(before - PackBytesOnDisk(store_dir_), want);

  // Human output of a second run: nothing left to do.
  r = RunTool(GcMain, "lmcfs-gc", {store_dir_, "--threshold", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("reclaimed 0 B"), std::string::npos) << r.out;

  Open();
  EXPECT_EQ(Read(fs::kRootIno, "keep.bin"), keep);
  Close();
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
}

TEST_F(ToolsOffline, GcRefusesAStoreInUse) {
  Write(fs::kRootIno, "f", RandomData(1000, 4));
  // The store is open here (as a daemon would hold it).
  auto r = RunTool(GcMain, "lmcfs-gc", {store_dir_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  r = RunTool(GcMain, "lmcfs-gc", {tmp_.path()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("is neither an lmcfs mountpoint"), std::string::npos) << r.err;
}

TEST_F(ToolsOffline, FsckFindsABitFlipAndNamesTheFile) {
  const uint64_t d = Mkdir(fs::kRootIno, "run");
  const uint64_t ibad = Write(d, "bad.bin", RandomData(600 << 10, 5));
  Write(d, "good.bin", RandomData(600 << 10, 6));
  const store::ChunkKey victim = *ChunksOf(ibad).begin();
  auto info = store_->GetChunkInfo(victim);
  ASSERT_TRUE(info.ok());
  Close();
  ASSERT_EQ(RunTool(FsckMain, "lmcfs-fsck", {store_dir_}).rc, 0);

  FlipBitInFrame(*info);

  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--json"});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out << r.err;
  json j = Json(r);
  EXPECT_EQ(j["store"]["bad_records"], 1u);
  EXPECT_EQ(j["affected_files"], json::array({"/run/bad.bin"}));
  EXPECT_EQ(j["bad_chunks"], json::array({victim.ToHex()}));
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, store::kFsckUncorrected);
  EXPECT_NE(r.out.find("files affected by corruption (1):\n  /run/bad.bin\n"), std::string::npos) << r.out;
  // Repair cannot invent the lost bytes: still uncorrected, evidence kept.
  const std::string q = tmp_.path() + "/q.json";
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--quarantine", q});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out;
  json qj = json::parse(std::ifstream(q), nullptr, false);
  ASSERT_FALSE(qj.is_discarded());
  EXPECT_EQ(qj["affected_files"], json::array({"/run/bad.bin"}));
}

// A file of several names (hard links) counts once in each directory that
// holds any of them, as du counts it, and once in the totals; each name's
// own row shows the file.
TEST_F(ToolsOffline, StatCountsAHardLinkedFileOncePerDirectory) {
  const uint64_t h = Mkdir(fs::kRootIno, "h"), other = Mkdir(fs::kRootIno, "other");
  const std::string data = RandomData(700 << 10, 51);
  const uint64_t ino = Write(h, "a", data);
  struct stat st;
  ASSERT_EQ(fs_->Link(ino, h, "b", &st), 0);
  ASSERT_EQ(fs_->Link(ino, other, "c", &st), 0);
  Write(other, "d", "dd");
  Close();
  auto r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = Json(r);
  std::map<std::string, json> by;
  for (const auto& e : j["entries"]) by[e["path"]] = e;
  for (const char* p : {"/h/a", "/h/b", "/other/c", "/h"}) EXPECT_EQ(by[p]["logical"], data.size()) << p;
  EXPECT_EQ(by["/other"]["logical"], data.size() + 2);
  EXPECT_EQ(by["/"]["logical"], j["totals"]["logical"]);
  EXPECT_EQ(by["/"]["stored"], j["totals"]["stored"]);
  EXPECT_EQ(by["/h"]["stored"], by["/h/a"]["stored"]);
  EXPECT_EQ(by["/h/a"]["nlink"], 3u);
}

// PATH arguments select subtrees, not name prefixes; a path asked twice, or
// inside another asked, shows each entry once; "/" is everything.
TEST_F(ToolsOffline, StatPathsSelectSubtreesNotPrefixes) {
  const uint64_t ck = Mkdir(fs::kRootIno, "ck");
  Write(Mkdir(ck, "sub"), "f", "1");
  Write(ck, "g", "22");
  Write(Mkdir(fs::kRootIno, "ck2"), "h", "333");
  Write(fs::kRootIno, "ck.bin", "4444");
  Close();
  auto paths = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {store_dir_, "--json"});
    auto r = RunTool(StatMain, "lmcfs-stat", args);
    EXPECT_EQ(r.rc, 0) << r.err;
    std::vector<std::string> out;
    const json j = Json(r);
    for (const auto& e : j["entries"]) out.push_back(e["path"]);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(paths({"/ck"}), (V{"/ck", "/ck/g", "/ck/sub", "/ck/sub/f"}));
  EXPECT_EQ(paths({"ck/sub/", "/ck/sub/f", "/ck/sub"}), (V{"/ck/sub", "/ck/sub/f"}));
  EXPECT_EQ(paths({"/ck2", "/ck.bin"}), (V{"/ck.bin", "/ck2", "/ck2/h"}));
  // Offline there is no kernel to resolve "." and "..": they are resolved
  // by name, never above the root.
  EXPECT_EQ(paths({"./ck//sub/../sub/./f"}), (V{"/ck/sub/f"}));
  EXPECT_EQ(paths({"../../ck2/"}), (V{"/ck2", "/ck2/h"}));
  EXPECT_EQ(paths({"/"}).size(), 8u);
  EXPECT_EQ(paths({}).size(), 8u);
}

// A file name is any bytes but '/' and NUL (a checkpoint named in latin-1,
// a name cut in the middle of a UTF-8 sequence), while JSON is UTF-8:
// stat shows such names with the odd bytes as \xNN, gives their exact bytes
// in path_hex, and finds them by those bytes; fsck names a damaged file by
// its escaped path, in text, JSON and the quarantine report; gc works on.
TEST_F(ToolsOffline, NamesThatAreNotUtf8AreEscapedAndFoundByTheirBytes) {
  const uint64_t d = Mkdir(fs::kRootIno, "d\xbd");
  const std::string data = RandomData(600 << 10, 41);
  const uint64_t bad = Write(d, "\xff\xfe.bin", data);
  Write(fs::kRootIno, "a\\xbd", RandomData(300 << 10, 42));        // valid: the characters \ x b d
  Write(fs::kRootIno, "gone\xc0\xaf", RandomData(300 << 10, 43));  // an overlong '/'
  Write(fs::kRootIno, "two\nlines", "x");  // valid UTF-8, but one row of the table each
  // A path longer than the table's line buffer once was (512 bytes).
  const std::string n1(200, 'a'), n2(200, 'b'), n3(200, 'c');
  Write(Mkdir(Mkdir(fs::kRootIno, n1), n2), n3, "deep");
  struct stat st;
  ASSERT_EQ(fs_->Unlink(fs::kRootIno, "gone\xc0\xaf"), 0);
  EXPECT_EQ(fs_->Lookup(fs::kRootIno, "gone\xc0\xaf", &st), ENOENT);
  Close();

  auto r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json listed = Json(r);  // (a temporary's member would dangle in the loop)
  std::map<std::string, json> by;
  for (const auto& e : listed["entries"]) by[e["path"]] = e;
  ASSERT_TRUE(by.count("/d\\xbd") && by.count("/d\\xbd/\\xff\\xfe.bin") && by.count("/a\\xbd")) << r.out;
  EXPECT_EQ(by["/d\\xbd"]["path_hex"], "2f64bd");
  EXPECT_EQ(by["/d\\xbd/\\xff\\xfe.bin"]["path_hex"], "2f64bd2ffffe2e62696e");
  EXPECT_EQ(by["/d\\xbd/\\xff\\xfe.bin"]["logical"], data.size());
  EXPECT_FALSE(by["/a\\xbd"].contains("path_hex"));  // the same characters, but a valid name
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("  /d\\xbd/\\xff\\xfe.bin\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  /two\\x0alines\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  /" + n1 + "/" + n2 + "/" + n3 + "\n"), std::string::npos) << r.out;
  EXPECT_TRUE(IsValidUtf8(r.out)) << r.out;
  // Found by its bytes, and only it.
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "/d\xbd", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json(r)["entries"].size(), 2u) << r.out;
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "/d\\xbd"});
  EXPECT_EQ(r.rc, 1) << r.out;  // the escaped spelling is another name
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "lmcfs-stat: cannot show '/d\\xbd': no such file or directory in the filesystem\n");
  // One there and one not: the one there shown, the other said, exit 1.
  r = RunTool(StatMain, "lmcfs-stat", {store_dir_, "/two\nlines", "/d\xbd/no\xfe"});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("  /two\\x0alines\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/d\\xbd"), std::string::npos) << r.out;
  EXPECT_EQ(r.err,
            "lmcfs-stat: cannot show '/d\\xbd/no\\xfe': no such file or directory in the filesystem\n");

  r = RunTool(GcMain, "lmcfs-gc", {store_dir_, "--threshold", "1", "--json"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_GT(Json(r)["bytes_reclaimed"].get<uint64_t>(), 300u << 10) << r.out;  // the unlinked file

  Open();
  const store::ChunkKey victim = CloseAndCorruptFirstChunkOf(bad);
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--json"});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out << r.err;
  json j = Json(r);
  EXPECT_EQ(j["affected_files"], json::array({"/d\\xbd/\\xff\\xfe.bin"})) << r.out;
  EXPECT_EQ(j["bad_chunks"], json::array({victim.ToHex()}));
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_NE(r.out.find("files affected by corruption (1):\n  /d\\xbd/\\xff\\xfe.bin\n"), std::string::npos)
      << r.out;
  EXPECT_TRUE(IsValidUtf8(r.out) && IsValidUtf8(r.err)) << r.out << r.err;
  const std::string q = tmp_.path() + "/q.json";
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--quarantine", q});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out;
  json qj = json::parse(std::ifstream(q), nullptr, false);
  ASSERT_FALSE(qj.is_discarded());
  EXPECT_EQ(qj["affected_files"], json::array({"/d\\xbd/\\xff\\xfe.bin"}));
}

// RocksDB's write-ahead log of the index damaged (a store whose index is
// journaled, the default): lmcfs-fsck stops, naming the index and saying
// what repairs it; lmcfs-fsck --repair rebuilds the index from the journal
// (exit 1, the damaged copy kept and named), after which every file is
// there with its bytes and fsck is clean.
TEST_F(ToolsOffline, FsckRepairRebuildsADamagedIndexFromTheJournal) {
  const uint64_t d = Mkdir(fs::kRootIno, "run");
  const std::string a = RandomData(700 << 10, 11), b = RandomData(300 << 10, 12);
  Write(d, "a.bin", a);
  Write(fs::kRootIno, "b.bin", b);
  Close();
  std::string log;
  for (const auto& e : std::filesystem::directory_iterator(store_dir_ + "/index"))
    if (e.path().extension() == ".log" && e.file_size() > 0) log = e.path().string();
  ASSERT_FALSE(log.empty());
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    const auto mid = static_cast<std::streamoff>(std::filesystem::file_size(log) / 2);
    f.seekg(mid);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(mid);
    f.write(&c, 1);
  }
  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, store::kFsckOperationalError) << r.out << r.err;
  EXPECT_NE(r.err.find("is damaged"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lmcfs-fsck --repair"), std::string::npos) << r.err;
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--json"});
  EXPECT_EQ(r.rc, store::kFsckCorrected) << r.out << r.err;
  json j = Json(r);
  const std::string aside = j.value("index_rebuilt_from_journal", "");
  EXPECT_NE(aside.find("/index.damaged-"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(aside));
  EXPECT_EQ(j["affected_files"], json::array());
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out << r.err;
  Open();
  struct stat st;
  ASSERT_EQ(fs_->Lookup(fs::kRootIno, "run", &st), 0);
  EXPECT_EQ(Read(st.st_ino, "a.bin"), a);
  EXPECT_EQ(Read(fs::kRootIno, "b.bin"), b);
}

// The index lost entries without an error (as RocksDB does when the last
// edit of its MANIFEST reads as a torn tail: the flush it recorded is
// dropped, and fsck had nothing to compare against). Here a file's extents
// are deleted behind the store's back. Its chunks then look leaked, and a
// repair from that index would have deleted them. fsck --deep compares the
// index with the one its journal makes and names the difference;
// --repair rebuilds the index from the journal first, repairs nothing from
// the wrong one, and the file reads back whole.
TEST_F(ToolsOffline, FsckRepairRebuildsAnIndexThatLostEntriesFromTheJournal) {
  const std::string a = RandomData(900 << 10, 21), b = RandomData(200 << 10, 22);
  const uint64_t ia = Write(fs::kRootIno, "a.bin", a);
  Write(fs::kRootIno, "b.bin", b);
  Close();
  store::testing::WithRawIndex(
      store_dir_, [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), h[5]));
        const std::string prefix = store::ExtentKeyPrefix(ia);
        int n = 0;
        for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
          ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h[5], it->key()).ok());
          ++n;
        }
        ASSERT_GT(n, 0);
      });
  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--deep", "--json"});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out << r.err;
  bool named = false;
  const json deep = Json(r);
  for (const auto& p : deep["store"]["problems"]) named |= p.value("kind", "") == "index_journal_mismatch";
  EXPECT_TRUE(named) << r.out;
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--json"});
  EXPECT_EQ(r.rc, store::kFsckCorrected) << r.out << r.err;
  EXPECT_NE(r.err.find("differs from the journal"), std::string::npos) << r.err;
  EXPECT_EQ(Json(r)["affected_files"], json::array());
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--deep"});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out << r.err;
  Open();
  EXPECT_EQ(Read(fs::kRootIno, "a.bin"), a);
  EXPECT_EQ(Read(fs::kRootIno, "b.bin"), b);
}

// What fsck reports (bad chunks, affected files, quarantine, exit code) comes
// from the problems' structured fields: rewording every message, so that
// none names a chunk or says "(repaired)", changes none of it.
TEST_F(ToolsOffline, FsckDecidesFromProblemsNotTheirWording) {
  const uint64_t ibad = Write(fs::kRootIno, "bad.bin", RandomData(600 << 10, 5));
  const uint64_t igood = Write(fs::kRootIno, "good.bin", RandomData(600 << 10, 6));
  const store::ChunkKey healthy = *ChunksOf(igood).begin();
  const store::ChunkKey victim = CloseAndCorruptFirstChunkOf(ibad);
  Checked c = OpenAndFsck();
  ASSERT_TRUE(c.store);
  ASSERT_EQ(c.report.Count(store::FsckProblem::Kind::kBadRecord), 1u);
  store::FsckReport reworded = c.report;
  for (auto& p : reworded.problems) p.message = "something is wrong";
  auto doc = [&](const store::FsckReport& r, const fs::control::FsckRunOptions& o) {
    auto d = fs::control::CompleteFsck(*c.store, r, o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? json::parse(*d) : json();
  };
  const json before = doc(c.report, {}), after = doc(reworded, {});
  for (const json* j : {&before, &after}) {
    EXPECT_EQ((*j)["exit_code"], static_cast<int>(store::kFsckUncorrected));
    EXPECT_EQ((*j)["bad_chunks"], json::array({victim.ToHex()}));
    EXPECT_EQ((*j)["affected_files"], json::array({"/bad.bin"}));
    EXPECT_EQ((*j)["store"]["bad_records"], 1u);
    ASSERT_EQ((*j)["store"]["problems"].size(), 1u);
    EXPECT_EQ((*j)["store"]["problems"][0]["kind"], "bad_record");
    EXPECT_EQ((*j)["store"]["problems"][0]["key_hex"], victim.ToHex());
  }

  // Repair: the unrepaired problem is quarantined as left, with the files.
  fs::control::FsckRunOptions o;
  o.repair = true;
  o.quarantine_path = tmp_.path() + "/q.json";
  const json repaired = doc(reworded, o);
  EXPECT_EQ(repaired["exit_code"], static_cast<int>(store::kFsckUncorrected));
  json qj = json::parse(std::ifstream(o.quarantine_path), nullptr, false);
  ASSERT_FALSE(qj.is_discarded());
  EXPECT_EQ(qj["records"], json::array({{{"what", "something is wrong"}, {"left", true}}}));
  EXPECT_EQ(qj["affected_files"], json::array({"/bad.bin"}));

  // A repaired problem counts as fixed though its message says nothing of it,
  // and a healthy chunk it names is not reported bad.
  store::FsckReport fixed;
  fixed.problems.push_back({.kind = store::FsckProblem::Kind::kRefcountMismatch,
                            .key = healthy,
                            .repaired = true,
                            .message = "count was off"});
  const json corrected = doc(fixed, {});
  EXPECT_EQ(corrected["exit_code"], static_cast<int>(store::kFsckCorrected));
  EXPECT_EQ(corrected["errors"], 1u);
  EXPECT_EQ(corrected["fixed"], 1u);
  EXPECT_EQ(corrected["bad_chunks"], json::array());
  EXPECT_EQ(corrected["store"]["messages"], json::array({"count was off (repaired)"}));
}

// The quarantine report is written durably (temporary file, fsync, rename,
// directory fsync): a failed step is an error naming it and leaves nothing
// half-written; a power loss after it keeps the whole report.
TEST_F(ToolsOffline, FsckQuarantineReportIsDurable) {
  CloseAndCorruptFirstChunkOf(Write(fs::kRootIno, "bad.bin", RandomData(600 << 10, 5)));
  Checked c = OpenAndFsck();
  ASSERT_TRUE(c.store);

  store::testing::FaultEnv env;
  fs::control::FsckRunOptions o;
  o.repair = true;
  o.env = &env;
  o.quarantine_path = tmp_.path() + "/q.json";
  env.FailSyncs(1);
  auto failed = fs::control::CompleteFsck(*c.store, c.report, o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(o.quarantine_path), std::string::npos)
      << failed.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(o.quarantine_path));
  EXPECT_FALSE(std::filesystem::exists(o.quarantine_path + ".tmp"));

  env.Heal();
  auto done = fs::control::CompleteFsck(*c.store, c.report, o);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  env.DropUnsynced();  // a power loss now
  json qj = json::parse(std::ifstream(o.quarantine_path), nullptr, false);
  ASSERT_FALSE(qj.is_discarded());
  EXPECT_EQ(qj["affected_files"], json::array({"/bad.bin"}));
  EXPECT_FALSE(std::filesystem::exists(o.quarantine_path + ".tmp"));
}

TEST_F(ToolsOffline, FsckRepairsAWrongReferenceCountAndTreeDamage) {
  const uint64_t ia = Write(fs::kRootIno, "a.bin", RandomData(300 << 10, 7));
  Mkdir(fs::kRootIno, "sub");
  const store::ChunkKey k = *ChunksOf(ia).begin();
  Close();
  {
    store::StoreOptions so;
    auto s = store::Store::Open(store_dir_, so);
    ASSERT_TRUE(s.ok());
    store::Batch b;
    b.Ref(k);  // a reference no extent holds: the count is one too high
    // A directory entry naming no inode, and a wrong link count.
    b.Put(store::Cf::kDirents, fs::DirentKey(fs::kRootIno, "ghost"), fs::EncodeDirent({999999, S_IFREG}));
    auto v = (*s)->Get(store::Cf::kInodes, fs::InodeKey(ia));
    ASSERT_TRUE(v.ok());
    auto rec = fs::DecodeInode(*v);
    rec->nlink = 3;
    b.Put(store::Cf::kInodes, fs::InodeKey(ia), fs::EncodeInode(*rec));
    ASSERT_TRUE((*s)->Commit(b).ok());
  }
  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--json"});
  EXPECT_EQ(r.rc, store::kFsckUncorrected) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["store"]["refcount_mismatches"], 1u);
  EXPECT_EQ(j["tree"]["problems"].size(), 2u) << j["tree"].dump();
  EXPECT_EQ(j["affected_files"].size(), 0u);

  const std::string q = tmp_.path() + "/quarantine.json";
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--quarantine", q});
  EXPECT_EQ(r.rc, store::kFsckCorrected) << r.out << r.err;
  json qj = json::parse(std::ifstream(q), nullptr, false);
  ASSERT_FALSE(qj.is_discarded());
  bool ghost = false;
  for (const auto& rec : qj["records"])
    ghost = ghost || rec["what"].get<std::string>().find("/ghost") != std::string::npos;
  EXPECT_TRUE(ghost) << qj.dump();

  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out;
  EXPECT_NE(r.out.find("clean"), std::string::npos);
  Open();
  EXPECT_EQ(Read(fs::kRootIno, "a.bin"), RandomData(300 << 10, 7));
}

// A file's stored bytes (st_blocks) out of date with its chunks' frames (a
// re-encoding whose refresh of the files a crash cut short): fsck names the
// file without counting a problem (the data is intact), --repair sets the
// extents' frame lengths and the inode's sum from the index.
TEST_F(ToolsOffline, FsckReportsAndRepairsStaleStoredBytes) {
  const std::string da = RandomData(600 << 10, 8), db = RandomData(300 << 10, 9);
  const uint64_t ia = Write(fs::kRootIno, "a.bin", da);
  const uint64_t ib = Write(fs::kRootIno, "b.bin", db);
  struct stat sa, sb;
  ASSERT_EQ(fs_->GetAttr(ia, &sa), 0);
  ASSERT_EQ(fs_->GetAttr(ib, &sb), 0);
  Close();
  uint64_t stored_a = 0, stored_b = 0, shrunk = 0;  // as written
  {
    auto s = store::Store::Open(store_dir_, {});
    ASSERT_TRUE(s.ok());
    store::Batch b;
    // a.bin: one extent records a frame 1000 bytes shorter, and the inode
    // the sum with it (as before a re-encoding grew the frame).
    ASSERT_TRUE((*s)->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ia),
                           [&](std::string_view k, std::string_view v) {
                             auto x = fs::DecodeExtentRec(v);
                             if (!x) return true;
                             const uint64_t was = x->Stored();
                             x->frame_len -= 1000;
                             shrunk = was - x->Stored();
                             b.Put(store::Cf::kExtents, std::string(k), fs::EncodeExtentRec(*x));
                             return false;
                           })
                    .ok());
    ASSERT_GT(shrunk, 0u);
    auto va = (*s)->Get(store::Cf::kInodes, fs::InodeKey(ia));
    ASSERT_TRUE(va.ok());
    auto ra = fs::DecodeInode(*va);
    stored_a = ra->stored;
    ra->stored -= shrunk;
    b.Put(store::Cf::kInodes, fs::InodeKey(ia), fs::EncodeInode(*ra));
    // b.bin: the extents are right, the inode's sum is not.
    auto vb = (*s)->Get(store::Cf::kInodes, fs::InodeKey(ib));
    ASSERT_TRUE(vb.ok());
    auto rb = fs::DecodeInode(*vb);
    stored_b = rb->stored;
    rb->stored += 77;
    b.Put(store::Cf::kInodes, fs::InodeKey(ib), fs::EncodeInode(*rb));
    ASSERT_TRUE((*s)->Commit(b).ok());
  }
  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--json"});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["errors"], 0u);
  ASSERT_EQ(j["tree"]["stale_stored"].size(), 2u) << j["tree"].dump();
  std::map<std::string, json> by;
  for (const auto& e : j["tree"]["stale_stored"]) by[e["path"]] = e;
  EXPECT_EQ(by["/a.bin"]["recorded"], stored_a - shrunk);
  EXPECT_EQ(by["/a.bin"]["actual"], stored_a);
  EXPECT_EQ(by["/b.bin"]["recorded"], stored_b + 77);
  EXPECT_EQ(by["/b.bin"]["actual"], stored_b);
  EXPECT_FALSE(by["/a.bin"]["repaired"].get<bool>());

  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out;
  EXPECT_NE(r.out.find("2 files' stored sizes are out of date"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lmcfs-fsck --repair sets them"), std::string::npos) << r.out;

  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--repair", "--json"});
  EXPECT_EQ(r.rc, store::kFsckOk) << r.out << r.err;
  j = Json(r);
  EXPECT_TRUE(j["tree"]["stale_stored"][0]["repaired"].get<bool>()) << j["tree"].dump();
  r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--json"});
  j = Json(r);
  EXPECT_EQ(j["tree"]["stale_stored"].size(), 0u) << j["tree"].dump();

  // The files show what they showed before the damage, and read the same.
  Open();
  struct stat now;
  ASSERT_EQ(fs_->GetAttr(ia, &now), 0);
  EXPECT_EQ(now.st_blocks, sa.st_blocks);
  ASSERT_EQ(fs_->GetAttr(ib, &now), 0);
  EXPECT_EQ(now.st_blocks, sb.st_blocks);
  EXPECT_EQ(Read(fs::kRootIno, "a.bin"), da);
  EXPECT_EQ(Read(fs::kRootIno, "b.bin"), db);
}

// Every tool answers -V and --version as Unix tools do, on stdout with exit
// code 0: its name, "(lmcfs)" and the release, then the formats it reads.
// Where help2man is installed the build makes each tool's manual page from
// that and --help (tools/CMakeLists.txt).
TEST(ToolsVersion, EveryToolNamesItsReleaseAndFormats) {
  const std::string dir = LMC_TOOLS_BIN_DIR;
  const std::pair<std::string, std::string> tools[] = {{dir + "/lmcfs-stat", "lmcfs-stat"},
                                                       {dir + "/lmcfs-gc", "lmcfs-gc"},
                                                       {dir + "/lmcfs-fsck", "lmcfs-fsck"},
                                                       {LMC_MOUNT_BIN, "mount.lmcfs"},
                                                       {LMC_BIN, "lmc"}};
  for (const auto& [bin, name] : tools) {
    for (const char* flag : {"--version", "-V"}) {
      std::string out;
      FILE* p = popen((bin + " " + flag + " 2>/dev/null").c_str(), "r");
      ASSERT_NE(p, nullptr);
      char buf[512];
      for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      EXPECT_EQ(pclose(p), 0) << name << " " << flag;
      EXPECT_EQ(out.substr(0, out.find('\n')), name + " (lmcfs) " LMC_VERSION) << out;
      const std::string formats = name == "lmc" ? "formats: frame versions 1-" : "formats: store 1-";
      EXPECT_NE(out.find("\n" + formats), std::string::npos) << out;
      EXPECT_NE(out.find(".lmc container 1\n"), std::string::npos) << out;
    }
    const std::string page = std::string(LMC_MAN_DIR) + "/" + name + (name == "lmc" ? ".1" : ".8");
    if (!std::filesystem::exists(LMC_MAN_DIR)) continue;  // no help2man, or a sanitizer build
    std::ifstream in(page);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find(".SH SYNOPSIS"), std::string::npos) << page;
    EXPECT_NE(text.str().find("lmcfs " LMC_VERSION), std::string::npos) << page;
  }
}

// A target that is missing or not a directory: each tool names it and says
// what it expected; lmcfs-fsck exits 8 (operational error, as e2fsck on a
// missing device), 16 only for a bad command line.
TEST_F(ToolsOffline, ToolsNameATargetTheyCannotOpen) {
  const std::string missing = tmp_.path() + "/no-such-store";
  const std::string file = tmp_.path() + "/a-file";
  std::ofstream(file) << "not a store";
  for (const std::string& target : {missing, file}) {
    using Main = int (*)(int, char**, std::ostream&, std::ostream&);
    const std::tuple<Main, const char*, int> tools[] = {
        {StatMain, "lmcfs-stat", 1},
        {GcMain, "lmcfs-gc", 1},
        {FsckMain, "lmcfs-fsck", store::kFsckOperationalError}};
    for (const auto& [main, name, rc] : tools) {
      auto r = RunTool(main, name, {target});
      EXPECT_EQ(r.rc, rc) << name << " " << target << ": " << r.err;
      EXPECT_EQ(r.err.rfind(std::string(name) + ": " + target, 0), 0u) << r.err;
      EXPECT_NE(r.err.find("expected an lmcfs mountpoint or a store directory"), std::string::npos) << r.err;
    }
  }
  auto r = RunTool(FsckMain, "lmcfs-fsck", {store_dir_, "--no-such-option"});
  EXPECT_EQ(r.rc, store::kFsckUsage) << r.err;
}

TEST_F(ToolsOffline, RetentionListsAndDeletesOnlyWithYes) {
  const std::string ck = tmp_.path() + "/ckpts";
  for (int i = 1; i <= 12; i++) std::filesystem::create_directories(ck + "/step-" + std::to_string(i * 100));
  std::filesystem::create_directories(ck + "/other");
  // Links named like checkpoints are not checkpoints: not counted among
  // the last two kept (step-9999 would be the newest), never deleted or
  // followed; a file so named is not a directory.
  const std::string outside = tmp_.path() + "/outside";
  std::filesystem::create_directories(outside + "/keep");
  std::filesystem::create_directory_symlink(ck + "/step-100", ck + "/step-9999");
  std::filesystem::create_directory_symlink(outside, ck + "/step-150");
  std::ofstream(ck + "/step-160") << "a file";
  Close();
  auto r = RunTool(GcMain, "lmcfs-gc",
                   {store_dir_, "--dir", ck, "--pattern", "step-*", "--keep-last", "2", "--keep-every", "5"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // Version order: step-100 .. step-1200; keep 100, 600, 1100 (every 5th) and 1100, 1200 (last 2).
  for (int s : {200, 300, 400, 500, 700, 800, 900, 1000})
    EXPECT_NE(r.out.find("  step-" + std::to_string(s) + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would delete 8 of 12"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(ck + "/step-200"));
  r = RunTool(
      GcMain, "lmcfs-gc",
      {store_dir_, "--dir", ck, "--pattern", "step-*", "--keep-last", "2", "--keep-every", "5", "--yes"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(ck)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"other", "step-100", "step-600", "step-1100", "step-1200",
                                         "step-9999", "step-150", "step-160"}));
  EXPECT_TRUE(std::filesystem::exists(outside + "/keep"));
}

// ------------------------------------------------------------ control channel in-process

class ToolsControl : public ToolsOffline {
 protected:
  void StartServer(uid_t owner = 0) {
    fs::Filesystem* f = fs_.get();
    auto daemon = [f] {
      return fs::control::DaemonStats{f->NamedCounters(), f->DeltaCounters(), f->GpuState(), "all",
                                      f->MemoryCounters()};
    };
    ASSERT_TRUE(server_.Start(f->store(), store_dir_, owner, daemon).ok());
  }
  json Call(const json& req, std::vector<json>* events = nullptr) {
    std::string resp;
    Status s = fs::control::Call(
        fs::control::SocketPath(store_dir_), req.dump(),
        [&](const std::string& e) {
          if (events) events->push_back(json::parse(e));
        },
        &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? json::parse(resp) : json();
  }
  void TearDown() override {
    server_.Stop();
    ToolsOffline::TearDown();
  }
  fs::control::ControlServer server_;
};

// The codec paths in lmcfs-stat (docs/ARCHITECTURE.md, "GPU codec in the
// mount"): a filesystem with a fake GPU codec, its counters over the socket,
// and the lines lmcfs-stat prints for them.
class ToolsGpu : public ToolsControl {
 protected:
  void SetUp() override {
    store_dir_ = tmp_.path() + "/store";
    fo_.chunk_size = 256 << 10;
    fo_.batch_limit = 1 << 20;
    fo_.gpu = &fake_;
    fo_.gpu_min_batch_bytes = 256 << 10;
    Open();
  }
  lmc::testing::FakeGpuCodec fake_;
};

TEST_F(ToolsGpu, StatShowsWhatEachCodecPathDid) {
  StartServer();
  Write(fs::kRootIno, "a.bin", RandomData(3 << 20, 1));
  Write(fs::kRootIno, "b.bin", RandomData(5 << 20, 2));
  json r = Call({{"op", "stat"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  const json& d = r["result"]["daemon"];
  EXPECT_EQ(d["cpu_encode_chunks"].get<uint64_t>() + d["gpu_encode_chunks"].get<uint64_t>(),
            d["chunks_written"].get<uint64_t>());
  EXPECT_EQ(d["cpu_encode_bytes"].get<uint64_t>() + d["gpu_encode_bytes"].get<uint64_t>(), 8u << 20);
  EXPECT_EQ(d["gpu_encode_chunks"].get<uint64_t>(), fake_.stats().encode_chunks);
  EXPECT_EQ(d["gpu_failed_batches"].get<uint64_t>(), 0u);
  EXPECT_EQ(d["gpu"], "fake GPU codec (CPU) (active)");
  std::ostringstream out;
  PrintStat(r["result"].dump(), true, out);
  const std::string cpu_bytes = std::to_string(d["cpu_encode_bytes"].get<uint64_t>());
  const std::string gpu_bytes = std::to_string(d["gpu_encode_bytes"].get<uint64_t>());
  EXPECT_NE(out.str().find("  codec: CPU encoded " + cpu_bytes + " in " +
                           std::to_string(d["cpu_encode_chunks"].get<uint64_t>()) + " chunks, GPU encoded " +
                           gpu_bytes + " in " + std::to_string(d["gpu_encode_chunks"].get<uint64_t>()) +
                           " chunks; reads: CPU decoded "),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  GPU: fake GPU codec (CPU) (active); batches: " +
                           std::to_string(d["gpu_batches"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << out.str();
}

TEST(ToolsStatText, CodecLinesWithAFailedGpuAndWithoutOne) {
  json doc = {{"entries", json::array()},
              {"totals",
               {{"files", 0},
                {"dirs", 1},
                {"inodes", 1},
                {"logical", 0},
                {"stored", 0},
                {"ratio", 0.0},
                {"charged", 0},
                {"saved_codec", 0},
                {"saved_delta", 0},
                {"saved_dedup", 0},
                {"delta_chunks", 0},
                {"packs", 0},
                {"pack_bytes", 0},
                {"live_bytes", 0},
                {"live_fraction", 0.0}}},
              {"daemon",
               {{"uptime_s", 10.0},
                {"write_bytes", 0},
                {"write_calls", 0},
                {"chunks_written", 0},
                {"cache_hits", 0},
                {"cache_misses", 0},
                {"eio", 0},
                {"store_corruptions", 0},
                {"cpu_encode_chunks", 812},
                {"cpu_encode_bytes", uint64_t{1288490189}},
                {"gpu_encode_chunks", 3},
                {"gpu_encode_bytes", 3 << 20},
                {"cpu_decode_chunks", 0},
                {"cpu_decode_bytes", 0},
                {"gpu_decode_chunks", 0},
                {"gpu_decode_bytes", 0},
                {"gpu_batches", 1},
                {"gpu_failed_batches", 1},
                {"gpu_fallback_chunks", 12},
                {"write_budget_wait_ns", uint64_t{1'250'000'000}},
                {"commit_wait_ns", 4'000'000},
                {"gpu_feeder_idle_ns", uint64_t{9'000'000'000}},
                {"gpu_feeder_prepare_ns", 20'000'000},
                {"gpu_feeder_finish_ns", 30'000'000},
                {"gpu_encode_call_ns", 5'000'000},
                {"gpu_decode_call_ns", 0},
                {"gpu_read_batch_ns", 0},
                {"gpu", "NVIDIA H100 (off after a device failure: I/O error: CUDA error 700)"}}}};
  std::ostringstream out;
  PrintStat(doc.dump(), false, out);
  EXPECT_NE(out.str().find(
                "  codec: CPU encoded 1.20 GiB in 812 chunks, GPU encoded 3.00 MiB in 3 chunks; reads: CPU "
                "decoded 0 B in 0 chunks, GPU decoded 0 B in 0 chunks\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find(
                "  GPU: NVIDIA H100 (off after a device failure: I/O error: CUDA error 700); batches: 1, "
                "failed: 1 (12 chunks redone on the CPU)\n"),
            std::string::npos)
      << out.str();
  {
    // Frames the GPU wrote that did not decode back there (the codec's
    // verify_encode): said on the same line.
    json d2 = doc;
    d2["daemon"]["gpu_failed_batches"] = 0;
    d2["daemon"]["gpu_verify_failures"] = 2;
    d2["daemon"]["gpu"] =
        "NVIDIA H100 (off after a device failure: 2 frame(s) it wrote did not decode back on it)";
    std::ostringstream o2;
    PrintStat(d2.dump(), false, o2);
    EXPECT_NE(
        o2.str().find("  GPU: NVIDIA H100 (off after a device failure: 2 frame(s) it wrote did not decode "
                      "back on it); batches: 1, frames that did not decode back on the GPU: 2 (encoded on "
                      "the CPU instead)\n"),
        std::string::npos)
        << o2.str();
  }
  EXPECT_NE(
      out.str().find("  waits: writers 1.25 s for the write budget (encoders behind), 0.00 s for commits\n"),
      std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  GPU time: device encode calls 0.01 s, decode calls 0.00 s; feeder idle 9.00 s, "
                           "preparing 0.02 s, finishing 0.03 s; read-ahead batches 0.00 s\n"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(out.str().find("memory:"), std::string::npos) << out.str();  // a daemon without the object
  doc["daemon"]["memory"] = {{"resident_bytes", uint64_t{700} << 20},
                             {"peak_resident_bytes", uint64_t{800} << 20},
                             {"write_inflight_bytes", uint64_t{96} << 20},
                             {"write_budget_bytes", uint64_t{256} << 20},
                             {"commit_queue_bytes", uint64_t{40} << 20},
                             {"commit_queue_limit", uint64_t{64} << 20},
                             {"write_block_bytes", uint64_t{320} << 20},
                             {"write_block_pool_bytes", uint64_t{64} << 20},
                             {"chunk_cache_bytes", uint64_t{64} << 20},
                             {"chunk_cache_capacity", uint64_t{64} << 20},
                             {"delta_cache_bytes", uint64_t{200} << 20},
                             {"delta_cache_capacity", uint64_t{256} << 20},
                             {"base_cache_bytes", 0},
                             {"base_cache_capacity", uint64_t{256} << 20},
                             {"frame_pool_bytes", uint64_t{12} << 20},
                             {"frame_pool_capacity", uint64_t{128} << 20},
                             {"index_memtable_bytes", uint64_t{3} << 20},
                             {"index_table_reader_bytes", 512 << 10},
                             {"index_block_cache_bytes", uint64_t{10} << 20},
                             {"index_block_cache_capacity", uint64_t{72} << 20},
                             {"trims", 3},
                             {"trim_returned_bytes", uint64_t{150} << 20}};
  std::ostringstream mem;
  PrintStat(doc.dump(), false, mem);
  EXPECT_NE(
      mem.str().find("  memory: resident 700.00 MiB (peak 800.00 MiB); writes in flight 96.00 MiB of "
                     "256.00 MiB, frames at the committer 40.00 MiB of 64.00 MiB, write blocks 320.00 MiB "
                     "(64.00 MiB idle), chunk cache 64.00 MiB of "
                     "64.00 MiB, bases of the next save 200.00 MiB "
                     "of 256.00 MiB, decoded delta bases 0 B of 256.00 MiB, idle frame buffers 12.00 "
                     "MiB of 128.00 MiB\n  index memory: memtables 3.00 MiB, table readers 512.00 KiB, "
                     "block caches 10.00 MiB of 72.00 MiB\n"),
      std::string::npos)
      << mem.str();
  EXPECT_NE(mem.str().find("  memory given back when quiet: 150.00 MiB in 3 trims\n"), std::string::npos)
      << mem.str();
  // A daemon of an older version (no codec counters): no codec lines.
  for (const char* k : {"cpu_encode_chunks", "gpu"}) doc["daemon"].erase(k);
  std::ostringstream old;
  PrintStat(doc.dump(), false, old);
  EXPECT_EQ(old.str().find("codec:"), std::string::npos) << old.str();
}

TEST_F(ToolsControl, StatGcFsckOverTheSocket) {
  StartServer();
  struct stat st;
  ASSERT_EQ(::stat(fs::control::SocketPath(store_dir_).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  Write(fs::kRootIno, "x.bin", RandomData(700 << 10, 8));
  json r = Call({{"op", "stat"}, {"paths", {"/x.bin"}}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["v"], fs::control::kProtocolVersion);
  EXPECT_EQ(r["result"]["entries"].size(), 1u);
  EXPECT_EQ(r["result"]["entries"][0]["logical"], 700u << 10);
  EXPECT_GT(r["result"]["daemon"]["write_bytes"].get<uint64_t>(), 0u);

  r = Call({{"op", "fsck"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["exit_code"], 0);
  EXPECT_TRUE(r["result"]["online"].get<bool>());
  r = Call({{"op", "fsck"}, {"repair", true}});
  EXPECT_FALSE(r["ok"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find("unmount"), std::string::npos);

  std::vector<json> events;
  r = Call({{"op", "gc"}, {"dry_run", true}}, &events);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_TRUE(r["result"]["dry_run"].get<bool>());

  r = Call({{"op", "launch"}});
  EXPECT_FALSE(r["ok"].get<bool>());
  // A missing path is listed, as ls and du go on past one: the others shown.
  r = Call({{"op", "stat"}, {"paths", {"/missing"}}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["not_found"], json::array({"/missing"}));
  EXPECT_EQ(r["result"]["entries"], json::array());
  r = Call({{"op", "stat"}, {"paths", {"/missing", "/x.bin", "/gone/"}}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["not_found"], json::array({"/missing", "/gone"}));
  ASSERT_EQ(r["result"]["entries"].size(), 1u);
  EXPECT_EQ(r["result"]["entries"][0]["path"], "/x.bin");
  // A newer client's version is refused by name.
  std::string resp;
  ASSERT_TRUE(fs::control::Call(fs::control::SocketPath(store_dir_), R"({"op":"stat"})", {}, &resp).ok());
  EXPECT_TRUE(json::parse(resp)["ok"].get<bool>());
}

// Over the socket a name that is not UTF-8 travels as {"hex": ...} and loses
// no byte; a malformed one is refused as a bad request, not a crash.
TEST_F(ToolsControl, NamesThatAreNotUtf8TravelAsHex) {
  StartServer();
  const uint64_t d = Mkdir(fs::kRootIno, "d\xbd");
  Write(d, "x", RandomData(100 << 10, 9));
  Write(fs::kRootIno, "dx", RandomData(100 << 10, 10));
  EXPECT_EQ(fs::control::NameToJson("/d\xbd"), json({{"hex", "2f64bd"}}));
  EXPECT_EQ(fs::control::NameToJson("/d\u00bd"), json("/d\u00bd"));  // valid: kept as it is
  for (const std::string name : {"/", "/d\xbd", "/d\xbd/x", "/\xff\x80\x01"}) {
    auto back = fs::control::NameFromJson(json::parse(fs::control::NameToJson(name).dump()));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, name);
  }
  json r = Call({{"op", "stat"}, {"paths", {fs::control::NameToJson("/d\xbd")}}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  ASSERT_EQ(r["result"]["entries"].size(), 2u) << r.dump();
  EXPECT_EQ(r["result"]["entries"][0]["path"], "/d\\xbd");
  EXPECT_EQ(r["result"]["entries"][1]["path_hex"], "2f64bd2f78");
  EXPECT_EQ(r["result"]["entries"][1]["logical"], 100u << 10);
  for (const json& bad : {json({{"hex", "2f6"}}), json({{"hex", "2f6g"}}), json({{"hex", 7}}), json(3),
                          json({{"hex", "2f"}, {"more", 1}})}) {
    r = Call({{"op", "stat"}, {"paths", {bad}}});
    EXPECT_FALSE(r["ok"].get<bool>()) << bad;
    EXPECT_EQ(r["code"], "bad_request") << r.dump();
  }
  r = Call({{"op", "stat"}, {"paths", "/dx"}});
  EXPECT_EQ(r["code"], "bad_request") << r.dump();
  r = Call({{"op", "fsck"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["exit_code"], 0);
}

TEST_F(ToolsControl, GcDuringConcurrentWritesLosesNothing) {
  Close();
  Open(/*pack_limit=*/256 << 10);  // many small packs to compact
  // Half of the data dead.
  for (int i = 0; i < 8; i++) Write(fs::kRootIno, "old" + std::to_string(i), RandomData(512 << 10, 100 + i));
  for (int i = 0; i < 8; i += 2) ASSERT_EQ(fs_->Unlink(fs::kRootIno, "old" + std::to_string(i)), 0);
  StartServer();
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop || i < 6; i++) {
      Write(fs::kRootIno, "new" + std::to_string(i), RandomData((256 << 10) + i * 977, 200 + i));
      written = i + 1;
    }
  });
  std::vector<json> events;
  json r = Call({{"op", "gc"}, {"threshold", 0.9}}, &events);
  stop = true;
  writer.join();
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_GT(r["result"]["bytes_reclaimed"].get<uint64_t>(), 0u);
  EXPECT_GT(r["result"]["packs_rewritten"].get<uint64_t>(), 0u);
  EXPECT_FALSE(events.empty());
  for (int i = 1; i < 8; i += 2)
    EXPECT_EQ(Read(fs::kRootIno, "old" + std::to_string(i)), RandomData(512 << 10, 100 + i));
  for (int i = 0; i < written; i++)
    EXPECT_EQ(Read(fs::kRootIno, "new" + std::to_string(i)), RandomData((256 << 10) + i * 977, 200 + i)) << i;
  server_.Stop();
  Close();
  auto f = RunTool(FsckMain, "lmcfs-fsck", {store_dir_});
  EXPECT_EQ(f.rc, 0) << f.out;
  Open();
}

// The peer-credential check: a process running as `nobody` is refused even
// when the socket's mode would let it connect.
TEST_F(ToolsControl, OnlyRootOrTheOwnerMayUseTheChannel) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to nobody";
  const uid_t nobody = 65534;
  StartServer(/*owner=*/0);
  const std::string sock = fs::control::SocketPath(store_dir_);
  ::chmod(tmp_.path().c_str(), 0755);
  ::chmod(store_dir_.c_str(), 0755);
  // Child exit codes: 0 = refused as expected, 1 = connect failed, 2 =
  // served. The child is this binary again, exec'd right after the fork
  // (running on in a copy of this threaded process could block on a lock
  // another thread held at the fork), as ChildCallsTheChannelAsNobody.
  auto as_nobody = [&](const std::string& path) {
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=ToolsControlChild.CallsTheChannelAsNobody";
    std::string env = "LMC_TEST_CHILD_SOCKET=" + path, uid = "LMC_TEST_CHILD_UID=" + std::to_string(nobody);
    char* child_argv[] = {exe.data(), filter.data(), nullptr};
    char* child_env[] = {env.data(), uid.data(), nullptr};
    pid_t pid = fork();
    if (pid == 0) {
      execve(exe.c_str(), child_argv, child_env);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(as_nobody(sock), 1);  // mode 0600: the kernel refuses the connect
  ASSERT_EQ(::chmod(sock.c_str(), 0666), 0);
  EXPECT_EQ(as_nobody(sock), 0);  // SO_PEERCRED: the server refuses
  // Root is served.
  EXPECT_TRUE(Call({{"op", "ping"}})["ok"].get<bool>());
  // The owner is served too.
  server_.Stop();
  StartServer(/*owner=*/nobody);
  ASSERT_EQ(::chmod(sock.c_str(), 0666), 0);
  EXPECT_EQ(as_nobody(sock), 2);
}

// The child of OnlyRootOrTheOwnerMayUseTheChannel (as nobody); skips when
// run on its own.
TEST(ToolsControlChild, CallsTheChannelAsNobody) {
  const char* path = std::getenv("LMC_TEST_CHILD_SOCKET");
  const char* uid = std::getenv("LMC_TEST_CHILD_UID");
  if (!path || !uid) GTEST_SKIP() << "run by ToolsControl.OnlyRootOrTheOwnerMayUseTheChannel";
  const uid_t id = static_cast<uid_t>(std::strtoul(uid, nullptr, 10));
  if (setgid(id) != 0 || setuid(id) != 0) _exit(3);
  std::string resp;
  Status s = fs::control::Call(path, R"({"op":"stat"})", {}, &resp);
  if (!s.ok()) _exit(1);
  json j = json::parse(resp, nullptr, false);
  _exit(j.is_object() && !j.value("ok", true) && j.value("code", "") == "permission_denied" ? 0 : 2);
}

}  // namespace
}  // namespace lmc::tools
