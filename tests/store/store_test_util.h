// Helpers shared by the store tests: a trivial frame codec (so pack, index
// and crash logic are tested without compression), temp directories and
// chunk generators.
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lmc/bytes.h"
#include "lmc/store/permissions.h"
#include "lmc/store/store.h"

namespace lmc::store::testing {

// Frame of the test codec: u8 delta flag, u64 Checksum-like sum of the
// decoded bytes, then the decoded bytes (XORed with the base for deltas).
inline uint64_t TestSum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::vector<uint8_t> TestFrame(const std::vector<uint8_t>& data,
                                      const std::vector<uint8_t>* base = nullptr) {
  std::vector<uint8_t> f(9 + data.size());
  f[0] = base ? 1 : 0;
  StoreLE64(f.data() + 1, TestSum(data.data(), data.size()));
  for (size_t i = 0; i < data.size(); ++i) f[9 + i] = data[i] ^ (base ? (*base)[i] : 0);
  return f;
}

class TestCodec final : public FrameCodec {
 public:
  Result<size_t> Decode(const uint8_t* frame, size_t len, const uint8_t* base, size_t base_len, uint8_t* dst,
                        size_t cap, Workspace&) const override {
    if (len < 9) return Status::Corruption("test frame too short");
    size_t n = len - 9;
    if (cap < n) return Status::InvalidArgument("small buffer");
    if (frame[0] > 1) return Status::Corruption("test frame bad flag");
    if (frame[0] == 1 && (!base || base_len != n)) return Status::InvalidArgument("needs base");
    for (size_t i = 0; i < n; ++i) dst[i] = frame[9 + i] ^ (frame[0] ? base[i] : 0);
    if (LoadLE64(frame + 1) != TestSum(dst, n)) return Status::Corruption("test frame checksum mismatch");
    return n;
  }
};

inline const FrameCodec* TestCodecInstance() {
  static TestCodec c;
  return &c;
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

inline ChunkKey KeyOf(const std::vector<uint8_t>& d) { return ChunkKey::Of(d.data(), d.size()); }

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lmc_store_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string store() const { return path_ + "/store"; }

 private:
  std::string path_;
};

inline StoreOptions TestOptions(Env* env = nullptr) {
  StoreOptions o;
  o.env = env;
  o.codec = TestCodecInstance();
  o.verify_content_hash = true;
  // SHA-256 keys (KeyOf): the stores of format 1-3 that older lmcfs made;
  // store_fast_keys_test.cc covers the XXH3 stores that are the default.
  o.fast_keys_new_stores = false;
  return o;
}

inline std::unique_ptr<Store> OpenOrDie(const std::string& dir, const StoreOptions& o) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Reads a chunk and returns its bytes; empty vector + failure on error.
inline Result<std::vector<uint8_t>> ReadAll(Store& s, const ChunkKey& k) {
  LMC_ASSIGN_OR_RETURN(ChunkInfo info, s.GetChunkInfo(k));
  std::vector<uint8_t> out(info.decoded_len);
  Workspace ws;
  LMC_ASSIGN_OR_RETURN(size_t n, s.ReadChunk(k, out.data(), out.size(), ws));
  out.resize(n);
  return out;
}

// Adds a chunk and an extent (inode, 0) referencing it, as the filesystem will.
inline void AddFileChunk(Batch& b, uint64_t inode, const std::vector<uint8_t>& data) {
  auto f = TestFrame(data);
  ChunkKey k = KeyOf(data);
  b.AddChunk(k, f, static_cast<uint32_t>(data.size()));
  Extent e;
  e.length = static_cast<uint32_t>(data.size());
  e.chunk = k;
  b.Put(Cf::kExtents, ExtentKey(inode, 0), EncodeExtent(e));
}

// Files as the crash tests model them: inode -> the bytes of its one chunk.
using FileModel = std::map<uint64_t, std::vector<uint8_t>>;

// Every file of `acked` reads back exactly, or, for a file of `maybe` (a
// commit that failed at a crash), as that version; a file `maybe` maps to
// no bytes was deleted by that commit and may be gone (a journaled store
// applies a failed commit whose journal record is durable at the next open).
inline void ExpectFiles(Store& s, const FileModel& acked, const FileModel& maybe, const std::string& where) {
  for (const auto& [ino, data] : acked) {
    auto v = s.Get(Cf::kExtents, ExtentKey(ino, 0));
    auto gone = maybe.find(ino);
    if (!v.ok() && v.status().IsNotFound() && gone != maybe.end() && gone->second.empty()) continue;
    ASSERT_TRUE(v.ok()) << where << " inode " << ino;
    auto e = DecodeExtent(*v);
    ASSERT_TRUE(e.has_value());
    auto r = ReadAll(s, e->chunk);
    ASSERT_TRUE(r.ok()) << where << " inode " << ino << ": " << r.status().ToString();
    auto mit = maybe.find(ino);
    if (*r != data) {
      ASSERT_TRUE(mit != maybe.end() && *r == mit->second) << where << " inode " << ino << " has wrong bytes";
    }
  }
}

// Opens the index of a closed store with RocksDB itself (to damage it, or
// to make it look like an older store's) and calls fn with the column
// family handles in the store's order: default, chunks, packs, inodes,
// dirents, extents, meta.
inline void WithRawIndex(
    const std::string& store_dir,
    const std::function<void(rocksdb::DB*, const std::vector<rocksdb::ColumnFamilyHandle*>&)>& fn) {
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const char* n : {"default", "chunks", "packs", "inodes", "dirents", "extents", "meta"})
    cfs.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> h;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), store_dir + "/index", cfs, &h, &db).ok());
  fn(db, h);
  for (auto* x : h) EXPECT_TRUE(db->DestroyColumnFamilyHandle(x).ok());
  delete db;
  // RocksDB's own modes are the umask's; the store's are owner-only
  // (docs/ARCHITECTURE.md, "Store permissions"), as fsck checks.
  auto loose = FindLoosePaths(store_dir, ::geteuid());
  ASSERT_TRUE(loose.ok()) << loose.status().ToString();
  ASSERT_TRUE(TightenPaths(*loose).ok());
}

}  // namespace lmc::store::testing
