#include "lmc/fs/records.h"

#include <time.h>

#include <cstring>

#include "lmc/store/extent.h"

namespace lmc::fs {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; i++) s->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; i++) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
void PutBE(std::string* s, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetBE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutBE64(std::string* s, uint64_t v) { PutBE(s, v, 8); }
uint64_t GetBE64(const char* p) { return GetBE(p, 8); }

std::string InodeKey(uint64_t ino) {
  std::string k;
  PutBE64(&k, ino);
  return k;
}

std::string EncodeInode(const InodeRec& r) {
  std::string v;
  v.reserve(64 + r.symlink.size());
  v.push_back(1);
  v.append(3, '\0');
  PutU32(&v, r.mode);
  PutU32(&v, r.uid);
  PutU32(&v, r.gid);
  PutU32(&v, r.nlink);
  PutU32(&v, r.rdev);
  PutU64(&v, r.size);
  PutU64(&v, r.stored);
  PutU64(&v, static_cast<uint64_t>(r.atime_ns));
  PutU64(&v, static_cast<uint64_t>(r.mtime_ns));
  PutU64(&v, static_cast<uint64_t>(r.ctime_ns));
  v += r.symlink;
  return v;
}

std::optional<InodeRec> DecodeInode(std::string_view v) {
  if (v.size() < 64 || v[0] != 1) return std::nullopt;
  const char* p = v.data();
  InodeRec r;
  r.mode = GetU32(p + 4);
  r.uid = GetU32(p + 8);
  r.gid = GetU32(p + 12);
  r.nlink = GetU32(p + 16);
  r.rdev = GetU32(p + 20);
  r.size = GetU64(p + 24);
  r.stored = GetU64(p + 32);
  r.atime_ns = static_cast<int64_t>(GetU64(p + 40));
  r.mtime_ns = static_cast<int64_t>(GetU64(p + 48));
  r.ctime_ns = static_cast<int64_t>(GetU64(p + 56));
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
  PutU64(&v, d.ino);
  PutU32(&v, d.mode);
  return v;
}

std::optional<DirentVal> DecodeDirent(std::string_view v) {
  if (v.size() < 12) return std::nullopt;
  return DirentVal{GetU64(v.data()), GetU32(v.data() + 8)};
}

std::string OrphanKey(uint64_t ino) {
  std::string k(kMetaOrphanPrefix);
  PutBE64(&k, ino);
  return k;
}

std::string EncodeExtentRec(const ExtentRec& e) {
  store::Extent x;
  x.length = e.length;
  x.chunk = e.key;
  x.chunk_offset = e.chunk_offset;
  PutU32(&x.trailer, e.frame_len);
  PutU32(&x.trailer, e.decoded_len);
  return store::EncodeExtent(x);
}

std::optional<ExtentRec> DecodeExtentRec(std::string_view v) {
  auto x = store::DecodeExtent(v);
  if (!x || x->hole() || x->trailer.size() < 8) return std::nullopt;
  ExtentRec e;
  e.length = x->length;
  e.key = x->chunk;
  e.chunk_offset = x->chunk_offset;
  e.frame_len = GetU32(x->trailer.data());
  e.decoded_len = GetU32(x->trailer.data() + 4);
  if (e.decoded_len == 0 || uint64_t{e.chunk_offset} + e.length > e.decoded_len) return std::nullopt;
  return e;
}

}  // namespace lmc::fs
