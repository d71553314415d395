// Time spent in a stage of the write and codec pipelines, added to
// FsCounters' *_ns counters (nanoseconds, summed over threads).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace lmc::fs {

inline uint64_t ElapsedNs(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Adds the time from its construction to its destruction to a counter of
// nanoseconds (FsCounters' *_ns).
class NsTimer {
 public:
  explicit NsTimer(std::atomic<uint64_t>& to) : to_(to), t0_(std::chrono::steady_clock::now()) {}
  ~NsTimer() { to_ += ElapsedNs(t0_, std::chrono::steady_clock::now()); }
  NsTimer(const NsTimer&) = delete;
  NsTimer& operator=(const NsTimer&) = delete;

 private:
  std::atomic<uint64_t>& to_;
  const std::chrono::steady_clock::time_point t0_;
};

}  // namespace lmc::fs
