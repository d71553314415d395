// `lmc bound NEW [PREV]`: the incremental-snapshot size target of
// docs/BENCHMARKS.md ("Incremental snapshots"): per chunk of NEW, the
// smaller of its standalone order-0 entropy bound and the order-0 bound of
// its XOR against the chunk of PREV with the same lineage (same tensor
// name, dtype, tensor length, offset in the tensor, chunk length; for mixed
// chunks the same file offset and length: docs/ARCHITECTURE.md,
// "Incremental snapshots", "Lineage"). With --pair, an fp32 tensor chunk
// may also take the order-0 bound of its XOR against the bf16 twin it has
// in FILE, widened, or with the rounding predicted where the encoder would
// predict it (docs/ARCHITECTURE.md, "Pairing fp32 masters with their bf16
// twins"): the twin found by fingerprint and checked on a sample, as the
// mount does, in either order in the file.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "cli.h"
#include "io.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/delta_estimate.h"
#include "lmc/twin.h"

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

  // --pair: fingerprints of every bf16 tensor chunk's twin offsets.
  struct Twin {
    const ChunkSpec* chunk;
    size_t offset;  // elements
  };
  std::map<uint64_t, Twin> twins;
  if (o.pair) {
    for (const ChunkSpec& c : chunks) {
      if (!c.tensor_chunk || c.dtype != DType::kBF16) continue;
      size_t offs[2];
      const size_t k = TwinOffsets(c.length / 2, co.chunk_size, offs);
      for (size_t i = 0; i < k; ++i)
        if (auto fp = Bf16Fingerprint(data->data() + c.offset + 2 * offs[i])) twins[*fp] = {&c, offs[i]};
    }
  }
  std::vector<uint8_t> widened, predicted;
  bool use_predicted = false;  // the encoder's choice for the last twin_of
  // The widened twin range of fp32 chunk c, or nullptr.
  auto twin_of = [&](const ChunkSpec& c) -> const uint8_t* {
    if (!o.pair || !c.tensor_chunk || c.dtype != DType::kF32 || c.length % 4 ||
        c.length / 4 < kFingerprintElems)
      return nullptr;
    const uint8_t* p = data->data() + c.offset;
    auto fp = Fp32Fingerprint(p);
    auto it = fp ? twins.find(*fp) : twins.end();
    if (it == twins.end()) return nullptr;
    const Twin& t = it->second;
    if (2 * (t.offset + c.length / 4) > t.chunk->length) return nullptr;
    const uint8_t* bf16 = data->data() + t.chunk->offset;
    if (!TwinsMatch(p, c.length / 4, bf16, t.offset)) return nullptr;
    widened.resize(c.length);
    WidenBf16(bf16, t.offset, c.length / 4, widened.data());
    predicted.resize(c.length);
    use_predicted = PredictedTwinOperand(p, c.length, bf16 + 2 * t.offset, predicted.data());
    return widened.data();
  };

  double standalone = 0, best = 0, best_paired = 0;
  uint64_t matched = 0, delta_wins = 0, paired = 0;
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
    double mp = m;
    if (const uint8_t* tw = twin_of(c)) {
      paired++;
      // As the encoder codes it: against the widened twin (float planes),
      // or with the rounding predicted (the 32-bit words' planes).
      const uint8_t* p = data->data() + c.offset;
      mp = std::min(
          m,
          std::ceil(use_predicted ? ChunkEntropyBound(DType::kU32, p, predicted.data(), c.length).delta_bytes
                                  : ChunkEntropyBound(c.dtype, p, tw, c.length).delta_bytes));
    }
    best_paired += mp;
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
  std::printf("file\tlogical\tchunks\tmatched\tdelta_wins\tstandalone_bound\tmin_bound%s\n",
              o.pair ? "\tpaired\tmin_bound_paired" : "");
  std::printf("%s\t%zu\t%zu\t%llu\t%llu\t%.0f\t%.0f", o.file.c_str(), data->size(), chunks.size(),
              static_cast<unsigned long long>(matched), static_cast<unsigned long long>(delta_wins),
              standalone, best);
  if (o.pair) std::printf("\t%llu\t%.0f", static_cast<unsigned long long>(paired), best_paired);
  std::printf("\n");
  return 0;
}

}  // namespace lmc::cli
