// The memory trimmer (lmc/fs/trim.h).
#include "lmc/fs/trim.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lmc::fs {
namespace {

// Resident bytes of this process (/proc/self/statm's second field); 0 if
// it cannot be read.
uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return uint64_t{resident} * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

uint64_t ReleaseFreeMemory() {
#if defined(__GLIBC__)
  const uint64_t before = ResidentBytes();
  ::malloc_trim(0);
  const uint64_t after = ResidentBytes();
  return before > after ? before - after : 0;
#else
  return 0;
#endif
}

MemoryTrimmer::MemoryTrimmer(TrimOptions options, TrimActivityFn activity, ReleaseFn release)
    : opts_(options),
      activity_(std::move(activity)),
      release_(release ? std::move(release) : ReleaseFreeMemory) {}

MemoryTrimmer::~MemoryTrimmer() { Stop(); }

void MemoryTrimmer::Start() {
  std::lock_guard l(mu_);
  if (started_ || opts_.idle.count() <= 0) return;
  started_ = true;
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
    if (!seen_ || a.operations != last_ops_ || a.background_pending) {
      // Busy (or the first look): the quiet time starts over, and the end
      // of this burst earns a trim.
      if (seen_ && (a.operations != last_ops_ || a.background_pending)) trimmed_ = false;
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
