// Commit: group commit of batches (docs/ARCHITECTURE.md, "The chunk store", "Commit").
//
// Callers queue; the first in the queue leads: it takes the queue's head
// (up to max_group_bytes of frames), applies the batches' chunk operations
// to an overlay of the index, appends all new records to the active pack in
// one write, fdatasyncs the pack once, then writes one RocksDB WriteBatch
// (synced if any member asked) and wakes the members.
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <unordered_map>

#include "store_impl.h"

namespace lmc::store {
namespace {

// The index state of chunks touched by the group, over the committed index.
class Overlay {
 public:
  struct Slot {
    bool present = false;
    bool dirty = false;
    fmt::ChunkEntry e;
  };

  explicit Overlay(Store::Impl& s) : s_(s) {}
  bool Pinned(const ChunkKey& key) const { return s_.Pinned(key); }

  Result<Slot*> Find(const ChunkKey& key) {
    auto it = map_.find(key);
    if (it != map_.end()) return &it->second;
    Slot slot;
    auto e = s_.LoadEntry(key);
    if (e.ok()) {
      slot.present = true;
      slot.e = std::move(*e);
    } else if (!e.status().IsNotFound()) {
      return e.status();
    }
    return &map_.emplace(key, std::move(slot)).first->second;
  }

  // Records a slot's state before the current batch changes it.
  void Save(const ChunkKey& key, const Slot& slot) { undo_.emplace_back(key, slot); }
  void AddLive(uint64_t pack, int64_t delta) {
    live_[pack] += delta;
    live_undo_.emplace_back(pack, delta);
  }

  void BeginBatch(size_t records_len) {
    undo_.clear();
    live_undo_.clear();
    records_mark_ = records_len;
  }
  // Undoes the current batch; returns the records length to cut back to.
  size_t AbortBatch() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) map_[it->first] = it->second;
    for (auto& [pack, d] : live_undo_) live_[pack] -= d;
    return records_mark_;
  }

  const std::unordered_map<ChunkKey, Slot, ChunkKeyHash>& slots() const { return map_; }
  const std::map<uint64_t, int64_t>& live() const { return live_; }

 private:
  Store::Impl& s_;
  std::unordered_map<ChunkKey, Slot, ChunkKeyHash> map_;
  std::map<uint64_t, int64_t> live_;
  std::vector<std::pair<ChunkKey, Slot>> undo_;
  std::vector<std::pair<uint64_t, int64_t>> live_undo_;
  size_t records_mark_ = 0;
};

struct BatchCounts {
  uint64_t stored = 0, dedup = 0;
};

Status Unref(Overlay& ov, const ChunkKey& first) {
  ChunkKey key = first;
  for (int depth = 0; depth <= fmt::kMaxDeltaDepth; ++depth) {
    LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(key));
    if (!slot->present || slot->e.refcount == 0)
      return Status::InvalidArgument("Unref of chunk " + key.ToHex() + " that holds no reference");
    ov.Save(key, *slot);
    slot->dirty = true;
    if (--slot->e.refcount > 0) return Status::Ok();
    // A pinned chunk stays indexed at refcount 0 until its pin goes
    // (CommitGroup writes its marker; a later group drops it).
    if (ov.Pinned(key)) return Status::Ok();
    // Last reference: the chunk leaves the index; its record is garbage.
    slot->present = false;
    ov.AddLive(slot->e.pack_id, -static_cast<int64_t>(slot->e.record_size()));
    if (!slot->e.base) return Status::Ok();
    key = *slot->e.base;  // a dependant holds one reference on its base
  }
  return Status::Corruption("delta chain of " + first.ToHex() + " longer than allowed");
}

// Appends op's frame as a record at the end of `records` (the active pack),
// makes `e` point at it and installs it in the slot (saved for undo first).
// One more reference to the chunk in `slot` (present).
void TakeRef(Overlay& ov, const ChunkKey& key, Overlay::Slot* slot) {
  ov.Save(key, *slot);
  slot->e.refcount++;
  slot->dirty = true;
}

// Makes `e` (chunk `key`, decoded_len bytes) a delta on `base`: checks the
// base (present, same size, chain within kMaxDeltaDepth) and takes its
// reference. May rehash the overlay: callers re-find their own slots.
Status TakeBase(Overlay& ov, const char* what, const ChunkKey& key, const ChunkKey& base,
                uint32_t decoded_len, fmt::ChunkEntry* e) {
  if (base == key) return Status::InvalidArgument("chunk cannot be its own delta base");
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * bslot, ov.Find(base));
  const std::string head = std::string(what) + " " + key.ToHex() + ": delta base " + base.ToHex();
  if (!bslot->present) return Status::InvalidArgument(head + " is not in the store");
  if (bslot->e.depth + 1 > fmt::kMaxDeltaDepth) return Status::InvalidArgument(head + ": delta chain too long");
  if (bslot->e.decoded_len != decoded_len) return Status::InvalidArgument(head + " is of another size");
  TakeRef(ov, base, bslot);
  e->base = base;
  e->depth = static_cast<uint8_t>(bslot->e.depth + 1);
  return Status::Ok();
}

void AppendRecord(Store::Impl& s, const Batch::Op& op, fmt::ChunkEntry& e, Overlay& ov,
                  Overlay::Slot* slot, std::string& records, uint64_t records_base) {
  e.pack_id = s.active_id;
  e.offset = records_base + records.size();
  e.frame_len = static_cast<uint32_t>(op.a.size());
  uint8_t hdr[fmt::kRecordHeaderSize];
  fmt::EncodeRecordHeader(hdr, op.key, reinterpret_cast<const uint8_t*>(op.a.data()), e.frame_len,
                          e.decoded_len);
  records.append(reinterpret_cast<const char*>(hdr), sizeof hdr);
  records.append(op.a);
  ov.Save(op.key, *slot);
  slot->present = true;
  slot->dirty = true;
  slot->e = e;
  ov.AddLive(s.active_id, static_cast<int64_t>(e.record_size()));
}

Status ApplyChunkOps(Store::Impl& s, const Batch& b, Overlay& ov, std::string& records,
                     uint64_t records_base, BatchCounts& counts) {
  for (const Batch::Op& op : b.ops()) {
    switch (op.kind) {
      case Batch::OpKind::kAdd: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        if (slot->present) {
          TakeRef(ov, op.key, slot);
          counts.dedup++;
          break;
        }
        if (op.a.empty() || op.a.size() > fmt::kMaxFrameLen || op.decoded_len > kMaxChunkSize)
          return Status::InvalidArgument("AddChunk " + op.key.ToHex() + ": frame of " +
                                         std::to_string(op.a.size()) + " bytes / chunk of " +
                                         std::to_string(op.decoded_len) + " bytes out of range");
        fmt::ChunkEntry e;
        if (op.base) LMC_RETURN_IF_ERROR(TakeBase(ov, "AddChunk", op.key, *op.base, op.decoded_len, &e));
        // Find may have rehashed; re-find the chunk's own slot.
        LMC_ASSIGN_OR_RETURN(slot, ov.Find(op.key));
        e.decoded_len = op.decoded_len;
        e.refcount = 1;
        AppendRecord(s, op, e, ov, slot, records, records_base);
        counts.stored++;
        break;
      }
      case Batch::OpKind::kRef: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        if (!slot->present) return Status::InvalidArgument("Ref of chunk " + op.key.ToHex() + " not in the store");
        TakeRef(ov, op.key, slot);
        break;
      }
      case Batch::OpKind::kUnref:
        LMC_RETURN_IF_ERROR(Unref(ov, op.key));
        break;
      case Batch::OpKind::kRewrite: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        if (!slot->present) break;  // released meanwhile: nothing to rewrite
        if (op.a.empty() || op.a.size() > fmt::kMaxFrameLen)
          return Status::InvalidArgument("RewriteChunk " + op.key.ToHex() + ": frame of " +
                                         std::to_string(op.a.size()) + " bytes out of range");
        fmt::ChunkEntry e = slot->e;
        const std::optional<ChunkKey> old_base = e.base;
        e.base.reset();
        e.depth = 0;
        if (op.base) LMC_RETURN_IF_ERROR(TakeBase(ov, "RewriteChunk", op.key, *op.base, e.decoded_len, &e));
        LMC_ASSIGN_OR_RETURN(slot, ov.Find(op.key));
        ov.AddLive(slot->e.pack_id, -static_cast<int64_t>(slot->e.record_size()));
        AppendRecord(s, op, e, ov, slot, records, records_base);
        counts.stored++;
        // The old base loses this dependant's reference.
        if (old_base) LMC_RETURN_IF_ERROR(Unref(ov, *old_base));
        break;
      }
      case Batch::OpKind::kRebase:
        break;  // not yet implemented: always skipped
      case Batch::OpKind::kUnpin:
        break;  // applied once the group has committed (CommitGroup)
      case Batch::OpKind::kPut:
      case Batch::OpKind::kDelete:
        if (static_cast<size_t>(op.cf) >= 4) return Status::InvalidArgument("unknown column family");
        break;
    }
  }
  return Status::Ok();
}

bool HasAdds(const Batch& b) {
  for (const auto& op : b.ops())
    if (op.kind == Batch::OpKind::kAdd || op.kind == Batch::OpKind::kRewrite) return true;
  return false;
}

}  // namespace

Status Store::Impl::EnsureActivePack() {
  if (active) return Status::Ok();
  const uint64_t id = next_pack_id++;
  const std::string path = PackPath(id);
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, Env::OpenMode::kCreate));
  std::string hdr = fmt::EncodePackHeader(id);
  Status st = f->Append(reinterpret_cast<const uint8_t*>(hdr.data()), hdr.size());
  // The new name must be durable before any index entry names the pack.
  if (st.ok()) st = env->SyncDir(pack_dir);
  if (!st.ok()) {
    f.reset();
    env->DeleteFile(path).IgnoreError();  // never referenced; Recover deletes it otherwise
    return st;
  }
  std::shared_ptr<File> shared(std::move(f));
  {
    std::unique_lock l(files_mu);
    files[id] = shared;
  }
  active = std::move(shared);
  active_id = id;
  active_end = fmt::kPackHeaderSize;
  return Status::Ok();
}

void Store::Impl::Rollback() {
  if (!active || active->Size() == active_end) return;
  Status st = active->Truncate(active_end);
  if (!st.ok()) {
    // The tail stays as garbage past the committed size; Recover cuts it.
    spdlog::warn("store {}: cannot cut pack {} back to {} ({}); starting a new pack", dir,
                 PackPath(active_id), active_end, st.ToString());
    active.reset();
  }
}

Status Store::Impl::AppendDurably(const std::string& records) {
  if (records.empty()) return Status::Ok();
  Status st = active->Append(reinterpret_cast<const uint8_t*>(records.data()), records.size());
  if (st.ok()) st = active->Sync();
  if (!st.ok()) {
    spdlog::error("store {}: writing {} bytes to pack {} failed: {}", dir, records.size(),
                  PackPath(active_id), st.ToString());
    Rollback();
  }
  return st;
}

Status Store::Impl::CommitGroup(const std::vector<Writer*>& group) {
  std::lock_guard l(commit_mu);
  bool adds = false, sync = false;
  for (Writer* w : group) {
    adds |= HasAdds(*w->batch);
    sync |= w->sync;
  }
  if (adds) LMC_RETURN_IF_ERROR(EnsureActivePack());

  const uint64_t base = active_end;
  Overlay ov(*this);
  std::string records;
  BatchCounts counts;
  rocksdb::WriteBatch wb;
  size_t applied = 0;

  // 0. Drop pinned dead chunks whose last pin went (kept in `reap` until a
  // group commits their removal).
  std::vector<ChunkKey> reaping;
  {
    std::lock_guard pl(pin_mu);
    for (const ChunkKey& k : reap)
      if (!pins.count(k)) reaping.push_back(k);
  }
  for (const ChunkKey& k : reaping) {
    LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(k));
    if (!slot->present || slot->e.refcount != 0 || Pinned(k)) continue;
    ov.Save(k, *slot);
    slot->present = false;
    slot->dirty = true;
    ov.AddLive(slot->e.pack_id, -static_cast<int64_t>(slot->e.record_size()));
    if (slot->e.base) {
      Status st = Unref(ov, *slot->e.base);
      if (!st.ok() && st.code() != Code::kInvalidArgument) return st;
      if (!st.ok()) spdlog::error("store {}: dropping pinned dead chunk {}: {} (run fsck)", dir, k.ToHex(), st.ToString());
    }
  }

  for (Writer* w : group) {
    ov.BeginBatch(records.size());
    BatchCounts bc;
    w->status = ApplyChunkOps(*this, *w->batch, ov, records, base, bc);
    if (!w->status.ok()) {
      if (w->status.code() != Code::kInvalidArgument) return w->status;  // I/O on the index
      records.resize(ov.AbortBatch());
      continue;
    }
    applied++;
    counts.stored += bc.stored;
    counts.dedup += bc.dedup;
    for (const Batch::Op& op : w->batch->ops()) {
      if (op.kind == Batch::OpKind::kPut)
        wb.Put(fs_cf[static_cast<size_t>(op.cf)], op.a, op.b);
      else if (op.kind == Batch::OpKind::kDelete)
        wb.Delete(fs_cf[static_cast<size_t>(op.cf)], op.a);
    }
  }
  if (applied == 0 && reaping.empty()) return Status::Ok();  // every member failed on its own

  // 1. Pack bytes durable before the index names them.
  LMC_RETURN_IF_ERROR(AppendDurably(records));

  // 2. One index batch: chunk entries, pack sizes and live bytes, fs metadata.
  std::vector<ChunkKey> new_zombies, gone_zombies;
  {
    std::lock_guard pl(pin_mu);
    for (const auto& [key, slot] : ov.slots()) {
      if (!slot.dirty) continue;
      if (slot.present) wb.Put(chunks_cf, key.view(), fmt::EncodeChunkEntry(key, slot.e));
      else wb.Delete(chunks_cf, key.view());
      const bool zombie = slot.present && slot.e.refcount == 0;
      if (zombie && !zombies.count(key)) {
        wb.Put(handles[0], fmt::PinnedDeadKey(key), "");
        new_zombies.push_back(key);
      } else if (!zombie && zombies.count(key)) {
        wb.Delete(handles[0], fmt::PinnedDeadKey(key));
        gone_zombies.push_back(key);
      }
    }
  }
  std::map<uint64_t, fmt::PackMeta> new_meta;
  for (const auto& [id, delta] : ov.live()) {
    if (delta == 0 && id != active_id) continue;
    auto it = packs.find(id);
    fmt::PackMeta m = it != packs.end() ? it->second : fmt::PackMeta{};
    m.live = static_cast<uint64_t>(static_cast<int64_t>(m.live) + delta);
    new_meta[id] = m;
  }
  const uint64_t end = base + records.size();
  bool seal = false;
  if (!records.empty()) {
    fmt::PackMeta& m = new_meta.try_emplace(active_id, packs.count(active_id) ? packs[active_id] : fmt::PackMeta{}).first->second;
    m.size = end;
    seal = end >= opts.pack_size_limit;
    if (seal) m.state = fmt::PackState::kSealed;
  }
  for (const auto& [id, m] : new_meta) wb.Put(packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, m));

  Status st = WriteIndex(wb, sync);
  if (!st.ok()) {
    spdlog::error("store {}: index commit failed: {}", dir, st.ToString());
    Rollback();
    return st;
  }
  // 3. Committed: publish the new state.
  for (const auto& [id, m] : new_meta) packs[id] = m;
  {
    std::lock_guard pl(pin_mu);
    for (const ChunkKey& k : new_zombies) zombies.insert(k);
    for (const ChunkKey& k : gone_zombies) {
      zombies.erase(k);
      reap.erase(k);
    }
    for (const ChunkKey& k : reaping) reap.erase(k);
    // Pins released by the batches that committed.
    for (Writer* w : group) {
      if (!w->status.ok()) continue;
      for (const Batch::Op& op : w->batch->ops()) {
        if (op.kind != Batch::OpKind::kUnpin) continue;
        auto it = pins.find(op.key);
        if (it == pins.end()) continue;
        if (--it->second == 0) {
          pins.erase(it);
          if (zombies.count(op.key)) reap.insert(op.key);
        }
      }
    }
  }
  if (!records.empty()) active_end = end;
  if (seal) active.reset();
  n_groups++;
  n_stored += counts.stored;
  n_dedup += counts.dedup;
  n_appended += records.size();
  return Status::Ok();
}

Status Store::Commit(const Batch& batch, bool sync) {
  Impl& s = *impl_;
  Writer w;
  w.batch = &batch;
  w.sync = sync;
  std::unique_lock l(s.queue_mu);
  s.writers.push_back(&w);
  while (!w.done && &w != s.writers.front()) w.cv.wait(l);
  if (w.done) return std::move(w.status);

  // Leader: take the head of the queue, bounded by frame bytes.
  std::vector<Writer*> group;
  uint64_t bytes = 0;
  for (Writer* x : s.writers) {
    if (!group.empty() && bytes + x->batch->frame_bytes() > s.opts.max_group_bytes) break;
    group.push_back(x);
    bytes += x->batch->frame_bytes();
  }
  l.unlock();

  Status st = s.CommitGroup(group);
  if (!st.ok() && group.size() > 1) {
    // A failure of the group (e.g. no space for all of it) is retried batch
    // by batch so that each caller gets its own outcome.
    for (Writer* x : group) {
      Status one = s.CommitGroup({x});
      if (!one.ok()) x->status = one;
    }
  } else if (!st.ok()) {
    w.status = st;
  }
  for (Writer* x : group)
    if (x->status.ok()) s.n_commits++;

  l.lock();
  for (Writer* x : group) {
    s.writers.pop_front();
    if (x != &w) {
      x->done = true;
      x->cv.notify_one();
    }
  }
  if (!s.writers.empty()) s.writers.front()->cv.notify_one();
  return std::move(w.status);
}

}  // namespace lmc::store
