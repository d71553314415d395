// fsck: check every pack, every chunk record, every index value and every
// reference count; repair what can be repaired without touching good data
// (docs/ARCHITECTURE.md, "The chunk store", "fsck").
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "lmc/store/permissions.h"
#include "lmc/thread_pool.h"
#include "rocks_view.h"
#include "store_impl.h"

namespace lmc::store {

const char* FsckProblemKindName(FsckProblem::Kind kind) {
  using K = FsckProblem::Kind;
  switch (kind) {
    case K::kBadRecord:
      return "bad_record";
    case K::kBadIndexValue:
      return "bad_index_value";
    case K::kMissingChunk:
      return "missing_chunk";
    case K::kRefcountMismatch:
      return "refcount_mismatch";
    case K::kLiveBytesMismatch:
      return "live_bytes_mismatch";
    case K::kOrphanPack:
      return "orphan_pack";
    case K::kUncommittedTail:
      return "uncommitted_tail";
    case K::kMissingPack:
      return "missing_pack";
    case K::kDependantIndex:
      return "dependant_index_mismatch";
    case K::kDepth:
      return "depth_mismatch";
    case K::kLoosePermissions:
      return "loose_permissions";
    case K::kJournal:
      return "journal";
    case K::kIndexJournalMismatch:
      return "index_journal_mismatch";
  }
  return "unknown";
}

int FsckExitCode(uint64_t errors, uint64_t fixed) {
  if (errors == 0) return kFsckOk;
  return fixed >= errors ? kFsckCorrected : kFsckUncorrected;
}

int FsckExitCode(const Status& failure) {
  return failure.code() == Code::kAborted ? kFsckCancelled : kFsckOperationalError;
}

int FsckExitCode(const Result<FsckReport>& r) { return r.ok() ? r->ExitCode() : FsckExitCode(r.status()); }

uint64_t FsckReport::Count(FsckProblem::Kind kind) const {
  return static_cast<uint64_t>(
      std::count_if(problems.begin(), problems.end(), [&](const FsckProblem& p) { return p.kind == kind; }));
}

uint64_t FsckReport::fixed() const {
  return static_cast<uint64_t>(
      std::count_if(problems.begin(), problems.end(), [](const FsckProblem& p) { return p.repaired; }));
}

std::vector<std::string> FsckReport::Messages() const {
  std::vector<std::string> out;
  out.reserve(problems.size());
  for (const auto& p : problems) out.push_back(p.message + (p.repaired ? " (repaired)" : ""));
  return out;
}

namespace {

using Kind = FsckProblem::Kind;

// Every problem goes through here: the report and the log agree.
struct Checker {
  FsckReport& r;
  const std::string& dir;
  void Problem(FsckProblem p) {
    spdlog::warn("fsck {}: {}{}", dir, p.message, p.repaired ? " (repaired)" : "");
    r.problems.push_back(std::move(p));
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
        return Status::Corruption("chunk " + key.ToHex() + ": pack " + std::to_string(e.pack_id) +
                                  " missing");
      return f.status();
    }
    Status rs = ReadRecord(key, e, **f, record);
    if (!rs.ok() && rs.IsCorruption() && attempt < 3 && Moved(key, e)) continue;  // died meanwhile
    return Reported(std::move(rs));
  }
}

// Reads, decodes and (with verify_content_hash) hashes every indexed chunk,
// in pack order (sequential reads), on the shared thread pool. *bad: the
// chunks that failed verification, with the reason. A chunk's delta bases
// are decoded on the way but verified as chunks of their own.
Status Store::Impl::VerifyRecords(const FsckOptions& options, BadRecords* bad) {
  struct Item {
    ChunkKey key;
    uint64_t pack_id, offset;
    uint32_t decoded_len;
  };
  std::vector<Item> items;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), chunks_cf));
    std::string kk, vk;  // copies under ThreadSanitizer (rocks_view.h)
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string_view raw = View(it->key(), &kk);
      if (raw.size() != ChunkKey::kSize) continue;  // reported under the lock
      ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(raw.data()));
      auto e = fmt::DecodeChunkEntry(key, View(it->value(), &vk));
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
        bad->emplace(item.key, BadRecord{st.message(), item.pack_id, item.offset});
      else if (!st.IsNotFound() && first_error.ok())  // NotFound: deleted meanwhile
        first_error = st;
    }
    if (options.progress) options.progress(++done, items.size());
  });
  return first_error;
}

namespace {

using BadRecords = Store::Impl::BadRecords;

// One fsck run under the commit lock, pass by pass (docs/ARCHITECTURE.md,
// "fsck"). Each pass reads what the earlier ones found; repairs are gathered
// in `fixes` and written by ApplyRepairs in one batch.
class FsckRun {
 public:
  FsckRun(Store::Impl& s, const FsckOptions& options) : s_(s), repair_(options.repair), c_{r_, s.dir} {}

  Result<FsckReport> Run(const BadRecords& bad) {
    LMC_RETURN_IF_ERROR(CheckPermissions());
    LMC_RETURN_IF_ERROR(LoadPackIndex());
    LMC_RETURN_IF_ERROR(CheckPackFiles());
    LMC_RETURN_IF_ERROR(LoadChunkIndex());
    CheckChunkRecords(bad);
    CountBaseReferences();
    LMC_RETURN_IF_ERROR(CountExtentReferences());
    LMC_RETURN_IF_ERROR(CheckDependantsIndex());
    CheckDepths();
    CheckRefcounts();
    CheckLiveBytes();
    LMC_RETURN_IF_ERROR(ApplyRepairs());
    return std::move(r_);
  }

 private:
  // 0. Store permissions (docs/ARCHITECTURE.md, "Store permissions"): what
  // users other than the store directory's owner could reach. Repair is
  // chmod go-rwx; another owner is reported and left (never chown).
  Status CheckPermissions() {
    struct stat st;
    if (::stat(s_.dir.c_str(), &st) != 0) return Status::Ok();  // not on the real file system (a test Env)
    LMC_ASSIGN_OR_RETURN(std::vector<LoosePath> loose, FindLoosePaths(s_.dir, st.st_uid));
    if (!loose.empty()) {
      // RocksDB creates its files with the umask's mode and the owner-only
      // wrapper (owner_only_fs.cc) tightens each right after: an fsck of a
      // store in use can catch a new file in between. Only what is still
      // loose a moment later counts.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      LMC_ASSIGN_OR_RETURN(std::vector<LoosePath> again, FindLoosePaths(s_.dir, st.st_uid));
      std::set<std::string> first;
      for (const LoosePath& p : loose) first.insert(p.path);
      loose.clear();
      for (LoosePath& p : again)
        if (first.count(p.path)) loose.push_back(std::move(p));
    }
    if (repair_) LMC_RETURN_IF_ERROR(TightenPaths(loose));
    for (const LoosePath& p : loose) {
      const bool fixed = repair_ && !p.other_owner && !p.link;
      std::string m =
          (p.link ? "symbolic link in the store: " : "store path other users can reach: ") + p.Describe();
      if (!fixed)
        m += p.link          ? " (remove it, or put what it points to in its place)"
             : p.other_owner ? " (chown it to the store's owner)"
                             : " (lmcfs-fsck --repair or chmod go-rwx)";
      c_.Problem({.kind = Kind::kLoosePermissions, .path = p.path, .repaired = fixed, .message = m});
    }
    return Status::Ok();
  }

  // 1a. Pack index values.
  Status LoadPackIndex() {
    std::unique_ptr<rocksdb::Iterator> it(s_.db->NewIterator(rocksdb::ReadOptions(), s_.packs_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = fmt::ParsePackKey(it->key().ToStringView());
      if (!id) {
        c_.Problem({.kind = Kind::kBadIndexValue, .message = "pack index key of bad length"});
        continue;
      }
      auto m = fmt::DecodePackMeta(*id, it->value().ToStringView());
      if (!m.ok()) {
        c_.Problem({.kind = Kind::kBadIndexValue,
                    .pack_id = *id,
                    .message = "pack " + std::to_string(*id) + " index value: " + m.status().message()});
        continue;
      }
      metas_[*id] = *m;
    }
    return FromRocks(it->status(), "scanning pack index");
  }

  // 1b. Pack files: orphans, headers, uncommitted tails, short or missing files.
  Status CheckPackFiles() {
    LMC_ASSIGN_OR_RETURN(std::vector<std::string> names, s_.env->ListDir(s_.pack_dir));
    std::set<uint64_t> on_disk;
    for (const auto& n : names) {
      auto id = fmt::ParsePackFileName(n);
      if (!id) continue;
      const std::string path = s_.pack_dir + "/" + n;
      LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, s_.env->OpenFile(path, repair_ ? Env::OpenMode::kReadWrite
                                                                                   : Env::OpenMode::kRead));
      auto m = metas_.find(*id);
      if (m == metas_.end()) {
        if (s_.active && *id == s_.active_id) {  // started, first commit pending
          on_disk.insert(*id);
          continue;
        }
        r_.orphan_bytes += f->Size();
        bool fixed = repair_ && s_.env->DeleteFile(path).ok();
        c_.Problem({.kind = Kind::kOrphanPack,
                    .pack_id = *id,
                    .repaired = fixed,
                    .message = "pack file " + path + " is not in the index (orphan, " +
                               std::to_string(f->Size()) + " bytes)"});
        continue;
      }
      on_disk.insert(*id);
      LMC_RETURN_IF_ERROR(CheckPackFile(path, *id, m->second, *f));
    }
    for (const auto& [id, m] : metas_) {
      if (on_disk.count(id)) continue;
      c_.Problem({.kind = Kind::kMissingPack,
                  .pack_id = id,
                  .message = "pack file " + s_.PackPath(id) + " is missing"});
    }
    return Status::Ok();
  }

  Status CheckPackFile(const std::string& path, uint64_t id, const fmt::PackMeta& m, File& f) {
    uint8_t hdr[fmt::kPackHeaderSize];
    LMC_ASSIGN_OR_RETURN(size_t got, f.ReadAt(0, sizeof hdr, hdr));
    Status hs = fmt::CheckPackHeader(hdr, got, id);
    if (!hs.ok()) {
      c_.Problem({.kind = Kind::kBadRecord,
                  .pack_id = id,
                  .offset = 0,
                  .message = "pack " + path + ": " + hs.message()});
    }
    if (f.Size() > m.size) {
      r_.orphan_bytes += f.Size() - m.size;
      bool fixed = repair_ && f.Truncate(m.size).ok() && f.Sync().ok();
      c_.Problem({.kind = Kind::kUncommittedTail,
                  .pack_id = id,
                  .offset = m.size,
                  .repaired = fixed,
                  .message = "pack " + path + " has " + std::to_string(f.Size() - m.size) +
                             " uncommitted bytes past its committed size"});
    } else if (f.Size() < m.size) {
      c_.Problem({.kind = Kind::kMissingPack,
                  .pack_id = id,
                  .message = "pack " + path + " is shorter (" + std::to_string(f.Size()) +
                             ") than its committed size (" + std::to_string(m.size) + ")"});
    }
    return Status::Ok();
  }

  // 2a. Chunk index values.
  Status LoadChunkIndex() {
    std::unique_ptr<rocksdb::Iterator> it(s_.db->NewIterator(rocksdb::ReadOptions(), s_.chunks_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != ChunkKey::kSize) {
        c_.Problem({.kind = Kind::kBadIndexValue, .message = "chunk index key of bad length"});
        continue;
      }
      ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(it->key().data()));
      auto e = fmt::DecodeChunkEntry(key, it->value().ToStringView());
      if (!e.ok()) {
        c_.Problem({.kind = Kind::kBadIndexValue,
                    .key = key,
                    .message = "chunk " + key.ToHex() + " index value: " + e.status().message()});
        continue;
      }
      chunks_.emplace(key, *e);
    }
    return FromRocks(it->status(), "scanning chunk index");
  }

  // 2b. Every entry names a known pack and its record verified (VerifyRecords).
  void CheckChunkRecords(const BadRecords& bad) {
    for (const auto& [key, e] : chunks_) {
      if (!metas_.count(e.pack_id)) {
        c_.Problem({.kind = Kind::kBadRecord,
                    .key = key,
                    .pack_id = e.pack_id,
                    .offset = e.offset,
                    .message = "chunk " + key.ToHex() + " names pack " + std::to_string(e.pack_id) +
                               " that the index does not know"});
      } else if (auto b = bad.find(key); b != bad.end()) {
        c_.Problem({.kind = Kind::kBadRecord,
                    .key = key,
                    .base = e.base,  // a bad base also fails its dependants' reads
                    .pack_id = b->second.pack_id,
                    .offset = b->second.offset,
                    .message = b->second.message});
      }
      r_.chunks_checked++;
    }
  }

  // 3a. References: one per delta dependant...
  void CountBaseReferences() {
    for (const auto& [key, e] : chunks_) {
      if (!e.base) continue;
      refs_[*e.base]++;
      if (!chunks_.count(*e.base)) {
        c_.Problem({.kind = Kind::kMissingChunk,
                    .key = key,
                    .base = *e.base,
                    .message = "chunk " + key.ToHex() + " has delta base " + e.base->ToHex() +
                               " that is not in the store"});
      }
    }
  }

  // 3b. ... and one per extent.
  Status CountExtentReferences() {
    std::unique_ptr<rocksdb::Iterator> it(
        s_.db->NewIterator(rocksdb::ReadOptions(), s_.fs_cf[static_cast<size_t>(Cf::kExtents)]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto x = DecodeExtent(it->value().ToStringView());
      auto k = ParseExtentKey(it->key().ToStringView());
      if (!x || !k) {
        c_.Problem({.kind = Kind::kBadIndexValue,
                    .ino = k ? std::optional<uint64_t>(k->first) : std::nullopt,
                    .message = "extent value or key malformed"});
        continue;
      }
      if (x->hole()) continue;
      refs_[x->chunk]++;
      if (!chunks_.count(x->chunk)) {
        c_.Problem({.kind = Kind::kMissingChunk,
                    .key = x->chunk,
                    .ino = k->first,
                    .message = "inode " + std::to_string(k->first) + " offset " + std::to_string(k->second) +
                               " references chunk " + x->chunk.ToHex() + " that is not in the store"});
      }
    }
    return FromRocks(it->status(), "scanning extents");
  }

  // 3c. Delta chains (docs/FORMAT.md, "Dependants index"): the dep/ records
  // name exactly the entries with a base.
  Status CheckDependantsIndex() {
    std::set<std::pair<ChunkKey, ChunkKey>> want;  // base, dependant
    for (const auto& [key, e] : chunks_)
      if (e.base) want.emplace(*e.base, key);
    const std::string_view prefix = fmt::kDependantPrefix;
    std::unique_ptr<rocksdb::Iterator> it(s_.db->NewIterator(rocksdb::ReadOptions(), s_.handles[0]));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
      std::string_view k = it->key().ToStringView();
      if (k.substr(0, prefix.size()) != prefix) break;
      FsckProblem p{
          .kind = Kind::kDependantIndex, .repaired = repair_, .message = "malformed dependants index record"};
      if (k.size() == fmt::kDependantKeySize) {
        const auto* kp = reinterpret_cast<const uint8_t*>(k.data() + prefix.size());
        const ChunkKey base = ChunkKey::FromBytes(kp), dep = ChunkKey::FromBytes(kp + ChunkKey::kSize);
        if (want.erase({base, dep})) continue;
        auto d = chunks_.find(dep);
        p.key = dep;
        p.base = base;
        p.message = "dependants index names chunk " + dep.ToHex() + " as built on " + base.ToHex() + " but " +
                    (d == chunks_.end() ? std::string("it is not in the store")
                     : d->second.base   ? "its base is " + d->second.base->ToHex()
                                        : std::string("it has no base"));
      }
      c_.Problem(std::move(p));
      if (repair_) fixes_.Delete(s_.handles[0], it->key());
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning the dependants index"));
    for (const auto& [base, dep] : want) {
      c_.Problem({.kind = Kind::kDependantIndex,
                  .key = dep,
                  .base = base,
                  .repaired = repair_,
                  .message = "chunk " + dep.ToHex() + " has delta base " + base.ToHex() +
                             " but no dependants index record"});
      if (repair_) fixes_.Put(s_.handles[0], fmt::DependantKey(base, dep), "");
    }
    return Status::Ok();
  }

  // 3d. Every recorded depth is exact. A chain through a missing base is
  // reported by CountBaseReferences, once.
  void CheckDepths() {
    auto reaches_missing = [&](const fmt::ChunkEntry* e) {
      for (int hop = 0; hop <= fmt::kMaxDeltaDepth + 1 && e->base; ++hop) {
        auto b = chunks_.find(*e->base);
        if (b == chunks_.end()) return true;
        e = &b->second;
      }
      return false;
    };
    const auto depths = ExactDepths(chunks_);
    for (auto& [key, e] : chunks_) {
      const std::optional<uint8_t> d = depths.at(key);
      if (d ? *d == e.depth : reaches_missing(&e)) continue;
      const bool fixed = repair_ && d.has_value();
      c_.Problem({.kind = Kind::kDepth,
                  .key = key,
                  .repaired = fixed,
                  .message = "chunk " + key.ToHex() + " records delta depth " + std::to_string(e.depth) +
                             " but its chain " +
                             (d ? "is " + std::to_string(*d) + " deep"
                                : "loops or is longer than " + std::to_string(fmt::kMaxDeltaDepth))});
      if (fixed) {
        e.depth = *d;
        redepth_.push_back(key);
      }
    }
  }

  // 4. Counts. A chunk nothing references is a leak: repair drops its entry
  // (its record becomes garbage for Compact), which releases its base.
  // A chunk kept at refcount 0 by a pin (online fsck; Store::PinChunk) is
  // not a leak: it goes when the pin does.
  void CheckRefcounts() {
    std::set<ChunkKey> pinned_dead;
    {
      std::lock_guard pl(s_.pin_mu);
      for (const auto& [key, e] : chunks_)
        if (e.refcount == 0 && refs_[key] == 0 && s_.pinned_dead.count(key)) pinned_dead.insert(key);
    }
    if (repair_) DropLeaks(pinned_dead);
    for (auto& [key, e] : chunks_) {
      const uint64_t want = refs_[key];
      if (pinned_dead.count(key)) continue;
      if (dropped_.count(key)) {
        c_.Problem({.kind = Kind::kRefcountMismatch,
                    .key = key,
                    .repaired = true,
                    .message = "chunk " + key.ToHex() + " has count " + std::to_string(e.refcount) +
                               " but no references (leaked)"});
        continue;
      }
      if (e.refcount == want) continue;
      c_.Problem({.kind = Kind::kRefcountMismatch,
                  .key = key,
                  .repaired = repair_ && want > 0,
                  .message = "chunk " + key.ToHex() + " has count " + std::to_string(e.refcount) + " but " +
                             std::to_string(want) + " references"});
      if (repair_ && want > 0) {
        e.refcount = want;
        fixes_.Put(s_.chunks_cf, key.view(), fmt::EncodeChunkEntry(key, e));
      }
    }
    for (const ChunkKey& key : redepth_)  // after the count fixes: this value has both
      if (!dropped_.count(key))
        fixes_.Put(s_.chunks_cf, key.view(), fmt::EncodeChunkEntry(key, chunks_[key]));
  }

  // Drops every unreferenced, unpinned entry, and then the bases that
  // dropping it leaves unreferenced.
  void DropLeaks(const std::set<ChunkKey>& pinned_dead) {
    std::vector<ChunkKey> zero;
    for (const auto& [key, e] : chunks_)
      if (refs_[key] == 0 && !pinned_dead.count(key)) zero.push_back(key);
    while (!zero.empty()) {
      ChunkKey key = zero.back();
      zero.pop_back();
      const fmt::ChunkEntry& e = chunks_[key];
      if (dropped_.count(key)) continue;
      dropped_.insert(key);
      fixes_.Delete(s_.chunks_cf, key.view());
      if (e.base) fixes_.Delete(s_.handles[0], fmt::DependantKey(*e.base, key));
      if (e.base && --refs_[*e.base] == 0 && chunks_.count(*e.base)) zero.push_back(*e.base);
    }
  }

  // 5. Live bytes per pack, from the (repaired) entries.
  void CheckLiveBytes() {
    std::map<uint64_t, uint64_t> live;
    for (const auto& [key, e] : chunks_)
      if (!dropped_.count(key)) live[e.pack_id] += e.record_size();
    for (auto& [id, m] : metas_) {
      if (m.live == live[id]) continue;
      c_.Problem({.kind = Kind::kLiveBytesMismatch,
                  .pack_id = id,
                  .repaired = repair_,
                  .message = "pack " + std::to_string(id) + " records " + std::to_string(m.live) +
                             " live bytes, chunks say " + std::to_string(live[id])});
      if (repair_) {
        fmt::PackMeta nm = m;
        nm.live = live[id];
        fixes_.Put(s_.packs_cf, fmt::PackKey(id), fmt::EncodePackMeta(id, nm));
        new_meta_[id] = nm;
      }
    }
  }

  // 6. The gathered repairs, in one index batch; deleted orphan packs made durable.
  Status ApplyRepairs() {
    if (repair_ && fixes_.Count() > 0) {
      LMC_RETURN_IF_ERROR(s_.WriteIndex(fixes_, true));
      for (const auto& [id, m] : new_meta_) s_.packs[id] = m;
    }
    if (repair_ && r_.Count(Kind::kOrphanPack) > 0) LMC_RETURN_IF_ERROR(s_.env->SyncDir(s_.pack_dir));
    return Status::Ok();
  }

  Store::Impl& s_;
  const bool repair_;
  FsckReport r_;
  Checker c_;
  rocksdb::WriteBatch fixes_;
  std::map<uint64_t, fmt::PackMeta> metas_;                             // decodable pack index values
  std::unordered_map<ChunkKey, fmt::ChunkEntry, ChunkKeyHash> chunks_;  // decodable chunk entries
  std::unordered_map<ChunkKey, uint64_t, ChunkKeyHash> refs_;           // references found per chunk
  std::vector<ChunkKey> redepth_;                                       // entries whose depth repair corrects
  std::set<ChunkKey> dropped_;                                          // leaked entries repair drops
  std::map<uint64_t, fmt::PackMeta> new_meta_;                          // pack values repair rewrites
};

}  // namespace

Result<FsckReport> Store::Fsck(const FsckOptions& given) {
  Impl& s = *impl_;
  FsckOptions options = given;
  // The index's own files first, as raw bytes (their blocks are parsed below).
  LMC_RETURN_IF_ERROR(s.VerifyIndexFiles());
  // Then the index against its journal: an index that lost entries without
  // an error would have fsck "repair" the counts of chunks whose extents it
  // lost, deleting them. Where they differ, nothing is repaired from it.
  std::vector<std::string> mismatches;
  if (options.compare_journal && s.journal) {
    std::lock_guard jl(s.journal_mu);
    Result<std::vector<std::string>> m = s.CompareWithJournal();
    if (!m.ok() && !m.status().IsCorruption()) return m.status();
    if (m.ok()) mismatches = std::move(m).value();  // a damaged journal is reported below
    if (!mismatches.empty()) options.repair = false;
  }
  // 0. Every record read and decoded (and hashed), before taking the commit
  // lock: this is nearly all of fsck's time, and a mounted store keeps
  // committing meanwhile. Records are immutable once indexed; a chunk
  // deleted or moved by a concurrent commit or compaction meanwhile reads
  // as NotFound (skipped) or is re-read through its new entry.
  Impl::BadRecords bad;
  LMC_RETURN_IF_ERROR(s.VerifyRecords(options, &bad));
  std::lock_guard l(s.commit_mu);  // no commit or compaction while we count
  LMC_ASSIGN_OR_RETURN(FsckReport r, FsckRun(s, options).Run(bad));
  for (const std::string& m : mismatches)
    Checker{r, s.dir}.Problem(
        {.kind = Kind::kIndexJournalMismatch,
         .message = m + (given.repair ? "; nothing was repaired from this index: lmcfs-fsck --repair STORE "
                                        "rebuilds it from the journal first"
                                      : " (lmcfs-fsck --repair rebuilds the index from the journal)")});
  // The index journal (a journaled store): every record and snapshot part
  // read back. Damage there loses nothing while the index is good, but the
  // journal could no longer rebuild it: repair writes it again from the
  // index (a snapshot; the old segments go).
  if (s.journal && !s.opts.read_only) {
    std::lock_guard jl(s.journal_mu);
    Status v = s.journal->Verify();
    if (!v.ok() && !v.IsCorruption()) return v;
    if (!v.ok()) {
      bool fixed = false;
      if (options.repair) {
        LMC_RETURN_IF_ERROR(
            s.journal->Heal([&](const IndexJournal::SinkFn& sink) { return s.ScanIndex(sink); }));
        fixed = true;
      }
      std::string m = v.message() + (fixed ? "; written again from the index"
                                           : " (the index is intact; lmcfs-fsck --repair writes the journal "
                                             "again from it)");
      Checker{r, s.dir}.Problem({.kind = Kind::kJournal, .repaired = fixed, .message = m});
    }
  }
  return r;
}

}  // namespace lmc::store
