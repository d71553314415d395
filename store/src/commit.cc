// Commit: group commit of batches (docs/ARCHITECTURE.md, "The chunk store", "Commit").
//
// Callers queue; the first in the queue leads: it takes the queue's head
// (up to max_group_bytes of frames), applies the batches' chunk operations
// to an overlay of the index, appends all new records to the active pack in
// one write, fdatasyncs the pack once, then writes one RocksDB WriteBatch
// (synced if any member asked) and wakes the members.
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "store_impl.h"

namespace lmc::store {
namespace {

// The records a group appends to the active pack: each a header built here
// and a frame that stays in its batch (referenced, not copied), written
// with one AppendV.
class PackRecords {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void Add(const uint8_t* hdr, const std::string& frame) {
    headers_.emplace_back();
    std::memcpy(headers_.back().data(), hdr, fmt::kRecordHeaderSize);
    pieces_.emplace_back(headers_.back().data(), fmt::kRecordHeaderSize);
    pieces_.emplace_back(reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
    size_ += fmt::kRecordHeaderSize + frame.size();
  }
  struct Mark {
    size_t records = 0, size = 0;
  };
  Mark mark() const { return {headers_.size(), size_}; }
  void CutTo(const Mark& m) {
    headers_.resize(m.records);
    pieces_.resize(2 * m.records);
    size_ = m.size;
  }
  std::span<const std::span<const uint8_t>> pieces() const { return pieces_; }

 private:
  std::deque<std::array<uint8_t, fmt::kRecordHeaderSize>> headers_;  // stable addresses
  std::vector<std::span<const uint8_t>> pieces_;
  size_t size_ = 0;
};

// The index state of chunks touched by the group, over the committed index.
class Overlay {
 public:
  struct Slot {
    bool present = false;
    bool dirty = false;
    fmt::ChunkEntry e;
    // The chunk's record in the committed index when the group first read
    // it (committed false: none): if the group moves or drops the chunk,
    // that record dies with the commit (hole punching).
    bool committed = false;
    uint64_t committed_pack = 0, committed_off = 0, committed_size = 0;
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
      slot.committed = true;
      slot.committed_pack = slot.e.pack_id;
      slot.committed_off = slot.e.offset;
      slot.committed_size = slot.e.record_size();
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

  // The dependants index (docs/FORMAT.md, "Dependants index"): the record
  // base -> dep is added (present) or removed by this group.
  void SetDependant(const ChunkKey& base, const ChunkKey& dep, bool present) {
    Edge edge{base, dep};
    auto it = edges_.find(edge);
    edge_undo_.emplace_back(edge, it == edges_.end() ? std::nullopt : std::optional<bool>(it->second));
    edges_[edge] = present;
  }
  // Chunks whose base is `key`: the committed records, with this group's
  // changes.
  Result<std::vector<ChunkKey>> Dependants(const ChunkKey& key) {
    std::set<ChunkKey> deps;
    LMC_RETURN_IF_ERROR(s_.ScanDependants(key, nullptr, [&](const ChunkKey& d) { deps.insert(d); }));
    for (auto it = edges_.lower_bound(Edge{key, ChunkKey{}}); it != edges_.end() && it->first.first == key;
         ++it) {
      if (it->second)
        deps.insert(it->first.second);
      else
        deps.erase(it->first.second);
    }
    return std::vector<ChunkKey>(deps.begin(), deps.end());
  }

  // The op whose frame this group appended at pack offset `off` (records
  // cut with an aborted batch are overwritten by the next at that offset).
  void NoteRecord(uint64_t off, const Batch::Op* op) { records_[off] = op; }
  const Batch::Op* RecordAt(uint64_t off) const {
    auto it = records_.find(off);
    return it == records_.end() ? nullptr : it->second;
  }
  // An op the group made (a matched chunk's frame, encoded at commit),
  // alive as long as the group: its frame is written from here.
  const Batch::Op& Keep(Batch::Op op) { return kept_.emplace_back(std::move(op)); }

  void BeginBatch() {
    undo_.clear();
    live_undo_.clear();
    edge_undo_.clear();
  }
  // Undoes the current batch.
  void AbortBatch() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) map_[it->first] = it->second;
    for (auto& [pack, d] : live_undo_) live_[pack] -= d;
    for (auto it = edge_undo_.rbegin(); it != edge_undo_.rend(); ++it) {
      if (it->second)
        edges_[it->first] = *it->second;
      else
        edges_.erase(it->first);
    }
  }

  const std::unordered_map<ChunkKey, Slot, ChunkKeyHash>& slots() const { return map_; }
  const std::map<uint64_t, int64_t>& live() const { return live_; }
  using Edge = std::pair<ChunkKey, ChunkKey>;  // base, dependant
  const std::map<Edge, bool>& dependant_changes() const { return edges_; }

 private:
  Store::Impl& s_;
  std::unordered_map<ChunkKey, Slot, ChunkKeyHash> map_;
  std::map<uint64_t, int64_t> live_;
  std::vector<std::pair<ChunkKey, Slot>> undo_;
  std::vector<std::pair<uint64_t, int64_t>> live_undo_;
  std::map<Edge, bool> edges_;
  std::vector<std::pair<Edge, std::optional<bool>>> edge_undo_;  // previous state; nullopt: committed
  std::unordered_map<uint64_t, const Batch::Op*> records_;
  std::deque<Batch::Op> kept_;  // stable addresses
};

struct BatchCounts {
  uint64_t stored = 0, dedup = 0, rebased = 0, rebase_skipped = 0;
  uint64_t verified = 0;           // dedup hits whose bytes were compared (here or by MatchChunk)
  uint64_t encoded_at_commit = 0;  // matched chunks gone by the commit, encoded here
};

// Takes `slot` (chunk `key`, present) out of the index: its record becomes
// garbage and its dep/ record goes. The caller releases its base.
void DropEntry(Overlay& ov, const ChunkKey& key, Overlay::Slot* slot) {
  ov.Save(key, *slot);
  slot->present = false;
  slot->dirty = true;
  ov.AddLive(slot->e.pack_id, -static_cast<int64_t>(slot->e.record_size()));
  if (slot->e.base) ov.SetDependant(*slot->e.base, key, false);
}

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
    // (Saved above; saving twice is harmless, undo replays in reverse.)
    DropEntry(ov, key, slot);
    if (!slot->e.base) return Status::Ok();
    key = *slot->e.base;  // a dependant holds one reference on its base
  }
  return Status::Corruption("delta chain of " + first.ToHex() + " longer than allowed");
}

// One more reference to the chunk in `slot` (present).
void TakeRef(Overlay& ov, const ChunkKey& key, Overlay::Slot* slot) {
  ov.Save(key, *slot);
  slot->e.refcount++;
  slot->dirty = true;
}

// Makes `e` (chunk `key`) a delta on `base`: checks the base (present,
// chain within kMaxDeltaDepth) and takes its reference. The base may be of
// another size than the chunk (an fp32 chunk against a range of its bf16
// twin: the frame says which range, and decoding checks it is there). May
// rehash the overlay: callers re-find their own slots.
Status TakeBase(Overlay& ov, const char* what, const ChunkKey& key, const ChunkKey& base,
                fmt::ChunkEntry* e) {
  if (base == key) return Status::InvalidArgument("chunk cannot be its own delta base");
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * bslot, ov.Find(base));
  const std::string head = std::string(what) + " " + key.ToHex() + ": delta base " + base.ToHex();
  if (!bslot->present) return Status::InvalidArgument(head + " is not in the store");
  if (bslot->e.depth + 1 > fmt::kMaxDeltaDepth)
    return Status::InvalidArgument(head + ": delta chain too long");
  TakeRef(ov, base, bslot);
  e->base = base;
  e->depth = static_cast<uint8_t>(bslot->e.depth + 1);
  ov.SetDependant(base, key, true);
  return Status::Ok();
}

// Appends op's frame as a record at the end of `records` (the active pack),
// makes `e` point at it and installs it in the slot (saved for undo first).
void AppendRecord(Store::Impl& s, const Batch::Op& op, fmt::ChunkEntry& e, Overlay& ov, Overlay::Slot* slot,
                  PackRecords& records, uint64_t records_base) {
  e.pack_id = s.active_id;
  e.offset = records_base + records.size();
  e.frame_len = static_cast<uint32_t>(op.frame.size());
  uint8_t hdr[fmt::kRecordHeaderSize];
  // The seal only for the record it was computed for.
  const RecordSeal* seal = op.seal && op.seal->key == op.key && op.seal->frame_len == e.frame_len &&
                                   op.seal->decoded_len == e.decoded_len && op.seal->owner == e.owner
                               ? &*op.seal
                               : nullptr;
  fmt::EncodeRecordHeader(hdr, op.key, reinterpret_cast<const uint8_t*>(op.frame.data()), e.frame_len,
                          e.decoded_len, e.owner, seal ? &seal->checksum : nullptr);
  records.Add(hdr, op.frame);
  ov.NoteRecord(e.offset, &op);
  ov.Save(op.key, *slot);
  slot->present = true;
  slot->dirty = true;
  slot->e = e;
  ov.AddLive(s.active_id, static_cast<int64_t>(e.record_size()));
}

// Whether `key` is `from` or one of its bases, in the overlay. A chain
// longer than any valid one counts as a loop.
Result<bool> InChain(Overlay& ov, const ChunkKey& from, const ChunkKey& key) {
  ChunkKey cur = from;
  for (int hop = 0; hop <= fmt::kMaxDeltaDepth + 1; ++hop) {
    if (cur == key) return true;
    LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(cur));
    if (!slot->present || !slot->e.base) return false;
    cur = *slot->e.base;
  }
  return true;
}

// The transitive dependants of `key` in the overlay, breadth first, each
// with its level below `key` (1: a direct dependant). Levels past
// kMaxDeltaDepth + 1 are not explored: such a subtree is over every limit.
Result<std::vector<std::pair<ChunkKey, int>>> Subtree(Overlay& ov, const ChunkKey& key) {
  std::vector<std::pair<ChunkKey, int>> out;
  std::unordered_set<ChunkKey, ChunkKeyHash> seen{key};
  for (size_t i = 0; i <= out.size(); ++i) {
    const ChunkKey parent = i == 0 ? key : out[i - 1].first;
    const int level = i == 0 ? 1 : out[i - 1].second + 1;
    if (level > fmt::kMaxDeltaDepth + 1) continue;
    LMC_ASSIGN_OR_RETURN(std::vector<ChunkKey> deps, ov.Dependants(parent));
    for (const ChunkKey& d : deps) {
      LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(d));
      // A record that no longer matches its entry (written by an older
      // lmcfs; fsck repairs it) is not followed.
      if (!slot->present || slot->e.base != parent || !seen.insert(d).second) continue;
      out.emplace_back(d, level);
    }
  }
  return out;
}

// Makes the depth of every chunk below `key` exact after key's own depth
// changed: depth(X) = depth(base(X)) + 1.
Status Redepth(Overlay& ov, const ChunkKey& key, const char* what) {
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(key));
  const int top = slot->e.depth;
  LMC_ASSIGN_OR_RETURN(auto below, Subtree(ov, key));
  for (const auto& [k, level] : below) {
    const int want = top + level;
    if (want > fmt::kMaxDeltaDepth)
      return Status::InvalidArgument(std::string(what) + " " + key.ToHex() + ": dependant " + k.ToHex() +
                                     " would be " + std::to_string(want) +
                                     " deltas deep: delta chain too long");
    LMC_ASSIGN_OR_RETURN(Overlay::Slot * d, ov.Find(k));
    if (d->e.depth == want) continue;
    ov.Save(k, *d);
    d->e.depth = static_cast<uint8_t>(want);
    d->dirty = true;
  }
  return Status::Ok();
}

// Whether a RebaseChunk may apply now (the conditions of Batch::RebaseChunk).
Result<bool> CanRebase(Overlay& ov, const Batch::Op& op) {
  const ChunkKey& key = op.key;
  const ChunkKey& base = *op.base;
  if (base == key) return false;
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(key));
  if (!slot->present || slot->e.base) return false;
  const uint32_t decoded_len = slot->e.decoded_len;
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * bslot, ov.Find(base));
  if (!bslot->present) return false;
  // An LMC frame with a widened base (an fp32 master on its bf16 twin)
  // needs the twin's values from its base offset on; any other delta (of
  // whatever FrameCodec), a base of its own size.
  auto info = ReadFrameInfo(reinterpret_cast<const uint8_t*>(op.frame.data()), op.frame.size());
  if (info.ok() && info->xor_delta && info->widened_base) {
    if (info->decoded_size != decoded_len ||
        bslot->e.decoded_len < 2 * (uint64_t{info->base_offset} + decoded_len / 4))
      return false;
  } else if (bslot->e.decoded_len != decoded_len) {
    return false;
  }
  const int depth = bslot->e.depth + 1;
  const int limit = std::min<int>(op.max_depth, fmt::kMaxDeltaDepth);
  if (depth > limit) return false;
  LMC_ASSIGN_OR_RETURN(bool loop, InChain(ov, base, key));
  if (loop) return false;
  LMC_ASSIGN_OR_RETURN(auto below, Subtree(ov, key));
  for (const auto& [k, level] : below)
    if (depth + level > limit) return false;
  return true;
}

Status CheckFrame(const Batch::Op& op, const char* what) {
  if (op.frame.empty() || op.frame.size() > fmt::kMaxFrameLen)
    return Status::InvalidArgument(std::string(what) + " " + op.key.ToHex() + ": frame of " +
                                   std::to_string(op.frame.size()) + " bytes out of range");
  return Status::Ok();
}

// Replaces the record of indexed chunk op.key by op's frame, a delta on
// op.base or standalone (RewriteChunk, RebaseChunk): the chunk keeps its
// key and references, its old record becomes garbage, the new base takes a
// reference and the old one releases one; its subtree's depths follow.
Status ReplaceRecord(Store::Impl& s, const Batch::Op& op, Overlay& ov, PackRecords& records,
                     uint64_t records_base, const char* what) {
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
  fmt::ChunkEntry e = slot->e;
  const std::optional<ChunkKey> old_base = e.base;
  if (old_base) ov.SetDependant(*old_base, op.key, false);
  e.base.reset();
  e.depth = 0;
  if (op.base) {
    LMC_ASSIGN_OR_RETURN(bool loop, InChain(ov, *op.base, op.key));
    if (loop)
      return Status::InvalidArgument(std::string(what) + " " + op.key.ToHex() + ": delta base " +
                                     op.base->ToHex() + " is built on it (a loop)");
    LMC_RETURN_IF_ERROR(TakeBase(ov, what, op.key, *op.base, &e));
  }
  LMC_ASSIGN_OR_RETURN(slot, ov.Find(op.key));
  ov.AddLive(slot->e.pack_id, -static_cast<int64_t>(slot->e.record_size()));
  AppendRecord(s, op, e, ov, slot, records, records_base);
  LMC_RETURN_IF_ERROR(Redepth(ov, op.key, what));
  // The old base loses this dependant's reference.
  if (old_base) LMC_RETURN_IF_ERROR(Unref(ov, *old_base));
  return Status::Ok();
}

Result<ChunkBytes> ChunkContent(Store::Impl& s, Overlay& ov, const ChunkKey& key, uint64_t records_base,
                                int depth);

// The bytes op's frame decodes to (decoded_len of them), its base taken as
// the group sees it.
Result<ChunkBytes> DecodeOp(Store::Impl& s, Overlay& ov, const Batch::Op& op, uint32_t decoded_len,
                            uint64_t records_base, int depth) {
  ChunkBytes base;
  if (op.base) {
    LMC_ASSIGN_OR_RETURN(base, ChunkContent(s, ov, *op.base, records_base, depth + 1));
  }
  uint8_t* w;
  ChunkBytes out = NewChunkBytes(decoded_len, &w);
  Workspace ws;
  LMC_ASSIGN_OR_RETURN(
      size_t n, s.codec->Decode(reinterpret_cast<const uint8_t*>(op.frame.data()), op.frame.size(),
                                base ? base->data() : nullptr, base ? base->size() : 0, w, decoded_len, ws));
  if (n != decoded_len) return Status::Corruption("frame decodes to another size");
  return out;
}

// The decoded bytes of chunk `key` as the group sees it: from its op when
// this group wrote its record (the caller's raw bytes, or the frame
// decoded), else read from the store.
Result<ChunkBytes> ChunkContent(Store::Impl& s, Overlay& ov, const ChunkKey& key, uint64_t records_base,
                                int depth) {
  if (depth > fmt::kMaxDeltaDepth) return Status::Corruption("delta chain too deep");
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(key));
  if (!slot->present) return Status::InvalidArgument("chunk " + key.ToHex() + " is not in the store");
  const fmt::ChunkEntry e = slot->e;  // Find may rehash the overlay below
  if (s.active && e.pack_id == s.active_id && e.offset >= records_base) {
    const Batch::Op* op = ov.RecordAt(e.offset);
    if (!op || op->key != key) return Status::Corruption("no op for the group's record of " + key.ToHex());
    if (op->raw && op->raw->size() == e.decoded_len) return op->raw;
    return DecodeOp(s, ov, *op, e.decoded_len, records_base, depth);
  }
  uint8_t* w;
  ChunkBytes out = NewChunkBytes(e.decoded_len, &w);
  Workspace ws;
  LMC_ASSIGN_OR_RETURN(size_t n, s.Read(key, w, e.decoded_len, ws, false, 0));
  if (n != e.decoded_len) return Status::Corruption("chunk " + key.ToHex() + " decodes to another size");
  return out;
}

// A dedup hit in a store whose keys are a fast hash (KeyScheme::verify_hits):
// the op's bytes must be the stored chunk's, or the chunk is not shared and
// the batch fails (InvalidArgument: only this batch). A collision cannot be
// crafted without the store's secret; an accidental one is as likely as
// 2^-128 per pair.
Status VerifyHit(Store::Impl& s, Overlay& ov, const Batch::Op& op, uint64_t records_base) {
  const std::string head = "AddChunk " + op.key.ToHex() + ": ";
  LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
  if (slot->e.decoded_len != op.decoded_len)
    return Status::InvalidArgument(head + "the store holds a chunk of " +
                                   std::to_string(slot->e.decoded_len) +
                                   " bytes under this key, this one has " + std::to_string(op.decoded_len) +
                                   "; nothing of this batch was stored");
  // A record this group wrote from the same frame on the same base (the
  // same tensor twice in one save): the same bytes, nothing to decode.
  if (s.active && slot->e.pack_id == s.active_id && slot->e.offset >= records_base) {
    const Batch::Op* mine = ov.RecordAt(slot->e.offset);
    if (mine && !op.frame.empty() && mine->frame == op.frame && mine->base == op.base) return Status::Ok();
  }
  auto stored = ChunkContent(s, ov, op.key, records_base, 0);
  if (!stored.ok())
    return Status::InvalidArgument(
        head + "the stored chunk with this key cannot be read to compare (" + stored.status().ToString() +
        "); nothing of this batch was stored. Run lmcfs-fsck --repair on the store");
  ChunkBytes mine = op.raw;
  if (!mine || mine->size() != op.decoded_len) {
    auto d = DecodeOp(s, ov, op, op.decoded_len, records_base, 0);
    if (!d.ok()) return Status::InvalidArgument(head + "frame does not decode: " + d.status().ToString());
    mine = std::move(*d);
  }
  if ((*stored)->size() != mine->size() || std::memcmp((*stored)->data(), mine->data(), mine->size()) != 0) {
    spdlog::error(
        "store {}: chunk key {} names two different chunks (a hash collision); the new one was "
        "not stored",
        s.dir, op.key.ToHex());
    return Status::InvalidArgument(head +
                                   "a different chunk of this store has the same key (a hash collision); "
                                   "nothing of this batch was stored");
  }
  return Status::Ok();
}

Status ApplyChunkOps(Store::Impl& s, const Batch& b, Overlay& ov, PackRecords& records, uint64_t records_base,
                     BatchCounts& counts) {
  for (const Batch::Op& op : b.ops()) {
    switch (op.kind) {
      case Batch::OpKind::kAdd: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        const bool matched = op.frame.empty() && op.raw;  // AddMatchedChunk
        if (slot->present) {
          if (s.keys.verify_hits()) {
            // A matched chunk whose record is still the one MatchChunk
            // compared has the same bytes (records never change in place).
            if (!matched || slot->e.pack_id != op.match_pack || slot->e.offset != op.match_offset) {
              LMC_RETURN_IF_ERROR(VerifyHit(s, ov, op, records_base));
              LMC_ASSIGN_OR_RETURN(slot, ov.Find(op.key));
            }
            counts.verified++;
          }
          TakeRef(ov, op.key, slot);
          counts.dedup++;
          break;
        }
        const Batch::Op* add = &op;
        if (matched) {
          // Matched, then released by others before this commit: store it.
          Workspace ws;
          auto f = s.codec->EncodeStandalone(op.raw->data(), op.raw->size(), ws);
          if (!f.ok())
            return Status::InvalidArgument("AddChunk " + op.key.ToHex() +
                                           ": the chunk it matched left the store before the commit, and "
                                           "encoding it here failed: " +
                                           f.status().ToString());
          add = &ov.Keep(Batch::Op{.kind = Batch::OpKind::kAdd,
                                   .key = op.key,
                                   .decoded_len = op.decoded_len,
                                   .owner = op.owner,
                                   .frame = std::move(*f),
                                   .raw = op.raw});
          counts.encoded_at_commit++;
        }
        if (add->frame.empty() || add->frame.size() > fmt::kMaxFrameLen || add->decoded_len > kMaxChunkSize)
          return Status::InvalidArgument("AddChunk " + add->key.ToHex() + ": frame of " +
                                         std::to_string(add->frame.size()) + " bytes / chunk of " +
                                         std::to_string(add->decoded_len) + " bytes out of range");
        fmt::ChunkEntry e;
        if (add->base) LMC_RETURN_IF_ERROR(TakeBase(ov, "AddChunk", add->key, *add->base, &e));
        // Find may have rehashed; re-find the chunk's own slot.
        LMC_ASSIGN_OR_RETURN(slot, ov.Find(add->key));
        e.decoded_len = add->decoded_len;
        e.owner = add->owner;
        e.refcount = 1;
        AppendRecord(s, *add, e, ov, slot, records, records_base);
        counts.stored++;
        break;
      }
      case Batch::OpKind::kRef: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        if (!slot->present)
          return Status::InvalidArgument("Ref of chunk " + op.key.ToHex() + " not in the store");
        TakeRef(ov, op.key, slot);
        break;
      }
      case Batch::OpKind::kUnref:
        LMC_RETURN_IF_ERROR(Unref(ov, op.key));
        break;
      case Batch::OpKind::kRewrite: {
        LMC_ASSIGN_OR_RETURN(Overlay::Slot * slot, ov.Find(op.key));
        if (!slot->present) break;  // released meanwhile: nothing to rewrite
        LMC_RETURN_IF_ERROR(CheckFrame(op, "RewriteChunk"));
        LMC_RETURN_IF_ERROR(ReplaceRecord(s, op, ov, records, records_base, "RewriteChunk"));
        counts.stored++;
        break;
      }
      case Batch::OpKind::kRebase: {
        LMC_RETURN_IF_ERROR(CheckFrame(op, "RebaseChunk"));
        LMC_ASSIGN_OR_RETURN(bool applies, CanRebase(ov, op));
        if (!applies) {
          counts.rebase_skipped++;
          break;
        }
        LMC_RETURN_IF_ERROR(ReplaceRecord(s, op, ov, records, records_base, "RebaseChunk"));
        counts.rebased++;
        break;
      }
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
    if (op.kind == Batch::OpKind::kAdd || op.kind == Batch::OpKind::kRewrite ||
        op.kind == Batch::OpKind::kRebase)
      return true;
  return false;
}

}  // namespace

uint64_t Store::Impl::PackLimit() const {
  uint64_t total = 0;
  for (const auto& [id, m] : packs) total += m.size;
  return std::min(opts.pack_size_limit, std::max(opts.pack_size_floor, total / 8));
}

Status Store::Impl::EnsureActivePack() {
  if (active) return Status::Ok();
  if (opts.read_only) return Status::Unsupported("store " + dir + " is open read-only");
  const uint64_t id = next_pack_id++;
  const std::string path = PackPath(id);
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, Env::OpenMode::kCreate));
  std::string hdr = fmt::EncodePackHeader(id);
  Status st = f->Append(reinterpret_cast<const uint8_t*>(hdr.data()), hdr.size());
  if (st.ok()) n_pack_written += hdr.size();
  // The new name must be durable before any index entry names the pack.
  if (st.ok()) st = env->SyncDir(pack_dir);
  if (!st.ok()) {
    f.reset();
    env->DeleteFile(path).IgnoreError();  // never referenced; Recover deletes it otherwise
    return st;
  }
  std::shared_ptr<File> shared(std::move(f));
  if (cache_holes) {
    std::lock_guard hl(holes_mu);
    pack_holes[id] = 0;
  }
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
  const std::span<const uint8_t> one(reinterpret_cast<const uint8_t*>(records.data()), records.size());
  return AppendDurably({&one, 1}, records.size());
}

Status Store::Impl::CheckRoom(uint64_t bytes) {
  if (opts.space_reserve == 0) return Status::Ok();
  uint64_t total = 0, avail = 0;
  if (!env->SpaceOf(pack_dir, &total, &avail).ok()) return Status::Ok();  // cannot tell
  const uint64_t reserve = ReserveOf(total);
  if (avail >= bytes + reserve) return Status::Ok();
  return Status::NoSpace("store " + dir + ": its filesystem has " + std::to_string(avail) +
                         " bytes free; writing " + std::to_string(bytes) +
                         " more would leave less than the " + std::to_string(reserve) +
                         " kept for deletes and the index. Delete files (their space comes back at once) or "
                         "free space on that filesystem");
}

Status Store::Impl::AppendDurably(std::span<const std::span<const uint8_t>> pieces, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  LMC_RETURN_IF_ERROR(CheckRoom(bytes));
  Status st = active->AppendV(pieces);
  if (st.ok()) n_pack_written += bytes;
  if (st.ok()) st = active->Sync();
  if (!st.ok()) {
    // A full store (a full Ceph pool refuses the append itself; a full
    // disk is refused by CheckRoom before) is its callers' to report: the
    // filesystem says it at most every 10 s, with what to do.
    spdlog::log(st.code() == Code::kNoSpace ? spdlog::level::debug : spdlog::level::err,
                "store {}: writing {} bytes to pack {} failed: {}", dir, bytes, PackPath(active_id),
                st.ToString());
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
  if (adds && format_version < 2) {
    bool scoped = false;
    for (Writer* w : group)
      for (const Batch::Op& op : w->batch->ops())
        scoped |= op.kind == Batch::OpKind::kAdd && op.owner.has_value();
    if (scoped) LMC_RETURN_IF_ERROR(UpgradeFormat());
  }

  const uint64_t base = active_end;
  Overlay ov(*this);
  PackRecords records;
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
    DropEntry(ov, k, slot);
    if (slot->e.base) {
      Status st = Unref(ov, *slot->e.base);
      if (!st.ok() && st.code() != Code::kInvalidArgument) return st;
      if (!st.ok())
        spdlog::error("store {}: dropping pinned dead chunk {}: {} (run fsck)", dir, k.ToHex(),
                      st.ToString());
    }
  }

  for (Writer* w : group) {
    ov.BeginBatch();
    const PackRecords::Mark mark = records.mark();
    BatchCounts bc;
    w->status = ApplyChunkOps(*this, *w->batch, ov, records, base, bc);
    if (!w->status.ok()) {
      if (w->status.code() != Code::kInvalidArgument) return w->status;  // I/O on the index
      ov.AbortBatch();
      records.CutTo(mark);
      continue;
    }
    applied++;
    counts.stored += bc.stored;
    counts.dedup += bc.dedup;
    counts.rebased += bc.rebased;
    counts.rebase_skipped += bc.rebase_skipped;
    counts.verified += bc.verified;
    counts.encoded_at_commit += bc.encoded_at_commit;
    for (const Batch::Op& op : w->batch->ops()) {
      if (op.kind == Batch::OpKind::kPut)
        wb.Put(fs_cf[static_cast<size_t>(op.cf)], op.cf_key, op.value);
      else if (op.kind == Batch::OpKind::kDelete)
        wb.Delete(fs_cf[static_cast<size_t>(op.cf)], op.cf_key);
    }
  }
  if (applied == 0 && reaping.empty()) return Status::Ok();  // every member failed on its own

  // 1. Pack bytes durable before the index names them.
  LMC_RETURN_IF_ERROR(AppendDurably(records.pieces(), records.size()));

  // 2. One index batch: chunk entries, pack sizes and live bytes, fs metadata.
  std::vector<ChunkKey> newly_pinned_dead, no_longer_pinned_dead;
  {
    std::lock_guard pl(pin_mu);
    for (const auto& [key, slot] : ov.slots()) {
      if (!slot.dirty) continue;
      if (slot.present)
        wb.Put(chunks_cf, key.view(), fmt::EncodeChunkEntry(key, slot.e));
      else
        wb.Delete(chunks_cf, key.view());
      const bool dead_but_pinned = slot.present && slot.e.refcount == 0;
      if (dead_but_pinned && !pinned_dead.count(key)) {
        wb.Put(handles[0], fmt::PinnedDeadKey(key), "");
        newly_pinned_dead.push_back(key);
      } else if (!dead_but_pinned && pinned_dead.count(key)) {
        wb.Delete(handles[0], fmt::PinnedDeadKey(key));
        no_longer_pinned_dead.push_back(key);
      }
    }
  }
  for (const auto& [edge, present] : ov.dependant_changes()) {
    const std::string k = fmt::DependantKey(edge.first, edge.second);
    if (present)
      wb.Put(handles[0], k, "");
    else
      wb.Delete(handles[0], k);
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
    fmt::PackMeta& m =
        new_meta.try_emplace(active_id, packs.count(active_id) ? packs[active_id] : fmt::PackMeta{})
            .first->second;
    m.size = end;
    seal = end >= PackLimit();
    if (seal) m.state = fmt::PackState::kSealed;
  }
  for (const auto& [id, m] : new_meta) wb.Put(packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, m));

  Status st = WriteIndex(wb, sync);
  if (!st.ok()) {
    spdlog::error("store {}: index commit failed: {}", dir, st.ToString());
    Rollback();
    return st;
  }
  // 3. Committed: publish the new state. Records the group moved or
  // dropped are dead: queued for punching.
  for (const auto& [id, m] : new_meta) packs[id] = m;
  {
    std::vector<DeadRange> dead;
    for (const auto& [key, slot] : ov.slots())
      if (slot.committed &&
          (!slot.present || slot.e.pack_id != slot.committed_pack || slot.e.offset != slot.committed_off))
        dead.push_back({slot.committed_pack, slot.committed_off, slot.committed_size});
    QueueDead(std::move(dead));
  }
  {
    std::lock_guard pl(pin_mu);
    for (const ChunkKey& k : newly_pinned_dead) pinned_dead.insert(k);
    for (const ChunkKey& k : no_longer_pinned_dead) {
      pinned_dead.erase(k);
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
          if (pinned_dead.count(op.key)) reap.insert(op.key);
        }
      }
    }
  }
  if (!records.empty()) active_end = end;
  if (seal) active.reset();
  n_groups++;
  n_stored += counts.stored;
  n_dedup += counts.dedup;
  n_dedup_verified += counts.verified;
  n_encoded_at_commit += counts.encoded_at_commit;
  n_rebased += counts.rebased;
  n_rebase_skipped += counts.rebase_skipped;
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
