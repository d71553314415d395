// fsck: check every pack, every chunk record, every index value and every
// reference count; repair what can be repaired without touching good data
// (docs/ARCHITECTURE.md, "The chunk store", "fsck").
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "lmc/thread_pool.h"

#include "store_impl.h"

namespace lmc::store {

int FsckExitCode(const Result<FsckReport>& r) {
  if (r.ok()) return r->ExitCode();
  if (r.status().code() == Code::kAborted) return kFsckCancelled;
  if (r.status().code() == Code::kInvalidArgument) return kFsckUsage;
  return kFsckOperationalError;
}

namespace {

struct Checker {
  FsckReport& r;
  const std::string& dir;
  void Problem(const std::string& msg, bool fixed) {
    r.errors++;
    if (fixed) r.fixed++;
    r.messages.push_back(msg + (fixed ? " (repaired)" : ""));
    spdlog::warn("fsck {}: {}{}", dir, msg, fixed ? " (repaired)" : "");
  }
};

}  // namespace

// Reads chunk `key`'s record and verifies its header and checksum, without
// decoding. A chunk released or moved meanwhile: NotFound, or the moved copy.
Status Store::Impl::CheckRecord(const ChunkKey& key) {
  thread_local std::vector<uint8_t> record;
  for (int attempt = 0;; ++attempt) {
    LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, LoadEntry(key));
    auto f = PackFile(e.pack_id);
    if (!f.ok()) {
      if (f.status().IsNotFound() && attempt < 3) continue;  // compaction retired the pack
      if (f.status().IsNotFound())
        return Status::Corruption("chunk " + key.ToHex() + ": pack " + std::to_string(e.pack_id) + " missing");
      return f.status();
    }
    return ReadRecord(key, e, **f, record);
  }
}

// Reads, decodes and (with verify_content_hash) hashes every indexed chunk,
// in pack order (sequential reads), on the shared thread pool. *bad: the
// chunks that failed verification, with the reason. A chunk's delta bases
// are decoded on the way but verified as chunks of their own.
Status Store::Impl::VerifyRecords(const FsckOptions& options,
                                  std::unordered_map<ChunkKey, std::string, ChunkKeyHash>* bad) {
  struct Item {
    ChunkKey key;
    uint64_t pack_id, offset;
    uint32_t decoded_len;
  };
  std::vector<Item> items;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), chunks_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != ChunkKey::kSize) continue;  // reported under the lock
      ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(it->key().data()));
      auto e = fmt::DecodeChunkEntry(key, it->value().ToStringView());
      if (!e.ok()) continue;  // reported under the lock
      items.push_back({key, e->pack_id, e->offset, e->decoded_len});
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning chunk index"));
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.pack_id, a.offset) < std::tie(b.pack_id, b.offset);
  });
  ThreadPool& pool = ThreadPool::Shared();
  const size_t slots = std::max<size_t>(1, pool.size());
  std::vector<Workspace> ws(slots);
  std::vector<std::vector<uint8_t>> bufs(slots);
  std::mutex mu;  // guards bad, first_error, done and the progress callback
  Status first_error;
  uint64_t done = 0;
  pool.ParallelFor(items.size(), slots, [&](size_t i, size_t slot) {
    const Item& item = items[i];
    std::vector<uint8_t>& buf = bufs[slot];
    buf.resize(std::max<size_t>(item.decoded_len, 1));
    Status st;
    try {
      if (options.decode) {
        st = Read(item.key, buf.data(), buf.size(), ws[slot], options.verify_content_hash, 0).status();
      } else {
        st = CheckRecord(item.key);
      }
    } catch (const std::exception& e) {
      st = Status::IOError(std::string("verifying chunk ") + item.key.ToHex() + ": " + e.what());
    }
    std::lock_guard l(mu);
    if (!st.ok()) {
      if (st.IsCorruption())
        bad->emplace(item.key, st.message());
      else if (!st.IsNotFound() && first_error.ok())  // NotFound: deleted meanwhile
        first_error = st;
    }
    if (options.progress) options.progress(++done, items.size());
  });
  return first_error;
}

Result<FsckReport> Store::Fsck(const FsckOptions& options) {
  Impl& s = *impl_;
  // 0. Every record read and decoded (and hashed), before taking the commit
  // lock: this is nearly all of fsck's time, and a mounted store keeps
  // committing meanwhile. Records are immutable once indexed; a chunk
  // deleted or moved by a concurrent commit or compaction meanwhile reads
  // as NotFound (skipped) or is re-read through its new entry.
  std::unordered_map<ChunkKey, std::string, ChunkKeyHash> bad;
  LMC_RETURN_IF_ERROR(s.VerifyRecords(options, &bad));
  std::lock_guard l(s.commit_mu);  // no commit or compaction while we count
  FsckReport r;
  Checker c{r, s.dir};
  const bool repair = options.repair;
  rocksdb::WriteBatch fixes;

  // 1. Pack index values and pack files.
  std::map<uint64_t, fmt::PackMeta> metas;
  {
    std::unique_ptr<rocksdb::Iterator> it(s.db->NewIterator(rocksdb::ReadOptions(), s.packs_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = fmt::ParsePackKey(it->key().ToStringView());
      if (!id) {
        r.bad_index_values++;
        c.Problem("pack index key of bad length", false);
        continue;
      }
      auto m = fmt::DecodePackMeta(*id, it->value().ToStringView());
      if (!m.ok()) {
        r.bad_index_values++;
        c.Problem("pack " + std::to_string(*id) + " index value: " + m.status().message(), false);
        continue;
      }
      metas[*id] = *m;
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning pack index"));
  }
  LMC_ASSIGN_OR_RETURN(std::vector<std::string> names, s.env->ListDir(s.pack_dir));
  std::set<uint64_t> on_disk;
  for (const auto& n : names) {
    auto id = fmt::ParsePackFileName(n);
    if (!id) continue;
    const std::string path = s.pack_dir + "/" + n;
    LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, s.env->OpenFile(path, Env::OpenMode::kReadWrite));
    auto m = metas.find(*id);
    if (m == metas.end()) {
      if (s.active && *id == s.active_id) {  // started, first commit pending
        on_disk.insert(*id);
        continue;
      }
      r.orphan_packs++;
      r.orphan_bytes += f->Size();
      bool fixed = repair && s.env->DeleteFile(path).ok();
      c.Problem("pack file " + path + " is not in the index (orphan, " + std::to_string(f->Size()) + " bytes)", fixed);
      continue;
    }
    on_disk.insert(*id);
    uint8_t hdr[fmt::kPackHeaderSize];
    LMC_ASSIGN_OR_RETURN(size_t got, f->ReadAt(0, sizeof hdr, hdr));
    Status hs = fmt::CheckPackHeader(hdr, got, *id);
    if (!hs.ok()) {
      r.bad_records++;
      c.Problem("pack " + path + ": " + hs.message(), false);
    }
    if (f->Size() > m->second.size) {
      r.orphan_bytes += f->Size() - m->second.size;
      bool fixed = repair && f->Truncate(m->second.size).ok() && f->Sync().ok();
      c.Problem("pack " + path + " has " + std::to_string(f->Size() - m->second.size) +
                    " uncommitted bytes past its committed size", fixed);
    } else if (f->Size() < m->second.size) {
      r.missing_packs++;
      c.Problem("pack " + path + " is shorter (" + std::to_string(f->Size()) +
                    ") than its committed size (" + std::to_string(m->second.size) + ")", false);
    }
  }
  for (const auto& [id, m] : metas) {
    if (on_disk.count(id)) continue;
    r.missing_packs++;
    c.Problem("pack file " + s.PackPath(id) + " is missing", false);
  }

  // 2. Chunk index values; every record read and decoded.
  std::unordered_map<ChunkKey, fmt::ChunkEntry, ChunkKeyHash> chunks;
  {
    std::unique_ptr<rocksdb::Iterator> it(s.db->NewIterator(rocksdb::ReadOptions(), s.chunks_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != ChunkKey::kSize) {
        r.bad_index_values++;
        c.Problem("chunk index key of bad length", false);
        continue;
      }
      ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(it->key().data()));
      auto e = fmt::DecodeChunkEntry(key, it->value().ToStringView());
      if (!e.ok()) {
        r.bad_index_values++;
        c.Problem("chunk " + key.ToHex() + " index value: " + e.status().message(), false);
        continue;
      }
      chunks.emplace(key, *e);
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning chunk index"));
  }
  for (const auto& [key, e] : chunks) {
    if (!metas.count(e.pack_id)) {
      r.bad_records++;
      c.Problem("chunk " + key.ToHex() + " names pack " + std::to_string(e.pack_id) + " that the index does not know", false);
    } else if (auto b = bad.find(key); b != bad.end()) {
      r.bad_records++;
      c.Problem(b->second, false);
    }
    r.chunks_checked++;
  }

  // 3. References: one per extent, one per delta dependant.
  std::unordered_map<ChunkKey, uint64_t, ChunkKeyHash> refs;
  for (const auto& [key, e] : chunks) {
    if (!e.base) continue;
    refs[*e.base]++;
    if (!chunks.count(*e.base)) {
      r.missing_chunks++;
      c.Problem("chunk " + key.ToHex() + " has delta base " + e.base->ToHex() + " that is not in the store", false);
    }
  }
  {
    std::unique_ptr<rocksdb::Iterator> it(
        s.db->NewIterator(rocksdb::ReadOptions(), s.fs_cf[static_cast<size_t>(Cf::kExtents)]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto x = DecodeExtent(it->value().ToStringView());
      auto k = ParseExtentKey(it->key().ToStringView());
      if (!x || !k) {
        r.bad_index_values++;
        c.Problem("extent value or key malformed", false);
        continue;
      }
      if (x->hole()) continue;
      refs[x->chunk]++;
      if (!chunks.count(x->chunk)) {
        r.missing_chunks++;
        c.Problem("inode " + std::to_string(k->first) + " offset " + std::to_string(k->second) +
                      " references chunk " + x->chunk.ToHex() + " that is not in the store", false);
      }
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning extents"));
  }

  // 3b. Delta chains (docs/FORMAT.md, "Dependants index"): the dep/
  // records name exactly the entries with a base, and every depth is exact.
  std::vector<ChunkKey> redepth;  // entries whose depth repair corrects
  {
    std::set<std::pair<ChunkKey, ChunkKey>> want;  // base, dependant
    for (const auto& [key, e] : chunks)
      if (e.base) want.emplace(*e.base, key);
    const std::string_view prefix = fmt::kDependantPrefix;
    std::unique_ptr<rocksdb::Iterator> it(s.db->NewIterator(rocksdb::ReadOptions(), s.handles[0]));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
      std::string_view k = it->key().ToStringView();
      if (k.substr(0, prefix.size()) != prefix) break;
      std::string what = "malformed dependants index record";
      if (k.size() == fmt::kDependantKeySize) {
        const auto* p = reinterpret_cast<const uint8_t*>(k.data() + prefix.size());
        const ChunkKey base = ChunkKey::FromBytes(p), dep = ChunkKey::FromBytes(p + ChunkKey::kSize);
        if (want.erase({base, dep})) continue;
        auto d = chunks.find(dep);
        what = "dependants index names chunk " + dep.ToHex() + " as built on " + base.ToHex() + " but " +
               (d == chunks.end() ? std::string("it is not in the store")
                : d->second.base ? "its base is " + d->second.base->ToHex()
                                 : std::string("it has no base"));
      }
      r.dependant_index_mismatches++;
      c.Problem(what, repair);
      if (repair) fixes.Delete(s.handles[0], it->key());
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning the dependants index"));
    for (const auto& [base, dep] : want) {
      r.dependant_index_mismatches++;
      c.Problem("chunk " + dep.ToHex() + " has delta base " + base.ToHex() + " but no dependants index record", repair);
      if (repair) fixes.Put(s.handles[0], fmt::DependantKey(base, dep), "");
    }
    // A chain through a missing base is reported above, once.
    auto reaches_missing = [&](const fmt::ChunkEntry* e) {
      for (int hop = 0; hop <= fmt::kMaxDeltaDepth + 1 && e->base; ++hop) {
        auto b = chunks.find(*e->base);
        if (b == chunks.end()) return true;
        e = &b->second;
      }
      return false;
    };
    const auto depths = ExactDepths(chunks);
    for (auto& [key, e] : chunks) {
      const std::optional<uint8_t> d = depths.at(key);
      if (d ? *d == e.depth : reaches_missing(&e)) continue;
      r.depth_mismatches++;
      const bool fixed = repair && d.has_value();
      c.Problem("chunk " + key.ToHex() + " records delta depth " + std::to_string(e.depth) + " but its chain " +
                    (d ? "is " + std::to_string(*d) + " deep"
                       : "loops or is longer than " + std::to_string(fmt::kMaxDeltaDepth)),
                fixed);
      if (fixed) {
        e.depth = *d;
        redepth.push_back(key);
      }
    }
  }

  // 4. Counts. A chunk nothing references is a leak: repair drops its entry
  // (its record becomes garbage for Compact), which releases its base.
  // A chunk kept at refcount 0 by a pin (online fsck; Store::PinChunk) is
  // not a leak: it goes when the pin does.
  std::set<ChunkKey> pinned_dead;
  {
    std::lock_guard pl(s.pin_mu);
    for (const auto& [key, e] : chunks)
      if (e.refcount == 0 && refs[key] == 0 && s.zombies.count(key)) pinned_dead.insert(key);
  }
  std::vector<ChunkKey> zero;
  for (const auto& [key, e] : chunks)
    if (refs[key] == 0 && !pinned_dead.count(key)) zero.push_back(key);
  std::set<ChunkKey> dropped;
  while (repair && !zero.empty()) {
    ChunkKey key = zero.back();
    zero.pop_back();
    const fmt::ChunkEntry& e = chunks[key];
    if (dropped.count(key)) continue;
    dropped.insert(key);
    fixes.Delete(s.chunks_cf, key.view());
    if (e.base) fixes.Delete(s.handles[0], fmt::DependantKey(*e.base, key));
    if (e.base && --refs[*e.base] == 0 && chunks.count(*e.base)) zero.push_back(*e.base);
  }
  for (auto& [key, e] : chunks) {
    const uint64_t want = refs[key];
    if (pinned_dead.count(key)) continue;
    if (dropped.count(key)) {
      r.refcount_mismatches++;
      c.Problem("chunk " + key.ToHex() + " has count " + std::to_string(e.refcount) + " but no references (leaked)", true);
      continue;
    }
    if (e.refcount == want) continue;
    r.refcount_mismatches++;
    c.Problem("chunk " + key.ToHex() + " has count " + std::to_string(e.refcount) + " but " +
                  std::to_string(want) + " references", repair && want > 0);
    if (repair && want > 0) {
      e.refcount = want;
      fixes.Put(s.chunks_cf, key.view(), fmt::EncodeChunkEntry(key, e));
    }
  }

  for (const ChunkKey& key : redepth)  // after the count fixes: this value has both
    if (!dropped.count(key)) fixes.Put(s.chunks_cf, key.view(), fmt::EncodeChunkEntry(key, chunks[key]));

  // 5. Live bytes per pack, from the (repaired) entries.
  std::map<uint64_t, uint64_t> live;
  for (const auto& [key, e] : chunks)
    if (!dropped.count(key)) live[e.pack_id] += e.record_size();
  std::map<uint64_t, fmt::PackMeta> new_meta;
  for (auto& [id, m] : metas) {
    if (m.live == live[id]) continue;
    r.live_bytes_mismatches++;
    c.Problem("pack " + std::to_string(id) + " records " + std::to_string(m.live) + " live bytes, chunks say " +
                  std::to_string(live[id]), repair);
    if (repair) {
      fmt::PackMeta nm = m;
      nm.live = live[id];
      fixes.Put(s.packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, nm));
      new_meta[id] = nm;
    }
  }
  if (repair && fixes.Count() > 0) {
    LMC_RETURN_IF_ERROR(s.WriteIndex(fixes, true));
    for (const auto& [id, m] : new_meta) s.packs[id] = m;
  }
  if (repair && r.orphan_packs > 0) LMC_RETURN_IF_ERROR(s.env->SyncDir(s.pack_dir));
  return r;
}

}  // namespace lmc::store
