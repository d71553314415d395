#include "delta.h"

#include <spdlog/spdlog.h>

namespace lmc::fs {

SnapshotDeltaPolicy::SnapshotDeltaPolicy(store::Store* store, DeltaOptions opts)
    : store_(store), opts_(opts), lineage_(store, opts.lineage_cached) {}

SnapshotDeltaPolicy::Bytes SnapshotDeltaPolicy::CacheGet(const store::ChunkKey& key) {
  std::lock_guard l(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void SnapshotDeltaPolicy::CachePut(const store::ChunkKey& key, Bytes b) {
  std::lock_guard l(mu_);
  if (b->size() > opts_.base_cache_bytes || map_.count(key)) return;
  lru_.emplace_front(key, b);
  map_[key] = lru_.begin();
  cached_ += b->size();
  while (cached_ > opts_.base_cache_bytes && !lru_.empty()) {
    cached_ -= lru_.back().second->size();
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

SnapshotDeltaPolicy::Bytes SnapshotDeltaPolicy::BaseBytes(const store::ChunkKey& key, size_t n) {
  if (Bytes b = CacheGet(key)) {
    counters_.base_cache_hits++;
    return b;
  }
  thread_local Workspace ws;
  auto buf = std::make_shared<std::vector<uint8_t>>(n);
  auto got = store_->ReadChunk(key, buf->data(), buf->size(), ws);
  if (!got.ok() || *got != n) {
    if (!got.ok())
      spdlog::warn("delta: base chunk {} unreadable ({}); writing standalone", key.ToHex(),
                   got.status().ToString());
    return nullptr;
  }
  Bytes b = std::move(buf);
  CachePut(key, b);
  return b;
}

std::optional<BaseChoice> SnapshotDeltaPolicy::ChooseBase(const ChunkOrigin& origin,
                                                          const uint8_t* data, size_t n) {
  if (!opts_.enabled || origin.spec == nullptr || n < opts_.min_chunk) {
    spdlog::debug("delta: ino {} len {}: not considered (off, no spec or small)", origin.ino, n);
    return std::nullopt;
  }
  // Keep this chunk's bytes for Record: they are the base of the next save.
  if (opts_.base_cache_bytes > 0) {
    auto copy = std::make_shared<const std::vector<uint8_t>>(data, data + n);
    std::lock_guard l(mu_);
    if (pending_bytes_ + n > opts_.base_cache_bytes) {
      // Chunks the pipeline never recorded (dropped writes) fill it up:
      // start again; losing entries only costs base reads later.
      pending_.clear();
      pending_bytes_ = 0;
    }
    {
      auto& slot = pending_[origin.ino][origin.spec->offset];
      if (slot) pending_bytes_ -= slot->size();
      slot = std::move(copy);
      pending_bytes_ += n;
    }
  }
  const std::string lk = LineageKey(origin.file_name, *origin.spec);
  auto base = lk.empty() ? std::nullopt : lineage_.Lookup(lk);
  if (!base) {
    counters_.no_lineage++;
    spdlog::debug("delta: ino {} offset {} len {} '{}': no prior version", origin.ino, origin.spec->offset, n,
                  origin.spec->region_name);
    return std::nullopt;
  }
  // Pin first: from here on the base stays indexed until Record's batch
  // commits (or UnpinChunk below).
  if (!store_->PinChunk(*base).ok()) {
    counters_.base_gone++;
    spdlog::debug("delta: ino {} offset {} len {}: prior version gone", origin.ino, origin.spec->offset, n);
    return std::nullopt;
  }
  auto unpin = [&] { store_->UnpinChunk(*base); };
  auto info = store_->GetChunkInfo(*base);
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
    spdlog::debug("delta: ino {} offset {} len {}: keyframe (chain limit)", origin.ino, origin.spec->offset, n);
    return std::nullopt;
  }
  Bytes bytes = BaseBytes(*base, n);
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
  return BaseChoice{*base, std::move(bytes)};
}

void SnapshotDeltaPolicy::Record(const ChunkOrigin& origin, const store::ChunkKey& key,
                                 const std::optional<store::ChunkKey>& base, store::Batch* batch) {
  if (base) batch->Unpin(*base);  // the pin ends when this batch commits
  if (!opts_.enabled || origin.spec == nullptr) return;
  Bytes bytes;
  {
    std::lock_guard l(mu_);
    auto f = pending_.find(origin.ino);
    if (f != pending_.end()) {
      auto it = f->second.find(origin.spec->offset);
      if (it != f->second.end()) {
        bytes = std::move(it->second);
        pending_bytes_ -= bytes->size();
        f->second.erase(it);
        if (f->second.empty()) pending_.erase(f);
      }
    }
  }
  if (bytes && bytes->size() == origin.spec->length) CachePut(key, std::move(bytes));
  const std::string lk = LineageKey(origin.file_name, *origin.spec);
  if (!lk.empty() && origin.spec->length >= opts_.min_chunk) lineage_.Record(lk, key, batch);
}


Result<bool> ParseDeltaOption(std::string_view key, std::string_view value, DeltaOptions* out) {
  if (key == "delta") {
    if (value == "on") out->enabled = true;
    else if (value == "off") out->enabled = false;
    else return Status::InvalidArgument("delta=" + std::string(value) + ": expected delta=on or delta=off");
    return true;
  }
  if (key == "delta_chain") {
    uint32_t n = 0;
    bool ok = !value.empty() && value.size() <= 2;
    for (char c : value) {
      if (c < '0' || c > '9') ok = false;
      else n = n * 10 + static_cast<uint32_t>(c - '0');
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

std::function<Status(store::Store&, const std::function<void(const std::string&)>&)> DeadBaseGcHook() {
  return [](store::Store& st, const std::function<void(const std::string&)>& events) -> Status {
    auto event = [&](const store::DeadBaseReport& r, bool done) {
      if (!events) return;
      events("{\"event\":\"dead_bases\",\"done\":" + std::string(done ? "true" : "false") +
             ",\"chunks_scanned\":" + std::to_string(r.chunks_scanned) +
             ",\"dead_bases\":" + std::to_string(r.dead_bases) +
             ",\"dead_base_bytes\":" + std::to_string(r.dead_base_bytes) +
             ",\"rewritten\":" + std::to_string(r.rewritten) +
             ",\"bytes_before\":" + std::to_string(r.bytes_before) +
             ",\"bytes_after\":" + std::to_string(r.bytes_after) + "}");
    };
    auto r = st.RewriteDeadBases({}, [&](const store::DeadBaseReport& p) {
      event(p, false);
      return true;
    });
    if (!r.ok()) return r.status();
    event(*r, true);
    return Status::Ok();
  };
}

std::unique_ptr<DeltaPolicy> MakeSnapshotDeltaPolicy(store::Store* store, const DeltaOptions& options) {
  return std::make_unique<SnapshotDeltaPolicy>(store, options);
}

}  // namespace lmc::fs
