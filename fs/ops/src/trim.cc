// The memory trimmer (lmc/fs/trim.h).
#include "lmc/fs/trim.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lmc::fs {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) m.resident = uint64_t{kib} << 10;
    if (std::sscanf(line, "VmHWM: %llu kB", &kib) == 1) m.peak = uint64_t{kib} << 10;
  }
  std::fclose(f);
  return m;
}

uint64_t ReleaseFreeMemory(const std::function<void()>& first) {
  const uint64_t before = ReadProcessMemory().resident;
  if (first) first();
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
  const uint64_t after = ReadProcessMemory().resident;
  return before > after ? before - after : 0;
}

MemoryTrimmer::MemoryTrimmer(TrimOptions options, TrimActivityFn activity, ReleaseFn release)
    : opts_(options),
      activity_(std::move(activity)),
      release_(release ? std::move(release) : [] { return ReleaseFreeMemory(); }) {}

MemoryTrimmer::~MemoryTrimmer() { Stop(); }

void MemoryTrimmer::Start() {
  std::lock_guard l(mu_);
  if (thread_.joinable() || opts_.idle.count() <= 0) return;
  thread_ = std::thread([this] { Run(); });
}

void MemoryTrimmer::Stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool MemoryTrimmer::Poll(std::chrono::steady_clock::time_point now) {
  const TrimActivity a = activity_();
  {
    std::lock_guard l(mu_);
    if (!seen_ || a.operations != last_ops_ || a.busy) {
      // Busy (or the first look): the quiet time starts over, and the end
      // of this burst earns a trim.
      trimmed_ = false;
      seen_ = true;
      last_ops_ = a.operations;
      quiet_since_ = now;
      return false;
    }
    if (trimmed_ || now - quiet_since_ < opts_.idle) return false;
    trimmed_ = true;
  }
  // Outside the lock: malloc_trim walks every arena (milliseconds).
  const uint64_t returned = release_();
  std::lock_guard l(mu_);
  stats_.trims++;
  stats_.returned_bytes += returned;
  spdlog::debug("lmcfs: quiet for {} s: gave {} bytes of free memory back to the system",
                std::chrono::duration_cast<std::chrono::seconds>(opts_.idle).count(), returned);
  return true;
}

TrimStats MemoryTrimmer::Stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

void MemoryTrimmer::Run() {
  std::unique_lock l(mu_);
  while (!stop_) {
    cv_.wait_for(l, opts_.poll, [this] { return stop_; });
    if (stop_) break;
    l.unlock();
    Poll(std::chrono::steady_clock::now());
    l.lock();
  }
}

}  // namespace lmc::fs
