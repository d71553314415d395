// The memory trimmer (lmc/fs/trim.h): free memory goes back once a burst
// of work has ended and the mount stayed quiet for the idle time, once a
// burst, never while work goes on or rebases are queued. The clock is the
// test's (Poll), the release a counter, so nothing here depends on timing
// or on the allocator.
#include "lmc/fs/trim.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core_test_util.h"

namespace lmc::fs {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Harness {
  TrimActivity activity;
  int releases = 0;
  MemoryTrimmer trimmer;
  explicit Harness(std::chrono::milliseconds idle = 10s)
      : trimmer(
            TrimOptions{idle, 1s}, [this] { return activity; },
            [this] {
              ++releases;
              return uint64_t{1} << 20;
            }) {}
};

TEST(MemoryTrimmer, GivesMemoryBackOnceAfterTheIdleTime) {
  Harness h;
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(h.trimmer.Poll(t0));  // the first look starts the quiet time
  EXPECT_FALSE(h.trimmer.Poll(t0 + 9s));
  EXPECT_TRUE(h.trimmer.Poll(t0 + 10s));
  EXPECT_EQ(h.releases, 1);
  // Still quiet: nothing more to give back until work comes and goes.
  EXPECT_FALSE(h.trimmer.Poll(t0 + 20s));
  EXPECT_FALSE(h.trimmer.Poll(t0 + 1h));
  EXPECT_EQ(h.releases, 1);
  EXPECT_EQ(h.trimmer.Stats().trims, 1u);
  EXPECT_EQ(h.trimmer.Stats().returned_bytes, uint64_t{1} << 20);
}

TEST(MemoryTrimmer, WorkRestartsTheQuietTimeAndEachBurstEarnsOneTrim) {
  Harness h;
  Clock::time_point t = Clock::now();
  EXPECT_FALSE(h.trimmer.Poll(t));
  // A save: the count changes at every poll for a minute.
  for (int i = 0; i < 60; ++i) {
    h.activity.operations++;
    t += 1s;
    EXPECT_FALSE(h.trimmer.Poll(t)) << i;
  }
  EXPECT_FALSE(h.trimmer.Poll(t + 9s));
  EXPECT_TRUE(h.trimmer.Poll(t + 10s));
  // A second save, then quiet again: a second trim.
  t += 30s;
  h.activity.operations += 5;
  EXPECT_FALSE(h.trimmer.Poll(t));
  EXPECT_FALSE(h.trimmer.Poll(t + 5s));
  EXPECT_TRUE(h.trimmer.Poll(t + 10s));
  EXPECT_EQ(h.releases, 2);
  EXPECT_EQ(h.trimmer.Stats().trims, 2u);
}

TEST(MemoryTrimmer, QueuedBackgroundWorkIsNotQuiet) {
  Harness h;
  const Clock::time_point t0 = Clock::now();
  h.activity.busy = true;  // rebases of the last save still queued
  EXPECT_FALSE(h.trimmer.Poll(t0));
  EXPECT_FALSE(h.trimmer.Poll(t0 + 30s));
  EXPECT_FALSE(h.trimmer.Poll(t0 + 1h));
  EXPECT_EQ(h.releases, 0);
  h.activity.busy = false;  // drained: quiet since the last busy poll
  EXPECT_FALSE(h.trimmer.Poll(t0 + 1h + 1s));
  EXPECT_FALSE(h.trimmer.Poll(t0 + 1h + 9s));
  EXPECT_TRUE(h.trimmer.Poll(t0 + 1h + 10s));
  EXPECT_EQ(h.releases, 1);
}

// trim_idle=0: no thread, no trim.
TEST(MemoryTrimmer, ZeroIdleNeverStartsAThread) {
  std::atomic<int> polled{0};
  MemoryTrimmer t(TrimOptions{0ms, 1ms}, [&] {
    polled++;
    return TrimActivity{};
  });
  t.Start();
  std::this_thread::sleep_for(50ms);
  t.Stop();
  EXPECT_EQ(polled.load(), 0);
  EXPECT_EQ(t.Stats().trims, 0u);
}

// The thread polls on its own and trims after the idle time; Stop joins it
// promptly (well before a poll period would end).
TEST(MemoryTrimmer, TheThreadTrimsAQuietProcessAndStopsAtOnce) {
  std::atomic<int> releases{0};
  MemoryTrimmer t(
      TrimOptions{20ms, 5ms}, [] { return TrimActivity{}; },
      [&] {
        releases++;
        return uint64_t{0};
      });
  t.Start();
  const Clock::time_point until = Clock::now() + 10s;
  while (releases.load() == 0 && Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(releases.load(), 1);
  t.Stop();
  MemoryTrimmer slow(TrimOptions{1h, 1h}, [] { return TrimActivity{}; });
  slow.Start();
  const Clock::time_point before = Clock::now();
  slow.Stop();
  EXPECT_LT(Clock::now() - before, 5s);
}

// The real release: 16 MiB freed in the middle of the heap (small blocks
// kept between them, so free() cannot give it back from the top) leaves
// the process with malloc_trim: its pages are no longer resident (mincore
// on the freed addresses), and the resident size fell. glibc only: a
// sanitizer's allocator is not glibc's.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LMC_SANITIZED_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LMC_SANITIZED_ALLOCATOR 1
#endif
#endif
TEST(MemoryTrimmer, ReleaseFreeMemoryGivesBackWhatWasFreedInsideTheHeap) {
#if !defined(__GLIBC__) || defined(LMC_SANITIZED_ALLOCATOR)
  GTEST_SKIP() << "malloc_trim is glibc's allocator's; this build uses another";
#else
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  constexpr size_t kSize = 100 << 10;  // below the mmap threshold: from the heap
  // Resident whole pages of the blocks at `at`, in bytes (a page no longer
  // mapped, as a thread arena's heap given back whole, is not resident).
  auto resident = [&](const std::vector<char*>& at) {
    size_t n = 0;
    for (char* p : at) {
      const fs::testing::PageCount c = fs::testing::CountPages(p, kSize);
      EXPECT_FALSE(c.error);
      n += c.resident;
    }
    return n * page;
  };
  ReleaseFreeMemory();  // whatever earlier tests left
  std::vector<std::unique_ptr<char[]> > big, pins;
  std::vector<char*> at;
  for (int i = 0; i < 160; ++i) {
    big.emplace_back(new char[kSize]);
    std::memset(big.back().get(), 1, kSize);
    at.push_back(big.back().get());
    pins.emplace_back(new char[64]);
  }
  const size_t touched = resident(at);
  EXPECT_GE(touched, uint64_t{15} << 20);
  big.clear();
  const uint64_t returned = ReleaseFreeMemory();
  // Gone but the pages the allocator's own headers sit in.
  EXPECT_LE(resident(at), touched / 8);
  // The resident size fell (by about as much, but other threads of this
  // process, such as earlier tests' pools, may take some meanwhile).
  EXPECT_GT(returned, 0u);
  EXPECT_LE(returned, uint64_t{64} << 20);
#endif
}

}  // namespace
}  // namespace lmc::fs
