// Private machinery shared by the layout parsers (see lmc/layout.h).
//
// Each format parser is a coroutine (ParseTask) that pulls the file's bytes
// through a LayoutContext: `co_await ctx.Read(n)` suspends until n bytes are
// buffered (or EOF), `co_await ctx.Skip(n)` discards bytes as they arrive
// without buffering them. Parsers describe the file by appending regions to
// the context's plan with Plan(); the plan may run ahead of the bytes fed
// (tensor extents known from a header) or behind the parser's read position
// (a header region planned after reading it). The context emits planned
// regions once their bytes have been fed.
//
// When a format parser returns (done, or on any malformed input), the
// statistical parser takes over at the end of the plan and covers the rest
// of the file, so a parser never has to clean up after itself.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lmc/dtype.h"
#include "lmc/layout.h"

namespace lmc::layout {

// Regions longer than this are emitted in pieces of this size, cut at
// multiples of it from the region's start (lmc/layout.h, "Emission").
inline constexpr uint64_t kPieceBytes = kRegionPieceBytes;
// Largest header (safetensors JSON, data.pkl, GGUF metadata, npy dict) a
// parser will buffer or walk; beyond it the parser gives up.
inline constexpr uint64_t kHeaderCap = uint64_t{64} << 20;
// Statistical fallback: block size, and the sample taken at each block's start.
inline constexpr uint64_t kStatsBlock = uint64_t{1} << 20;
inline constexpr size_t kSampleBytes = size_t{64} << 10;
// No tensor or file extent beyond 1 PiB is believed.
inline constexpr uint64_t kMaxExtent = uint64_t{1} << 50;

// A coroutine that owns its frame. Starts suspended; LayoutContext resumes it.
class ParseTask {
 public:
  struct promise_type {
    ParseTask get_return_object() {
      return ParseTask(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() {}
    // An exception inside a parser (bad_alloc, a json type error that slipped
    // through) just ends it; the statistical parser covers the rest.
    void unhandled_exception() {}
  };

  ParseTask() = default;
  explicit ParseTask(std::coroutine_handle<promise_type> h) : h_(h) {}
  ParseTask(ParseTask&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  ParseTask& operator=(ParseTask&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  ParseTask(const ParseTask&) = delete;
  ParseTask& operator=(const ParseTask&) = delete;
  ~ParseTask() {
    if (h_) h_.destroy();
  }

  explicit operator bool() const { return static_cast<bool>(h_); }
  bool done() const { return !h_ || h_.done(); }
  void resume() { h_.resume(); }

 private:
  std::coroutine_handle<promise_type> h_;
};

// Input cursor and region plan, shared by the parser coroutines. Not thread-safe.
class LayoutContext {
 public:
  // --- Used by parsers -----------------------------------------------------

  // Awaitable: up to n bytes starting at pos(), consumed. Fewer than n only at
  // EOF. The view is valid until the parser's next co_await.
  struct ReadAwaiter {
    LayoutContext* c;
    size_t n;
    bool consume;
    bool await_ready() const noexcept { return c->avail() >= n || c->eof_; }
    void await_suspend(std::coroutine_handle<>) noexcept { c->want_ = n; }
    std::string_view await_resume() noexcept;
  };
  ReadAwaiter Read(size_t n) { return {this, n, true}; }
  // Like Read, but leaves the bytes in place.
  ReadAwaiter Peek(size_t n) { return {this, n, false}; }

  // Awaitable: discards n bytes; yields how many were discarded (fewer than n
  // only at EOF).
  struct SkipAwaiter {
    LayoutContext* c;
    uint64_t n;
    bool await_ready() noexcept;
    void await_suspend(std::coroutine_handle<>) noexcept {}
    uint64_t await_resume() noexcept;
  };
  SkipAwaiter Skip(uint64_t n) { return {this, n}; }

  // Absolute file offset of the next byte a Read would return.
  uint64_t pos() const { return pos_; }
  bool eof() const { return eof_; }

  // Appends [planned_end(), planned_end() + len) to the plan. len 0 is ignored.
  void Plan(uint64_t len, DType dtype, bool is_tensor, std::string name);
  uint64_t planned_end() const { return planned_end_; }

  void set_format(Format f) { format_ = f; }
  Format format() const { return format_; }
  // The parser to run after the current one returns (instead of statistics).
  void set_next(ParseTask t) { next_ = std::move(t); }

  // --- Used by the driver (layout.cc) -------------------------------------

  LayoutContext();
  ~LayoutContext();
  void Feed(const uint8_t* data, size_t n);
  void Finish();
  std::vector<Region> TakeRegions() { return std::exchange(out_, {}); }
  uint64_t bytes_fed() const { return fed_; }
  uint64_t bytes_covered() const { return covered_; }

 private:
  struct Planned {
    uint64_t start;
    uint64_t length;
    DType dtype;
    bool is_tensor;
    std::string name;
  };

  size_t avail() const { return buf_.size() - head_; }
  void Consume(size_t k) {
    head_ += k;
    pos_ += k;
  }
  void Append(const uint8_t* p, size_t n);
  // Resumes the current parser until it waits for input; chains to the next
  // parser (or statistics) when it returns.
  void Drive();
  // Emits planned regions (in pieces) up to `limit`, which is fed_ or, at
  // Finish, fed_ with everything beyond dropped.
  void Emit(bool final);
  void EmitUpTo(const Planned& p, uint64_t end);

  // Input.
  std::string buf_;  // buffered bytes; buf_[head_] is at file offset pos_
  size_t head_ = 0;
  uint64_t pos_ = 0;
  uint64_t fed_ = 0;
  size_t want_ = 0;    // bytes a suspended Read/Peek waits for
  uint64_t skip_ = 0;  // bytes a suspended Skip still discards
  bool eof_ = false;

  // Parsers.
  ParseTask task_;
  ParseTask next_;
  bool stats_started_ = false;
  bool dead_ = false;  // no parser left: remaining bytes become plain bytes
  Format format_ = Format::kUnknown;

  // Plan and output.
  std::deque<Planned> plan_;
  uint64_t planned_end_ = 0;
  uint64_t covered_ = 0;
  std::vector<Region> out_;
};

// Format parsers (one per file). Each may return at any point; statistics
// then covers the rest of the file from planned_end() on.
ParseTask DetectAndParse(LayoutContext& c);
ParseTask ParseSafetensors(LayoutContext& c);
ParseTask ParseZip(LayoutContext& c);
ParseTask ParseGguf(LayoutContext& c);
ParseTask ParseNpy(LayoutContext& c);
ParseTask ParseStats(LayoutContext& c);

// The format the first bytes of a file suggest (head: up to 16 bytes).
Format DetectFormat(std::string_view head);

// npy: "\x93NUMPY", major, minor, header length (u16 for v1, u32 for v2/3),
// then a Python dict literal. Size of the fixed prefix for a major version,
// or 0 when the magic or version is unknown. `head` holds at least 8 bytes.
size_t NpyPrefixSize(std::string_view head);
// Length of the dict that follows the prefix (prefix holds NpyPrefixSize bytes).
uint64_t NpyDictLength(std::string_view prefix);
struct NpyArray {
  DType dtype = DType::kBytes;
  uint64_t data_bytes = 0;  // numel * itemsize
};
// Parses the dict ({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }).
// False for big-endian, structured or unknown descr, or a malformed dict.
bool ParseNpyDict(std::string_view dict, NpyArray* out);

// torch data.pkl: storage key -> element type and byte size, from the
// persistent ids ('storage', torch.<X>Storage, key, location, numel). Stops
// quietly at the first opcode it does not know.
struct StorageInfo {
  DType dtype = DType::kBytes;
  bool typed = false;   // dtype is known (false for UntypedStorage, unknown classes)
  uint64_t nbytes = 0;  // numel * element width
  bool sized = false;   // nbytes is known
};
using TorchStorages = std::unordered_map<std::string, StorageInfo>;
TorchStorages ReadTorchPickle(std::string_view pkl);

}  // namespace lmc::layout
