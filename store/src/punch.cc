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

}  // namespace

void Store::Impl::QueueDead(std::vector<DeadRange> ranges) {
  if (ranges.empty() || !punch_enabled.load(std::memory_order_relaxed)) return;
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
      continue;
    }
    holes.push_back(r);
  }
  for (const DeadRange& h : holes) {
    // Whole blocks inside the dead bytes only: a block that also holds a
    // live record's bytes is never touched, nor the active pack's last
    // partial block (a dead record ends at or before the committed end,
    // and the next direct append rewrites from that block on).
    const uint64_t a = (h.off + kBlock - 1) / kBlock * kBlock;
    const uint64_t b = (h.off + h.len) / kBlock * kBlock;
    if (b <= a) continue;
    Status st = env->PunchHole(PackPath(h.pack), a, b - a);
    if (st.ok()) {
      n_punched += b - a;
      n_holes++;
      continue;
    }
    if (st.IsNotFound()) continue;  // compaction deleted the pack meanwhile
    if (st.code() == Code::kUnsupported) {
      spdlog::info("store {}: {}; dead records are given back by compaction only", dir, st.message());
      punch_enabled = false;
      return;
    }
    spdlog::warn("store {}: punching dead records in {} failed ({}); compaction gives their space back", dir,
                 PackPath(h.pack), st.ToString());
    return;
  }
}

void Store::Impl::StartPuncher() {
  punch_enabled = true;
  puncher = std::thread([this] {
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

void Store::PunchDeadRecords() { impl_->PunchDead(); }

}  // namespace lmc::store
