// `lmc bound NEW [PREV]`: the incremental-snapshot size target of
// docs/BENCHMARKS.md ("Incremental snapshots"): per chunk of NEW, the
// smaller of its standalone order-0 entropy bound and the order-0 bound of
// its XOR against the chunk of PREV with the same lineage (same tensor
// name, dtype, tensor length, offset in the tensor, chunk length; for mixed
// chunks the same file offset and length: docs/ARCHITECTURE.md,
// "Incremental snapshots", "Lineage").
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "cli.h"
#include "io.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/delta_estimate.h"

namespace lmc::cli {
namespace {

std::string MatchKey(const ChunkSpec& c) {
  if (c.tensor_chunk)
    return "t" + c.region_name + '\0' + std::to_string(static_cast<int>(c.dtype)) + ':' +
           std::to_string(c.region_length) + ':' + std::to_string(c.region_offset) + ':' +
           std::to_string(c.length);
  return "m" + std::to_string(c.offset) + ':' + std::to_string(c.length);
}

}  // namespace

int RunBound(const BoundOptions& o) {
  auto data = ReadFile(o.file);
  if (!data.ok()) {
    std::fprintf(stderr, "lmc bound: %s: %s\n", o.file.c_str(), data.status().ToString().c_str());
    return 1;
  }
  ChunkerOptions co;
  if (o.chunk_size) co.chunk_size = o.chunk_size;
  const std::vector<ChunkSpec> chunks = PlanChunks(data->data(), data->size(), co, nullptr);

  std::vector<uint8_t> prev;
  std::map<std::string, ChunkSpec> prev_chunks;
  if (!o.prev.empty()) {
    auto p = ReadFile(o.prev);
    if (!p.ok()) {
      std::fprintf(stderr, "lmc bound: %s: %s\n", o.prev.c_str(), p.status().ToString().c_str());
      return 1;
    }
    prev = std::move(*p);
    for (const ChunkSpec& c : PlanChunks(prev.data(), prev.size(), co, nullptr)) prev_chunks[MatchKey(c)] = c;
  }

  double standalone = 0, best = 0;
  uint64_t matched = 0, delta_wins = 0;
  // --encode: the frames themselves, and what the sampled estimate picks.
  uint64_t frames_min = 0, frames_chosen = 0;
  Workspace ws;
  std::vector<uint8_t> frame;
  auto frame_size = [&](const ChunkSpec& c, const uint8_t* base) -> uint64_t {
    frame.resize(MaxEncodedSize(c.length));
    EncodeParams p;
    p.dtype = c.dtype;
    p.base = base;
    auto n = EncodeChunk(data->data() + c.offset, c.length, p, frame.data(), frame.size(), ws);
    return n.ok() ? *n : 0;
  };
  if (o.per_chunk) std::printf("offset\tlength\tdtype\ttensor\tstandalone_bytes\txor_bytes\tmin_bytes\n");
  for (const ChunkSpec& c : chunks) {
    const uint8_t* base = nullptr;
    auto it = prev_chunks.find(MatchKey(c));
    if (it != prev_chunks.end()) {
      base = prev.data() + it->second.offset;
      matched++;
    }
    const EntropyBound b = ChunkEntropyBound(c.dtype, data->data() + c.offset, base, c.length);
    const double s = std::ceil(b.standalone_bytes), m = std::ceil(b.min_bytes());
    standalone += s;
    best += m;
    if (m < s) delta_wins++;
    if (o.encode) {
      const uint64_t fs = frame_size(c, nullptr), fx = base ? frame_size(c, base) : fs;
      frames_min += std::min(fs, fx);
      const bool pick = base && EstimateDelta(c.dtype, data->data() + c.offset, base, c.length).prefer_delta;
      frames_chosen += pick ? fx : fs;
      if (o.per_chunk)
        std::printf("  frames: standalone %llu xor %llu estimate picks %s\n",
                    static_cast<unsigned long long>(fs), static_cast<unsigned long long>(fx),
                    pick ? "xor" : "standalone");
    }
    if (o.per_chunk)
      std::printf("%llu\t%u\t%s\t%s\t%.0f\t%.0f\t%.0f\n", static_cast<unsigned long long>(c.offset), c.length,
                  std::string(DTypeName(c.dtype)).c_str(), c.region_name.c_str(), s,
                  base ? std::ceil(b.delta_bytes) : -1.0, m);
  }
  if (o.encode)
    std::printf("frames: per-chunk min %llu, as the estimate picks %llu\n",
                static_cast<unsigned long long>(frames_min), static_cast<unsigned long long>(frames_chosen));
  std::printf("file\tlogical\tchunks\tmatched\tdelta_wins\tstandalone_bound\tmin_bound\n");
  std::printf("%s\t%zu\t%zu\t%llu\t%llu\t%.0f\t%.0f\n", o.file.c_str(), data->size(), chunks.size(),
              static_cast<unsigned long long>(matched), static_cast<unsigned long long>(delta_wins),
              standalone, best);
  return 0;
}

}  // namespace lmc::cli
