// The `lmc` command as a function, so tests run it in-process (tools are functions; main only adapts).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lmc/gpu.h"
#include "lmc/status.h"

namespace lmc::cli {

// Opens the GPU codec for --gpu (GpuCodec::Open; tests pass a double).
using GpuOpenFn = std::function<Result<std::unique_ptr<GpuCodec>>()>;

// Runs `lmc args...` (args excludes argv[0]). Returns the exit status:
// 0 success, 1 operation failed (message on stderr), 2 usage error, or
// --gpu where no GPU codec can be used (nothing is read or written then).
int LmcMain(const std::vector<std::string>& args);
int LmcMain(const std::vector<std::string>& args, const GpuOpenFn& open_gpu);

// `lmc bench` (bench.cc).
struct BenchOptions {
  std::vector<std::string> files;
  size_t threads = 0;    // multi-thread column: 0 = every core
  unsigned repeats = 3;  // best of N for each timing
  bool json = false;
  bool skip_zstd19 = false;
  uint32_t chunk_size = 0;  // 0: default
  GpuCodec* gpu = nullptr;  // --gpu: also lmc on the GPU ("lmc gpu" rows)
};
int RunBench(const BenchOptions& o);

// `lmc bound` (bound.cc): the incremental-snapshot size bound of a file
// given its predecessor.
struct BoundOptions {
  std::string file;
  std::string prev;         // empty: standalone bound only
  uint32_t chunk_size = 0;  // 0: default
  bool per_chunk = false;   // one row per chunk
  bool encode = false;      // also encode each chunk both ways (frame sizes, estimate's pick)
  bool pair = false;        // also the bound of fp32 chunks against their bf16 twins in FILE
};
int RunBound(const BoundOptions& o);

}  // namespace lmc::cli
