// Garbage collection of dead delta bases (docs/ARCHITECTURE.md,
// "Incremental snapshots", "Dead bases").
//
// A chunk's refcount counts references from file extents and from the
// chunks that use it as their delta base, together. A full scan of the
// chunk index tells them apart: a chunk whose every reference comes from a
// dependant is a dead base. Re-encoding its dependants standalone (their
// key, the SHA-256 of their decoded bytes, does not change) releases it;
// its own base may then die in turn (Unref follows the chain).
#include <rocksdb/iterator.h>
#include <spdlog/spdlog.h>

#include <unordered_map>
#include <unordered_set>

#include "rocks_view.h"
#include "store_impl.h"

namespace lmc::store {
namespace {

struct Scanned {
  uint64_t refcount = 0;
  uint64_t record_size = 0;
  std::optional<ChunkKey> base;
};

Result<std::vector<uint8_t>> ReencodeStandalone(const uint8_t* decoded, size_t n, DType dtype) {
  thread_local Workspace ws;
  std::vector<uint8_t> frame(MaxEncodedSize(n));
  EncodeParams p;
  p.dtype = dtype;
  LMC_ASSIGN_OR_RETURN(size_t len, EncodeChunk(decoded, n, p, frame.data(), frame.size(), ws));
  frame.resize(len);
  return frame;
}

}  // namespace

Result<DeadBaseReport> Store::RewriteDeadBases(const DeadBaseOptions& options,
                                               const DeadBaseProgressFn& progress) {
  Impl& s = *impl_;
  std::lock_guard maint(s.maint_mu);
  DeadBaseReport r;
  // 1. Scan: refcounts and dependants, from one consistent snapshot.
  std::unordered_map<ChunkKey, Scanned, ChunkKeyHash> chunks;
  std::unordered_map<ChunkKey, std::vector<ChunkKey>, ChunkKeyHash> dependants;
  {
    std::unique_ptr<rocksdb::Iterator> it(s.db->NewIterator(rocksdb::ReadOptions(), s.chunks_cf));
    std::string kk, vk;  // copies under ThreadSanitizer (rocks_view.h)
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      std::string_view k = View(it->key(), &kk);
      if (k.size() != ChunkKey::kSize) return Status::Corruption("chunk index key of bad length (run fsck)");
      const ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data()));
      LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, fmt::DecodeChunkEntry(key, View(it->value(), &vk)));
      chunks[key] = Scanned{e.refcount, e.record_size(), e.base};
      if (e.base) dependants[*e.base].push_back(key);
      r.chunks_scanned++;
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning chunk index"));
  }
  std::unordered_set<ChunkKey, ChunkKeyHash> dead;
  for (const auto& [key, deps] : dependants) {
    auto c = chunks.find(key);
    if (c == chunks.end() || c->second.refcount == 0) continue;  // missing (fsck) or pinned dead
    if (c->second.refcount <= deps.size()) {
      dead.insert(key);
      r.dead_bases++;
      r.dead_base_bytes += c->second.record_size;
    }
  }
  if (options.dry_run || dead.empty()) return r;

  // 2. Re-encode the live dependants standalone. A dependant that is dead
  // itself is left alone: it goes once its own dependants are rewritten.
  Batch batch;
  std::vector<ChunkKey> in_batch;
  std::vector<uint8_t> decoded;
  Workspace ws;
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::Ok();
    if (options.before_commit) options.before_commit(in_batch, &batch);
    LMC_RETURN_IF_ERROR(Commit(batch, true));
    batch.Clear();
    if (options.committed) options.committed(in_batch);
    in_batch.clear();
    return Status::Ok();
  };
  for (const ChunkKey& base : dead) {
    for (const ChunkKey& dep : dependants[base]) {
      if (dead.count(dep)) continue;
      if (r.rewritten >= options.max_chunks) break;
      auto e = s.LoadEntry(dep);
      if (e.status().IsNotFound()) continue;  // released since the scan
      LMC_RETURN_IF_ERROR(e.status());
      if (!e->base || *e->base != base) continue;  // rewritten since the scan
      // The dtype the frame was coded with.
      DType dtype = DType::kBytes;
      {
        LMC_ASSIGN_OR_RETURN(std::shared_ptr<File> f, s.PackFile(e->pack_id));
        std::vector<uint8_t> record;
        if (Status rs = s.ReadRecord(dep, *e, *f, record); !rs.ok()) {
          if (rs.IsCorruption() && s.Moved(dep, *e)) continue;  // rewritten meanwhile
          return s.Reported(std::move(rs));
        }
        auto info = ReadFrameInfo(record.data() + fmt::kRecordHeaderSize, e->frame_len);
        if (info.ok()) dtype = info->dtype;
      }
      decoded.resize(e->decoded_len);
      LMC_ASSIGN_OR_RETURN(size_t n, ReadChunk(dep, decoded.data(), decoded.size(), ws));
      Result<std::vector<uint8_t>> frame = options.reencode ? options.reencode(dep, decoded.data(), n, dtype)
                                                            : ReencodeStandalone(decoded.data(), n, dtype);
      LMC_RETURN_IF_ERROR(frame.status());
      batch.RewriteChunk(dep, *frame);
      in_batch.push_back(dep);
      r.rewritten++;
      r.bytes_before += e->record_size();
      r.bytes_after += fmt::kRecordHeaderSize + frame->size();
      if (batch.frame_bytes() >= options.batch_bytes) {
        LMC_RETURN_IF_ERROR(flush());
        if (progress && !progress(r)) return r;
      }
    }
  }
  LMC_RETURN_IF_ERROR(flush());
  if (progress) progress(r);
  spdlog::info(
      "store {}: {} dead delta bases ({} bytes): {} dependants re-encoded standalone ({} -> {} bytes)", s.dir,
      r.dead_bases, r.dead_base_bytes, r.rewritten, r.bytes_before, r.bytes_after);
  return r;
}

}  // namespace lmc::store
