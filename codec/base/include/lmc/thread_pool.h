// A fixed pool of worker threads shared by the library (no thread per call).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmc {

class ThreadPool {
 public:
  // threads == 0: one per hardware thread.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, created on first use with one thread per core.
  static ThreadPool& Shared();

  size_t size() const { return workers_.size(); }

  // Queues fn(worker_index). Thread-safe. worker_index < size() identifies the
  // worker, so callers can keep per-worker state (e.g. a codec Workspace).
  void Submit(std::function<void(size_t)> fn);

  // Runs fn(i, slot) for i in [0, count) on at most `parallelism` workers
  // (0: all) and waits. slot < parallelism is unique among concurrently
  // running calls of this ParallelFor, for per-slot scratch. The caller's
  // thread takes part as slot 0. fn must not throw. Must not be called from
  // a task of this pool (the caller waits for queued helpers).
  void ParallelFor(size_t count, size_t parallelism, const std::function<void(size_t i, size_t slot)>& fn);

 private:
  void Run(size_t index);

  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<std::function<void(size_t)>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace lmc
