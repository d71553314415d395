// The commit stage of the write pipeline (docs/ARCHITECTURE.md, "Write
// pipeline"): a writer whose pending batch reaches FsOptions::batch_limit
// hands it to the committer thread and goes on encoding and writing, so
// that the pack append and its fdatasync overlap the next chunks instead of
// stalling the writer under its inode's mutex. An inode has at most
// kMaxQueuedPerInode batches at the committer, which commits them in
// order; a batch whose predecessor of the same inode failed is not
// committed either (it fails too), so that the inode can put all of them
// back, in order, in front of its pending batch (FileData::WaitCommits).
// Every commit on the inode's own thread waits for its queued batches
// first. Commits that must be durable when they return (fsync, flush,
// namespace changes) stay on the caller's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs {

struct CommitTicket {
  static constexpr size_t kMaxQueuedPerInode = 4;

  store::Batch batch;  // the committer's while !done; the submitter's again after
  // The batch's frame bytes, counted in *queued (the frames at the
  // committer, over all inodes: FsOptions::commit_queue_limit) from its
  // hand-off until the submitter takes it back (Unqueue).
  std::atomic<uint64_t>* queued = nullptr;
  uint64_t queued_bytes = 0;
  void Unqueue() {
    if (queued) *queued -= queued_bytes;
    queued = nullptr;
  }
  ~CommitTicket() { Unqueue(); }
  // The same inode's previous batch at the committer (or nullptr): when it
  // failed, this one is not committed. Dropped once this one is done.
  std::shared_ptr<CommitTicket> prev;
  // The submitter's own count: one past the number of the last chunk its
  // batch holds (FileData::applied_committed_).
  uint64_t applied_end = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Status status;      // set before done

  void Wait();
};

class Committer {
 public:
  // The thread starts with the first Submit (a filesystem that never
  // writes runs none).
  explicit Committer(store::Store* store);
  ~Committer();  // commits what is queued, then joins
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Queues the ticket; the thread commits its batch (not synced: the pack
  // bytes are, the index entry is written without a WAL sync, as any
  // non-sync Store::Commit) and marks it done.
  void Submit(std::shared_ptr<CommitTicket> t);

 private:
  void Run();

  store::Store* const store_;
  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<CommitTicket>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lmc::fs
