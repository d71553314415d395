// The frame buffer pool (frame_pool.h).
#include "lmc/store/frame_pool.h"

#include <mutex>
#include <utility>
#include <vector>

namespace lmc::store {
namespace {

class FramePool {
 public:
  static FramePool& Get() {
    static FramePool* pool = new FramePool;  // never destroyed: batches may outlive statics
    return *pool;
  }

  std::string Take(size_t n) {
    if (n >= kFramePoolMinBytes) {
      std::lock_guard lk(mu_);
      // The most recently given buffer that is large enough (its pages are
      // the likeliest to be in cache); frames of one mount are mostly of one size.
      for (size_t i = free_.size(); i-- > 0;) {
        if (free_[i].capacity() < n) continue;
        std::string s = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        idle_ -= s.capacity();
        return s;
      }
    }
    // Rounded up to whole kFramePoolMinBytes: frames of same-sized chunks
    // differ by a few bytes, and a buffer reserved to the byte would be too
    // small for most of the next ones.
    std::string s;
    s.reserve(
        n < kFramePoolMinBytes ? n : (n + kFramePoolMinBytes - 1) / kFramePoolMinBytes * kFramePoolMinBytes);
    return s;
  }

  void Give(std::string&& s) {
    std::string mine = std::move(s);
    s.clear();
    const size_t cap = mine.capacity();
    if (cap < kFramePoolMinBytes) return;
    mine.clear();
    std::lock_guard lk(mu_);
    if (idle_ + cap > kFramePoolBytes) return;  // freed as `mine` goes
    idle_ += cap;
    free_.push_back(std::move(mine));
  }

  size_t Idle() {
    std::lock_guard lk(mu_);
    return idle_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> free_;  // guarded by mu_
  size_t idle_ = 0;                // sum of free_'s capacities
};

}  // namespace

std::string TakeFrameBuffer(size_t n) { return FramePool::Get().Take(n); }
void GiveFrameBuffer(std::string&& s) { FramePool::Get().Give(std::move(s)); }
size_t FramePoolIdleBytes() { return FramePool::Get().Idle(); }

}  // namespace lmc::store
