// Hole punching: the disk blocks of dead records go back to the filesystem
// as soon as the index change that killed them is durable, without waiting
// for compaction to free their whole pack (docs/ARCHITECTURE.md, "Hole
// punching").
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "store_impl.h"

namespace lmc::store {
namespace {

// Holes cover whole blocks of this size (a multiple of the usual logical
// block sizes; the kernel frees whole filesystem blocks inside a range and
// zeroes the rest of it, all dead bytes either way).
constexpr uint64_t kBlock = 4096;
// After the first dead record is queued, the puncher waits this long for
// more: the next commits' records share its index sync and its holes.
constexpr auto kGather = std::chrono::milliseconds(20);
// A follower reads the holes of a pack a refresh changed this long after
// the change (the writer punches within kGather of its commit being
// durable, which is before the follower reads it, unless it is busy), and
// once more kHolesLater after that.
constexpr auto kHolesRecheck = std::chrono::seconds(1);
constexpr auto kHolesLater = std::chrono::seconds(5);
// A follower that read journal records reads the journal's HEAD again this
// often, so that the records the writer's snapshots took leave its count
// of the journal's bytes (IndexJournal::FollowHead).
constexpr auto kHeadRecheck = std::chrono::seconds(5);

}  // namespace

void Store::Impl::QueueDead(std::vector<DeadRange> ranges) {
  if (ranges.empty() || !punch_enabled.load(std::memory_order_relaxed)) return;
  for (DeadRange& r : ranges) {
    auto it = packs.find(r.pack);
    r.pack_end = it != packs.end() ? std::max(it->second.size, r.off + r.len) : r.off + r.len;
  }
  {
    std::lock_guard l(punch_mu);
    punch_queue.insert(punch_queue.end(), ranges.begin(), ranges.end());
    punch_queue.insert(punch_queue.end(), punch_deferred.begin(), punch_deferred.end());
    punch_deferred.clear();
  }
  punch_cv.notify_one();
}

void Store::Impl::PunchDead() {
  std::lock_guard run(punch_run_mu);
  std::vector<DeadRange> q;
  {
    std::lock_guard l(punch_mu);
    q.swap(punch_queue);
  }
  if (q.empty() || !punch_enabled) return;
  // The batches that killed these records may not be durable yet (commits
  // without sync): punching before a crash that loses them would take
  // records the recovered index still names. A journaled store's batches
  // are durable in its journal before the local index applies them.
  // The barrier is a synced write (a delete of a key never present), not
  // SyncWAL: after a failed WAL append (a full disk) RocksDB answers a
  // write with its error, while SyncWAL trips an assertion. When the index
  // refuses it, the ranges wait for the next commit that kills records
  // (the index takes writes again then), not for compaction: on a full
  // disk they are the space that lets writing resume.
  if (!journal) {
    rocksdb::WriteBatch barrier;
    barrier.Delete(handles[0], fmt::kPunchBarrierKey);
    if (Status st = WriteIndex(barrier, true); !st.ok()) {
      spdlog::warn(
          "store {}: syncing the index before punching {} dead records failed ({}); they are punched after "
          "the next delete that commits",
          dir, q.size(), st.ToString());
      std::lock_guard l(punch_mu);
      punch_deferred.insert(punch_deferred.end(), q.begin(), q.end());
      return;
    }
  }
  std::sort(q.begin(), q.end(), [](const DeadRange& a, const DeadRange& b) {
    return a.pack != b.pack ? a.pack < b.pack : a.off < b.off;
  });
  // Adjacent dead records make one hole: the blocks they share go too.
  std::vector<DeadRange> holes;
  for (const DeadRange& r : q) {
    if (!holes.empty() && holes.back().pack == r.pack && r.off <= holes.back().off + holes.back().len) {
      holes.back().len = std::max(holes.back().len, r.off + r.len - holes.back().off);
      holes.back().pack_end = std::max(holes.back().pack_end, r.pack_end);
      continue;
    }
    holes.push_back(r);
  }
  // Whole blocks inside the dead bytes only: a block that also holds a
  // live record's bytes is never touched, nor the block that holds a
  // pack's last committed byte (the active pack's next direct append
  // rewrites from there, and in RADOS zeroing an object's tail truncates
  // it: the object would end before its committed bytes). One request per
  // pack (Env::PunchHoles).
  for (size_t i = 0; i < holes.size();) {
    const uint64_t pack = holes[i].pack;
    std::vector<Env::Range> ranges;
    for (; i < holes.size() && holes[i].pack == pack; ++i) {
      const uint64_t a = (holes[i].off + kBlock - 1) / kBlock * kBlock;
      const uint64_t last = holes[i].pack_end > 0 ? (holes[i].pack_end - 1) / kBlock * kBlock : 0;
      const uint64_t b = std::min((holes[i].off + holes[i].len) / kBlock * kBlock, last);
      if (b > a) ranges.push_back({a, b - a});
    }
    if (ranges.empty()) continue;
    size_t done = 0;
    Status st = env->PunchHoles(PackPath(pack), ranges, &done);
    uint64_t bytes = 0;
    for (size_t k = 0; k < done; ++k) bytes += ranges[k].len;
    n_punched += bytes;
    n_holes += done;
    if (cache_holes && bytes > 0) {
      std::lock_guard l(holes_mu);
      // A pack not cached has the holes counted in its attribute already.
      if (auto it = pack_holes.find(pack); it != pack_holes.end()) it->second += bytes;
    }
    if (st.ok() || st.IsNotFound()) continue;  // not found: compaction deleted the pack meanwhile
    if (st.code() == Code::kUnsupported) {
      spdlog::info("store {}: {}; dead records are given back by compaction only", dir, st.message());
      punch_enabled = false;
      return;
    }
    spdlog::warn("store {}: punching dead records in {} failed ({}); compaction gives their space back", dir,
                 PackPath(pack), st.ToString());
    return;
  }
}

uint64_t Store::Impl::PackOnDisk(uint64_t id, uint64_t size, bool ask) {
  if (!punch_enabled && !follow_holes) return size;
  if (!cache_holes) {
    if (!ask) return size;
    auto d = env->FileDiskBytes(PackPath(id));
    return d.ok() ? std::min(size, *d) : size;
  }
  {
    std::lock_guard l(holes_mu);
    if (auto it = pack_holes.find(id); it != pack_holes.end()) return size - std::min(size, it->second);
  }
  if (!ask) return size;
  // Read once: the object's size less its holes, one read. The holes are
  // taken as the committed size less that: an object longer than its
  // committed bytes (an uncommitted tail; Recover cuts those at open)
  // would count fewer holes than it has, never more. The puncher reads
  // every pack so before its first round; were a compaction's read to
  // overlap a punch of a pack not cached yet, the pack would count that
  // hole as still on disk (compaction might copy it for nothing), never
  // the reverse.
  auto d = env->FileDiskBytes(PackPath(id));
  if (!d.ok()) return size;
  const uint64_t holes = size - std::min(size, *d);
  std::lock_guard l(holes_mu);
  pack_holes.try_emplace(id, holes);
  return size - std::min(size, pack_holes[id]);
}

void Store::Impl::CachePackHoles(const std::function<bool()>& stop) {
  std::vector<std::pair<uint64_t, uint64_t>> sizes;
  {
    std::lock_guard l(commit_mu);
    for (const auto& [id, m] : packs) sizes.emplace_back(id, m.size);
  }
  for (const auto& [id, size] : sizes) {
    if (stop()) return;
    PackOnDisk(id, size);
  }
}

void Store::Impl::StartPuncher() {
  punch_enabled = true;
  puncher = std::thread([this] {
    // Packs from earlier mounts: their holes read once, here, so that
    // Stats (lmcfs-stat, the reclaimer's bound) counts them from the start;
    // punches queued meanwhile wait (and no read races a punch).
    if (cache_holes)
      CachePackHoles([this] {
        std::lock_guard l(punch_mu);
        return punch_stop;
      });
    for (;;) {
      {
        std::unique_lock l(punch_mu);
        punch_cv.wait(l, [&] { return punch_stop || !punch_queue.empty(); });
        if (punch_stop) break;
        punch_cv.wait_for(l, kGather, [&] { return punch_stop; });
      }
      PunchDead();
    }
    PunchDead();  // what the last commits killed
  });
}

void Store::Impl::StopPuncher() {
  if (!puncher.joinable()) return;
  {
    std::lock_guard l(punch_mu);
    punch_stop = true;
  }
  punch_cv.notify_all();
  puncher.join();
}

void Store::Impl::PacksChanged(const std::vector<uint64_t>& changed, const std::vector<uint64_t>& gone) {
  if (!follow_holes) return;
  if (!gone.empty()) {
    std::lock_guard l(holes_mu);
    for (uint64_t id : gone) pack_holes.erase(id);
  }
  if (changed.empty() && gone.empty()) return;
  const auto due = std::chrono::steady_clock::now() + kHolesRecheck;
  {
    std::lock_guard l(punch_mu);
    for (uint64_t id : gone) holes_due.erase(id);
    for (uint64_t id : changed) {
      auto [it, fresh] = holes_due.try_emplace(id, HolesDue{due, 2});
      if (fresh) continue;
      // A pack changing on and on (the writer's active pack) is read every
      // kHolesRecheck, not put off until it stops changing.
      it->second.due = std::min(it->second.due, due);
      it->second.reads_left = 2;
    }
  }
  punch_cv.notify_one();
}

void Store::Impl::ReadPackHoles(uint64_t id) {
  uint64_t size = 0;
  {
    std::lock_guard l(commit_mu);
    auto it = packs.find(id);
    if (it == packs.end()) return;
    size = it->second.size;
  }
  // An object longer than the size this node knows (the writer appended
  // since) counts fewer holes than it has, never more.
  auto d = env->FileDiskBytes(PackPath(id));
  if (!d.ok()) return;
  std::lock_guard l(commit_mu);
  if (!packs.count(id)) return;  // gone meanwhile (a refresh saw it compacted)
  std::lock_guard hl(holes_mu);
  pack_holes[id] = size - std::min(size, *d);
}

void Store::Impl::StartHolesFollower() {
  follow_holes = true;
  puncher = std::thread([this] {
    CachePackHoles([this] {
      std::lock_guard l(punch_mu);
      return punch_stop;
    });
    auto head_due = std::chrono::steady_clock::now() + kHeadRecheck;
    uint64_t head_seq = 0;  // the journal's next record when HEAD was last read
    std::unique_lock l(punch_mu);
    while (!punch_stop) {
      if (std::chrono::steady_clock::now() >= head_due) {
        l.unlock();
        FollowJournalHead(&head_seq);
        l.lock();
        head_due = std::chrono::steady_clock::now() + kHeadRecheck;
        continue;
      }
      if (holes_due.empty()) {
        punch_cv.wait_until(l, head_due, [&] { return punch_stop || !holes_due.empty(); });
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      auto next = std::min(now + kHolesLater, head_due);
      std::vector<uint64_t> ids;
      for (auto it = holes_due.begin(); it != holes_due.end();) {
        if (it->second.due > now) {
          next = std::min(next, it->second.due);
          ++it;
          continue;
        }
        ids.push_back(it->first);
        if (--it->second.reads_left > 0) {
          it->second.due = now + kHolesLater;
          ++it;
        } else {
          it = holes_due.erase(it);
        }
      }
      if (ids.empty()) {
        punch_cv.wait_until(l, next);
        continue;
      }
      l.unlock();
      for (uint64_t id : ids) ReadPackHoles(id);
      l.lock();
    }
  });
}

void Store::Impl::FollowJournalHead(uint64_t* seen) {
  if (!journal) return;
  std::lock_guard l(journal_mu);
  const uint64_t next = journal->next_seq();
  if (next == *seen) return;  // no record read since: the count stands
  if (Status st = journal->FollowHead(); !st.ok()) {
    spdlog::debug("store {}: reading the journal's HEAD again: {}", dir, st.ToString());
    return;
  }
  *seen = next;
}

void Store::PunchDeadRecords() { impl_->PunchDead(); }

}  // namespace lmc::store
