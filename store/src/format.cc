#include "format.h"

#include <cinttypes>
#include <cstdio>

#include "lmc/hash.h"

namespace lmc::store::fmt {

std::string PackFileName(uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "pack-%016" PRIx64 ".lmp", id);
  return buf;
}

std::optional<uint64_t> ParseHex16(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::optional<uint64_t> ParsePackFileName(std::string_view name) {
  if (name.size() != 25 || name.substr(0, 5) != "pack-" || name.substr(21) != ".lmp") return std::nullopt;
  return ParseHex16(name.substr(5, 16));
}

std::string EncodePackHeader(uint64_t id) {
  uint8_t h[kPackHeaderSize] = {};
  std::memcpy(h, kPackMagic, 8);
  StoreLE32(h + 8, kPackVersion);
  StoreLE32(h + 12, kPackHeaderSize);
  StoreLE64(h + 16, id);
  StoreLE64(h + 24, hash::Xxh3_64(h, 24));
  return std::string(reinterpret_cast<const char*>(h), sizeof h);
}

Status CheckPackHeader(const uint8_t* h, size_t n, uint64_t id) {
  if (n < kPackHeaderSize) return Status::Corruption("pack header truncated");
  if (std::memcmp(h, kPackMagic, 8) != 0) return Status::Corruption("pack header has a bad magic");
  if (LoadLE64(h + 24) != hash::Xxh3_64(h, 24)) return Status::Corruption("pack header checksum mismatch");
  if (LoadLE32(h + 8) != kPackVersion)
    return Status::Unsupported("pack version " + std::to_string(LoadLE32(h + 8)) +
                               " is newer than this lmcfs reads (1)");
  if (LoadLE32(h + 12) != kPackHeaderSize) return Status::Corruption("pack header has a bad size");
  if (LoadLE64(h + 16) != id) return Status::Corruption("pack header names another pack id");
  return Status::Ok();
}

uint64_t RecordChecksum(const uint8_t* hdr, const uint8_t* frame, size_t frame_len) {
  hash::Xxh3Stream st;
  st.Update(hdr, kRecordChecksumOffset);
  st.Update(frame, frame_len);
  return st.Digest64();
}

void EncodeRecordHeader(uint8_t* h, const ChunkKey& key, const uint8_t* frame, uint32_t frame_len,
                        uint32_t decoded_len, KeyOwner owner, const uint64_t* checksum) {
  std::memset(h, 0, kRecordHeaderSize);
  std::memcpy(h, kRecordMagic, 4);
  // h[4..8): flags; bit 0: owner-scoped key.
  if (owner) StoreLE32(h + 4, kRecordOwnerScoped);
  std::memcpy(h + 8, key.bytes.data(), ChunkKey::kSize);
  StoreLE32(h + 40, frame_len);
  StoreLE32(h + 44, decoded_len);
  // h[48..52): the key's owner (0 without the flag); h[52..56): reserved, 0.
  if (owner) StoreLE32(h + 48, *owner);
  StoreLE64(h + kRecordChecksumOffset, checksum ? *checksum : RecordChecksum(h, frame, frame_len));
}

Result<RecordHeader> ParseRecordHeader(const uint8_t* h) {
  if (std::memcmp(h, kRecordMagic, 4) != 0) return Status::Corruption("record has a bad magic");
  const uint32_t flags = LoadLE32(h + 4);
  if ((flags & ~kRecordOwnerScoped) != 0 || LoadLE32(h + 52) != 0 ||
      (!(flags & kRecordOwnerScoped) && LoadLE32(h + 48) != 0))
    return Status::Corruption("record has unknown flags or reserved bits set");
  RecordHeader r;
  if (flags & kRecordOwnerScoped) r.owner = LoadLE32(h + 48);
  r.key = ChunkKey::FromBytes(h + 8);
  r.frame_len = LoadLE32(h + 40);
  r.decoded_len = LoadLE32(h + 44);
  r.checksum = LoadLE64(h + kRecordChecksumOffset);
  if (r.frame_len > kMaxFrameLen) return Status::Corruption("record frame length too large");
  return r;
}

namespace {
constexpr uint8_t kEntryVersion = 1;
constexpr uint8_t kEntryHasBase = 1;
constexpr uint8_t kEntryOwnerScoped = 2;
constexpr size_t kEntryFixed = 40;

uint64_t SeedOf(const ChunkKey& key) { return LoadLE64(key.bytes.data()); }
}  // namespace

std::string EncodeChunkEntry(const ChunkKey& key, const ChunkEntry& e) {
  uint8_t v[kEntryFixed + ChunkKey::kSize + 8] = {};
  v[0] = kEntryVersion;
  v[1] = static_cast<uint8_t>((e.base ? kEntryHasBase : 0) | (e.owner ? kEntryOwnerScoped : 0));
  v[2] = e.depth;
  StoreLE32(v + 4, e.frame_len);
  StoreLE64(v + 8, e.pack_id);
  StoreLE64(v + 16, e.offset);
  StoreLE32(v + 24, e.decoded_len);
  if (e.owner) StoreLE32(v + 28, *e.owner);
  StoreLE64(v + 32, e.refcount);
  size_t n = kEntryFixed;
  if (e.base) {
    std::memcpy(v + n, e.base->bytes.data(), ChunkKey::kSize);
    n += ChunkKey::kSize;
  }
  StoreLE64(v + n, hash::Xxh3_64WithSeed(v, n, SeedOf(key)));
  n += 8;
  return std::string(reinterpret_cast<const char*>(v), n);
}

Result<ChunkEntry> DecodeChunkEntry(const ChunkKey& key, std::string_view sv) {
  const auto* v = reinterpret_cast<const uint8_t*>(sv.data());
  if (sv.size() != kEntryFixed + 8 && sv.size() != kEntryFixed + ChunkKey::kSize + 8)
    return Status::Corruption("chunk index value has a bad length");
  size_t n = sv.size() - 8;
  if (LoadLE64(v + n) != hash::Xxh3_64WithSeed(v, n, SeedOf(key)))
    return Status::Corruption("chunk index value checksum mismatch");
  if (v[0] != kEntryVersion) return Status::Unsupported("chunk index value of a newer version");
  bool has_base = v[1] & kEntryHasBase;
  const bool scoped = v[1] & kEntryOwnerScoped;
  if ((v[1] & ~(kEntryHasBase | kEntryOwnerScoped)) || v[3] != 0 || (!scoped && LoadLE32(v + 28) != 0) ||
      has_base != (n == kEntryFixed + ChunkKey::kSize) || has_base != (v[2] != 0) || v[2] > kMaxDeltaDepth)
    return Status::Corruption("chunk index value has inconsistent fields");
  ChunkEntry e;
  e.depth = v[2];
  e.frame_len = LoadLE32(v + 4);
  e.pack_id = LoadLE64(v + 8);
  e.offset = LoadLE64(v + 16);
  e.decoded_len = LoadLE32(v + 24);
  e.refcount = LoadLE64(v + 32);
  if (has_base) e.base = ChunkKey::FromBytes(v + kEntryFixed);
  if (scoped) e.owner = LoadLE32(v + 28);
  return e;
}

std::string PackKey(uint64_t id) {
  uint8_t k[8];
  StoreBE64(k, id);
  return std::string(reinterpret_cast<const char*>(k), 8);
}

std::optional<uint64_t> ParsePackKey(std::string_view k) {
  if (k.size() != 8) return std::nullopt;
  return LoadBE64(reinterpret_cast<const uint8_t*>(k.data()));
}

std::string EncodePackMeta(uint64_t id, const PackMeta& m) {
  uint8_t v[32] = {};
  v[0] = 1;
  v[1] = static_cast<uint8_t>(m.state);
  StoreLE64(v + 8, m.size);
  StoreLE64(v + 16, m.live);
  StoreLE64(v + 24, hash::Xxh3_64WithSeed(v, 24, id));
  return std::string(reinterpret_cast<const char*>(v), sizeof v);
}

Result<PackMeta> DecodePackMeta(uint64_t id, std::string_view sv) {
  const auto* v = reinterpret_cast<const uint8_t*>(sv.data());
  if (sv.size() != 32) return Status::Corruption("pack index value has a bad length");
  if (LoadLE64(v + 24) != hash::Xxh3_64WithSeed(v, 24, id))
    return Status::Corruption("pack index value checksum mismatch");
  if (v[0] != 1) return Status::Unsupported("pack index value of a newer version");
  if (v[1] > 2 || v[2] || v[3] || LoadLE32(v + 4))
    return Status::Corruption("pack index value has inconsistent fields");
  PackMeta m;
  m.state = static_cast<PackState>(v[1]);
  m.size = LoadLE64(v + 8);
  m.live = LoadLE64(v + 16);
  return m;
}

}  // namespace lmc::store::fmt
