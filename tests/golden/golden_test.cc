// Golden files (docs/FORMAT.md, "Golden files"): what an earlier lmc wrote
// at each format version must keep decoding to the same bytes. The files
// are checked in under tests/golden/v<N>/ (made by make_golden.cc through
// scripts/make_golden.sh); these tests only read them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fs_tree.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/snapshots.h"
#include "lmc/store/extent.h"
#include "lmc/store/permissions.h"
#include "lmc/store/store.h"

namespace lmc {
namespace {

namespace fsys = std::filesystem;
using golden::Hex;
using store::ChunkKey;

const fsys::path kV1 = fsys::path(LMC_GOLDEN_DIR) / "v1";

// Copies a checked-in store to `to`, owner-only as lmcfs keeps its stores
// (a checkout has the umask's modes; fsck reports group or other bits).
void CopyGoldenStore(const fsys::path& from, const fsys::path& to) {
  fsys::copy(from, to, fsys::copy_options::recursive);
  auto loose = store::FindLoosePaths(to.string(), ::geteuid());
  ASSERT_TRUE(loose.ok()) << loose.status().ToString();
  ASSERT_TRUE(store::TightenPaths(*loose).ok());
}

std::vector<uint8_t> ReadAll(const fsys::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << "missing golden file " << p;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(GoldenV1, FrameDecodesToItsBytes) {
  const auto frame = ReadAll(kV1 / "frame_bf16.lmcf");
  const auto want = ReadAll(kV1 / "frame_bf16.raw");
  auto info = ReadFrameInfo(frame.data(), frame.size());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->version, 1);
  EXPECT_EQ(info->dtype, DType::kBF16);
  EXPECT_FALSE(info->xor_delta);
  EXPECT_EQ(info->frame_size, frame.size());
  ASSERT_EQ(info->decoded_size, want.size());
  Workspace ws;
  std::vector<uint8_t> out(want.size());
  auto n = DecodeChunk(frame.data(), frame.size(), nullptr, 0, out.data(), out.size(), ws);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, want.size());
  EXPECT_TRUE(out == want) << "frame decodes to other bytes";
}

TEST(GoldenV1, ContainerDecodesToItsBytes) {
  const auto container = ReadAll(kV1 / "container_f32.lmc");
  const auto want = ReadAll(kV1 / "container_f32.raw");
  ASSERT_TRUE(IsContainer(container.data(), container.size()));
  ASSERT_GT(container.size(), 4u);
  EXPECT_EQ(container[4], 1) << "container version";
  auto out = DecompressBuffer(container.data(), container.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->size(), want.size());
  EXPECT_TRUE(*out == want) << "container decodes to other bytes";
}

// A fresh directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fsys::temp_directory_path() / "lmc_golden_XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fsys::remove_all(path_, ec);
  }
  const fsys::path& path() const { return path_; }

 private:
  fsys::path path_;
};

struct ManifestChunk {
  uint32_t decoded_len = 0;
  int depth = 0;
  std::string base;  // hex, or "-"
};

TEST(GoldenV1, StoreReadsBackEveryChunkAndFscksClean) {
  std::map<std::string, ManifestChunk> chunks;                   // key hex -> entry
  std::map<std::pair<uint64_t, uint64_t>, std::string> extents;  // (inode, offset) -> "len key"
  std::ifstream manifest(kV1 / "store.manifest");
  ASSERT_TRUE(manifest);
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream in(line);
    std::string kind, key;
    in >> kind;
    if (kind == "chunk") {
      ManifestChunk c;
      in >> key >> c.decoded_len >> c.depth >> c.base;
      chunks[key] = c;
    } else if (kind == "extent") {
      uint64_t ino, off, len;
      in >> ino >> off >> len >> key;
      extents[{ino, off}] = std::to_string(len) + " " + key;
    }
  }
  ASSERT_EQ(chunks.size(), 3u);

  // Opening may write (recovery, lock files, RocksDB's own files): never
  // open the checked-in copy.
  TempDir tmp;
  const fsys::path dir = tmp.path() / "store";
  CopyGoldenStore(kV1 / "store", dir);
  store::StoreOptions so;
  so.create_if_missing = false;
  so.verify_content_hash = true;
  auto st = store::Store::Open(dir.string(), so);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  store::Store& s = **st;

  Workspace ws;
  for (const auto& [hex, want] : chunks) {
    SCOPED_TRACE(hex);
    auto key = ChunkKey::FromHex(hex);
    ASSERT_TRUE(key.has_value());
    auto info = s.GetChunkInfo(*key);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->decoded_len, want.decoded_len);
    EXPECT_EQ(info->delta_depth, want.depth);
    EXPECT_EQ(info->base ? info->base->ToHex() : "-", want.base);
    std::vector<uint8_t> out(want.decoded_len);
    auto n = s.ReadChunk(*key, out.data(), out.size(), ws);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, want.decoded_len);
    // The key is the store's hash of the original bytes (SHA-256 in v1).
    EXPECT_EQ(s.keys().Of(out.data(), out.size()).ToHex(), hex);
  }

  std::map<std::pair<uint64_t, uint64_t>, std::string> stored;
  Status scan = s.Scan(store::Cf::kExtents, "", [&](std::string_view k, std::string_view v) {
    auto pos = store::ParseExtentKey(k);
    auto e = store::DecodeExtent(v);
    EXPECT_TRUE(pos && e) << "malformed extent";
    if (pos && e) stored[*pos] = std::to_string(e->length) + " " + e->chunk.ToHex();
    return true;
  });
  ASSERT_TRUE(scan.ok()) << scan.ToString();
  EXPECT_EQ(stored, extents);

  auto fsck = s.Fsck({});
  ASSERT_TRUE(fsck.ok()) << fsck.status().ToString();
  EXPECT_EQ(fsck->errors(), 0u) << (fsck->Messages().empty() ? "" : fsck->Messages()[0]);
  EXPECT_EQ(fsck->chunks_checked, chunks.size());
  EXPECT_EQ(fsck->ExitCode(), store::kFsckOk);
}

// The fs-store golden: a small filesystem written through fs::Filesystem
// with reverse deltas (make_golden.cc, MakeFsStore), and the lines
// fs_tree.h's DescribeFs gave for it then (fs-store.manifest).
class GoldenV1Fs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream manifest(kV1 / "fs-store.manifest");
    ASSERT_TRUE(manifest) << "missing fs-store.manifest";
    for (std::string line; std::getline(manifest, line);)
      if (!line.empty() && line[0] != '#') want_.push_back(line);
    // Opening may write: never open the checked-in copy.
    CopyGoldenStore(kV1 / "fs-store", dir());
  }
  void TearDown() override {
    if (fs_) {
      Status s = fs_->Shutdown();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    fs_.reset();
    store_.reset();
  }
  fsys::path dir() const { return tmp_.path() / "fs-store"; }
  void Open(bool read_only) {
    store::StoreOptions so;
    so.create_if_missing = false;
    // Not verify_content_hash: reads decode ahead on the shared pool, whose
    // threads would then hold OpenSSL state LeakSanitizer reports at exit;
    // every file's bytes are checked against the manifest's SHA-256 anyway.
    auto st = store::Store::Open(dir().string(), so);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(st).value();
    fs::FsOptions fo;
    fo.chunk_size = 16 << 10;
    fo.read_only = read_only;
    auto f = fs::Filesystem::Open(store_.get(), dir().string(), fo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  void ExpectFsckClean() {
    auto fsck = store_->Fsck({});
    ASSERT_TRUE(fsck.ok()) << fsck.status().ToString();
    EXPECT_EQ(fsck->errors(), 0u) << (fsck->Messages().empty() ? "" : fsck->Messages()[0]);
    EXPECT_EQ(fsck->ExitCode(), store::kFsckOk);
  }
  std::vector<std::string> LinesStartingWith(const std::vector<std::string>& lines,
                                             std::string_view prefix) const {
    std::vector<std::string> out;
    for (const auto& l : lines)
      if (l.starts_with(prefix)) out.push_back(l);
    return out;
  }
  // The tree lines (entries and xattrs): what a reader sees of the files.
  std::vector<std::string> Tree(const std::vector<std::string>& lines) const {
    std::vector<std::string> out;
    for (const auto& l : lines)
      if ((l.size() > 2 && l[1] == ' ') || l.starts_with("xattr ")) out.push_back(l);
    return out;
  }

  TempDir tmp_;
  std::vector<std::string> want_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<fs::Filesystem> fs_;
};

// Each entry line, without its inode number and hash: "<kind> <path>
// mode=.. nlink=.. size=.." (and target= for symlinks).
std::string Shape(const std::string& line) {
  std::istringstream in(line);
  std::string out, word;
  while (in >> word)
    if (!word.starts_with("ino=") && !word.starts_with("sha256=")) out += (out.empty() ? "" : " ") + word;
  return out;
}

TEST_F(GoldenV1Fs, TreeBytesAndRecordsReadBackAsWrittenAndFsckClean) {
  // The golden holds what it is meant to (so the comparison below covers
  // every kind of record): the tree, a hard link, a symlink, an xattr,
  // delta chunks, lineage records and queued rebases.
  std::vector<std::string> shapes;
  for (const auto& l : want_)
    if (l.size() > 2 && l[1] == ' ' && l[0] != 'd') shapes.push_back(Shape(l));
  EXPECT_EQ(shapes, (std::vector<std::string>{
                        "f /ckpt/best.bin mode=640 nlink=2 size=65536",
                        "f /ckpt/ckpt-step1.bin mode=644 nlink=1 size=65536",
                        "f /ckpt/ckpt-step2.bin mode=640 nlink=2 size=65536",
                        "f /ckpt/ckpt-step3.bin mode=644 nlink=1 size=65536",
                        "l /latest mode=777 nlink=1 size=19 target=ckpt/ckpt-step3.bin",
                    }));
  EXPECT_EQ(LinesStartingWith(want_, "d /ckpt "),
            std::vector<std::string>{"d /ckpt ino=2 mode=750 nlink=2 size=4096"});
  EXPECT_EQ(LinesStartingWith(want_, "xattr "),
            std::vector<std::string>{"xattr /ckpt/best.bin user.lmc.step 32"});
  int deltas = 0;
  for (const auto& l : LinesStartingWith(want_, "extent "))
    if (l.find(" base=-") == std::string::npos) deltas++;
  EXPECT_GT(deltas, 0) << "no delta chunk in the golden";
  EXPECT_GT(LinesStartingWith(want_, "meta " + Hex("lineage/")).size(), 0u);
  EXPECT_GT(LinesStartingWith(want_, "meta " + Hex("rebase/")).size(), 0u);

  Open(/*read_only=*/true);
  // Every line: the same tree, bytes (SHA-256 of each file read), xattrs,
  // extents and chunks (depth, base), lineage and rebase records.
  EXPECT_EQ(golden::DescribeFs(*fs_, *store_), want_);
  ExpectFsckClean();
}

TEST_F(GoldenV1Fs, QueuedRebasesAreWorkedOffByTheNextMount) {
  Open(/*read_only=*/false);
  fs::DeltaOptions d;
  d.max_chain = 4;
  fs::InstallSnapshotPolicy(fs_.get(), d);
  fs_->FlushBackground();
  // The four queued records (step 2's chunks onto step 3's) are read and
  // done: step 2's chunks become deltas.
  std::map<std::string, uint64_t> counters;
  for (const auto& [name, value] : fs_->DeltaCounters()) counters[name] = value;
  EXPECT_EQ(counters["rebased"], 4u);
  EXPECT_EQ(counters["rebase_errors"], 0u);
  EXPECT_EQ(counters["rebase_pending"], 0u);
  const auto got = golden::DescribeFs(*fs_, *store_);
  EXPECT_EQ(LinesStartingWith(got, "meta " + Hex("rebase/")), std::vector<std::string>{})
      << "rebase records left";
  // The files read the same; their chunks may now be deltas.
  EXPECT_EQ(Tree(got), Tree(want_));
  ExpectFsckClean();
}

}  // namespace
}  // namespace lmc
