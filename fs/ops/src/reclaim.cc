// Background space reclamation (lmc/fs/reclaim.h).
#include "lmc/fs/reclaim.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdint>

namespace lmc::fs {

namespace {
using Clock = std::chrono::steady_clock;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<std::pair<std::string, uint64_t>> ReclaimStats::Named() const {
  return {{"reclaim_passes", passes},
          {"reclaim_passes_stopped", passes_stopped},
          {"reclaim_bytes_reclaimed", bytes_reclaimed},
          {"reclaim_bytes_copied", bytes_copied},
          {"reclaim_dead_bases_rewritten", dead_bases_rewritten},
          {"reclaim_errors", errors},
          {"reclaim_ms", static_cast<uint64_t>(seconds * 1000)},
          {"reclaim_last_pass_unix", static_cast<uint64_t>(last_pass_unix)}};
}

Reclaimer::Reclaimer(store::Store* store, ReclaimOptions options, ReclaimActivityFn activity,
                     ReencodedFn reencoded)
    : store_(store), opts_(options), activity_(std::move(activity)), reencoded_(std::move(reencoded)) {}

Reclaimer::~Reclaimer() { Stop(); }

void Reclaimer::Start() {
  if (!opts_.enabled || thread_.joinable()) return;
  {
    std::lock_guard l(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Reclaimer::Stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

ReclaimStats Reclaimer::Stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

// Dead bytes on disk: hole punching gives most back at once (the store's
// own thread); what stays (blocks shared with live records, stores that
// cannot punch) is compaction's.
bool Reclaimer::OverBound(const store::StoreStats& st) const {
  const uint64_t dead = st.dead_disk_bytes();
  return dead >= opts_.min_dead_bytes &&
         static_cast<double>(dead) > opts_.max_dead_fraction * static_cast<double>(st.pack_disk_bytes);
}

Result<uint64_t> Reclaimer::Pass(const std::function<bool()>& busy, bool idle) {
  const auto t0 = Clock::now();
  const store::StoreStats before = store_->Stats();
  ReclaimStats add;
  bool stopped = false;
  Status status;
  // Files were removed: a delta base may now be referenced only by its
  // dependants (a dead base); rewriting them standalone lets it go.
  const ReclaimActivity act = Activity();
  if (idle && act.removals != removals_seen_) {
    DeadBaseRun run =
        RewriteDeadBasesRefreshing(store_, reencoded_, [&](const store::DeadBaseReport&) { return !busy(); });
    if (!run.refreshed.ok())
      spdlog::warn(
          "lmcfs: refreshing the stored bytes of the files using {} re-encoded chunks failed ({}); their "
          "data is intact, but st_blocks and du may show their old sizes (lmcfs-fsck --repair on the "
          "unmounted store sets them)",
          run.reencoded, run.refreshed.status().ToString());
    const auto& r = run.report;
    if (!r.ok()) {
      status = r.status();
    } else {
      add.dead_bases_rewritten = r->rewritten;
      // It stops early (and says ok) when busy: then it is not done.
      if (busy())
        stopped = true;
      else
        removals_seen_ = act.removals;
    }
  }
  if (const store::StoreStats now = store_->Stats();
      status.ok() && !stopped && (OverBound(now) || (idle && now.empty_packs > 0))) {
    store::CompactOptions co;
    co.policy = store::CompactOptions::Policy::kCostBenefit;
    co.target_dead_fraction = opts_.max_dead_fraction / 2;  // hysteresis: not a pass per save
    co.judge_by_disk = true;                                // dead records already punched need no copy
    if (!idle) {
      // While saves run, only packs that cost little to free (mostly dead:
      // little to copy), so that the save's own writes come first.
      co.policy = store::CompactOptions::Policy::kThreshold;
      co.live_fraction_threshold = opts_.pressure_max_live;
    }
    // The active pack holds the save being written: sealing and copying it
    // while busy would copy records about to die (the next rebase).
    co.seal_active_dead_bytes = idle ? opts_.min_dead_bytes : 0;
    auto r = store_->Compact(co, [&](const store::CompactProgress&) { return !busy(); });
    if (!r.ok()) {
      if (r.status().code() == Code::kAborted)
        stopped = true;
      else
        status = r.status();
    }
  }
  const store::StoreStats after = store_->Stats();
  add.bytes_reclaimed = after.compact_bytes_reclaimed - before.compact_bytes_reclaimed;
  add.bytes_copied = after.compact_bytes_copied - before.compact_bytes_copied;
  {
    std::lock_guard l(mu_);
    stats_.passes++;
    stats_.passes_stopped += stopped;
    stats_.errors += !status.ok();
    stats_.bytes_reclaimed += add.bytes_reclaimed;
    stats_.bytes_copied += add.bytes_copied;
    stats_.dead_bases_rewritten += add.dead_bases_rewritten;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.last_pass_unix = UnixNow();
  }
  if (!status.ok() && status.code() == Code::kNoSpace) {
    // A full store: compaction has no room for its copies. Not a fault;
    // said at most once a minute while it lasts.
    if (const auto now = Clock::now(); now - no_space_said_ >= std::chrono::minutes(1)) {
      no_space_said_ = now;
      spdlog::warn(
          "lmcfs: background reclamation waits for space ({}); deleting files gives theirs back at once, "
          "and it tries again",
          status.ToString());
    }
    return status;
  }
  if (!status.ok()) {
    spdlog::error(
        "lmcfs: background reclamation failed ({}); it will try again; run lmcfs-fsck on the "
        "mountpoint if this repeats",
        status.ToString());
    return status;
  }
  // One line per pass that did something; passes with nothing to do
  // (pressure polls while only the active pack holds garbage) stay quiet.
  const bool did = add.bytes_reclaimed || add.bytes_copied || add.dead_bases_rewritten;
  spdlog::log(
      did ? spdlog::level::info : spdlog::level::debug,
      "lmcfs: background reclamation gave back {} bytes (copied {}, {} dead-base dependants rewritten){}",
      add.bytes_reclaimed, add.bytes_copied, add.dead_bases_rewritten,
      stopped ? "; stopped for foreground work" : "");
  return add.bytes_reclaimed;
}

Result<uint64_t> Reclaimer::RunOnce() {
  return Pass(
      [this] {
        std::lock_guard l(mu_);
        return stop_;
      },
      /*idle=*/true);
}

void Reclaimer::Loop() {
  ReclaimActivity last = Activity();
  auto quiet_since = Clock::now();
  // The store as a pass that changed nothing left it: no new pass until it
  // changes (otherwise a pass that cannot help, e.g. under pressure with
  // all garbage in the active pack, would run at every poll).
  // An idle pass can do all a pressure pass can, not the reverse.
  uint64_t unchanged_packs = UINT64_MAX, unchanged_bytes = UINT64_MAX;
  bool unchanged_by_idle = false;
  for (;;) {
    {
      std::unique_lock l(mu_);
      cv_.wait_for(l, opts_.poll, [&] { return stop_; });
      if (stop_) return;
    }
    const ReclaimActivity now = Activity();
    if (now.operations != last.operations) {
      last = now;
      quiet_since = Clock::now();
    }
    const bool idle = Clock::now() - quiet_since >= opts_.idle;
    const store::StoreStats st = store_->Stats();
    // Under pressure (dead bytes far over the bound: saves come faster than
    // idle moments), one pack per poll even while busy.
    const bool pressure = st.dead_disk_bytes() >= opts_.min_dead_bytes &&
                          static_cast<double>(st.dead_disk_bytes()) >
                              opts_.pressure_fraction * static_cast<double>(st.pack_disk_bytes);
    // Sealed packs left without a live record (their dead records already
    // holes) are deleted at the next idle moment: no copy, one file less.
    const bool due =
        idle ? (now.removals != removals_seen_ || OverBound(st) || st.empty_packs > 0) : pressure;
    if (!due) continue;
    if (now.removals == removals_seen_ && st.packs == unchanged_packs && st.pack_bytes == unchanged_bytes &&
        (unchanged_by_idle || !idle))
      continue;
    const uint64_t ops_at_start = now.operations;
    int checks = 0;
    (void)Pass(
        [&] {
          {
            std::lock_guard l(mu_);
            if (stop_) return true;
          }
          // Under pressure the first pack is always done.
          if (!idle && checks++ == 0) return false;
          const ReclaimActivity a = Activity();
          return a.operations != ops_at_start;
        },
        idle);
    if (const store::StoreStats after = store_->Stats();
        after.packs == st.packs && after.pack_bytes == st.pack_bytes) {
      unchanged_packs = after.packs;
      unchanged_bytes = after.pack_bytes;
      unchanged_by_idle = idle;
    }
    // Foreground work during the pass counts from now on; the pass itself
    // is not activity (an idle mount stays idle across pressure passes).
    if (const ReclaimActivity a = Activity(); a.operations != last.operations) {
      last = a;
      quiet_since = Clock::now();
    }
  }
}

Result<bool> ParseReclaimOption(std::string_view key, std::string_view value, ReclaimOptions* out) {
  if (key == "gc") {
    if (value == "auto")
      out->enabled = true;
    else if (value == "off")
      out->enabled = false;
    else
      return Status::InvalidArgument("bad gc '" + std::string(value) + "' (expected auto or off)");
    return true;
  }
  if (key == "gc_dead") {
    unsigned pct = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), pct);
    if (ec != std::errc() || p != value.data() + value.size() || pct < 1 || pct > 90)
      return Status::InvalidArgument("bad gc_dead '" + std::string(value) +
                                     "' (expected a percentage of pack bytes, 1 to 90)");
    out->max_dead_fraction = pct / 100.0;
    return true;
  }
  return false;
}

}  // namespace lmc::fs
