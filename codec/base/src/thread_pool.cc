#include "lmc/thread_pool.h"

#include <atomic>
#include <memory>

namespace lmc {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this, i] { Run(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::Shared() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::Submit(std::function<void(size_t)> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void ThreadPool::Run(size_t index) {
  for (;;) {
    std::function<void(size_t)> fn;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn(index);
  }
}

void ThreadPool::ParallelFor(size_t count, size_t parallelism,
                             const std::function<void(size_t, size_t)>& fn) {
  if (count == 0) return;
  if (parallelism == 0 || parallelism > size()) parallelism = size();
  if (parallelism > count) parallelism = count;
  // Work is claimed from a shared counter, so an uneven mix of chunk sizes
  // still balances. Helpers get slots 1..parallelism-1; the caller is slot 0.
  struct State {
    std::atomic<size_t> next{0};
    std::atomic<size_t> helpers_left;
    std::mutex mu;
    std::condition_variable done;
  };
  auto st = std::make_shared<State>();
  st->helpers_left = parallelism - 1;
  auto work = [st, count, &fn](size_t slot) {
    for (size_t i; (i = st->next.fetch_add(1)) < count;) fn(i, slot);
  };
  for (size_t s = 1; s < parallelism; ++s) {
    Submit([st, work, s](size_t) {
      work(s);
      if (st->helpers_left.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> l(st->mu);
        st->done.notify_all();
      }
    });
  }
  work(0);
  std::unique_lock<std::mutex> l(st->mu);
  st->done.wait(l, [&] { return st->helpers_left.load() == 0; });
}

}  // namespace lmc
