// The commit stage of the write pipeline (committer.h).
#include "committer.h"

#include <pthread.h>

namespace lmc::fs {

void CommitTicket::Wait() {
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
}

Committer::Committer(store::Store* store) : store_(store) {}

Committer::~Committer() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Committer::Submit(std::shared_ptr<CommitTicket> t) {
  {
    std::lock_guard lk(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    queue_.push_back(std::move(t));
  }
  cv_.notify_one();
}

void Committer::Run() {
  pthread_setname_np(pthread_self(), "lmcfs-commit");
  for (;;) {
    std::shared_ptr<CommitTicket> t;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    Status s;
    try {
      if (t->prev && !t->prev->status.ok())
        s = Status::IOError("not committed: an earlier batch of the same file failed");
      else
        s = store_->Commit(t->batch, false);
    } catch (const std::bad_alloc&) {
      s = Status::IOError("out of memory committing a batch");
    } catch (const std::exception& e) {
      s = Status::IOError(std::string("committing a batch failed: ") + e.what());
    }
    {
      std::lock_guard lk(t->mu);
      t->status = std::move(s);
      t->done = true;
      t->prev.reset();
    }
    t->cv.notify_all();
  }
}

}  // namespace lmc::fs
