// The CPU codec on the encode profiles (docs/FORMAT.md, "Encode profiles"):
// ratio and one-thread encode and decode speed of the same chunks as the
// frames lmc wrote before blocked Huffman (4 sub-streams), as the CPU
// profile's and as the GPU profile's, in one run, A-B-C-A-B-C.
// docs/BENCHMARKS.md, "GPU codec".
//
//   lmc_profile_bench FILE               the first 256 MiB, as 1 MiB bf16 chunks
//   lmc_profile_bench FILE BASE DTYPE    the same as XOR deltas against BASE's
//                                        bytes at the same offsets (a snapshot
//                                        series), chunks of DTYPE (bf16, f32, ...)
//   --block-log2 K (first)               blocked Huffman in blocks of 2^K symbols
//                                        (EncodeParams::huffman_block_log2; 12)
//   lmc_profile_bench --hash FILE        XXH3 (lmc/hash.h) on each vector unit
//                                        the CPU has, over FILE's 1 MiB chunks:
//                                        one chunk again and again (in cache)
//                                        and every chunk in turn (from memory)
//   lmc_profile_bench --encoder FILE DTYPE  the encoder's exponent-plane passes
//                                        on FILE's 1 MiB chunks of DTYPE (the
//                                        first 256 MiB): the run histograms
//                                        of stream 0, by HistogramRuns and by
//                                        HistogramRunsLikely on each vector
//                                        unit, and EncodeChunk with and
//                                        without pair codes; rounds
//                                        alternate, best of five each
//   lmc_profile_bench --coverage         HistogramRuns against HistogramRunsLikely
//                                        on each vector unit, on 512 KiB streams
//                                        where 16 values hold a given share of
//                                        the bytes and 140 others the rest: where
//                                        PickLikely's thresholds come from
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "huffman.h"
#include "lmc/codec.h"
#include "lmc/dtype.h"
#include "lmc/hash.h"
#include "lmc/transform.h"
#include "transform_internal.h"

namespace {
bool ReadFile(const char* path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "lmc_profile_bench: cannot open %s\n", path);
    return false;
  }
  out->assign(std::istreambuf_iterator<char>(f), {});
  out->resize(std::min<size_t>(out->size(), size_t{256} << 20));
  return true;
}

// GB/s of fn(chunk) over `chunks` (indices into data), best of three.
template <typename Fn>
double HashRate(const std::vector<uint8_t>& data, const std::vector<size_t>& chunks, Fn fn) {
  double best = 0;
  volatile uint64_t sink = 0;  // the hashes are used
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t c : chunks) sink = sink + fn(data.data() + (c << 20));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(chunks.size() << 20) / s / 1e9);
  }
  return best;
}

int HashBench(const char* path) {
  std::vector<uint8_t> data;
  if (!ReadFile(path, &data)) return 1;
  const size_t nc = data.size() >> 20;
  if (nc == 0) {
    std::fprintf(stderr, "lmc_profile_bench: %s is under 1 MiB\n", path);
    return 1;
  }
  std::vector<size_t> hot(256, 0), cold(nc);
  for (size_t c = 0; c < nc; ++c) cold[c] = c;
  std::vector<uint8_t> secret(192);
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 73 + 11);
  const std::string chosen = lmc::hash::internal::HashUnit();
  std::printf("chosen unit: %s; %zu chunks of 1 MiB (cold: each once a pass, %zu MiB)\n", chosen.c_str(), nc,
              nc);
  for (int round = 0; round < 2; ++round) {
    for (const char* unit : {"avx512", "avx2", "sse2"}) {
      if (!lmc::hash::internal::SetHashUnit(unit)) continue;
      auto h64 = [](const uint8_t* p) { return lmc::hash::Xxh3_64(p, 1 << 20); };
      auto streamed = [](const uint8_t* p) {
        lmc::hash::Xxh3Stream st;  // as the frame checksum: 64 KiB at a time
        for (size_t o = 0; o < (1 << 20); o += 65536) st.Update(p + o, 65536);
        return st.Digest64();
      };
      auto h128 = [&](const uint8_t* p) {
        return lmc::hash::Xxh3_128WithSecret(p, 1 << 20, secret.data(), secret.size()).low64;
      };
      std::printf(
          "%-7s XXH3-64 %6.1f hot %6.1f cold | 64 KiB pieces %6.1f hot | XXH3-128 secret %6.1f hot %6.1f "
          "cold GB/s\n",
          unit, HashRate(data, hot, h64), HashRate(data, cold, h64), HashRate(data, hot, streamed),
          HashRate(data, hot, h128), HashRate(data, cold, h128));
    }
  }
  lmc::hash::internal::SetHashUnit(chosen.c_str());
  return 0;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int EncoderBench(const char* path, const char* dtype_name) {
  std::vector<uint8_t> data;
  if (!ReadFile(path, &data)) return 1;
  auto dtype = lmc::DTypeFromName(dtype_name);
  if (!dtype) {
    std::fprintf(stderr, "lmc_profile_bench: unknown dtype %s\n", dtype_name);
    return 2;
  }
  const size_t chunk = 1 << 20, nc = data.size() / chunk;
  if (nc == 0) {
    std::fprintf(stderr, "lmc_profile_bench: %s is under 1 MiB\n", path);
    return 1;
  }
  // Stream 0 (the exponents of a float type) of every chunk, with the
  // likely values the encoder's sample would pick.
  const lmc::StreamShape shape = lmc::ShapeFor(*dtype, chunk);
  const size_t m = shape.size(0);
  std::vector<uint8_t> planes(nc * m), scratch(chunk);
  std::vector<std::array<uint8_t, lmc::kLikelySymbols>> likely(nc);
  size_t picked = 0;
  for (size_t c = 0; c < nc; ++c) {
    lmc::SplitStreams(*dtype, data.data() + c * chunk, chunk, nullptr, scratch.data());
    std::copy_n(scratch.data() + shape.offset(0), m, planes.data() + c * m);
    uint32_t h[256];
    lmc::Histogram(planes.data() + c * m, m, h);
    picked += lmc::PickLikely(h, likely[c].data());
  }
  size_t cuts[5];
  lmc::huff::BlockedCuts(m, 12, cuts);
  const lmc::internal::HistogramIsa best = lmc::internal::BestHistogramIsa();
  std::printf(
      "%zu chunks of 1 MiB %s; stream 0: %zu bytes a chunk; PickLikely takes the likely values of %zu of %zu "
      "chunks\n",
      nc, dtype_name, m, picked, nc);
  const char* names[] = {"scalar", "avx2", "avx512"};
  double hist_best[4] = {}, enc_best[2] = {};
  volatile uint32_t sink = 0;
  for (int round = 0; round < 5; ++round) {
    // 0: HistogramRuns; 1 + isa: HistogramRunsLikely on that vector unit.
    for (int path = 0; path <= 1 + static_cast<int>(best); path += path == 0 ? 2 : 1) {
      const auto was = lmc::internal::SetHistogramIsa(path == 0 ? lmc::internal::HistogramIsa::kScalar
                                                                : lmc::internal::HistogramIsa(path - 1));
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t c = 0; c < nc; ++c) {
        uint32_t runs[4][256], hist[256];
        if (path == 0)
          lmc::HistogramRuns(planes.data() + c * m, cuts, runs, hist);
        else
          lmc::HistogramRunsLikely(planes.data() + c * m, cuts, likely[c].data(), runs, hist);
        sink = sink + hist[likely[c][0]];
      }
      hist_best[path] = std::max(hist_best[path], nc * m / Seconds(t0) / 1e9);
      lmc::internal::SetHistogramIsa(was);
    }
    for (int pairs = 0; pairs < 2; ++pairs) {
      const bool was = lmc::huff::internal::SetPairCodes(pairs != 0);
      lmc::Workspace ws;
      std::vector<uint8_t> frame(lmc::MaxEncodedSize(chunk));
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t c = 0; c < nc; ++c) {
        lmc::EncodeParams p{*dtype};
        auto r = lmc::EncodeChunk(data.data() + c * chunk, chunk, p, frame.data(), frame.size(), ws);
        if (!r.ok()) {
          std::fprintf(stderr, "encode failed: %s\n", r.status().ToString().c_str());
          return 1;
        }
      }
      enc_best[pairs] = std::max(enc_best[pairs], nc * chunk / Seconds(t0) / 1e6);
      lmc::huff::internal::SetPairCodes(was);
    }
  }
  std::printf("stream 0 run histograms, GB/s: HistogramRuns %.2f", hist_best[0]);
  for (int path = 2; path <= 1 + static_cast<int>(best); ++path)
    std::printf(" | likely on %s %.2f", names[path - 1], hist_best[path]);
  std::printf("\nEncodeChunk (the best unit), MB/s of input: single codes %.0f | pair codes %.0f\n",
              enc_best[0], enc_best[1]);
  return 0;
}
int CoverageBench() {
  const size_t n = 512 * 1024;
  const lmc::internal::HistogramIsa best = lmc::internal::BestHistogramIsa();
  const char* names[] = {"scalar", "avx2", "avx512"};
  uint8_t likely[lmc::kLikelySymbols];
  for (int k = 0; k < lmc::kLikelySymbols; ++k) likely[k] = static_cast<uint8_t>(100 + k);
  size_t cuts[5];
  lmc::QuarterCuts(n, cuts);
  std::printf("GB/s, best of five; 16 values at the share given, 140 others for the rest\n");
  volatile uint32_t sink = 0;
  for (int share : {100, 99, 98, 95, 90, 85, 80, 70, 60}) {
    std::mt19937 rng(1);
    std::vector<uint8_t> v(n);
    for (auto& b : v)
      b = static_cast<uint8_t>(static_cast<int>(rng() % 100) < share ? 100 + rng() % 16 : 116 + rng() % 140);
    std::printf("share %3d%%: HistogramRuns", share);
    double rate[3] = {};
    for (int round = 0; round < 5; ++round) {
      for (int path = 0; path <= static_cast<int>(best); ++path) {
        const auto was = lmc::internal::SetHistogramIsa(lmc::internal::HistogramIsa(path));
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < 40; ++r) {
          uint32_t runs[4][256], hist[256];
          if (path == 0)
            lmc::HistogramRuns(v.data(), cuts, runs, hist);
          else
            lmc::HistogramRunsLikely(v.data(), cuts, likely, runs, hist);
          sink = sink + hist[100];
        }
        rate[path] = std::max(rate[path], 40.0 * n / Seconds(t0) / 1e9);
        lmc::internal::SetHistogramIsa(was);
      }
    }
    std::printf(" %.2f", rate[0]);
    for (int path = 1; path <= static_cast<int>(best); ++path)
      std::printf(" | likely on %s %.2f", names[path], rate[path]);
    std::printf("\n");
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--coverage") return CoverageBench();
  if (argc == 3 && std::string(argv[1]) == "--hash") return HashBench(argv[2]);
  if (argc == 4 && std::string(argv[1]) == "--encoder") return EncoderBench(argv[2], argv[3]);
  int block_log2 = 12;
  if (argc >= 3 && std::string(argv[1]) == "--block-log2") {
    block_log2 = std::atoi(argv[2]);
    argc -= 2;
    argv += 2;
  }
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr,
                 "usage: lmc_profile_bench [--block-log2 K] FILE [BASE DTYPE] | --hash FILE | --encoder FILE "
                 "DTYPE | --coverage\n");
    return 2;
  }
  std::vector<uint8_t> data, base;
  if (!ReadFile(argv[1], &data)) return 1;
  lmc::DType dtype = lmc::DType::kBF16;
  if (argc == 4) {
    if (!ReadFile(argv[2], &base)) return 1;
    auto t = lmc::DTypeFromName(argv[3]);
    if (!t) {
      std::fprintf(stderr, "lmc_profile_bench: unknown dtype %s\n", argv[3]);
      return 2;
    }
    dtype = *t;
    data.resize(std::min(data.size(), base.size()));
  }
  const size_t chunk = 1 << 20, nc = data.size() / chunk;
  auto base_of = [&](size_t c) { return base.empty() ? nullptr : base.data() + c * chunk; };
  lmc::Workspace ws;
  using lmc::EncodeProfile;
  for (auto prof : {EncodeProfile::kCpuQuarters, EncodeProfile::kCpu, EncodeProfile::kGpu,
                    EncodeProfile::kCpuQuarters, EncodeProfile::kCpu, EncodeProfile::kGpu}) {
    std::vector<std::vector<uint8_t>> fr(nc);
    size_t total = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < nc; ++c) {
      fr[c].resize(lmc::MaxEncodedSize(chunk));
      lmc::EncodeParams p{dtype, base_of(c), prof};
      p.huffman_block_log2 = block_log2;
      auto r = lmc::EncodeChunk(data.data() + c * chunk, chunk, p, fr[c].data(), fr[c].size(), ws);
      if (!r.ok()) {
        std::fprintf(stderr, "encode failed: %s\n", r.status().ToString().c_str());
        return 1;
      }
      fr[c].resize(*r);
      total += *r;
    }
    const double te = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<uint8_t> out(nc * chunk);
    t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < nc; ++c) {
      auto r = lmc::DecodeChunk(fr[c].data(), fr[c].size(), base_of(c), base.empty() ? 0 : chunk,
                                out.data() + c * chunk, chunk, ws);
      if (!r.ok()) {
        std::fprintf(stderr, "decode failed on chunk %zu: %s\n", c, r.status().ToString().c_str());
        return 1;
      }
    }
    const double td = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!std::equal(out.begin(), out.end(), data.begin())) {
      std::fprintf(stderr, "decoded bytes differ\n");
      return 1;
    }
    std::printf(
        "%s ratio %.3f%%  encode %5.0f MB/s  decode %5.0f MB/s  (one thread, %zu chunks of 1 MiB%s, blocks "
        "of "
        "2^%d)\n",
        prof == EncodeProfile::kCpuQuarters ? "cpu, 4 sub-streams (before):"
        : prof == EncodeProfile::kCpu       ? "cpu profile (blocked):       "
                                            : "gpu profile (blocked):       ",
        100.0 * total / (nc * chunk), nc * chunk / te / 1e6, nc * chunk / td / 1e6, nc,
        base.empty() ? "" : ", XOR deltas", block_log2);
  }
  return 0;
}
