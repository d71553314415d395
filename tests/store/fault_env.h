// FaultEnv: an Env for tests that injects failed and short writes, ENOSPC,
// fsync errors and crashes (docs/ARCHITECTURE.md, "The chunk store", "Crash simulation").
//
// A crash is modelled in two steps: CrashAfter(n) lets n more mutating
// operations through and fails every one after (the one that crashes, if an
// Append, writes half its bytes first: a torn write); after the Store is
// destroyed, DropUnsynced() puts every file back to what a power loss would
// have left: data cut to its last Sync, files created since the last
// SyncDir of their directory removed.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lmc/store/env.h"

namespace lmc::store::testing {

class FaultEnv final : public Env {
 public:
  explicit FaultEnv(Env* base = Env::Default()) : base_(base) {}

  void CrashAfter(int64_t ops) {
    std::lock_guard l(mu_);
    ops_left_ = ops;
  }
  void NoSpaceAfter(int64_t bytes) {
    std::lock_guard l(mu_);
    space_left_ = bytes;
  }
  void FailSyncs(int n) {
    std::lock_guard l(mu_);
    fail_syncs_ = n;
  }
  void FailWrites(int n) {
    std::lock_guard l(mu_);
    fail_writes_ = n;
  }
  // While held, every file Sync waits (a commit leader stalls with its
  // group taken, so that the next Commit calls queue up behind it).
  void HoldSyncs(bool hold) {
    std::lock_guard l(mu_);
    hold_syncs_ = hold;
    cv_.notify_all();
  }
  // Waits until n Syncs are held.
  void WaitForHeldSyncs(int n) {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return held_syncs_ >= n; });
  }
  // The threads Syncs were held on, in order.
  std::vector<std::thread::id> HeldThreads() {
    std::lock_guard l(mu_);
    return held_threads_;
  }
  // The same, for at most `limit`; whether they are.
  bool WaitForHeldSyncsFor(int n, std::chrono::milliseconds limit) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, limit, [&] { return held_syncs_ >= n; });
  }
  // Clears every fault, including a crash.
  void Heal() {
    std::lock_guard l(mu_);
    ops_left_ = -1;
    space_left_ = -1;
    fail_syncs_ = fail_writes_ = 0;
    crashed_ = false;
  }
  bool crashed() const {
    std::lock_guard l(mu_);
    return crashed_;
  }
  // The operation the simulated crash failed ("write PATH", "sync PATH"...).
  std::string crash_point() const {
    std::lock_guard l(mu_);
    return crash_point_;
  }
  int64_t ops() const {
    std::lock_guard l(mu_);
    return ops_;
  }

  void DropUnsynced() {
    std::lock_guard l(mu_);
    for (auto& [path, st] : files_) {
      if (!base_->FileExists(path)) continue;
      if (!st.dir_synced) {
        base_->DeleteFile(path).IgnoreError();
        continue;
      }
      auto f = base_->OpenFile(path, OpenMode::kReadWrite);
      if (f.ok() && (*f)->Size() > st.synced) (*f)->Truncate(st.synced).IgnoreError();
    }
    files_.clear();
  }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    if (mode == OpenMode::kCreate) LMC_RETURN_IF_ERROR(Step("create " + path));
    LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->OpenFile(path, mode));
    {
      std::lock_guard l(mu_);
      auto [it, inserted] = files_.try_emplace(path);
      if (inserted && mode != OpenMode::kCreate) {
        it->second.synced = f->Size();
        it->second.dir_synced = true;
      }
    }
    return std::unique_ptr<File>(new FaultFile(this, path, std::move(f)));
  }
  Status CreateDir(const std::string& path) override {
    LMC_RETURN_IF_ERROR(Step("mkdir " + path));
    return base_->CreateDir(path);
  }
  Status SyncDir(const std::string& path) override {
    LMC_RETURN_IF_ERROR(Step("syncdir " + path));
    LMC_RETURN_IF_ERROR(base_->SyncDir(path));
    std::lock_guard l(mu_);
    for (auto& [p, st] : files_)
      if (p.size() > path.size() && p.compare(0, path.size(), path) == 0 && p[path.size()] == '/' &&
          p.find('/', path.size() + 1) == std::string::npos)
        st.dir_synced = true;
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    listings_++;
    return base_->ListDir(path);
  }
  // ListDir and DiskBytes calls so far (in RADOS each is a scan of the
  // pool's placement groups).
  int Listings() const { return listings_.load(); }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Status DeleteFile(const std::string& path) override {
    LMC_RETURN_IF_ERROR(Step("unlink " + path));
    LMC_RETURN_IF_ERROR(base_->DeleteFile(path));
    std::lock_guard l(mu_);
    files_.erase(path);
    return Status::Ok();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    LMC_RETURN_IF_ERROR(Step("rename " + from));
    // Renaming over a name that is durable replaces it atomically: after a
    // crash the name holds the old file or the new one, never nothing; this
    // model keeps the new one.
    bool target_durable;
    {
      std::lock_guard l(mu_);
      auto t = files_.find(to);
      target_durable = t != files_.end() ? t->second.dir_synced : base_->FileExists(to);
    }
    LMC_RETURN_IF_ERROR(base_->RenameFile(from, to));
    std::lock_guard l(mu_);
    auto it = files_.find(from);
    if (it != files_.end()) {
      files_[to] = it->second;
      if (target_durable) files_[to].dir_synced = true;
      files_.erase(from);
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    return base_->LockFile(path);
  }
  // Counted with the listings: it lists the directory (in RADOS, the pool).
  Result<uint64_t> DiskBytes(const std::string& dir) override {
    listings_++;
    return base_->DiskBytes(dir);
  }
  Result<uint64_t> FileDiskBytes(const std::string& path) override { return base_->FileDiskBytes(path); }
  // Holes are punched by the store's own thread at times no test controls,
  // so they are not counted as crash points (the store never depends on one
  // having happened: a hole only frees what the durable index no longer
  // names); none is punched after the simulated crash, nor with
  // FailPunches.
  Status PunchHole(const std::string& path, uint64_t off, uint64_t len) override {
    {
      std::lock_guard l(mu_);
      punch_calls_++;
      if (crashed_) return Status::IOError("simulated crash (punch " + path + ")");
      if (punch_fault_ == PunchFault::kIOError) return Status::IOError("injected fallocate error on " + path);
      if (punch_fault_ == PunchFault::kUnsupported)
        return Status::Unsupported("the filesystem of " + path + " cannot punch holes");
    }
    return base_->PunchHole(path, off, len);
  }
  // What every later PunchHole does instead of punching.
  enum class PunchFault { kNone, kIOError, kUnsupported };
  void FailPunches(PunchFault f) {
    std::lock_guard l(mu_);
    punch_fault_ = f;
  }
  uint64_t punch_calls() const {
    std::lock_guard l(mu_);
    return punch_calls_;
  }

 private:
  class FaultFile final : public File {
   public:
    FaultFile(FaultEnv* env, std::string path, std::unique_ptr<File> f)
        : env_(env), path_(std::move(path)), f_(std::move(f)) {}
    Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const override {
      return f_->ReadAt(off, n, dst);
    }
    Status Append(const uint8_t* p, size_t n) override {
      size_t allowed = n;
      Status st = env_->WriteStep(path_, n, &allowed);
      if (allowed > 0) {
        Status w = f_->Append(p, allowed);
        if (!w.ok()) return w;
      }
      return st;
    }
    Status Sync() override {
      LMC_RETURN_IF_ERROR(env_->SyncStep(path_));
      LMC_RETURN_IF_ERROR(f_->Sync());
      env_->Synced(path_, f_->Size());
      return Status::Ok();
    }
    Status Truncate(uint64_t size) override {
      LMC_RETURN_IF_ERROR(env_->Step("truncate " + path_));
      LMC_RETURN_IF_ERROR(f_->Truncate(size));
      env_->Truncated(path_, size);
      return Status::Ok();
    }
    uint64_t Size() const override { return f_->Size(); }

   private:
    FaultEnv* env_;
    std::string path_;
    std::unique_ptr<File> f_;
  };

  struct FileState {
    uint64_t synced = 0;
    bool dir_synced = false;
  };

  // Counts a mutating operation; fails it after a crash or at the crash point.
  Status Step(const std::string& what) {
    std::lock_guard l(mu_);
    return StepLocked(what);
  }
  Status StepLocked(const std::string& what) {
    if (crashed_) return Status::IOError("simulated crash (" + what + ")");
    ops_++;
    if (ops_left_ == 0) {
      crashed_ = true;
      crash_point_ = what;
      return Status::IOError("simulated crash at " + what);
    }
    if (ops_left_ > 0) ops_left_--;
    return Status::Ok();
  }
  // *allowed: how many of the n bytes reach the file.
  Status WriteStep(const std::string& path, size_t n, size_t* allowed) {
    std::lock_guard l(mu_);
    bool was_crashed = crashed_;
    Status st = StepLocked("write " + path);
    if (!st.ok()) {
      *allowed = was_crashed ? 0 : n / 2;  // torn write at the crash point
      return st;
    }
    if (fail_writes_ > 0) {
      fail_writes_--;
      *allowed = 0;
      return Status::IOError("injected write error on " + path);
    }
    // The space the store keeps in reserve holds the index journal's
    // writes (Impl::CheckRoom refuses pack writes first): only other
    // writes run out of the injected space.
    const bool reserved = path.find("/journal/") != std::string::npos;
    if (reserved) return Status::Ok();
    if (space_left_ >= 0 && static_cast<int64_t>(n) > space_left_) {
      *allowed = static_cast<size_t>(space_left_);
      space_left_ = 0;
      return Status::NoSpace("injected ENOSPC writing " + path);
    }
    if (space_left_ >= 0) space_left_ -= static_cast<int64_t>(n);
    return Status::Ok();
  }
  Status SyncStep(const std::string& path) {
    std::unique_lock l(mu_);
    if (hold_syncs_) {
      held_syncs_++;
      held_threads_.push_back(std::this_thread::get_id());
      cv_.notify_all();
      cv_.wait(l, [&] { return !hold_syncs_; });
      held_syncs_--;
    }
    LMC_RETURN_IF_ERROR(StepLocked("sync " + path));
    if (fail_syncs_ > 0) {
      fail_syncs_--;
      return Status::IOError("injected fdatasync error on " + path);
    }
    return Status::Ok();
  }
  void Synced(const std::string& path, uint64_t size) {
    std::lock_guard l(mu_);
    files_[path].synced = size;
  }
  void Truncated(const std::string& path, uint64_t size) {
    std::lock_guard l(mu_);
    auto& st = files_[path];
    st.synced = std::min(st.synced, size);
  }

  std::atomic<int> listings_{0};
  Env* base_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool hold_syncs_ = false;
  int held_syncs_ = 0;
  std::vector<std::thread::id> held_threads_;  // every thread a held Sync ran on
  std::map<std::string, FileState> files_;
  int64_t ops_ = 0;
  int64_t ops_left_ = -1;
  int64_t space_left_ = -1;
  int fail_syncs_ = 0;
  int fail_writes_ = 0;
  bool crashed_ = false;
  std::string crash_point_;
  PunchFault punch_fault_ = PunchFault::kNone;
  uint64_t punch_calls_ = 0;
};

}  // namespace lmc::store::testing
