// The commit stage of the write pipeline (docs/ARCHITECTURE.md, "Write
// pipeline"): a writer whose pending batch reaches FsOptions::batch_limit
// hands it to the committer thread and goes on encoding and writing, so
// that the pack append and its fdatasync overlap the next chunks instead of
// stalling the writer under its inode's mutex. Each inode has at most one
// batch at the committer, and every later commit of that inode waits for it
// first (FileData::WaitCommit), so an inode's batches reach the store in
// order. Commits that must be durable when they return (fsync, flush,
// namespace changes) stay on the caller's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs {

struct CommitTicket {
  store::Batch batch;  // the committer's while !done; the submitter's again after

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Status status;      // set before done

  void Wait();
};

class Committer {
 public:
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
