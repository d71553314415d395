// libFuzzer target for the layout parsers (lmc/layout.h). Parses the input
// whole, then again fed in pieces whose sizes come from a hash of the input,
// and aborts unless both are valid covers of the input and identical.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "lmc/layout.h"

namespace {

void CheckCover(const std::vector<lmc::Region>& r, uint64_t n) {
  uint64_t at = 0;
  for (const auto& x : r) {
    if (x.offset != at || x.length == 0) std::abort();
    at += x.length;
  }
  if (at != n) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto whole = lmc::ParseLayout(data, size);
  CheckCover(whole, size);

  // Split sizes from a hash of the input: deterministic per input, so a
  // crash reproduces, yet different inputs get different splits.
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  auto p = lmc::LayoutParser::Create();
  std::vector<lmc::Region> pieces;
  size_t at = 0;
  while (at < size) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    size_t n = 1 + static_cast<size_t>(h % ((h >> 40) % 4 == 0 ? 64 : 4));
    if (n > size - at) n = size - at;
    p->Feed(data + at, n);
    at += n;
    auto r = p->TakeRegions();
    pieces.insert(pieces.end(), r.begin(), r.end());
    if (p->bytes_fed() != at || p->bytes_covered() > at) std::abort();
  }
  p->Finish();
  auto r = p->TakeRegions();
  pieces.insert(pieces.end(), r.begin(), r.end());
  CheckCover(pieces, size);
  if (whole != pieces) std::abort();
  return 0;
}
