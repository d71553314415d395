// Pairing fp32 chunks with their bf16 twins: see pairing.h.
#include "pairing.h"

#include <xxhash.h>

#include <cstring>

#include "lmc/bytes.h"

namespace lmc::fs {

uint16_t RoundToBf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: quiet
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

namespace {
std::optional<uint64_t> HashIfVaried(const uint16_t* v) {
  bool varied = false;
  for (size_t i = 1; i < kFingerprintElems && !varied; ++i) varied = v[i] != v[0];
  if (!varied) return std::nullopt;
  return XXH3_64bits(v, kFingerprintElems * 2);
}
}  // namespace

std::optional<uint64_t> Bf16Fingerprint(const uint8_t* p) {
  uint16_t v[kFingerprintElems];
  for (size_t i = 0; i < kFingerprintElems; ++i) v[i] = static_cast<uint16_t>(LoadLE16(p + 2 * i));
  return HashIfVaried(v);
}

std::optional<uint64_t> Fp32Fingerprint(const uint8_t* p) {
  uint16_t v[kFingerprintElems];
  for (size_t i = 0; i < kFingerprintElems; ++i) v[i] = RoundToBf16(LoadLE32(p + 4 * i));
  return HashIfVaried(v);
}

bool TwinsMatch(const uint8_t* f32, size_t n, const uint8_t* bf16, size_t offset) {
  if (n == 0) return false;
  constexpr size_t kSamples = 256;
  const size_t samples = n < kSamples ? n : kSamples;
  size_t close = 0;
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = s * n / samples;
    const uint32_t hi = LoadLE32(f32 + 4 * i) >> 16;
    const uint32_t b = LoadLE16(bf16 + 2 * (offset + i));
    close += (hi >= b ? hi - b : b - hi) <= 1;
  }
  return close * 100 >= samples * 95;
}

std::string PairIndex::Key(uint64_t fingerprint, store::KeyOwner owner) {
  std::string k = owner ? kOwnerPairPrefix : kPairPrefix;
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
  if (!v.ok() || v->size() != kKey + 4) return std::nullopt;
  PairEntry e;
  e.key = store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(v->data()));
  e.offset = static_cast<uint32_t>(LoadBEBytes(v->data() + kKey, 4));
  return e;
}

void PairIndex::Record(uint64_t fingerprint, store::KeyOwner owner, const PairEntry& entry,
                       store::Batch* batch) {
  const std::string k = Key(fingerprint, owner);
  std::string v(entry.key.view());
  AppendBEBytes(&v, entry.offset, 4);
  batch->Put(store::Cf::kMeta, k, v);
  std::lock_guard l(mu_);
  if (cache_.size() >= max_) cache_.clear();
  cache_[k] = entry;
}

}  // namespace lmc::fs
