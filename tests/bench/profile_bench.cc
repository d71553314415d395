// The CPU codec on the encode profiles (docs/FORMAT.md, "Encode profiles"):
// ratio and one-thread encode and decode speed of the same bf16 chunks as
// the frames lmc wrote before blocked Huffman (4 sub-streams), as the CPU
// profile's and as the GPU profile's, in one run, A-B-C-A-B-C.
// docs/BENCHMARKS.md, "GPU codec".
//
//   lmc_profile_bench FILE   (the first 256 MiB, as 1 MiB bf16 chunks)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "lmc/codec.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lmc_profile_bench FILE\n");
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "lmc_profile_bench: cannot open %s\n", argv[1]);
    return 1;
  }
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), {});
  data.resize(std::min<size_t>(data.size(), size_t{256} << 20));
  const size_t chunk = 1 << 20, nc = data.size() / chunk;
  lmc::Workspace ws;
  using lmc::EncodeProfile;
  for (auto prof : {EncodeProfile::kCpuQuarters, EncodeProfile::kCpu, EncodeProfile::kGpu,
                    EncodeProfile::kCpuQuarters, EncodeProfile::kCpu, EncodeProfile::kGpu}) {
    std::vector<std::vector<uint8_t>> fr(nc);
    size_t total = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < nc; ++c) {
      fr[c].resize(lmc::MaxEncodedSize(chunk));
      auto r = lmc::EncodeChunk(data.data() + c * chunk, chunk, {lmc::DType::kBF16, nullptr, prof},
                                fr[c].data(), fr[c].size(), ws);
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
      auto r = lmc::DecodeChunk(fr[c].data(), fr[c].size(), nullptr, 0, out.data() + c * chunk, chunk, ws);
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
    std::printf("%s ratio %.3f%%  encode %5.0f MB/s  decode %5.0f MB/s  (one thread, %zu chunks of 1 MiB)\n",
                prof == EncodeProfile::kCpuQuarters ? "cpu, 4 sub-streams (before):"
                : prof == EncodeProfile::kCpu       ? "cpu profile (blocked):       "
                                                    : "gpu profile (blocked):       ",
                100.0 * total / (nc * chunk), nc * chunk / te / 1e6, nc * chunk / td / 1e6, nc);
  }
  return 0;
}
