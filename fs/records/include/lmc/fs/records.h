// Encodings of the filesystem's column families (docs/FORMAT.md,
// "8. Filesystem metadata"). Integers little-endian in values, big-endian in keys
// (so one directory's entries, and one inode's extents, are adjacent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "lmc/status.h"
#include "lmc/store/chunk_key.h"

namespace lmc::store {
class Store;
}

namespace lmc::fs {

// The root directory's inode number (FUSE_ROOT_ID).
inline constexpr uint64_t kRootIno = 1;

// Wall-clock time in nanoseconds, as inode timestamps record it.
int64_t NowNs();

// inodes: key = ino u64 BE. Value version 1:
//   0 u8 version  1..3 reserved  4 u32 mode  8 u32 uid  12 u32 gid
//   16 u32 nlink  20 u32 rdev  24 u64 size  32 u64 stored bytes
//   40 i64 atime ns  48 i64 mtime ns  56 i64 ctime ns  64.. symlink target
struct InodeRec {
  uint32_t mode = 0, uid = 0, gid = 0, nlink = 0, rdev = 0;
  uint64_t size = 0;
  uint64_t stored = 0;  // sum of the extents' shares of their frames (st_blocks)
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  std::string symlink;
};
std::string InodeKey(uint64_t ino);
std::string EncodeInode(const InodeRec& r);
std::optional<InodeRec> DecodeInode(std::string_view v);

// dirents: key = parent u64 BE + name. Value: u64 ino, u32 mode (S_IFMT).
std::string DirentKey(uint64_t parent, std::string_view name);
std::string DirentPrefix(uint64_t parent);
struct DirentVal {
  uint64_t ino = 0;
  uint32_t mode = 0;
};
std::string EncodeDirent(const DirentVal& d);
std::optional<DirentVal> DecodeDirent(std::string_view v);

// meta keys.
inline constexpr std::string_view kMetaNextIno = "fs/next_ino";      // u64 LE
inline constexpr std::string_view kMetaFormat = "fs/format";         // "1"
inline constexpr std::string_view kMetaOrphanPrefix = "fs/orphan/";  // + ino u64 BE: unlinked, still open
std::string OrphanKey(uint64_t ino);
inline constexpr std::string_view kMetaXattrPrefix = "fs/xattr/";  // + ino u64 BE + name: value
std::string XattrPrefix(uint64_t ino);
// + a chunk key (32 bytes), empty value: the files using that chunk may
// hold an old frame length for it (a re-encoding: gc's dead-base rewrite,
// a rebase of a chunk other files share); deleted once they were told.
inline constexpr std::string_view kMetaReencodeRefreshPrefix = "reencode-refresh/";
std::string ReencodeRefreshKey(const store::ChunkKey& key);

// A data extent in memory. Its store value is lmc/store/extent.h with an
// 8-byte trailer: u32 frame length, u32 decoded length of the chunk, so
// reads size their buffer and st_blocks is kept without asking the store.
struct ExtentRec {
  uint32_t length = 0;
  store::ChunkKey key;
  uint32_t chunk_offset = 0;
  uint32_t frame_len = 0;
  uint32_t decoded_len = 0;
  // This extent's share of the stored frame, in bytes.
  uint64_t Stored() const { return decoded_len ? uint64_t{frame_len} * length / decoded_len : 0; }
};
std::string EncodeExtentRec(const ExtentRec& e);
std::optional<ExtentRec> DecodeExtentRec(std::string_view v);

// Where files use chunks: each data extent (inode, file offset) naming one
// of `keys`, in key order. One scan of the extents column family, so for a
// set of chunks at a time (those a maintenance run re-encoded).
struct ExtentPlace {
  uint64_t ino = 0, offset = 0;
  store::ChunkKey key;
};
using ChunkKeySet = std::unordered_set<store::ChunkKey, store::ChunkKeyHash>;
Result<std::vector<ExtentPlace>> FindExtentsUsing(store::Store* st, const ChunkKeySet& keys);

}  // namespace lmc::fs
