#include "lmc/fs/records.h"

#include <time.h>

#include <cstring>

#include "lmc/bytes.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"

namespace lmc::fs {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::string InodeKey(uint64_t ino) {
  std::string k;
  AppendBE64(&k, ino);
  return k;
}

std::string EncodeInode(const InodeRec& r) {
  std::string v;
  v.reserve(64 + r.symlink.size());
  v.push_back(1);
  v.append(3, '\0');
  AppendLE32(&v, r.mode);
  AppendLE32(&v, r.uid);
  AppendLE32(&v, r.gid);
  AppendLE32(&v, r.nlink);
  AppendLE32(&v, r.rdev);
  AppendLE64(&v, r.size);
  AppendLE64(&v, r.stored);
  AppendLE64(&v, static_cast<uint64_t>(r.atime_ns));
  AppendLE64(&v, static_cast<uint64_t>(r.mtime_ns));
  AppendLE64(&v, static_cast<uint64_t>(r.ctime_ns));
  v += r.symlink;
  return v;
}

std::optional<InodeRec> DecodeInode(std::string_view v) {
  if (v.size() < 64 || v[0] != 1) return std::nullopt;
  const char* p = v.data();
  InodeRec r;
  r.mode = LoadLE32(p + 4);
  r.uid = LoadLE32(p + 8);
  r.gid = LoadLE32(p + 12);
  r.nlink = LoadLE32(p + 16);
  r.rdev = LoadLE32(p + 20);
  r.size = LoadLE64(p + 24);
  r.stored = LoadLE64(p + 32);
  r.atime_ns = static_cast<int64_t>(LoadLE64(p + 40));
  r.mtime_ns = static_cast<int64_t>(LoadLE64(p + 48));
  r.ctime_ns = static_cast<int64_t>(LoadLE64(p + 56));
  r.symlink.assign(v.substr(64));
  return r;
}

std::string DirentPrefix(uint64_t parent) { return InodeKey(parent); }

std::string DirentKey(uint64_t parent, std::string_view name) {
  std::string k = InodeKey(parent);
  k += name;
  return k;
}

std::string EncodeDirent(const DirentVal& d) {
  std::string v;
  AppendLE64(&v, d.ino);
  AppendLE32(&v, d.mode);
  return v;
}

std::optional<DirentVal> DecodeDirent(std::string_view v) {
  if (v.size() < 12) return std::nullopt;
  return DirentVal{LoadLE64(v.data()), LoadLE32(v.data() + 8)};
}

std::string OrphanKey(uint64_t ino) {
  std::string k(kMetaOrphanPrefix);
  AppendBE64(&k, ino);
  return k;
}

std::string ReencodeRefreshKey(const store::ChunkKey& key) {
  std::string k(kMetaReencodeRefreshPrefix);
  k.append(key.view());
  return k;
}

std::string EncodeExtentRec(const ExtentRec& e) {
  store::Extent x;
  x.length = e.length;
  x.chunk = e.key;
  x.chunk_offset = e.chunk_offset;
  AppendLE32(&x.trailer, e.frame_len);
  AppendLE32(&x.trailer, e.decoded_len);
  return store::EncodeExtent(x);
}

std::optional<ExtentRec> DecodeExtentRec(std::string_view v) {
  auto x = store::DecodeExtent(v);
  if (!x || x->hole() || x->trailer.size() < 8) return std::nullopt;
  ExtentRec e;
  e.length = x->length;
  e.key = x->chunk;
  e.chunk_offset = x->chunk_offset;
  e.frame_len = LoadLE32(x->trailer.data());
  e.decoded_len = LoadLE32(x->trailer.data() + 4);
  if (e.decoded_len == 0 || uint64_t{e.chunk_offset} + e.length > e.decoded_len) return std::nullopt;
  return e;
}

Result<std::vector<ExtentPlace>> FindExtentsUsing(store::Store* st, const ChunkKeySet& keys) {
  std::vector<ExtentPlace> places;
  if (keys.empty()) return places;
  LMC_RETURN_IF_ERROR(st->Scan(store::Cf::kExtents, "", [&](std::string_view k, std::string_view v) {
    auto x = store::DecodeExtent(v);
    if (!x || x->hole() || !keys.count(x->chunk)) return true;
    if (auto where = store::ParseExtentKey(k)) places.push_back({where->first, where->second, x->chunk});
    return true;
  }));
  return places;
}

}  // namespace lmc::fs
