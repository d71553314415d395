// The extents column family's encoding, shared by the filesystem (which
// owns the column family) and fsck (which counts chunk references from it).
// docs/FORMAT.md, "Chunk store", "Column family extents".
//
// Reference-counting contract: every non-hole extent value held in the
// extents column family is exactly one reference to its chunk. Whoever puts
// such a value must, in the same Batch, take that reference (AddChunk or
// Ref), and whoever deletes or overwrites one must release it (Unref) in
// the same Batch. fsck recounts references this way (plus one per delta
// dependant) and reports any difference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lmc/store/chunk_key.h"

namespace lmc::store {

// Key: inode number u64 big-endian, then the extent's file offset u64
// big-endian (16 bytes), so one inode's extents are adjacent and in order.
std::string ExtentKey(uint64_t inode, uint64_t file_offset);
// Parses an extent key; nullopt if not 16 bytes.
std::optional<std::pair<uint64_t, uint64_t>> ParseExtentKey(std::string_view key);
// The 8-byte prefix of all of one inode's extent keys.
std::string ExtentKeyPrefix(uint64_t inode);

struct Extent {
  static constexpr uint8_t kVersion = 1;
  static constexpr uint8_t kFlagHole = 1;     // no chunk: reads as zeros, holds no reference
  static constexpr size_t kEncodedSize = 48;  // fs may append its own bytes after these

  uint8_t flags = 0;
  uint32_t length = 0;        // bytes of the file this extent covers
  ChunkKey chunk;             // ignored for holes
  uint32_t chunk_offset = 0;  // where the extent starts inside the decoded chunk
  std::string trailer;        // fs-owned bytes after the first 48; opaque to the store

  bool hole() const { return flags & kFlagHole; }
};

// Value layout (little-endian):
//   0 u8 version (1)   1 u8 flags   2 u16 reserved (0)   4 u32 length
//   8 [32] chunk key   40 u32 chunk offset   44 u32 reserved (0)   48.. trailer
std::string EncodeExtent(const Extent& e);
// nullopt if shorter than 48 bytes, of another version, or with unknown flags.
std::optional<Extent> DecodeExtent(std::string_view value);

}  // namespace lmc::store
