#include "lineage.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "lmc/bytes.h"
#include "lmc/fs/records.h"

namespace lmc::fs {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSep(char c) { return c == '_' || c == '-' || c == '.' || c == '='; }

bool ShardWord(std::string_view w) {
  static constexpr std::array<std::string_view, 15> kWords = {"rank", "shard", "part", "mp",     "pp",
                                                              "tp",   "dp",    "ep",   "worker", "gpu",
                                                              "node", "of",    "pipe", "layer",  "expert"};
  for (auto k : kWords)
    if (w == k) return true;
  return false;
}

// The word (letters) ending just before position i, skipping one separator.
std::string WordBefore(std::string_view s, size_t i) {
  if (i > 0 && IsSep(s[i - 1])) --i;
  size_t j = i;
  while (j > 0 && std::isalpha(static_cast<unsigned char>(s[j - 1]))) --j;
  std::string w(s.substr(j, i - j));
  for (auto& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return w;
}

// True when s[j..] starts with "-of-" or "_of_" (any case).
bool OfFollows(std::string_view s, size_t j) {
  if (j + 4 > s.size()) return false;
  if (!IsSep(s[j]) || !IsSep(s[j + 3])) return false;
  return std::tolower(static_cast<unsigned char>(s[j + 1])) == 'o' &&
         std::tolower(static_cast<unsigned char>(s[j + 2])) == 'f';
}

// A PyTorch DCP file: DCP names a rank's files __<rank>_<n>.distcp and puts
// the step in the directory's name.
bool IsDcpFile(std::string_view s) { return s.ends_with(".distcp"); }

// Names whose every digit tells shards apart: DCP files; Megatron's rank
// directories mp_rank_<tp>[_<pp>[_<ep>]] (and DeepSpeed's mp_rank_ files);
// DeepSpeed's pipeline files layer_<idx>-model_<tp>-model_states.pt and
// expert files layer_<l>_expert_<e>_mp_rank_<tp>_model_states.pt (the step
// is in the directory's name, global_step<N>).
bool KeepsEveryDigit(std::string_view s) {
  return IsDcpFile(s) || s.starts_with("mp_rank_") || s.starts_with("layer_");
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsIdentifierChar(char c) { return IsAlnum(c) || c == '_'; }

// A dotted parameter name, as DeepSpeed's universal checkpoints name a
// directory per parameter (zero/model.layers.0.mlp.fc1.weight/fp32.pt):
// components of [A-Za-z0-9_] separated by '.', the last starting with a
// letter or '_', and either three components or more, or a last one of
// "weight" or "bias" (lm_head.weight). checkpoint.step100 is not one.
bool IsParameterName(std::string_view s) {
  size_t components = 0;
  std::string_view last;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    last = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (last.empty() || !std::all_of(last.begin(), last.end(), IsIdentifierChar)) return false;
    ++components;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (components < 2 || IsDigit(last[0])) return false;
  return components >= 3 || last == "weight" || last == "bias";
}

}  // namespace

std::string NormalizeFileName(std::string_view s) {
  if (KeepsEveryDigit(s)) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (!IsDigit(s[i])) {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i;
    while (j < s.size() && IsDigit(s[j])) ++j;
    const bool keep = ShardWord(WordBefore(s, i)) || OfFollows(s, j);
    if (keep)
      out.append(s.substr(i, j - i));
    else
      out.push_back('#');
    i = j;
  }
  return out;
}

bool IsTemporaryName(std::string_view s) {
  // `r` is n characters that `ok` accepts, alone or before a ".suffix".
  auto random_run = [](std::string_view r, size_t n, bool (*ok)(char)) {
    return r.size() >= n && std::all_of(r.begin(), r.begin() + n, ok) && (r.size() == n || r[n] == '.');
  };
  // Rust's tempfile: ".tmp" + 6 random alphanumerics.
  if (s.starts_with(".tmp") && random_run(s.substr(4), 6, IsAlnum)) return true;
  // Python's tempfile: "tmp" + 8 of [a-z0-9_].
  if (s.starts_with("tmp") && random_run(s.substr(3), 8, IsIdentifierChar)) return true;
  for (std::string_view ext : {".tmp", ".temp", ".part", ".partial", ".incomplete"})
    if (s.size() > ext.size() && s.ends_with(ext)) return true;
  // NAME.tmp.<pid or random>
  const size_t t = s.find(".tmp.");
  return t != std::string_view::npos && t > 0 && t + 5 < s.size();
}

namespace {
// The part of a lineage key after the file role.
void AppendChunkPart(std::string& k, const ChunkSpec& spec) {
  if (spec.tensor_chunk) {
    k.push_back('t');
    k += spec.region_name;
    k.push_back('\0');
    k.push_back(static_cast<char>(spec.dtype));
    AppendBEBytes(&k, spec.region_length, 8);
    AppendBEBytes(&k, spec.region_offset, 8);
  } else {
    k.push_back('m');
    AppendBEBytes(&k, spec.offset, 8);
  }
  AppendBEBytes(&k, spec.length, 4);
}

// The record key's prefix, with the owner for owner-scoped chunks.
std::string PrefixFor(const char* shared, const char* scoped, store::KeyOwner owner) {
  if (!owner) return shared;
  std::string k = scoped;
  AppendBEBytes(&k, *owner, 4);
  return k;
}
}  // namespace

std::string FileRole(std::string_view file_name, std::string_view dir_name) {
  std::string role = NormalizeFileName(file_name);
  if (dir_name.empty()) return role;
  // A directory named after a parameter holds that parameter's files, under
  // the same names for every parameter: the whole name is the role's, its
  // digits included (layers.0 / layers.1, fc1 / fc2).
  if (IsParameterName(dir_name)) return std::string(dir_name) + "/" + role;
  std::string dir = NormalizeFileName(dir_name);
  // Every DCP save names its files alike: the directory tells the model's
  // from the optimizer's (accelerate's FSDP checkpoints hold
  // pytorch_model_fsdp_0/ and optimizer_0/, each a DCP save).
  if (!IsDcpFile(file_name) && std::none_of(dir.begin(), dir.end(), IsDigit)) return role;
  return dir + "/" + role;
}

std::string LineageKey(std::string_view file_name, const ChunkSpec& spec, store::KeyOwner owner,
                       std::string_view dir_name) {
  if (spec.length == 0) return {};
  std::string k = PrefixFor(kLineagePrefix, kOwnerLineagePrefix, owner);
  k += FileRole(file_name, dir_name);
  k.push_back('\0');
  AppendChunkPart(k, spec);
  return k;
}

std::string DirLineageKey(uint64_t dir_ino, const ChunkSpec& spec, store::KeyOwner owner) {
  if (spec.length == 0 || dir_ino == 0) return {};
  std::string k = PrefixFor(kDirLineagePrefix, kOwnerDirLineagePrefix, owner);
  AppendBEBytes(&k, dir_ino, 8);
  AppendChunkPart(k, spec);
  return k;
}

void LineageIndex::CacheLocked(const std::string& lineage, const LineageEntry& entry) {
  auto it = map_.find(lineage);
  if (it != map_.end()) {
    it->second->second = entry;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.emplace_front(lineage, entry);
  map_[lineage] = lru_.begin();
  while (map_.size() > max_ && !lru_.empty()) {
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::optional<LineageEntry> LineageIndex::Lookup(const std::string& lineage) {
  {
    std::lock_guard l(mu_);
    auto it = map_.find(lineage);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto v = store_->Get(store::Cf::kMeta, lineage);
  constexpr size_t kKey = store::ChunkKey::kSize;
  if (!v.ok() || (v->size() != kKey && v->size() != kKey + 16)) return std::nullopt;
  LineageEntry e;
  e.key = store::ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(v->data()));
  if (v->size() == kKey + 16) {
    e.ino = LoadBEBytes(v->data() + kKey, 8);
    e.offset = LoadBEBytes(v->data() + kKey + 8, 8);
  }
  std::lock_guard l(mu_);
  if (!map_.count(lineage)) CacheLocked(lineage, e);
  return e;
}

void LineageIndex::Record(const std::string& lineage, const LineageEntry& entry, store::Batch* batch) {
  std::string v(entry.key.view());
  AppendBEBytes(&v, entry.ino, 8);
  AppendBEBytes(&v, entry.offset, 8);
  batch->Put(store::Cf::kMeta, lineage, v);
  std::lock_guard l(mu_);
  CacheLocked(lineage, entry);
}

}  // namespace lmc::fs
