// A host emulator of CUDA's SIMT execution, enough for the GPU codec's
// kernels (codec/cuda/gpu_kernels.cuh): every CUDA thread of a block runs
// as a fiber of its own on the calling thread, blocks one after another,
// and the collectives (__syncthreads, __syncthreads_or, __syncwarp, the
// shuffles, ballots and votes) wait until every thread they need has
// reached them. So the kernels' own source, not a scalar rewrite of it,
// runs in CI without a GPU, and under ASan (tests/codec/gpu_simt_test.cc).
//
// What it checks beyond the results:
// - a warp collective (full mask only) reached by some lanes of a warp
//   while another has left the kernel or waits elsewhere: undefined on a
//   device (a hang, or garbage), an error here;
// - a block whose threads wait at barriers that can never complete;
// - order: runnable threads are picked at random (seeded), so a kernel that
//   reads what another thread writes without a barrier between them gives
//   different results from run to run instead of the one order a loop
//   would give.
// Shared memory is `static`: a block's threads share it, and one block
// runs at a time in the process (launches take a process-wide lock, so
// that the GPU codec's lanes, threads of their own, take turns). Being a
// static, each array has ASan's redzones around it: an index past a
// shared array is caught, as compute-sanitizer's memcheck catches it on
// a device (a thread_local array would have none). It is not cleared
// between blocks (neither is a device's).
//
// An error stops the launch: Launch returns its description, and the
// threads still running are dropped where they stand (their stacks are
// reused; kernels hold no objects with destructors).
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define LMC_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LMC_SIMT_ASAN 1
#endif
#endif
#if defined(LMC_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// The threads' stack switch: 15 instructions on x86-64, glibc's
// swapcontext elsewhere (or with LMC_SIMT_UCONTEXT defined, to test it),
// which saves and sets the signal mask at every switch: the GpuSimt tests
// took 189 s with it on this 2-vCPU VM, 23 s with the instructions.
#if defined(__x86_64__) && !defined(LMC_SIMT_UCONTEXT)
#define LMC_SIMT_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace lmc::simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) uint4_t {
  unsigned x, y, z, w;
};

namespace detail {

#if defined(LMC_SIMT_ASM_SWITCH)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save and continues on the stack `load` (a frame this function
// left, or one Lane::Prepare built), whose registers it pops.
extern "C" void lmc_simt_switch(void** save, void* load);
asm(R"(
  .pushsection .text
  .p2align 4
  .weak lmc_simt_switch
  .type lmc_simt_switch,@function
lmc_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lmc_simt_switch, .-lmc_simt_switch
  .popsection
)");
#endif

enum class Wait : uint8_t { kRunning, kBarrier, kWarp, kDone };
enum class WarpOp : uint8_t { kSync, kShfl, kShflXor, kShflUp, kBallot, kAny, kAll };
inline const char* OpName(WarpOp op) {
  switch (op) {
    case WarpOp::kSync:
      return "__syncwarp";
    case WarpOp::kShfl:
      return "__shfl_sync";
    case WarpOp::kShflXor:
      return "__shfl_xor_sync";
    case WarpOp::kShflUp:
      return "__shfl_up_sync";
    case WarpOp::kBallot:
      return "__ballot_sync";
    case WarpOp::kAny:
      return "__any_sync";
    case WarpOp::kAll:
      return "__all_sync";
  }
  return "?";
}

constexpr size_t kStackBytes = size_t{512} << 10;

struct Lane {
  Dim3 tid;
  Wait wait = Wait::kRunning;
  WarpOp op = WarpOp::kSync;
  int arg = 0, width = 32;
  uint64_t value = 0, result = 0;
  bool pred = false;
  char* stack = nullptr;
  bool dropped = false;  // left mid-kernel by a failed launch: frames anywhere on its stack
#if defined(LMC_SIMT_ASM_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
#if defined(LMC_SIMT_ASAN)
  void* fake = nullptr;
#endif
};

class Runner;
inline thread_local Runner* tl_runner = nullptr;

class Runner {
 public:
  ~Runner() {
    for (Lane& l : lanes_)
      if (l.stack) munmap(l.stack, kStackBytes);
  }

  // Runs fn on grid x block threads; "" or what went wrong.
  std::string Run(unsigned grid, unsigned block, const std::function<void()>& fn, uint64_t seed) {
    if (block == 0 || block > 1024) return "block of " + std::to_string(block) + " threads";
    fn_ = &fn;
    rng_ = seed * 0x9E3779B97F4A7C15ull | 1;
    grid_dim_ = {grid, 1, 1};
    block_dim_ = {block, 1, 1};
    while (lanes_.size() < block) {
      lanes_.emplace_back();
      void* m = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) {
        lanes_.pop_back();
        return "no memory for the threads' stacks";
      }
      lanes_.back().stack = static_cast<char*>(m);
    }
    tl_runner = this;
    std::string err;
    for (unsigned b = 0; b < grid && err.empty(); ++b) err = RunBlock(b);
    if (!err.empty())
      for (unsigned t = 0; t < block; ++t) lanes_[t].dropped = true;
    tl_runner = nullptr;
    return err;
  }

  Lane& Self() { return *cur_; }
  const Dim3& BlockIdx() const { return block_idx_; }
  const Dim3& BlockDim() const { return block_dim_; }
  const Dim3& GridDim() const { return grid_dim_; }

  // __syncthreads and __syncthreads_or: every thread of the block still
  // running gets here (threads that left count as arrived).
  bool Barrier(bool pred) {
    Lane& me = *cur_;
    me.wait = Wait::kBarrier;
    me.pred = pred;
    ++at_barrier_;
    barrier_or_ = barrier_or_ || pred;
    MaybeReleaseBarrier();
    Yield();
    return me.pred;
  }

  // A warp collective over all 32 lanes: each lane's value in, its result
  // out (ResolveWarp). Only the full mask is emulated.
  uint64_t Warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    Lane& me = *cur_;
    if (mask != 0xffffffffu) Fail(std::string(OpName(op)) + " with a partial mask (not emulated)");
    me.wait = Wait::kWarp;
    me.op = op;
    me.value = value;
    me.arg = arg;
    me.width = width;
    const unsigned w = static_cast<unsigned>(&me - lanes_.data()) / 32;
    if (done_in_warp_[w]) LeftEarly(w, op);
    ++at_warp_[w];
    if (at_warp_[w] == WarpSize(w)) ResolveWarp(w);
    Yield();
    return me.result;
  }

 private:
  uint64_t Next() {  // xorshift64*
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1Dull;
  }
  unsigned WarpSize(unsigned w) const { return std::min(32u, block_dim_.x - 32 * w); }

  std::string RunBlock(unsigned b) {
    block_idx_ = {b, 0, 0};
    const unsigned n = block_dim_.x;
    const unsigned warps = (n + 31) / 32;
    at_warp_.assign(warps, 0);
    done_in_warp_.assign(warps, 0);
    at_barrier_ = 0;
    live_ = n;
    barrier_or_ = false;
    error_.clear();
    ready_.clear();
    for (unsigned t = 0; t < n; ++t) {
      Lane& l = lanes_[t];
      l.tid = {t, 0, 0};
      l.wait = Wait::kRunning;
      Prepare(l);
      ready_.push_back(t);
    }
    while (!ready_.empty() && error_.empty()) {
      // A random runnable thread: any order the device could take.
      const size_t k = static_cast<size_t>((static_cast<unsigned __int128>(Next()) * ready_.size()) >> 64);
      const unsigned t = ready_[k];
      ready_[k] = ready_.back();
      ready_.pop_back();
      Resume(lanes_[t]);
    }
    if (!error_.empty()) return error_;
    if (live_ != 0) return Stuck();
    return "";
  }

  std::string Stuck() const {
    std::string s =
        "block " + std::to_string(block_idx_.x) + ": threads wait at collectives that cannot complete:";
    int shown = 0;
    for (unsigned t = 0; t < block_dim_.x && shown < 8; ++t) {
      const Lane& l = lanes_[t];
      if (l.wait == Wait::kBarrier) {
        s += " thread " + std::to_string(t) + " at __syncthreads;";
        ++shown;
      } else if (l.wait == Wait::kWarp) {
        s += " thread " + std::to_string(t) + " at " + OpName(l.op) + ";";
        ++shown;
      }
    }
    return s;
  }

  void MaybeReleaseBarrier() {
    if (at_barrier_ == 0 || at_barrier_ != live_) return;
    for (unsigned t = 0; t < block_dim_.x; ++t) {
      Lane& l = lanes_[t];
      if (l.wait != Wait::kBarrier) continue;
      l.pred = barrier_or_;
      l.wait = Wait::kRunning;
      ready_.push_back(t);
    }
    at_barrier_ = 0;
    barrier_or_ = false;
  }

  void ResolveWarp(unsigned w) {
    Lane* lane = &lanes_[32 * w];
    const unsigned size = WarpSize(w);
    if (size != 32) {
      Fail(std::string(OpName(lane[0].op)) + " in a warp of " + std::to_string(size) + " threads");
      return;
    }
    for (unsigned j = 1; j < 32; ++j) {
      if (lane[j].op != lane[0].op) {
        Fail("warp " + std::to_string(w) + " of block " + std::to_string(block_idx_.x) + ": lane 0 at " +
             OpName(lane[0].op) + ", lane " + std::to_string(j) + " at " + OpName(lane[j].op));
        return;
      }
    }
    uint32_t ballot = 0;
    for (unsigned j = 0; j < 32; ++j)
      if (lane[j].value) ballot |= 1u << j;
    for (unsigned j = 0; j < 32; ++j) {
      Lane& l = lane[j];
      const int width = l.width;
      const unsigned seg = j & ~static_cast<unsigned>(width - 1);
      switch (l.op) {
        case WarpOp::kSync:
          l.result = 0;
          break;
        case WarpOp::kShfl:
          l.result = lane[seg + (static_cast<unsigned>(l.arg) % static_cast<unsigned>(width))].value;
          break;
        case WarpOp::kShflXor: {
          const unsigned src = j ^ static_cast<unsigned>(l.arg);
          l.result = src < seg + static_cast<unsigned>(width) && src >= seg ? lane[src].value : l.value;
          break;
        }
        case WarpOp::kShflUp:
          l.result = j - seg >= static_cast<unsigned>(l.arg) ? lane[j - l.arg].value : l.value;
          break;
        case WarpOp::kBallot:
          l.result = ballot;
          break;
        case WarpOp::kAny:
          l.result = ballot != 0;
          break;
        case WarpOp::kAll:
          l.result = ballot == 0xffffffffu;
          break;
      }
    }
    for (unsigned j = 0; j < 32; ++j) {
      lane[j].wait = Wait::kRunning;
      ready_.push_back(32 * w + j);
    }
    at_warp_[w] = 0;
  }

  // A full-mask collective of warp w reached after some of its lanes left
  // the kernel (or, from LaneDone, a lane leaving while others wait).
  void LeftEarly(unsigned w, WarpOp op) {
    Fail("warp " + std::to_string(w) + " of block " + std::to_string(block_idx_.x) + ": " + OpName(op) +
         " with a full mask: " + std::to_string(done_in_warp_[w]) + " of its lanes left the kernel, " +
         std::to_string(at_warp_[w] + (cur_->wait == Wait::kWarp ? 1 : 0)) + " wait at it");
  }

  // From a thread: stops the launch with `why`.
  void Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }

  void LaneDone() {
    Lane& me = *cur_;
    me.wait = Wait::kDone;
    --live_;
    const unsigned w = static_cast<unsigned>(&me - lanes_.data()) / 32;
    ++done_in_warp_[w];
    if (at_warp_[w]) {
      for (unsigned j = 32 * w; j < 32 * w + WarpSize(w); ++j)
        if (lanes_[j].wait == Wait::kWarp) return LeftEarly(w, lanes_[j].op);
    }
    MaybeReleaseBarrier();
  }

  static void Entry() {
    Runner* r = tl_runner;
#if defined(LMC_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &r->sched_bottom_, &r->sched_size_);
#endif
    (*r->fn_)();
    r->LaneDone();
    r->SwitchOut(true);
    __builtin_unreachable();
  }

  static void Trampoline() { Entry(); }
  void Prepare(Lane& l) {
#if defined(LMC_SIMT_ASAN)
    // A thread that ran to its end leaves only its first frames (Entry's,
    // the last switch's) poisoned, at the top; one dropped by a failed
    // launch may leave frames anywhere.
    const size_t used = l.dropped ? kStackBytes : kTopBytes;
    ASAN_UNPOISON_MEMORY_REGION(l.stack + kStackBytes - used, used);
    l.dropped = false;
#endif
#if defined(LMC_SIMT_ASM_SWITCH)
    auto* top = reinterpret_cast<void**>(l.stack + kStackBytes);
    *--top = nullptr;  // Trampoline's return address: it never returns
    *--top = reinterpret_cast<void*>(&Trampoline);
    for (int k = 0; k < 6; ++k) *--top = nullptr;  // rbp rbx r12-r15
    l.sp = top;
#else
    getcontext(&l.uc);
    l.uc.uc_stack.ss_sp = l.stack;
    l.uc.uc_stack.ss_size = kStackBytes;
    l.uc.uc_link = nullptr;
    makecontext(&l.uc, &Trampoline, 0);
#endif
  }

  void Resume(Lane& l) {
    cur_ = &l;
#if defined(LMC_SIMT_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, l.stack, kStackBytes);
#endif
#if defined(LMC_SIMT_ASM_SWITCH)
    lmc_simt_switch(&sched_sp_, l.sp);
#else
    swapcontext(&sched_uc_, &l.uc);
#endif
#if defined(LMC_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur_ = nullptr;
  }

  // From a thread back to the scheduler; returns when it is resumed.
  void Yield() { SwitchOut(false); }
  void SwitchOut(bool last) {
    Lane& me = *cur_;
#if defined(LMC_SIMT_ASAN)
    __sanitizer_start_switch_fiber(last ? nullptr : &me.fake, sched_bottom_, sched_size_);
#else
    (void)last;
#endif
#if defined(LMC_SIMT_ASM_SWITCH)
    lmc_simt_switch(&me.sp, sched_sp_);
#else
    swapcontext(&me.uc, &sched_uc_);
#endif
#if defined(LMC_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(me.fake, &sched_bottom_, &sched_size_);
#endif
  }

  static constexpr size_t kTopBytes = size_t{16} << 10;
  const std::function<void()>* fn_ = nullptr;
  uint64_t rng_ = 1;
  Dim3 grid_dim_, block_dim_, block_idx_;
  std::vector<Lane> lanes_;
  std::vector<unsigned> ready_;
  std::vector<unsigned> at_warp_, done_in_warp_;
  unsigned at_barrier_ = 0, live_ = 0;
  bool barrier_or_ = false;
  std::string error_;
  Lane* cur_ = nullptr;
#if defined(LMC_SIMT_ASM_SWITCH)
  void* sched_sp_ = nullptr;
#else
  ucontext_t sched_uc_;
#endif
  const void* sched_bottom_ = nullptr;
  size_t sched_size_ = 0;
};

inline Runner& Cur() { return *tl_runner; }

template <typename T>
uint64_t Bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T>
T FromBits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace detail

// The process's runner (its threads' stacks) and the lock launches take
// (shared memory is static).
struct Shared {
  std::mutex mu;
  detail::Runner runner;
};
inline Shared& TheRunner() {
  static Shared* s = new Shared;  // never destroyed: launches may come from threads still running at exit
  return *s;
}

// Runs kernel(args...) on grid x block threads; "" or what went wrong.
template <typename... P, typename... A>
std::string Launch(unsigned grid, unsigned block, uint64_t seed, void (*kernel)(P...), const A&... args) {
  const std::function<void()> fn = [&] { kernel(args...); };
  Shared& s = TheRunner();
  std::lock_guard lk(s.mu);
  return s.runner.Run(grid, block, fn, seed);
}

}  // namespace lmc::simt

// CUDA's built-ins, for kernels compiled by the host compiler.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (::lmc::simt::detail::Cur().Self().tid)
#define blockIdx (::lmc::simt::detail::Cur().BlockIdx())
#define blockDim (::lmc::simt::detail::Cur().BlockDim())
#define gridDim (::lmc::simt::detail::Cur().GridDim())
using uint4 = ::lmc::simt::uint4_t;

inline void __syncthreads() { ::lmc::simt::detail::Cur().Barrier(false); }
inline int __syncthreads_or(int pred) { return ::lmc::simt::detail::Cur().Barrier(pred != 0) ? 1 : 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::lmc::simt::detail::Cur().Warp(::lmc::simt::detail::WarpOp::kSync, mask, 0, 0, 32);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  using namespace ::lmc::simt::detail;
  return FromBits<T>(Cur().Warp(WarpOp::kShfl, mask, Bits(v), src, width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  using namespace ::lmc::simt::detail;
  return FromBits<T>(Cur().Warp(WarpOp::kShflXor, mask, Bits(v), lane_mask, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::lmc::simt::detail;
  return FromBits<T>(Cur().Warp(WarpOp::kShflUp, mask, Bits(v), static_cast<int>(delta), width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  using namespace ::lmc::simt::detail;
  return static_cast<unsigned>(Cur().Warp(WarpOp::kBallot, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  using namespace ::lmc::simt::detail;
  return static_cast<int>(Cur().Warp(WarpOp::kAny, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
  using namespace ::lmc::simt::detail;
  return static_cast<int>(Cur().Warp(WarpOp::kAll, mask, pred != 0, 0, 32));
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
// Threads of a block run one at a time and are switched only at
// collectives, so a read-modify-write is atomic among them.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
