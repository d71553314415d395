// Memory given back to the system when the mount goes quiet
// (docs/ARCHITECTURE.md, "Memory"). A save frees what it allocated (frame
// buffers past the pools, decoded chunks, RocksDB's blocks), but the
// allocator keeps freed memory inside its arenas for the next allocation,
// so the daemon's resident size stays at the high-water mark of the last
// burst: about 100 MiB above what its caches hold after a run of eight
// ranks saving at once (scripts/many_writers_run.py). On a training node
// that memory belongs to the job between saves. Once the mount has had no
// foreground operation and no background work for `idle`, the trimmer
// calls its release function once (mount.lmcfs: the free write blocks
// past 8, then malloc_trim(0), glibc: every arena's free pages back to
// the kernel), then waits for the next burst to end. The caches keep what
// they hold; only free memory goes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace lmc::fs {

struct TrimOptions {
  // Quiet time before memory is given back (mount option trim_idle=SECONDS);
  // zero: never.
  std::chrono::milliseconds idle{10000};
  std::chrono::milliseconds poll{1000};
};

// Polled: a count that changes with every foreground operation or
// background pass, and whether work is still queued or running (rebases,
// a flush or fsync waiting on the disk): busy either way.
struct TrimActivity {
  uint64_t operations = 0;
  bool busy = false;  // rebases queued or running, a flush or fsync in flight
};
using TrimActivityFn = std::function<TrimActivity()>;

struct TrimStats {
  uint64_t trims = 0;           // times memory was given back
  uint64_t returned_bytes = 0;  // resident bytes given back (the sum of each trim's drop)
};

class MemoryTrimmer {
 public:
  // `release` gives free memory back and returns the resident bytes it
  // released (default: ReleaseFreeMemory(), below, which measures the
  // resident size in /proc/self/status).
  using ReleaseFn = std::function<uint64_t()>;
  MemoryTrimmer(TrimOptions options, TrimActivityFn activity, ReleaseFn release = nullptr);
  ~MemoryTrimmer();  // Stop()
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // The polling thread (none when options.idle is zero).
  void Start();
  void Stop();
  // One poll at `now`, what the thread does every options.poll: true when
  // it gave memory back. Public for tests, which drive the clock.
  bool Poll(std::chrono::steady_clock::time_point now);
  TrimStats Stats() const;
  const TrimOptions& options() const { return opts_; }

 private:
  void Run();

  const TrimOptions opts_;
  const TrimActivityFn activity_;
  const ReleaseFn release_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t last_ops_ = 0;
  bool seen_ = false;     // last_ops_ holds a poll's count
  bool trimmed_ = false;  // memory was given back since the last activity
  std::chrono::steady_clock::time_point quiet_since_{};
  TrimStats stats_;
  std::thread thread_;
};

// `first` (frees what its owner keeps for reuse), then malloc_trim(0)
// where the C library has it, and the drop of the resident size they
// caused (0 if it grew meanwhile).
uint64_t ReleaseFreeMemory(const std::function<void()>& first = nullptr);

// This process's resident size now and at most (VmRSS and VmHWM of
// /proc/self/status, bytes); zeros where it cannot be read.
struct ProcessMemory {
  uint64_t resident = 0, peak = 0;
};
ProcessMemory ReadProcessMemory();

}  // namespace lmc::fs
