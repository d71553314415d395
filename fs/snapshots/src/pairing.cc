// Pairing fp32 chunks with their bf16 twins: see pairing.h.
#include "pairing.h"

#include <cstring>

#include "lmc/bytes.h"

namespace lmc::fs {

std::string PairIndex::Key(uint64_t fingerprint, store::KeyOwner owner) const {
  std::string k = kind_ == Kind::kTwins ? (owner ? kOwnerPairPrefix : kPairPrefix)
                                        : (owner ? kOwnerMasterPrefix : kMasterPrefix);
  if (owner) AppendBEBytes(&k, *owner, 4);
  AppendBEBytes(&k, fingerprint, 8);
  return k;
}

std::optional<PairEntry> PairIndex::Lookup(uint64_t fingerprint, store::KeyOwner owner) {
  const std::string k = Key(fingerprint, owner);
  {
    std::lock_guard l(mu_);
    if (auto it = cache_.find(k); it != cache_.end()) return it->second;
  }
  auto v = store_->Get(store::Cf::kMeta, k);
  constexpr size_t kKey = store::ChunkKey::kSize;
  if (!v.ok() || v->size() != kKey + (kind_ == Kind::kTwins ? 4 : 16)) return std::nullopt;
  PairEntry e;
  e.key = store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(v->data()));
  if (kind_ == Kind::kTwins) {
    e.offset = static_cast<uint32_t>(LoadBEBytes(v->data() + kKey, 4));
  } else {
    e.ino = LoadBEBytes(v->data() + kKey, 8);
    e.file_offset = LoadBEBytes(v->data() + kKey + 8, 8);
  }
  return e;
}

void PairIndex::Record(uint64_t fingerprint, store::KeyOwner owner, const PairEntry& entry,
                       store::Batch* batch) {
  const std::string k = Key(fingerprint, owner);
  std::string v(entry.key.view());
  if (kind_ == Kind::kTwins) {
    AppendBEBytes(&v, entry.offset, 4);
  } else {
    AppendBEBytes(&v, entry.ino, 8);
    AppendBEBytes(&v, entry.file_offset, 8);
  }
  batch->Put(store::Cf::kMeta, k, v);
  std::lock_guard l(mu_);
  if (cache_.size() >= max_) cache_.clear();
  cache_[k] = entry;
}

}  // namespace lmc::fs
