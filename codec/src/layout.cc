// Layout parser driver: format detection, the input cursor the parser
// coroutines pull from, and the region plan they push to (layout_internal.h).

#include "lmc/layout.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc {
namespace layout {

// --- Awaiters ---------------------------------------------------------------

std::string_view LayoutContext::ReadAwaiter::await_resume() noexcept {
  c->want_ = 0;
  size_t k = std::min(n, c->avail());
  std::string_view v(c->buf_.data() + c->head_, k);
  if (consume) c->Consume(k);
  return v;
}

bool LayoutContext::SkipAwaiter::await_ready() noexcept {
  uint64_t take = std::min<uint64_t>(n, c->avail());
  c->Consume(static_cast<size_t>(take));
  c->skip_ = n - take;
  return c->skip_ == 0 || c->eof_;
}

uint64_t LayoutContext::SkipAwaiter::await_resume() noexcept {
  uint64_t done = n - c->skip_;
  c->skip_ = 0;
  return done;
}

// --- Plan and emission ------------------------------------------------------

LayoutContext::LayoutContext() {
  task_ = DetectAndParse(*this);
  Drive();
}

LayoutContext::~LayoutContext() {
  // Frames first: they hold references to this context.
  task_ = {};
  next_ = {};
}

void LayoutContext::Plan(uint64_t len, DType dtype, bool is_tensor, std::string name) {
  // Keep every offset below 2^62 so that no sum below can overflow.
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  if (planned_end_ >= kLimit) return;
  len = std::min(len, kLimit - planned_end_);
  if (len == 0) return;
  plan_.push_back({planned_end_, len, dtype, is_tensor, std::move(name)});
  planned_end_ += len;
}

void LayoutContext::EmitUpTo(const Planned& p, uint64_t end) {
  while (covered_ < end) {
    uint64_t rel = covered_ - p.start;
    uint64_t next_cut = p.start + (rel / kPieceBytes + 1) * kPieceBytes;
    uint64_t piece_end = std::min(end, next_cut);
    out_.push_back({covered_, piece_end - covered_, p.dtype, p.is_tensor, p.name});
    covered_ = piece_end;
  }
}

void LayoutContext::Emit(bool final) {
  while (!plan_.empty()) {
    const Planned& p = plan_.front();
    uint64_t end = p.start + p.length;
    if (end <= fed_) {
      EmitUpTo(p, end);
      plan_.pop_front();
      continue;
    }
    if (fed_ > p.start) {
      // Partly fed: whole pieces now, the rest only when truncated at EOF.
      uint64_t whole = p.start + (fed_ - p.start) / kPieceBytes * kPieceBytes;
      EmitUpTo(p, final ? fed_ : whole);
    }
    if (final) plan_.clear();
    break;
  }
}

// --- Input ------------------------------------------------------------------

void LayoutContext::Append(const uint8_t* p, size_t n) {
  // No parser holds a view while suspended, so the buffer may move here.
  if (head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  } else if (head_ >= (size_t{1} << 16) && head_ >= buf_.size() / 2) {
    buf_.erase(0, head_);
    head_ = 0;
  }
  buf_.append(reinterpret_cast<const char*>(p), n);
}

void LayoutContext::Drive() {
  while (!dead_) {
    if (!task_.done()) {
      task_.resume();
      if (!task_.done()) break;  // waiting for input
    }
    if (next_) {
      task_ = std::move(next_);
    } else if (!stats_started_) {
      stats_started_ = true;
      task_ = ParseStats(*this);
    } else {
      task_ = {};
      dead_ = true;
    }
  }
  // A suspended parser always waits for bytes; anything else is a bug that
  // would stall the feed loop, so stop parsing rather than spin.
  if (!dead_ && !eof_ && skip_ == 0 && want_ <= avail()) {
    task_ = {};
    dead_ = true;
  }
}

void LayoutContext::Feed(const uint8_t* data, size_t n) {
  if (eof_ || n == 0) return;
  fed_ += n;
  try {
    while (n > 0 && !dead_) {
      if (skip_ > 0) {
        size_t t = static_cast<size_t>(std::min<uint64_t>(skip_, n));
        skip_ -= t;
        pos_ += t;
        data += t;
        n -= t;
        if (skip_ == 0) Drive();
        continue;
      }
      size_t have = avail();
      if (want_ > have) {
        size_t t = std::min(want_ - have, n);
        Append(data, t);
        data += t;
        n -= t;
      }
      if (avail() >= want_) Drive();
    }
  } catch (...) {
    task_ = {};
    next_ = {};
    dead_ = true;
  }
  try {
    if (dead_ && planned_end_ < fed_) Plan(fed_ - planned_end_, DType::kBytes, false, {});
    Emit(false);
  } catch (...) {
    // Out of memory while recording regions: they are emitted by a later call.
  }
}

void LayoutContext::Finish() {
  if (eof_) return;
  eof_ = true;
  try {
    if (!dead_) Drive();  // every await is ready now: the parsers run to the end
  } catch (...) {
    task_ = {};
    next_ = {};
    dead_ = true;
  }
  try {
    if (planned_end_ < fed_) Plan(fed_ - planned_end_, DType::kBytes, false, {});
    Emit(true);
  } catch (...) {
  }
}

// --- Detection --------------------------------------------------------------

Format DetectFormat(std::string_view head) {
  if (head.size() >= 4 && head.substr(0, 4) == "GGUF") return Format::kGGUF;
  if (head.size() >= 6 && head.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return Format::kNpy;
  if (head.size() >= 4 && head.substr(0, 4) == std::string_view("PK\x03\x04", 4)) return Format::kZip;
  if (head.size() >= 9) {
    uint64_t n = LoadLE64(head.data());
    if (n >= 2 && n <= kHeaderCap && head[8] == '{') return Format::kSafetensors;
  }
  return Format::kUnknown;
}

ParseTask DetectAndParse(LayoutContext& c) {
  std::string_view head = co_await c.Peek(16);
  Format f = DetectFormat(head);
  c.set_format(f);
  switch (f) {
    case Format::kSafetensors:
      c.set_next(ParseSafetensors(c));
      break;
    case Format::kZip:
    case Format::kTorchZip:
      c.set_next(ParseZip(c));
      break;
    case Format::kGGUF:
      c.set_next(ParseGguf(c));
      break;
    case Format::kNpy:
      c.set_next(ParseNpy(c));
      break;
    case Format::kUnknown:
      break;
  }
}

namespace {

class StreamingLayoutParser final : public LayoutParser {
 public:
  void Feed(const uint8_t* data, size_t n) override { ctx_.Feed(data, n); }
  void Finish() override { ctx_.Finish(); }
  std::vector<Region> TakeRegions() override { return ctx_.TakeRegions(); }
  uint64_t bytes_fed() const override { return ctx_.bytes_fed(); }
  uint64_t bytes_covered() const override { return ctx_.bytes_covered(); }
  Format format() const override { return ctx_.format(); }

 private:
  LayoutContext ctx_;
};

}  // namespace
}  // namespace layout

std::string_view FormatName(Format f) {
  switch (f) {
    case Format::kUnknown:
      return "unknown";
    case Format::kSafetensors:
      return "safetensors";
    case Format::kTorchZip:
      return "torch-zip";
    case Format::kZip:
      return "zip";
    case Format::kGGUF:
      return "gguf";
    case Format::kNpy:
      return "npy";
  }
  return "invalid";
}

std::unique_ptr<LayoutParser> LayoutParser::Create() {
  return std::make_unique<layout::StreamingLayoutParser>();
}

std::vector<Region> ParseLayout(const uint8_t* data, size_t n, Format* format) {
  layout::StreamingLayoutParser p;
  p.Feed(data, n);
  p.Finish();
  if (format) *format = p.format();
  return p.TakeRegions();
}

}  // namespace lmc
