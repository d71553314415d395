// Background space reclamation in the daemon (docs/ARCHITECTURE.md,
// "Reclamation"): the store's dead bytes are given back without an
// operator, the way ZFS and btrfs free blocks.
//
// A thread polls the store four times a second. When dead pack bytes exceed
// max_dead_fraction of all pack bytes (and at least min_dead_bytes), and the
// filesystem has been idle for `idle` (no foreground operation), it runs
// one pass: the dead-base rewrite when files were removed since the last
// one, then Store::Compact with the cost-benefit policy down to half the
// bound, sealing the active pack when it holds dead bytes worth it.
// Foreground work coming back stops the pass after the pack in hand. Under
// pressure (dead bytes over pressure_fraction) one pack per poll is
// compacted even while busy. Each pack's move commits on its own, as with
// lmcfs-gc, so a stopped or crashed pass leaves a consistent store). An
// explicit lmcfs-gc and a pass take turns (the store's maintenance lock).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lmc/fs/inspect.h"
#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs {

struct ReclaimOptions {
  bool enabled = true;                // mount option gc=auto (true) | off
  double max_dead_fraction = 0.10;    // gc_dead=PCT: a pass starts above this
  uint64_t min_dead_bytes = 1 << 20;  // and with at least this many dead bytes
  // Quiet time (no foreground operation) before a pass starts, and the
  // polling period.
  std::chrono::milliseconds idle{500};
  std::chrono::milliseconds poll{250};
  // Dead bytes above this fraction of pack bytes: a pass of one pack per
  // poll runs even while the mount is busy (saves coming faster than idle
  // moments must not let the store grow without bound).
  double pressure_fraction = 0.40;
  // A pressure pass takes only sealed packs with at most this live fraction.
  double pressure_max_live = 0.25;
};

// What the filesystem tells the reclaimer (polled): a count that changes
// with every foreground operation, and files removed so far. Background
// rebases are not activity: a pass may run beside them (both commit through
// the store, which checks every move against the current index).
struct ReclaimActivity {
  uint64_t operations = 0;
  uint64_t removals = 0;
};
using ReclaimActivityFn = std::function<ReclaimActivity()>;

struct ReclaimStats {
  uint64_t passes = 0;           // passes run (finished or stopped)
  uint64_t passes_stopped = 0;   // of those, stopped by foreground work
  uint64_t bytes_reclaimed = 0;  // pack bytes given back
  uint64_t bytes_copied = 0;     // live bytes compaction moved
  uint64_t dead_bases_rewritten = 0;
  uint64_t errors = 0;         // passes that failed (logged)
  double seconds = 0;          // time spent in passes
  int64_t last_pass_unix = 0;  // when the last pass ended (0: never)
  // Name -> value, for lmcfs-stat's daemon object and the root xattrs.
  std::vector<std::pair<std::string, uint64_t>> Named() const;
};

class Reclaimer {
 public:
  // `store` must outlive the Reclaimer. The dead-base rewrite uses the LMC
  // codec (Store::RewriteDeadBases' default) and tells `reencoded` (the
  // mount's filesystem) which chunks it re-encoded.
  Reclaimer(store::Store* store, ReclaimOptions options, ReclaimActivityFn activity,
            ReencodedFn reencoded = {});
  ~Reclaimer();  // Stop()
  Reclaimer(const Reclaimer&) = delete;
  Reclaimer& operator=(const Reclaimer&) = delete;

  // Starts the thread (nothing when options.enabled is false).
  void Start();
  // Stops the thread; a running pass stops after the pack in hand.
  void Stop();
  ReclaimStats Stats() const;
  const ReclaimOptions& options() const { return opts_; }

  // One pass now if over the bound, whatever the activity (tests). Returns
  // what it reclaimed.
  Result<uint64_t> RunOnce();

 private:
  void Loop();
  ReclaimActivity Activity() const { return activity_ ? activity_() : ReclaimActivity{}; }
  bool OverBound(const store::StoreStats& st) const;
  // A pass; `busy` says when to stop between packs. idle: the mount is
  // quiet, so also rewrite dead delta bases (files were removed since the
  // last time) and seal the active pack when it holds dead bytes; a
  // pressure pass (not idle) compacts sealed packs only.
  Result<uint64_t> Pass(const std::function<bool()>& busy, bool idle);

  store::Store* store_;
  const ReclaimOptions opts_;
  ReclaimActivityFn activity_;
  ReencodedFn reencoded_;
  uint64_t removals_seen_ = 0;  // removals at the last dead-base rewrite (Loop's thread)
  // When a pass last said it waits for space (Loop's thread).
  std::chrono::steady_clock::time_point no_space_said_{};

  mutable std::mutex mu_;  // guards stats_ and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  ReclaimStats stats_;
  std::thread thread_;
};

// Parses a mount option of reclamation: "gc" (auto|off) or "gc_dead" (a
// percentage 1..90, the bound). false when `key` is not one of them;
// InvalidArgument naming the option and its values when the value is bad.
Result<bool> ParseReclaimOption(std::string_view key, std::string_view value, ReclaimOptions* out);

}  // namespace lmc::fs
