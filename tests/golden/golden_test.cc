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

#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"

namespace lmc {
namespace {

namespace fsys = std::filesystem;
using store::ChunkKey;

const fsys::path kV1 = fsys::path(LMC_GOLDEN_DIR) / "v1";

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
  std::map<std::string, ManifestChunk> chunks;            // key hex -> entry
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
  fsys::copy(kV1 / "store", dir, fsys::copy_options::recursive);
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
    // The key is SHA-256 of the original bytes: equal hashes, equal bytes.
    EXPECT_EQ(ChunkKey::Of(out.data(), out.size()).ToHex(), hex);
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

}  // namespace
}  // namespace lmc
