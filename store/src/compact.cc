// Compaction: copy the live records of mostly-dead packs into the active
// pack, commit their new places, then retire and delete the old packs.
// Each step leaves a state that Recover understands
// (docs/ARCHITECTURE.md, "The chunk store", "Compaction").
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rocks_view.h"
#include "store_impl.h"

namespace lmc::store {
namespace {

// Live records copied per commit_mu hold: a commit waits at most for one
// slice's append and sync, never for a whole pack's copy.
constexpr size_t kSliceBytes = size_t{8} << 20;

struct ReadRecordCopy {
  ChunkKey key;
  uint64_t offset = 0;  // in the old pack, when read
  std::vector<uint8_t> record;
};

// Appends a slice of copied records to the active pack and points their
// chunks at it, in one synced index batch that also moves their live bytes
// from the old pack to the active one. commit_mu held. A chunk whose entry
// changed since it was read (released, rewritten, moved) is skipped: its
// copy would be garbage.
Status MoveSlice(Store::Impl& s, uint64_t id, std::vector<ReadRecordCopy>& slice, CompactReport& report) {
  auto pm = s.packs.find(id);
  if (pm == s.packs.end()) return Status::Ok();
  LMC_RETURN_IF_ERROR(s.EnsureActivePack());
  std::string records;
  std::vector<std::pair<ChunkKey, fmt::ChunkEntry>> moved;
  std::vector<Store::Impl::DeadRange> dead;  // the old places
  for (ReadRecordCopy& c : slice) {
    auto e = s.LoadEntry(c.key);
    if (!e.ok() && e.status().IsNotFound()) continue;
    if (!e.ok()) return e.status();
    if (e->pack_id != id || e->offset != c.offset) continue;
    fmt::ChunkEntry ne = *e;
    ne.pack_id = s.active_id;
    ne.offset = s.active_end + records.size();
    records.append(reinterpret_cast<const char*>(c.record.data()), c.record.size());
    moved.emplace_back(c.key, ne);
    dead.push_back({id, c.offset, c.record.size()});
  }
  if (moved.empty()) return Status::Ok();
  // Copies durable in the active pack first (a crash leaves a tail that
  // Recover cuts), then their new places in the index.
  LMC_RETURN_IF_ERROR(s.AppendDurably(records));
  rocksdb::WriteBatch wb;
  uint64_t live_moved = 0;
  for (const auto& [key, e] : moved) {
    wb.Put(s.chunks_cf, key.view(), fmt::EncodeChunkEntry(key, e));
    live_moved += e.record_size();
  }
  fmt::PackMeta active_meta;
  if (auto it = s.packs.find(s.active_id); it != s.packs.end()) active_meta = it->second;
  const uint64_t end = s.active_end + records.size();
  active_meta.size = end;
  active_meta.live += live_moved;
  const bool seal = end >= s.PackLimit();
  if (seal) active_meta.state = fmt::PackState::kSealed;
  wb.Put(s.packs_cf, fmt::PackKey(s.active_id), fmt::EncodePackMeta(s.active_id, active_meta));
  fmt::PackMeta old_meta = pm->second;
  old_meta.live -= std::min(old_meta.live, live_moved);
  wb.Put(s.packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, old_meta));
  Status st = s.WriteIndex(wb, true);
  if (!st.ok()) {
    s.Rollback();
    return st;
  }
  s.packs[s.active_id] = active_meta;
  s.packs[id] = old_meta;
  s.active_end = end;
  s.QueueDead(std::move(dead));
  if (seal) s.active.reset();
  report.chunks_moved += moved.size();
  report.bytes_copied += records.size();
  return Status::Ok();
}

// Moves the live records of pack `id` to the active pack and retires it.
// Records are read and verified without the commit lock; each slice of
// kSliceBytes is moved under it (MoveSlice), and the retirement takes it
// once more. keys: chunks that pointed into the pack when scanned (each is
// re-checked: commits may have released or rewritten some since).
Status CompactPack(Store::Impl& s, uint64_t id, const std::vector<ChunkKey>& keys, CompactReport& report) {
  {
    std::lock_guard l(s.commit_mu);
    auto pm = s.packs.find(id);
    if (pm == s.packs.end() || (s.active && id == s.active_id)) return Status::Ok();
  }
  if (!keys.empty()) {
    LMC_ASSIGN_OR_RETURN(std::shared_ptr<File> f, s.PackFile(id));
    std::vector<ReadRecordCopy> slice;
    size_t slice_bytes = 0;
    auto flush = [&]() -> Status {
      std::lock_guard l(s.commit_mu);
      Status st = MoveSlice(s, id, slice, report);
      slice.clear();
      slice_bytes = 0;
      return st;
    };
    for (const ChunkKey& key : keys) {
      auto e = s.LoadEntry(key);
      if (!e.ok() && e.status().IsNotFound()) continue;
      if (!e.ok()) return e.status();
      if (e->pack_id != id) continue;
      // A record that fails verification is never copied and its pack is
      // never deleted: fsck must look at it.
      ReadRecordCopy c{key, e->offset, {}};
      if (Status rs = s.ReadRecord(key, *e, *f, c.record); !rs.ok()) {
        // Died (and maybe punched) since the entry was read: nothing to copy.
        if (rs.IsCorruption() && s.Moved(key, *e)) continue;
        return s.Reported(std::move(rs));
      }
      slice_bytes += c.record.size();
      slice.push_back(std::move(c));
      if (slice_bytes >= kSliceBytes) LMC_RETURN_IF_ERROR(flush());
    }
    if (!slice.empty()) LMC_RETURN_IF_ERROR(flush());
  }

  std::lock_guard l(s.commit_mu);
  auto pm = s.packs.find(id);
  if (pm == s.packs.end()) return Status::Ok();
  const uint64_t old_size = pm->second.size;
  // A chunk added to the index after the scan cannot point into a sealed
  // pack; one still pointing here was skipped above (entry changed while we
  // read): keep the pack for a later run.
  if (pm->second.live != 0) {
    bool still_used = false;
    for (const ChunkKey& key : keys) {
      auto e = s.LoadEntry(key);
      if (e.ok() && e->pack_id == id) {
        still_used = true;
        break;
      }
    }
    if (still_used) return Status::Ok();
  }
  // The old pack's retirement in one synced index batch. A crash from here
  // on leaves a retired entry: Recover deletes the file (if still there)
  // and the entry.
  rocksdb::WriteBatch wb;
  fmt::PackMeta retired{fmt::PackState::kRetired, old_size, 0};
  wb.Put(s.packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, retired));
  LMC_RETURN_IF_ERROR(s.WriteIndex(wb, true));
  s.packs.erase(id);
  // What deleting the file gives back: its committed bytes, less the holes
  // already punched in it (those were given back when punched).
  report.bytes_reclaimed += s.PackOnDisk(id, old_size);
  {
    std::lock_guard hl(s.holes_mu);
    s.pack_holes.erase(id);
  }
  report.packs_compacted++;
  {
    std::unique_lock fl(s.files_mu);
    s.retired.insert(id);
    s.files.erase(id);  // readers holding it keep reading the unlinked file
  }
  LMC_RETURN_IF_ERROR(s.env->DeleteFile(s.PackPath(id)));
  LMC_RETURN_IF_ERROR(s.env->SyncDir(s.pack_dir));
  // Forget the pack.
  rocksdb::WriteBatch forget;
  forget.Delete(s.packs_cf, fmt::PackKey(id));
  return s.WriteIndex(forget, true);
}

// Seals the active pack when it holds at least min_dead dead bytes, so that
// compaction can take it (one synced index batch; the next commit starts a
// new pack). commit_mu held.
Status SealActiveIfDead(Store::Impl& s, uint64_t min_dead, bool by_disk) {
  if (min_dead == 0 || !s.active) return Status::Ok();
  auto it = s.packs.find(s.active_id);
  if (it == s.packs.end()) return Status::Ok();  // nothing committed to it yet
  fmt::PackMeta m = it->second;
  // Dead bytes still on disk: those punched need no compaction.
  const uint64_t size = by_disk ? s.PackOnDisk(s.active_id, m.size) : m.size;
  const uint64_t record_bytes = size > fmt::kPackHeaderSize ? size - fmt::kPackHeaderSize : 0;
  if (record_bytes < m.live || record_bytes - m.live < min_dead) return Status::Ok();
  m.state = fmt::PackState::kSealed;
  rocksdb::WriteBatch wb;
  wb.Put(s.packs_cf, fmt::PackKey(s.active_id), fmt::EncodePackMeta(s.active_id, m));
  LMC_RETURN_IF_ERROR(s.WriteIndex(wb, true));
  it->second = m;
  s.active.reset();
  return Status::Ok();
}

// The packs to compact, per options.policy. commit_mu held.
void SelectPacks(Store::Impl& s, const CompactOptions& options, CompactReport& report) {
  struct Pack {
    uint64_t id, record_bytes, live;
  };
  std::vector<Pack> sealed;
  uint64_t pack_bytes = 0, dead = 0;
  for (const auto& [id, m] : s.packs) {
    // What the pack holds on disk: its committed bytes less the holes
    // punched in it (hole punching gives dead records back without
    // compaction; copying a pack whose dead records are already holes would
    // only write its live ones again).
    const uint64_t size = options.judge_by_disk ? s.PackOnDisk(id, m.size) : m.size;
    pack_bytes += size;
    const uint64_t record_bytes = size > fmt::kPackHeaderSize ? size - fmt::kPackHeaderSize : 0;
    dead += size - std::min(size, m.live);
    if (s.active && id == s.active_id) continue;
    report.packs_examined++;
    // A pack with no live record is freed without copying, holes or not.
    sealed.push_back({id, m.live == 0 ? 0 : record_bytes, std::min(m.live, record_bytes)});
  }
  if (options.policy == CompactOptions::Policy::kThreshold) {
    for (const Pack& p : sealed)
      if (p.record_bytes == 0 ||
          static_cast<double>(p.live) < options.live_fraction_threshold * static_cast<double>(p.record_bytes))
        report.candidates.push_back(p.id);
    return;
  }
  // Cost-benefit: u = live / record bytes; freeing a pack reads it and
  // rewrites u of it to free 1 - u: (1 - u) / (1 + u), best first.
  auto score = [](const Pack& p) {
    if (p.record_bytes == 0) return 2.0;  // header only: free
    const double u = static_cast<double>(p.live) / static_cast<double>(p.record_bytes);
    return (1 - u) / (1 + u);
  };
  std::sort(sealed.begin(), sealed.end(), [&](const Pack& a, const Pack& b) { return score(a) > score(b); });
  for (const Pack& p : sealed) {
    // Packs without a live record cost nothing to free (no copy): always
    // taken, even under the target (their holes leave a header and the
    // blocks shared with records that died at other times).
    const bool empty = p.record_bytes == 0 || p.live == 0;
    if (!empty && static_cast<double>(dead) <= options.target_dead_fraction * static_cast<double>(pack_bytes))
      break;
    if (p.record_bytes > 0 && p.live >= p.record_bytes) break;  // the rest are all live
    report.candidates.push_back(p.id);
    // After: the pack's bytes go, its live records come back in the active pack.
    const uint64_t size = p.record_bytes + fmt::kPackHeaderSize;
    pack_bytes = pack_bytes - std::min(pack_bytes, size) + p.live;
    dead -= std::min(dead, size - p.live);
  }
}

}  // namespace

Result<CompactReport> Store::Compact(const CompactOptions& options, const CompactProgressFn& progress) {
  Impl& s = *impl_;
  std::lock_guard maint(s.maint_mu);
  CompactReport report;
  // Where a pack's holes cost a round trip (RADOS), those not cached yet
  // are read before commit_mu is taken: no commit waits for them.
  if (options.judge_by_disk && s.cache_holes) s.CachePackHoles([] { return false; });
  {
    std::lock_guard l(s.commit_mu);
    if (!options.dry_run)
      LMC_RETURN_IF_ERROR(SealActiveIfDead(s, options.seal_active_dead_bytes, options.judge_by_disk));
    SelectPacks(s, options, report);
  }
  if (options.dry_run || report.candidates.empty()) return report;

  // Which chunks live in the candidates: one scan of the chunk index. An
  // entry we cannot decode might point into a candidate, so it stops the
  // run before anything is touched.
  std::map<uint64_t, std::vector<ChunkKey>> keys;
  for (uint64_t id : report.candidates) keys[id];
  {
    std::unique_ptr<rocksdb::Iterator> it(s.db->NewIterator(rocksdb::ReadOptions(), s.chunks_cf));
    std::string kk, vk;  // copies under ThreadSanitizer (rocks_view.h)
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string_view raw = View(it->key(), &kk);
      if (raw.size() != ChunkKey::kSize)
        return Status::Corruption("chunk index key of bad length; run fsck before compacting");
      ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(raw.data()));
      auto e = fmt::DecodeChunkEntry(key, View(it->value(), &vk));
      if (!e.ok())
        return Status::Corruption("chunk " + key.ToHex() + ": " + e.status().message() +
                                  "; run fsck before compacting");
      auto k = keys.find(e->pack_id);
      if (k != keys.end()) k->second.push_back(key);
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning chunk index"));
  }

  CompactProgress p;
  p.packs_total = report.candidates.size();
  for (uint64_t id : report.candidates) {
    if (report.bytes_copied >= options.max_bytes_to_copy) break;
    const uint64_t copied = report.bytes_copied, reclaimed = report.bytes_reclaimed;
    Status st = CompactPack(s, id, keys[id], report);
    s.n_compact_copied += report.bytes_copied - copied;
    s.n_compact_reclaimed += report.bytes_reclaimed - reclaimed;
    if (!st.ok()) {
      // No room for the copies (a full store) is the caller's to report.
      spdlog::log(st.code() == Code::kNoSpace ? spdlog::level::debug : spdlog::level::err,
                  "store {}: compacting pack {} stopped: {}", s.dir, s.PackPath(id), st.ToString());
      return st;
    }
    p.pack_id = id;
    p.packs_done++;
    p.bytes_copied = report.bytes_copied;
    p.bytes_reclaimed = report.bytes_reclaimed;
    if (progress && !progress(p)) return Status::Aborted("compaction stopped by the caller");
  }
  return report;
}

}  // namespace lmc::store
