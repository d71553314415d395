#include "delta.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/fs/records.h"
#include "lmc/store/extent.h"

namespace lmc::fs {

namespace {
// How long a queued rebase waits for its new chunk to be committed before
// it is dropped (the file was deleted or its commit failed).
constexpr int64_t kRebaseWaitNs = int64_t{30} * 1000 * 1000 * 1000;
// Frame bytes per rebase commit. Small: a commit's new delta records and
// the standalone records they replace are both on disk until the store
// punches the old ones (docs/ARCHITECTURE.md, "Hole punching"), so this
// bounds what a rebase adds to the store's peak; each commit costs one
// pack sync and one index write.
constexpr size_t kRebaseBatchBytes = size_t{4} << 20;
// ReconcileShared scans every extent: the next scan waits at least this
// long (and ten times the last scan's duration), unless a flush asks.
constexpr int64_t kReconcileMinGapNs = int64_t{2} * 1000 * 1000 * 1000;
}  // namespace

SnapshotDeltaPolicy::SnapshotDeltaPolicy(store::Store* store, DeltaOptions opts)
    : store_(store),
      opts_(opts),
      lineage_(store, opts.lineage_cached),
      pairs_(store, opts.pairs_cached),
      masters_(store, opts.pairs_cached, PairIndex::Kind::kMasters),
      cache_(opts.base_cache_bytes) {
  if (opts_.mode == DeltaMode::kReverse && opts_.background) {
    LoadQueuedRebases();
    rebaser_ = std::thread([this] { RebaseLoop(); });
  }
}

namespace {
constexpr std::string_view kRebasePrefix = "rebase/";
constexpr std::string_view kPairRebasePrefix = "rebase-pair/";
constexpr std::string_view kRefreshPrefix = "rebase-refresh/";
}  // namespace

std::string SnapshotDeltaPolicy::RefreshRecordKey(uint64_t ino, uint64_t offset) {
  std::string k(kRefreshPrefix);
  AppendBEBytes(&k, ino, 8);
  AppendBEBytes(&k, offset, 8);
  return k;
}

void SnapshotDeltaPolicy::SetReencodedListener(ReencodedListener fn) {
  std::lock_guard l(rq_mu_);
  reencoded_listener_ = std::move(fn);
}

void SnapshotDeltaPolicy::SetRebaseListener(RebaseListener fn) {
  {
    std::lock_guard l(rq_mu_);
    listener_ = fn;
  }
  if (!fn) return;
  // Refreshes a crash cut short (between a rebase's commit and the
  // listener's): told now, then their records go.
  struct Place {
    std::string record;
    uint64_t ino, offset;
    store::ChunkKey key;
  };
  std::vector<Place> left;
  Status st = store_->Scan(store::Cf::kMeta, kRefreshPrefix, [&](std::string_view k, std::string_view v) {
    if (k.size() != kRefreshPrefix.size() + 16 || v.size() != store::ChunkKey::kSize) return true;
    left.push_back({std::string(k), LoadBEBytes(k.data() + kRefreshPrefix.size(), 8),
                    LoadBEBytes(k.data() + kRefreshPrefix.size() + 8, 8),
                    store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(v.data()))});
    return true;
  });
  if (!st.ok()) {
    spdlog::warn(
        "delta: reading the refreshes an earlier mount left failed ({}); those files' stored bytes "
        "(st_blocks) may stay as they were (lmcfs-fsck --repair sets them)",
        st.ToString());
    return;
  }
  if (left.empty()) return;
  store::Batch done;
  for (const Place& p : left) {
    fn(p.ino, p.offset, p.key);
    done.Delete(store::Cf::kMeta, p.record);
  }
  if (Status cs = store_->Commit(done, false); !cs.ok())
    spdlog::warn("delta: deleting {} refresh records failed ({}); the next mount tells them again",
                 left.size(), cs.ToString());
  spdlog::info("delta: stored bytes of {} places refreshed that an earlier mount's end cut short",
               left.size());
}

std::string SnapshotDeltaPolicy::RebaseRecordKey(const RebaseItem& it) {
  std::string k(it.paired ? kPairRebasePrefix : kRebasePrefix);
  k.append(it.prev.view());
  k.append(it.next.view());
  return k;
}

std::string SnapshotDeltaPolicy::EncodeRebaseItem(const RebaseItem& it) {
  std::string v;
  if (it.paired) {
    AppendBEBytes(&v, it.base_offset, 4);
  } else {
    v.push_back(static_cast<char>(it.dtype));
    AppendBEBytes(&v, it.n, 4);
  }
  AppendBEBytes(&v, it.prev_ino, 8);
  AppendBEBytes(&v, it.prev_offset, 8);
  return v;
}

void SnapshotDeltaPolicy::LoadQueuedRebases() {
  constexpr size_t kKey = store::ChunkKey::kSize;
  const int64_t now = NowNs();
  size_t bad = 0;
  auto scan = [&](std::string_view prefix, bool paired) {
    const size_t head = paired ? 4 : 5;  // what precedes the inode and offset
    return store_->Scan(store::Cf::kMeta, prefix, [&](std::string_view k, std::string_view v) {
      if (k.size() != prefix.size() + 2 * kKey || v.size() != head + 16 ||
          (!paired && static_cast<uint8_t>(v[0]) >= kNumDTypes)) {
        bad++;
        return true;
      }
      RebaseItem it;
      it.prev = store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data() + prefix.size()));
      it.next = store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data() + prefix.size() + kKey));
      it.paired = paired;
      if (paired) {
        it.dtype = DType::kF32;
        it.base_offset = static_cast<uint32_t>(LoadBEBytes(v.data(), 4));
      } else {
        it.dtype = static_cast<DType>(static_cast<uint8_t>(v[0]));
        it.n = static_cast<uint32_t>(LoadBEBytes(v.data() + 1, 4));
      }
      it.prev_ino = LoadBEBytes(v.data() + head, 8);
      it.prev_offset = LoadBEBytes(v.data() + head + 8, 8);
      it.queued_ns = now;
      rq_.push_back(it);
      return true;
    });
  };
  Status st = scan(kRebasePrefix, false);
  if (st.ok()) st = scan(kPairRebasePrefix, true);
  if (!st.ok())
    spdlog::warn("delta: reading the queued rebases failed ({}); those prior versions stay standalone",
                 st.ToString());
  if (bad) spdlog::warn("delta: {} malformed rebase records ignored", bad);
  if (!rq_.empty()) {
    counters_.rebase_queued += rq_.size();
    spdlog::info("delta: {} rebases queued by an earlier mount resume", rq_.size());
  }
}

SnapshotDeltaPolicy::~SnapshotDeltaPolicy() { StopBackground(); }

void SnapshotDeltaPolicy::StopBackground() {
  {
    std::lock_guard l(rq_mu_);
    stop_ = true;
  }
  rq_cv_.notify_all();
  idle_cv_.notify_all();
  if (rebaser_.joinable()) rebaser_.join();
  std::lock_guard l(rq_mu_);
  if (!rq_.empty()) {
    counters_.rebase_dropped += rq_.size();
    spdlog::info("delta: {} queued rebases dropped at shutdown (those prior versions stay standalone)",
                 rq_.size());
    rq_.clear();
  }
}

SnapshotDeltaPolicy::Bytes SnapshotDeltaPolicy::BaseBytes(const store::ChunkKey& key, size_t n) {
  if (Bytes b = cache_.Get(key)) {
    counters_.base_cache_hits++;
    return b;
  }
  thread_local Workspace ws;
  uint8_t* w;
  Bytes buf = store::NewChunkBytes(n, &w);
  auto got = store_->ReadChunk(key, w, n, ws);
  if (!got.ok() || *got != n) {
    if (!got.ok())
      spdlog::warn("delta: base chunk {} unreadable ({}); writing standalone", key.ToHex(),
                   got.status().ToString());
    return nullptr;
  }
  Bytes b = std::move(buf);
  cache_.Put(key, b);
  return b;
}

std::optional<BaseChoice> SnapshotDeltaPolicy::ChooseBase(const ChunkOrigin& origin, const uint8_t* data,
                                                          size_t n) {
  if (opts_.mode == DeltaMode::kOff || origin.spec == nullptr || n < opts_.min_chunk) {
    spdlog::debug("delta: ino {} len {}: not considered (off, no spec or small)", origin.ino, n);
    return std::nullopt;
  }
  // An fp32 master whose bf16 twin is stored: the pair (against the prior
  // version too, below, in forward mode: the smaller estimate wins).
  double pair_bits = 0;
  std::optional<BaseChoice> paired = TryPair(origin, data, n, &pair_bits);
  // An explicit base directory (delta_base=DIR) comes first, for files
  // outside it.
  if (!opts_.base_dir.empty()) {
    if (auto dir = BaseDirIno(); dir && origin.parent != *dir) {
      const std::string dk = DirLineageKey(*dir, *origin.spec, origin.owner);
      if (auto e = dk.empty() ? std::nullopt : lineage_.Lookup(dk)) {
        if (auto b = TryBase(origin, data, n, e->key)) {
          if (paired) Release(paired->key);
          counters_.explicit_base++;
          return b;
        }
      }
    }
  }
  auto take_paired = [&] {
    if (paired) counters_.paired++;
    return paired;
  };
  // Reverse deltas: the new chunk is standalone (or paired); Record queues
  // the rebase of its prior version.
  if (opts_.mode == DeltaMode::kReverse) return take_paired();
  const std::string lk = LineageKey(origin.file_name, *origin.spec, origin.owner, origin.dir_name);
  std::optional<LineageEntry> prior = lk.empty() ? std::nullopt : lineage_.Lookup(lk);
  if (!prior) {
    counters_.no_lineage++;
    spdlog::debug("delta: ino {} offset {} len {} '{}': no prior version", origin.ino, origin.spec->offset, n,
                  origin.spec->region_name);
    return take_paired();
  }
  double lineage_bits = 0;
  std::optional<BaseChoice> b = TryBase(origin, data, n, prior->key, &lineage_bits);
  if (paired && (!b || pair_bits < lineage_bits)) {
    if (b) {
      Release(b->key);
      counters_.delta--;  // TryBase counted it
    }
    return take_paired();
  }
  if (paired) Release(paired->key);
  return b;
}

std::optional<BaseChoice> SnapshotDeltaPolicy::TryPair(const ChunkOrigin& origin, const uint8_t* data,
                                                       size_t n, double* bits) {
  const ChunkSpec& spec = *origin.spec;
  if (!opts_.pair || !spec.tensor_chunk || spec.dtype != DType::kF32 || n % 4 != 0 ||
      n / 4 < kFingerprintElems)
    return std::nullopt;
  const std::optional<uint64_t> fp = Fp32Fingerprint(data);
  if (!fp) return std::nullopt;
  const std::optional<PairEntry> twin = pairs_.Lookup(*fp, origin.owner);
  if (!twin) return std::nullopt;
  auto refuse = [&](const char* why) -> std::optional<BaseChoice> {
    counters_.pair_refused++;
    spdlog::debug("delta: ino {} offset {} len {} '{}': bf16 twin {} refused: {}", origin.ino, spec.offset, n,
                  spec.region_name, twin->key.ToHex(), why);
    return std::nullopt;
  };
  // The twin is pinned ahead (no commit lock: this very file's commits may
  // be running), then looked up. Indexed, it is pinned again the usual way
  // (PinChunk excludes a commit group dropping it meanwhile). Not indexed,
  // it is either still in this inode's pending batches (a torch.save writes
  // the bf16 model just before the fp32 master), which commit before this
  // chunk and from then on keep it by the pin, or it was dropped before the
  // pin: FileData::DropPendingBase tells the two apart when it applies the
  // chunk. Its bytes are those Record kept; its depth is unknown but at most
  // max_chain, so the chain stays within the store's limit.
  Bytes twin_bytes;
  store_->PinPendingChunk(twin->key);
  auto info = store_->GetChunkInfo(twin->key);
  if (info.ok()) {
    store_->UnpinChunk(twin->key);
    if (!store_->PinChunk(twin->key).ok()) return refuse("gone");
    info = store_->GetChunkInfo(twin->key);
    if (!info.ok() || info->delta_depth + 1u > opts_.max_chain) {
      store_->UnpinChunk(twin->key);
      return refuse(info.ok() ? "chain limit" : "gone");
    }
    twin_bytes = BaseBytes(twin->key, info->decoded_len);
  } else {
    if (twin->ino != origin.ino || opts_.max_chain + 1 > store::Store::kMaxDeltaChain) {
      store_->UnpinChunk(twin->key);
      return refuse("gone");
    }
    twin_bytes = cache_.Get(twin->key);
  }
  const uint64_t need = 2 * (uint64_t{twin->offset} + n / 4);
  if (!twin_bytes || twin_bytes->size() < need ||
      !TwinsMatch(data, n / 4, twin_bytes->data(), twin->offset)) {
    store_->UnpinChunk(twin->key);
    return refuse(!twin_bytes                 ? "unreadable"
                  : twin_bytes->size() < need ? "too short"
                                              : "values do not match");
  }
  // The estimate needs the widened values; the encoder widens them again
  // (EncodeParams::widened_base_offset): the choice carries the twin's own
  // bytes, not a copy per chunk.
  thread_local std::vector<uint8_t> widened;
  if (widened.size() < n) widened.resize(n);
  WidenBf16(twin_bytes->data(), twin->offset, n / 4, widened.data());
  const DeltaEstimate est = EstimateDelta(DType::kF32, data, widened.data(), n, opts_.estimate);
  if (!est.prefer_delta) {
    store_->UnpinChunk(twin->key);
    return refuse("not smaller");
  }
  *bits = est.delta_bits;
  spdlog::debug(
      "delta: ino {} offset {} len {} '{}': paired with bf16 twin {} at element {} ({:.0f} vs {:.0f} bits)",
      origin.ino, spec.offset, n, spec.region_name, twin->key.ToHex(), twin->offset, est.delta_bits,
      est.standalone_bits);
  return BaseChoice{twin->key, std::move(twin_bytes), twin->offset, !info.ok()};
}

void SnapshotDeltaPolicy::RecordPairs(const ChunkOrigin& origin, const store::ChunkKey& key,
                                      const store::ChunkBytes& bytes, store::Batch* batch) {
  const ChunkSpec& spec = *origin.spec;
  if (!opts_.pair || !bytes || !spec.tensor_chunk || spec.dtype != DType::kBF16) return;
  // An fp32 chunk of the same byte size covers half as many values: those
  // of the twin tensor start at this chunk's first value and a quarter of
  // the chunk size in (TwinOffsets).
  size_t offs[2];
  const size_t k = TwinOffsets(bytes->size() / 2, opts_.chunk_size, offs);
  for (size_t i = 0; i < k; ++i) {
    const size_t off = offs[i];
    auto fp = Bf16Fingerprint(bytes->data() + 2 * off);
    if (!fp) continue;
    pairs_.Record(*fp, origin.owner, PairEntry{key, static_cast<uint32_t>(off), origin.ino}, batch);
    // A master written before this chunk: the rebaser re-encodes it against
    // this chunk (reverse mode runs the rebaser). The candidate is checked
    // there, on the committed bytes of both.
    if (opts_.mode != DeltaMode::kReverse) continue;
    auto master = masters_.Lookup(*fp, origin.owner);
    if (!master || master->key == key) continue;
    RebaseItem item;
    item.prev = master->key;
    item.next = key;
    item.dtype = DType::kF32;
    item.queued_ns = NowNs();
    item.prev_ino = master->ino;
    item.prev_offset = master->file_offset;
    item.paired = true;
    item.base_offset = static_cast<uint32_t>(off);
    counters_.pair_later_queued++;
    spdlog::debug(
        "delta: ino {} offset {} '{}': bf16 chunk {} at element {} may be the twin of fp32 chunk {}",
        origin.ino, spec.offset, spec.region_name, key.ToHex(), off, master->key.ToHex());
    QueueRebase(item, batch);
  }
}

void SnapshotDeltaPolicy::RecordMaster(const ChunkOrigin& origin, const store::ChunkKey& key,
                                       const std::optional<store::ChunkKey>& base,
                                       const store::ChunkBytes& bytes, store::Batch* batch) {
  const ChunkSpec& spec = *origin.spec;
  if (!opts_.pair || opts_.mode != DeltaMode::kReverse || base || !bytes || !spec.tensor_chunk ||
      spec.dtype != DType::kF32 || bytes->size() % 4 != 0 || bytes->size() / 4 < kFingerprintElems)
    return;
  if (auto fp = Fp32Fingerprint(bytes->data()))
    masters_.Record(*fp, origin.owner, PairEntry{key, 0, origin.ino, spec.offset}, batch);
}

void SnapshotDeltaPolicy::QueueRebase(const RebaseItem& item, store::Batch* batch) {
  // Persisted with the new chunk: a crash or unmount before the rebase
  // leaves it for the next mount.
  batch->Put(store::Cf::kMeta, RebaseRecordKey(item), EncodeRebaseItem(item));
  if (!opts_.background) return;
  {
    std::lock_guard l(rq_mu_);
    rq_.push_back(item);
  }
  counters_.rebase_queued++;
  rq_cv_.notify_one();
}

std::optional<uint64_t> SnapshotDeltaPolicy::BaseDirIno() {
  if (opts_.base_dir.empty() || !resolver_) return std::nullopt;
  std::lock_guard l(dir_mu_);
  const int64_t now = NowNs();
  if (base_dir_checked_ns_ == 0 || now - base_dir_checked_ns_ > 1000 * 1000 * 1000) {
    base_dir_ino_ = resolver_(opts_.base_dir);
    base_dir_checked_ns_ = now;
  }
  return base_dir_ino_;
}

std::optional<BaseChoice> SnapshotDeltaPolicy::TryBase(const ChunkOrigin& origin, const uint8_t* data,
                                                       size_t n, const store::ChunkKey& base, double* bits) {
  // Pin first: from here on the base stays indexed until Record's batch
  // commits (or UnpinChunk below).
  if (!store_->PinChunk(base).ok()) {
    counters_.base_gone++;
    spdlog::debug("delta: ino {} offset {} len {}: prior version gone", origin.ino, origin.spec->offset, n);
    return std::nullopt;
  }
  auto unpin = [&] { store_->UnpinChunk(base); };
  auto info = store_->GetChunkInfo(base);
  if (!info.ok() || info->decoded_len != n) {
    unpin();
    counters_.base_gone++;
    spdlog::debug("delta: ino {} offset {} len {}: prior version gone or of another length", origin.ino,
                  origin.spec->offset, n);
    return std::nullopt;
  }
  if (info->delta_depth + 1u > opts_.max_chain) {
    unpin();
    counters_.keyframes++;
    spdlog::debug("delta: ino {} offset {} len {}: keyframe (chain limit)", origin.ino, origin.spec->offset,
                  n);
    return std::nullopt;
  }
  Bytes bytes = BaseBytes(base, n);
  if (!bytes) {
    unpin();
    counters_.base_gone++;
    return std::nullopt;
  }
  const DeltaEstimate est = EstimateDelta(origin.spec->dtype, data, bytes->data(), n, opts_.estimate);
  spdlog::debug("delta: ino {} offset {} len {} '{}' depth {}: estimate standalone {:.0f} xor {:.0f} bits",
                origin.ino, origin.spec->offset, n, origin.spec->region_name, info->delta_depth,
                est.standalone_bits, est.delta_bits);
  if (!est.prefer_delta) {
    unpin();
    counters_.estimate_said_no++;
    return std::nullopt;
  }
  counters_.delta++;
  if (bits) *bits = est.delta_bits;
  return BaseChoice{base, std::move(bytes)};
}

void SnapshotDeltaPolicy::Record(const ChunkOrigin& origin, const store::ChunkKey& key,
                                 const std::optional<store::ChunkKey>& base, const store::ChunkBytes& bytes,
                                 store::Batch* batch) {
  if (base) batch->Unpin(*base);  // the pin ends when this batch commits
  if (opts_.mode == DeltaMode::kOff || origin.spec == nullptr) return;
  // The bases of the next save.
  if (bytes && bytes->size() == origin.spec->length && bytes->size() >= opts_.min_chunk)
    cache_.Put(key, bytes);
  RecordPairs(origin, key, bytes, batch);
  RecordMaster(origin, key, base, bytes, batch);
  if (origin.spec->length == 0 || origin.spec->length < opts_.min_chunk) return;
  if (IsTemporaryName(origin.file_name)) {
    // An atomic save: the file's role is the name it will be renamed to.
    std::lock_guard l(held_mu_);
    if (held_count_ < kMaxHeld) {
      held_[origin.ino].push_back(Held{*origin.spec, key, origin.owner, base.has_value()});
      held_count_++;
      counters_.lineage_held++;
    } else {
      counters_.lineage_dropped++;
    }
  } else {
    RecordLineage(origin, key, base.has_value(), batch);
  }
  const LineageEntry entry{key, origin.ino, origin.spec->offset};
  if (const std::string dk = DirLineageKey(origin.parent, *origin.spec, origin.owner); !dk.empty())
    lineage_.Record(dk, entry, batch);
}

void SnapshotDeltaPolicy::RecordLineage(const ChunkOrigin& origin, const store::ChunkKey& key, bool based,
                                        store::Batch* batch) {
  const std::string lk = LineageKey(origin.file_name, *origin.spec, origin.owner, origin.dir_name);
  if (lk.empty()) return;
  // A chunk written as a delta (against delta_base) has its base already:
  // its prior version in the series is left as it is.
  if (opts_.mode == DeltaMode::kReverse && !based) {
    if (auto prev = lineage_.Lookup(lk); prev && prev->key != key) {
      QueueRebase(RebaseItem{prev->key, key, origin.spec->dtype, origin.spec->length, NowNs(), prev->ino,
                             prev->offset},
                  batch);
    }
  }
  lineage_.Record(lk, LineageEntry{key, origin.ino, origin.spec->offset}, batch);
}

void SnapshotDeltaPolicy::Named(uint64_t ino, std::string_view name, uint64_t parent,
                                std::string_view dir_name, store::Batch* batch) {
  if (opts_.mode == DeltaMode::kOff || IsTemporaryName(name)) return;  // still temporary: keep holding
  std::vector<Held> held;
  {
    std::lock_guard l(held_mu_);
    auto it = held_.find(ino);
    if (it == held_.end()) return;
    held = std::move(it->second);
    held_.erase(it);
    held_count_ -= held.size();
  }
  for (const Held& h : held)
    RecordLineage(ChunkOrigin{ino, name, &h.spec, parent, h.owner, dir_name}, h.key, h.based, batch);
  counters_.lineage_named += held.size();
  spdlog::debug("delta: ino {} named '{}': lineage of {} chunks recorded under that name", ino, name,
                held.size());
}

void SnapshotDeltaPolicy::Forget(uint64_t ino) {
  std::lock_guard l(held_mu_);
  auto it = held_.find(ino);
  if (it == held_.end()) return;
  held_count_ -= it->second.size();
  counters_.lineage_dropped += it->second.size();
  held_.erase(it);
}

uint64_t SnapshotDeltaPolicy::Pending() const {
  std::lock_guard l(rq_mu_);
  return rq_.size() + in_progress_ + (reconcile_due_ ? 1 : 0);
}

std::vector<std::pair<std::string, uint64_t>> SnapshotDeltaPolicy::Counters() const {
  const DeltaCounters& c = counters_;
  return {{"delta_chunks", c.delta.load()},
          {"no_lineage", c.no_lineage.load()},
          {"base_gone", c.base_gone.load()},
          {"keyframes", c.keyframes.load()},
          {"estimate_said_no", c.estimate_said_no.load()},
          {"base_cache_hits", c.base_cache_hits.load()},
          {"explicit_base", c.explicit_base.load()},
          {"paired", c.paired.load()},
          {"pair_refused", c.pair_refused.load()},
          {"pair_later_queued", c.pair_later_queued.load()},
          {"paired_later", c.paired_later.load()},
          {"rebase_queued", c.rebase_queued.load()},
          {"rebase_pending", Pending()},
          {"rebased", c.rebased.load()},
          {"rebase_keyframes", c.rebase_keyframes.load()},
          {"rebase_not_smaller", c.rebase_not_smaller.load()},
          {"rebase_skipped", c.rebase_skipped.load()},
          {"rebase_dropped", c.rebase_dropped.load()},
          {"rebase_errors", c.rebase_errors.load()},
          {"lineage_held", c.lineage_held.load()},
          {"lineage_named", c.lineage_named.load()},
          {"lineage_dropped", c.lineage_dropped.load()},
          {"shared_refreshed", c.shared_refreshed.load()},
          {"shared_scans", c.shared_scans.load()}};
}

void SnapshotDeltaPolicy::Flush() {
  if (opts_.mode != DeltaMode::kReverse) return;
  std::unique_lock l(rq_mu_);
  flushers_++;
  rq_cv_.notify_all();
  idle_cv_.wait(l, [&] { return stop_ || (rq_.empty() && in_progress_ == 0 && !reconcile_due_); });
  flushers_--;
}

SnapshotDeltaPolicy::Outcome SnapshotDeltaPolicy::PrepareRebase(const RebaseItem& it, store::Batch* batch) {
  auto next = store_->GetChunkInfo(it.next);
  if (next.status().IsNotFound()) {
    // Not committed yet, or committed and gone since (the file was
    // overwritten or removed): the item's record commits with the new
    // chunk or after it, so a record without the chunk means gone, and
    // waiting for it would only hold the queue (and whoever waits for it
    // to drain) for kRebaseWaitNs.
    // The two reads are not one snapshot: a commit landing between them
    // shows the record without the chunk. The chunk read again after the
    // record was seen tells a commit in between from a chunk gone.
    if (between_rebase_reads_) between_rebase_reads_();
    if (store_->Get(store::Cf::kMeta, RebaseRecordKey(it)).ok()) {
      next = store_->GetChunkInfo(it.next);
      if (next.status().IsNotFound()) {
        counters_.rebase_skipped++;
        return Outcome::kSkipped;
      }
    } else {
      return Outcome::kWaiting;
    }
  }
  auto prev = store_->GetChunkInfo(it.prev);
  // A paired item's master is as long as it was written (4-byte values); its
  // twin holds the bf16 values from base_offset on.
  const size_t n = it.paired && prev.ok() ? prev->decoded_len : it.n;
  const bool fits =
      it.paired ? n % 4 == 0 && next.ok() && next->decoded_len >= 2 * (uint64_t{it.base_offset} + n / 4)
                : next.ok() && next->decoded_len == n;
  if (!next.ok() || !prev.ok() || prev->base || prev->decoded_len != n || !fits) {
    counters_.rebase_skipped++;  // gone, already a delta, or another length
    return Outcome::kSkipped;
  }
  auto height = store_->SubtreeHeight(it.prev);
  if (!height.ok()) {
    counters_.rebase_skipped++;
    return Outcome::kSkipped;
  }
  // prev would sit at next's depth + 1, and its dependants below it.
  if (next->delta_depth + 1u + *height > opts_.max_chain) {
    counters_.rebase_keyframes++;
    spdlog::debug("delta: {} stays a keyframe (chain limit)", it.prev.ToHex());
    return Outcome::kSkipped;
  }
  // Decoded bytes: the new chunk is usually in the cache (Record put it
  // there); the prior version too when it was written by this process.
  thread_local Workspace ws;
  Bytes nb = BaseBytes(it.next, next->decoded_len);
  Bytes pb = cache_.Get(it.prev);
  if (!pb) {
    uint8_t* w;
    Bytes buf = store::NewChunkBytes(n, &w);
    auto got = store_->ReadChunk(it.prev, w, n, ws);
    if (got.ok() && *got == n) pb = std::move(buf);
  }
  if (!nb || !pb) {
    counters_.rebase_skipped++;
    return Outcome::kSkipped;
  }
  EncodeParams params;
  params.base = nb->data();
  DeltaEstimate est;
  if (it.paired) {
    // A fingerprint found the pair: the values must check out too.
    if (!TwinsMatch(pb->data(), n / 4, nb->data(), it.base_offset)) {
      counters_.pair_refused++;
      spdlog::debug("delta: fp32 chunk {} is not the master of bf16 chunk {} (values do not match)",
                    it.prev.ToHex(), it.next.ToHex());
      return Outcome::kSkipped;
    }
    thread_local std::vector<uint8_t> widened;
    if (widened.size() < n) widened.resize(n);
    WidenBf16(nb->data(), it.base_offset, n / 4, widened.data());
    params.dtype = DType::kF32;
    params.widened_base_offset = it.base_offset;
    params.base_len = nb->size();
    est = EstimateDelta(DType::kF32, pb->data(), widened.data(), n, opts_.estimate);
  } else {
    params.dtype = it.dtype != DType::kBytes ? it.dtype : DetectDType(pb->data(), n);
    est = EstimateDelta(params.dtype, pb->data(), nb->data(), n, opts_.estimate);
  }
  if (!est.prefer_delta) {
    counters_.rebase_not_smaller++;
    return Outcome::kSkipped;
  }
  // Buffers reused from chunk to chunk (one rebase thread); the batch
  // copies the frame.
  thread_local std::vector<uint8_t> frame, check;
  frame.resize(MaxEncodedSize(n));
  auto len = EncodeChunk(pb->data(), n, params, frame.data(), frame.size(), ws);
  if (!len.ok()) {
    counters_.rebase_errors++;
    spdlog::warn("delta: re-encoding {} against {} failed ({}); it stays standalone", it.prev.ToHex(),
                 it.next.ToHex(), len.status().ToString());
    return Outcome::kSkipped;
  }
  frame.resize(*len);
  // The stored bytes of an older checkpoint are about to be replaced:
  // decode the new frame and compare before it goes anywhere.
  check.resize(n);
  auto back = DecodeChunk(frame.data(), frame.size(), nb->data(), nb->size(), check.data(), n, ws);
  if (!back.ok() || *back != n || std::memcmp(check.data(), pb->data(), n) != 0) {
    counters_.rebase_errors++;
    spdlog::error(
        "delta: re-encoded frame of {} against {} does not decode to its bytes ({}); it stays "
        "standalone",
        it.prev.ToHex(), it.next.ToHex(), back.ok() ? "bytes differ" : back.status().ToString());
    return Outcome::kSkipped;
  }
  batch->RebaseChunk(it.prev, frame, it.next, static_cast<uint8_t>(opts_.max_chain));
  return Outcome::kAdded;
}

void SnapshotDeltaPolicy::RebaseLoop() {
  // Background work: the lowest CPU priority, so that writers' encoders
  // come first (Linux: nice applies per thread).
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
  std::unique_lock l(rq_mu_);
  for (;;) {
    auto reconcile_now = [&] { return reconcile_due_ && (flushers_ > 0 || NowNs() >= next_reconcile_ns_); };
    if (reconcile_due_)
      rq_cv_.wait_for(l, std::chrono::nanoseconds(std::max<int64_t>(0, next_reconcile_ns_ - NowNs())),
                      [&] { return stop_ || !rq_.empty() || reconcile_now(); });
    else
      rq_cv_.wait(l, [&] { return stop_ || !rq_.empty(); });
    if (stop_) break;
    if (rq_.empty()) {
      // Idle: the other extents of shared chunks that were re-encoded.
      if (!reconcile_now()) continue;
      in_progress_ = 1;
      const RebaseListener listener = listener_;
      l.unlock();
      const int64_t t0 = NowNs();
      ReconcileShared(listener);
      const int64_t took = NowNs() - t0;
      l.lock();
      next_reconcile_ns_ = NowNs() + std::max(kReconcileMinGapNs, 10 * took);
      reconcile_due_ = false;
      in_progress_ = 0;
      if (rq_.empty()) idle_cv_.notify_all();
      continue;
    }
    const bool flushing = flushers_ > 0;
    std::vector<RebaseItem> take(rq_.begin(), rq_.end());
    rq_.clear();
    in_progress_ = take.size();
    const RebaseListener listener = listener_;
    const ReencodedListener reencoded = reencoded_listener_;
    l.unlock();

    std::vector<RebaseItem> waiting;
    store::Batch batch;
    std::vector<const RebaseItem*> in_batch;
    uint64_t added = 0;
    auto commit = [&] {
      if (batch.empty()) return;
      const uint64_t before = store_->Stats().rebased;
      Status st = store_->Commit(batch, false);
      if (!st.ok()) {
        counters_.rebase_errors += added;
        spdlog::warn("delta: committing {} rebases failed ({}); those prior versions stay standalone", added,
                     st.ToString());
      } else {
        const uint64_t done = store_->Stats().rebased - before;
        counters_.rebased += std::min<uint64_t>(done, added);
        if (done < added) counters_.rebase_skipped += added - done;  // refused under the commit lock
        // The files' extents still carry the old frame length (st_blocks):
        // the filesystem refreshes them.
        std::vector<store::ChunkKey> done_keys;
        // Re-encode records that go with the places' records below: chunks
        // not rebased after all, and rebased ones no other file shares. A
        // shared chunk's record stays until ReconcileShared told its other
        // places.
        std::vector<store::ChunkKey> drop_records;
        for (const RebaseItem* it : in_batch) {
          auto info = store_->GetChunkInfo(it->prev);
          const bool done = info.ok() && info->base && *info->base == it->next;
          if (done && it->paired) counters_.paired_later++;
          if (done) done_keys.push_back(it->prev);
          if (!listener) continue;
          if (!done) {
            drop_records.push_back(it->prev);
            continue;
          }
          if (it->prev_ino != 0) listener(it->prev_ino, it->prev_offset, it->prev);
          // Referenced by more extents than its place, if the place still
          // holds it (the chunks based on it hold the rest of its count):
          // those are found by a scan.
          auto dependants = store_->CountDependants(it->prev);
          const uint64_t at_place = PlaceHolds(it->prev_ino, it->prev_offset, it->prev) ? 1 : 0;
          const bool shared = !dependants.ok() || info->refcount > *dependants + at_place;
          if (shared && shared_rebased_.size() < kMaxShared)
            shared_rebased_[it->prev] = Shared{it->prev_ino, it->prev_offset};
          else if (!shared)
            drop_records.push_back(it->prev);
          // (Shared past kMaxShared: the record stays for the next mount.)
        }
        // Extents in memory (a dedup hit or a clone made before the commit
        // and committed after it, which neither the place nor the shared
        // scan reaches), after the places and the counts above.
        if (reencoded && !done_keys.empty()) reencoded(done_keys);
        // The places are told: their refresh records go (a failure leaves
        // them to the next mount, which tells them again). With no
        // listener yet they stay for the one SetRebaseListener installs.
        store::Batch told;
        for (const RebaseItem* it : in_batch)
          if (listener && it->prev_ino != 0)
            told.Delete(store::Cf::kMeta, RefreshRecordKey(it->prev_ino, it->prev_offset));
        for (const store::ChunkKey& k : drop_records) told.Delete(store::Cf::kMeta, ReencodeRefreshKey(k));
        if (Status ts = told.empty() ? Status::Ok() : store_->Commit(told, false); !ts.ok())
          spdlog::warn("delta: deleting refresh records failed ({}); the next mount tells them again",
                       ts.ToString());
      }
      batch.Clear();
      in_batch.clear();
      added = 0;
    };
    for (const RebaseItem& it : take) {
      bool stopping;
      {
        std::lock_guard g(rq_mu_);
        stopping = stop_;
      }
      if (stopping) {
        counters_.rebase_dropped++;  // its record stays for the next mount
        continue;
      }
      // The item's record goes in the batch that ends it (with the rebase
      // itself when there is one).
      switch (PrepareRebase(it, &batch)) {
        case Outcome::kAdded:
          added++;
          in_batch.push_back(&it);
          batch.Delete(store::Cf::kMeta, RebaseRecordKey(it));
          // Until the listener is told (after the commit), a crash would
          // leave the place's stored bytes as they were: the record says so.
          if (it.prev_ino != 0)
            batch.Put(store::Cf::kMeta, RefreshRecordKey(it.prev_ino, it.prev_offset), it.prev.view());
          // And the other files that may share the chunk (a copy, a dedup
          // hit): known only after the commit, so every rebased chunk has
          // a re-encode record until then; the next mount refreshes every
          // file using a chunk whose record a crash left.
          batch.Put(store::Cf::kMeta, ReencodeRefreshKey(it.prev), "");
          break;
        case Outcome::kWaiting:
          if (!flushing && NowNs() - it.queued_ns < kRebaseWaitNs) {
            waiting.push_back(it);
          } else {
            counters_.rebase_dropped++;
            batch.Delete(store::Cf::kMeta, RebaseRecordKey(it));
          }
          break;
        case Outcome::kSkipped:
          batch.Delete(store::Cf::kMeta, RebaseRecordKey(it));
          break;
      }
      if (batch.frame_bytes() >= kRebaseBatchBytes) commit();
    }
    commit();

    l.lock();
    in_progress_ = 0;
    reconcile_due_ = !shared_rebased_.empty();
    const bool only_waiting = rq_.empty() && !waiting.empty();
    for (auto& w : waiting) rq_.push_back(w);
    if (rq_.empty()) idle_cv_.notify_all();
    // Everything left waits for commits: look again a little later.
    if (only_waiting)
      rq_cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return stop_ || flushers_ > 0; });
  }
  idle_cv_.notify_all();
}

bool SnapshotDeltaPolicy::PlaceHolds(uint64_t ino, uint64_t offset, const store::ChunkKey& key) {
  if (ino == 0) return false;
  auto v = store_->Get(store::Cf::kExtents, store::ExtentKey(ino, offset));
  if (!v.ok()) return false;
  auto x = store::DecodeExtent(*v);
  return x && !x->hole() && x->chunk == key;
}

void SnapshotDeltaPolicy::ReconcileShared(const RebaseListener& listener) {
  counters_.shared_scans++;
  if (shared_rebased_.empty()) return;
  ChunkKeySet keys;
  for (const auto& [key, place] : shared_rebased_) keys.insert(key);
  const int64_t t0 = NowNs();
  auto found = FindExtentsUsing(store_, keys);
  std::vector<ExtentPlace> places;
  if (found.ok()) {
    for (const ExtentPlace& p : *found) {
      const Shared& told = shared_rebased_.at(p.key);
      if (p.ino != told.ino || p.offset != told.offset) places.push_back(p);
    }
  }
  spdlog::debug("delta: extents scanned in {} ms for {} re-encoded shared chunks: {} other places",
                (NowNs() - t0) / 1000000, shared_rebased_.size(), places.size());
  shared_rebased_.clear();
  if (!found.ok()) {
    spdlog::warn(
        "delta: scanning the extents for chunks shared with re-encoded ones failed ({}); their files' "
        "stored bytes (st_blocks, du) stay as they were until the next mount; the data is unaffected",
        found.status().ToString());
    return;  // their re-encode records stay for the next mount
  }
  if (listener)
    for (const ExtentPlace& p : places) listener(p.ino, p.offset, p.key);
  counters_.shared_refreshed += places.size();
  store::Batch told;
  for (const store::ChunkKey& k : keys) told.Delete(store::Cf::kMeta, ReencodeRefreshKey(k));
  if (Status ts = store_->Commit(told, false); !ts.ok())
    spdlog::warn("delta: deleting re-encode records failed ({}); the next mount refreshes those files again",
                 ts.ToString());
}

Result<bool> ParseDeltaOption(std::string_view key, std::string_view value, DeltaOptions* out) {
  if (key == "delta") {
    if (value == "on" || value == "reverse")
      out->mode = DeltaMode::kReverse;
    else if (value == "forward")
      out->mode = DeltaMode::kForward;
    else if (value == "off")
      out->mode = DeltaMode::kOff;
    else
      return Status::InvalidArgument("delta=" + std::string(value) +
                                     ": expected delta=on (reverse deltas), delta=forward or delta=off");
    return true;
  }
  if (key == "pair") {
    if (value != "on" && value != "off")
      return Status::InvalidArgument("pair=" + std::string(value) + ": expected pair=on or pair=off");
    out->pair = value == "on";
    return true;
  }
  if (key == "delta_base") {
    std::string v(value);
    while (v.size() > 1 && v.back() == '/') v.pop_back();
    while (!v.empty() && v.front() == '/') v.erase(v.begin());
    if (v.empty() || v.find("..") != std::string::npos)
      return Status::InvalidArgument("delta_base=" + std::string(value) +
                                     ": expected a directory of the mount, as a path from its root (e.g. "
                                     "delta_base=base-model)");
    out->base_dir = v;
    return true;
  }
  if (key == "delta_chain") {
    uint32_t n = 0;
    bool ok = !value.empty() && value.size() <= 2;
    for (char c : value) {
      if (c < '0' || c > '9')
        ok = false;
      else
        n = n * 10 + static_cast<uint32_t>(c - '0');
    }
    if (!ok || n < 1 || n > kMaxDeltaChain)
      return Status::InvalidArgument("delta_chain=" + std::string(value) + ": expected a number from 1 to " +
                                     std::to_string(kMaxDeltaChain) +
                                     " (frames decoded per chunk read at most; use delta=off for none)");
    out->max_chain = n;
    return true;
  }
  return false;
}

std::unique_ptr<DeltaPolicy> MakeSnapshotDeltaPolicy(store::Store* store, const DeltaOptions& options) {
  return std::make_unique<SnapshotDeltaPolicy>(store, options);
}

}  // namespace lmc::fs
