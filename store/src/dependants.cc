// The dependants index (docs/FORMAT.md, "Dependants index"): one dep/
// record per chunk entry with a delta base, so that the chunks built on a
// chunk are found without scanning the chunk index. Commit groups maintain
// it (commit.cc); this file builds it for stores that predate it, walks it
// for Store::SubtreeHeight, and computes exact depths for the migration
// and for fsck.
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <unordered_set>

#include "rocks_view.h"
#include "store_impl.h"

namespace lmc::store {

std::unordered_map<ChunkKey, std::optional<uint8_t>, ChunkKeyHash> ExactDepths(const ChunkEntries& chunks) {
  std::unordered_map<ChunkKey, std::optional<uint8_t>, ChunkKeyHash> depth;
  depth.reserve(chunks.size());
  std::vector<ChunkKey> path;  // unknown chunks, each the base of the one before
  for (const auto& [key, entry] : chunks) {
    if (depth.count(key)) continue;
    path.assign(1, key);
    const fmt::ChunkEntry* e = &entry;
    std::optional<int> top;  // depth of path.back(), once known
    bool broken = false;     // the whole path chains through a missing or bad base
    bool too_long = false;   // more hops than any valid chain (or a loop)
    while (true) {
      if (!e->base) {
        top = 0;
        break;
      }
      if (auto d = depth.find(*e->base); d != depth.end()) {
        if (d->second)
          top = *d->second + 1;
        else
          broken = true;
        break;
      }
      auto b = chunks.find(*e->base);
      if (b == chunks.end()) {
        broken = true;
        break;
      }
      if (path.size() > fmt::kMaxDeltaDepth + 1u) {
        too_long = true;
        break;
      }
      path.push_back(b->first);
      e = &b->second;
    }
    if (too_long) {
      // Only the walk's start is certainly over the limit; the chunks
      // above it get walks of their own.
      depth[path.front()] = std::nullopt;
      continue;
    }
    int d = top.value_or(0);
    for (auto it = path.rbegin(); it != path.rend(); ++it, ++d)
      depth[*it] = !broken && d <= fmt::kMaxDeltaDepth ? std::optional<uint8_t>(static_cast<uint8_t>(d))
                                                       : std::nullopt;
  }
  return depth;
}

Status Store::Impl::ScanDependants(const ChunkKey& base, const rocksdb::Snapshot* snap,
                                   const std::function<void(const ChunkKey&)>& fn) {
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  const std::string prefix = fmt::DependantPrefix(base);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, handles[0]));
  std::string kk;  // a copy under ThreadSanitizer (rocks_view.h)
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    std::string_view k = View(it->key(), &kk);
    if (k.substr(0, prefix.size()) != prefix) break;
    if (k.size() != fmt::kDependantKeySize) continue;  // fsck reports and deletes it
    fn(ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data() + prefix.size())));
  }
  return FromRocks(it->status(), "scanning the dependants index");
}

bool Store::Impl::HasDependants(const ChunkKey& base) {
  const std::string prefix = fmt::DependantPrefix(base);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[0]));
  it->Seek(prefix);
  return it->Valid() && it->key().ToStringView().substr(0, prefix.size()) == prefix;
}

Status Store::Impl::EnsureDependantsIndex(bool fresh) {
  rocksdb::WriteBatch wb;
  if (!fresh) {
    std::string v;
    rocksdb::Status rs = db->Get(rocksdb::ReadOptions(), handles[0], fmt::kDepsIndexMarker, &v);
    if (rs.ok() && v == fmt::kDepsIndexMarkerValue) return Status::Ok();
    if (rs.ok())
      return Status::Unsupported("store " + dir + ": dependants index of a newer version (" + v + ")");
    if (!rs.IsNotFound()) return FromRocks(rs, "reading the dependants index marker");
    // One scan of the chunk index. Entries that do not decode are left to
    // fsck, as everywhere else.
    ChunkEntries chunks;
    {
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), chunks_cf));
      std::string kk, vk;  // copies under ThreadSanitizer (rocks_view.h)
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const std::string_view k = View(it->key(), &kk);
        if (k.size() != ChunkKey::kSize) continue;
        const ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data()));
        auto e = fmt::DecodeChunkEntry(key, View(it->value(), &vk));
        if (e.ok()) chunks.emplace(key, *e);
      }
      LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning chunk index"));
    }
    // Records a previous partial build could not have left (the build is
    // one write), but an older lmcfs writing to a store that had an index
    // and lost its marker could: start clean.
    {
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[0]));
      const std::string_view prefix = fmt::kDependantPrefix;
      for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
        if (it->key().ToStringView().substr(0, prefix.size()) != prefix) break;
        wb.Delete(handles[0], it->key());
      }
      LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning the dependants index"));
    }
    uint64_t edges = 0, redepthed = 0;
    const auto depths = ExactDepths(chunks);
    for (auto& [key, e] : chunks) {
      if (e.base) {
        wb.Put(handles[0], fmt::DependantKey(*e.base, key), "");
        edges++;
      }
      // Rewrites before this index left dependants an upper bound.
      const std::optional<uint8_t> d = depths.at(key);
      if (d && *d != e.depth) {
        e.depth = *d;
        wb.Put(chunks_cf, key.view(), fmt::EncodeChunkEntry(key, e));
        redepthed++;
      }
    }
    spdlog::info("store {}: built the dependants index ({} chunks, {} with a base, {} depths corrected)", dir,
                 chunks.size(), edges, redepthed);
  }
  wb.Put(handles[0], fmt::kDepsIndexMarker, fmt::kDepsIndexMarkerValue);
  return WriteIndex(wb, true);
}

Result<uint32_t> Store::SubtreeHeight(const ChunkKey& key) {
  Impl& s = *impl_;
  const rocksdb::Snapshot* snap = s.db->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snap;
    ~Release() { db->ReleaseSnapshot(snap); }
  } release{s.db, snap};
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  std::string v;
  rocksdb::Status rs = s.db->Get(ro, s.chunks_cf, key.view(), &v);
  if (rs.IsNotFound()) return Status::NotFound("no chunk " + key.ToHex());
  LMC_RETURN_IF_ERROR(FromRocks(rs, "reading chunk index"));
  // Depths are exact, so depth(X) - depth(key) is X's level below key.
  // Deeper than kMaxDeltaDepth + 1 levels cannot be (and cannot matter).
  std::unordered_set<ChunkKey, ChunkKeyHash> seen{key};
  std::vector<ChunkKey> level{key}, next;
  uint32_t height = 0;
  while (!level.empty() && height <= fmt::kMaxDeltaDepth) {
    next.clear();
    for (const ChunkKey& k : level)
      LMC_RETURN_IF_ERROR(s.ScanDependants(k, snap, [&](const ChunkKey& d) {
        if (seen.insert(d).second) next.push_back(d);
      }));
    if (next.empty()) break;
    height++;
    level.swap(next);
  }
  return height;
}

Result<uint64_t> Store::CountDependants(const ChunkKey& key) {
  uint64_t n = 0;
  LMC_RETURN_IF_ERROR(impl_->ScanDependants(key, nullptr, [&](const ChunkKey&) { n++; }));
  return n;
}

}  // namespace lmc::store
