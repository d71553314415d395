#include "lmc/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

namespace lmc {
namespace {

TEST(ThreadPoolTest, ParallelForRunsEachIndexOnceWithDistinctSlots) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  std::vector<std::atomic<int>> in_slot(4);
  std::atomic<bool> overlap{false};
  pool.ParallelFor(hits.size(), 4, [&](size_t i, size_t slot) {
    ASSERT_LT(slot, 4u);
    if (in_slot[slot].fetch_add(1) != 0) overlap = true;
    hits[i].fetch_add(1);
    in_slot[slot].fetch_sub(1);
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_FALSE(overlap.load()) << "two tasks shared a slot at once";
}

TEST(ThreadPoolTest, ConcurrentCallersAndSubmit) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  std::thread t1([&] { pool.ParallelFor(500, 0, [&](size_t, size_t) { sum += 1; }); });
  std::thread t2([&] { pool.ParallelFor(500, 0, [&](size_t, size_t) { sum += 1; }); });
  t1.join();
  t2.join();
  EXPECT_EQ(sum.load(), 1000);
  std::atomic<int> done{0};
  {
    ThreadPool p2(2);
    for (int i = 0; i < 10; ++i) p2.Submit([&](size_t) { done++; });
  }  // destructor drains the queue
  EXPECT_EQ(done.load(), 10);
}

}  // namespace
}  // namespace lmc
