#include "lmc/store/extent.h"

#include "format.h"

namespace lmc::store {

std::string ExtentKeyPrefix(uint64_t inode) {
  uint8_t k[8];
  StoreBE64(k, inode);
  return std::string(reinterpret_cast<const char*>(k), 8);
}

std::string ExtentKey(uint64_t inode, uint64_t file_offset) {
  uint8_t k[16];
  StoreBE64(k, inode);
  StoreBE64(k + 8, file_offset);
  return std::string(reinterpret_cast<const char*>(k), 16);
}

std::optional<std::pair<uint64_t, uint64_t>> ParseExtentKey(std::string_view key) {
  if (key.size() != 16) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(key.data());
  return std::make_pair(LoadBE64(p), LoadBE64(p + 8));
}

std::string EncodeExtent(const Extent& e) {
  uint8_t v[Extent::kEncodedSize] = {};
  v[0] = Extent::kVersion;
  v[1] = e.flags;
  StoreLE32(v + 4, e.length);
  std::memcpy(v + 8, e.chunk.bytes.data(), ChunkKey::kSize);
  StoreLE32(v + 40, e.chunk_offset);
  std::string s(reinterpret_cast<const char*>(v), sizeof v);
  s += e.trailer;
  return s;
}

std::optional<Extent> DecodeExtent(std::string_view sv) {
  if (sv.size() < Extent::kEncodedSize) return std::nullopt;
  const auto* v = reinterpret_cast<const uint8_t*>(sv.data());
  if (v[0] != Extent::kVersion || (v[1] & ~Extent::kFlagHole)) return std::nullopt;
  Extent e;
  e.flags = v[1];
  e.length = LoadLE32(v + 4);
  e.chunk = ChunkKey::FromBytes(v + 8);
  e.chunk_offset = LoadLE32(v + 40);
  e.trailer = std::string(sv.substr(Extent::kEncodedSize));
  return e;
}

}  // namespace lmc::store
