// Byte layouts of the store's on-disk structures: pack header, record
// header, chunk and pack index values. Each one is drawn in
// docs/FORMAT.md, "Chunk store" under the section named next to it.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "lmc/bytes.h"
#include "lmc/status.h"
#include "lmc/store/chunk_key.h"

namespace lmc::store::fmt {

// Store config file ("Config file").
// The newest format this lmcfs reads and writes (docs/FORMAT.md, "Config
// file"). A store is created as 4 (XXH3 chunk keys, the default), or with
// SHA-256 keys as 1 (older lmcfs read it too) or as 3 when its index is
// journaled.
inline constexpr uint32_t kFormatVersion = 4;
// 2: owner-scoped chunk keys (dedup=uid); a store below is raised to it by
// the first commit that writes one.
inline constexpr uint32_t kFormatVersionOwnerKeys = 2;
// 3: the index is journaled (CONFIG index_journal=1; a new POSIX store).
inline constexpr uint32_t kFormatVersionJournal = 3;
// 4: chunk keys are XXH3-128 under the store's secret (CONFIG hash=xxh3-128,
// hash_secret=; KeyScheme), and dedup hits compare bytes.
inline constexpr uint32_t kFormatVersionFastKeys = 4;
inline constexpr uint32_t kFormatVersionFirst = 1;
inline constexpr char kConfigName[] = "CONFIG";
inline constexpr char kLockName[] = "LOCK";
inline constexpr char kIndexDir[] = "index";
inline constexpr char kPackDir[] = "packs";

// Pack header ("Pack file").
inline constexpr char kPackMagic[8] = {'L', 'M', 'C', 'P', 'A', 'C', 'K', '1'};
inline constexpr uint32_t kPackVersion = 1;
inline constexpr size_t kPackHeaderSize = 32;

// Record ("Record").
inline constexpr char kRecordMagic[4] = {'L', 'M', 'C', 'R'};
inline constexpr size_t kRecordHeaderSize = 64;
inline constexpr size_t kRecordChecksumOffset = 56;
inline constexpr uint32_t kRecordOwnerScoped = 1;  // record flags bit 0: the key is owner-scoped
inline constexpr uint32_t kMaxFrameLen = (1u << 30) + (1u << 16);

// Marker of a chunk kept at refcount 0 by an in-memory pin, in the default
// column family ("Column family default"): prefix + the 32-byte key, empty value.
inline constexpr char kPinnedDeadPrefix[] = "pinned-dead/";
inline std::string PinnedDeadKey(const ChunkKey& k) {
  return std::string(kPinnedDeadPrefix) + std::string(k.view());
}

// A journaled store's local index (docs/FORMAT.md, "Index journal"), in the
// default column family: the id of the journal it materializes (32 hex
// digits), and the sequence number of the last journal record applied
// (u64 LE; every journaled batch carries it).
inline constexpr char kJournalIdKey[] = "journal-id";
inline constexpr char kJournalSeqKey[] = "journal-seq";
// Never present: deleted with a synced write as the durability barrier
// before holes are punched (ARCHITECTURE.md, "Hole punching").
inline constexpr char kPunchBarrierKey[] = "punch-barrier";

// Dependants index ("Dependants index", default column family): prefix +
// base key + dependant key (32 bytes each), empty value, one per chunk entry
// with a base. The marker key says the index is complete (built or
// maintained since the store was created).
inline constexpr char kDependantPrefix[] = "dep/";
inline constexpr char kDepsIndexMarker[] = "deps-index";
inline constexpr char kDepsIndexMarkerValue[] = "1";
inline constexpr size_t kDependantKeySize = sizeof(kDependantPrefix) - 1 + 2 * ChunkKey::kSize;
inline std::string DependantPrefix(const ChunkKey& base) {
  return std::string(kDependantPrefix) + std::string(base.view());
}
inline std::string DependantKey(const ChunkKey& base, const ChunkKey& dep) {
  return DependantPrefix(base) + std::string(dep.view());
}

// Delta chains ("Column family chunks").
inline constexpr uint8_t kMaxDeltaDepth = 8;

std::string PackFileName(uint64_t id);  // "pack-<16 hex digits>.lmp"
std::optional<uint64_t> ParsePackFileName(std::string_view name);
// 16 lower-case hex digits (a pack id, a journal sequence number).
std::optional<uint64_t> ParseHex16(std::string_view s);

// 32 bytes: magic, version, header size, pack id, checksum.
std::string EncodePackHeader(uint64_t id);
Status CheckPackHeader(const uint8_t* p, size_t n, uint64_t id);

struct RecordHeader {
  ChunkKey key;
  uint32_t frame_len = 0;
  uint32_t decoded_len = 0;
  KeyOwner owner;  // the key is owner-scoped (flags bit 0, owner at [48, 52))
  uint64_t checksum = 0;
};
// Writes the 64-byte header of a record for `frame` into hdr.
// `checksum`: the record's checksum computed already (RecordSeal), or
// nullptr to compute it here.
void EncodeRecordHeader(uint8_t* hdr, const ChunkKey& key, const uint8_t* frame, uint32_t frame_len,
                        uint32_t decoded_len, KeyOwner owner, const uint64_t* checksum = nullptr);
// Parses and checks magic and flags (not the checksum).
Result<RecordHeader> ParseRecordHeader(const uint8_t* hdr);
// XXH3-64 over header bytes [0, 56) followed by the frame.
uint64_t RecordChecksum(const uint8_t* hdr, const uint8_t* frame, size_t frame_len);

struct ChunkEntry {
  uint64_t pack_id = 0;
  uint64_t offset = 0;
  uint32_t frame_len = 0;
  uint32_t decoded_len = 0;
  uint64_t refcount = 0;
  uint8_t depth = 0;
  std::optional<ChunkKey> base;
  KeyOwner owner;  // the key is owner-scoped (flags bit 1, owner at [28, 32))
  uint64_t record_size() const { return kRecordHeaderSize + frame_len; }
};
std::string EncodeChunkEntry(const ChunkKey& key, const ChunkEntry& e);
// Corruption if the value's length, version, flags or checksum are wrong.
Result<ChunkEntry> DecodeChunkEntry(const ChunkKey& key, std::string_view v);

enum class PackState : uint8_t { kOpen = 0, kSealed = 1, kRetired = 2 };
struct PackMeta {
  PackState state = PackState::kOpen;
  uint64_t size = 0;  // committed bytes, header included
  uint64_t live = 0;  // record bytes of indexed chunks
  uint64_t record_bytes() const { return size > kPackHeaderSize ? size - kPackHeaderSize : 0; }
};
std::string PackKey(uint64_t id);  // u64 big-endian
std::optional<uint64_t> ParsePackKey(std::string_view k);
std::string EncodePackMeta(uint64_t id, const PackMeta& m);
Result<PackMeta> DecodePackMeta(uint64_t id, std::string_view v);

}  // namespace lmc::store::fmt
