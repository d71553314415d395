// `lmc bench`: lmc against libzstd and lz4 on the same bytes, in one run.
#include <lz4.h>
#include <zstd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli.h"
#include "io.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/gpu.h"
#include "lmc/thread_pool.h"
#include "lmc/transform.h"

namespace lmc::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  std::string method;
  size_t threads = 1;
  uint64_t in = 0, out = 0;
  double comp_mbs = 0, decomp_mbs = 0;
  bool verified = false;
};

// Best wall time of `repeats` runs of fn, in seconds.
double BestOf(unsigned repeats, const std::function<void()>& fn) {
  double best = INFINITY;
  for (unsigned r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

double MBs(uint64_t bytes, double s) { return s > 0 ? bytes / s / 1e6 : 0; }

// gpu: the GPU codec's batches (the "lmc gpu" row; threads only for a
// fallback to the CPU after a device failure, which fails the row).
Result<Row> BenchLmc(const std::vector<uint8_t>& data, size_t threads, unsigned repeats, uint32_t chunk,
                     GpuCodec* gpu = nullptr) {
  Row row;
  row.method = gpu ? "lmc gpu" : "lmc";
  row.threads = threads;
  row.in = data.size();
  CompressOptions co;
  co.threads = threads;
  co.gpu = gpu;
  if (chunk) co.chunk_size = chunk;
  // Buffers are allocated once, outside the timings, as for zstd and lz4.
  std::vector<uint8_t> comp, back;
  Status st;
  CompressStats cs;
  double tc = BestOf(repeats, [&] {
    if (st.ok()) st = CompressBufferInto(data.data(), data.size(), co, &comp, &cs);
    if (st.ok() && cs.gpu_failed_batches) st = Status::IOError("the GPU failed: " + cs.gpu_failure);
  });
  LMC_RETURN_IF_ERROR(st);
  DecompressOptions dopt;
  dopt.threads = threads;
  dopt.gpu = gpu;
  DecompressStats ds;
  double td = BestOf(repeats, [&] {
    if (st.ok()) st = DecompressBufferInto(comp.data(), comp.size(), dopt, &back, &ds);
    if (st.ok() && ds.gpu_failed_batches) st = Status::IOError("the GPU failed: " + ds.gpu_failure);
  });
  LMC_RETURN_IF_ERROR(st);
  row.out = comp.size();
  row.comp_mbs = MBs(row.in, tc);
  row.decomp_mbs = MBs(row.in, td);
  row.verified = back == data;
  return row;
}

Row BenchZstd(const std::vector<uint8_t>& data, int level, size_t threads, unsigned repeats) {
  Row row;
  row.method = "zstd -" + std::to_string(level);
  row.threads = threads;
  row.in = data.size();
  std::vector<uint8_t> comp(ZSTD_compressBound(data.size()));
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (threads > 1) ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, static_cast<int>(threads));
  size_t csize = 0;
  double tc = BestOf(
      repeats, [&] { csize = ZSTD_compress2(cctx, comp.data(), comp.size(), data.data(), data.size()); });
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(csize)) return row;
  std::vector<uint8_t> back(data.size());
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  size_t dsize = 0;
  double td = BestOf(
      repeats, [&] { dsize = ZSTD_decompressDCtx(dctx, back.data(), back.size(), comp.data(), csize); });
  ZSTD_freeDCtx(dctx);
  row.out = csize;
  row.comp_mbs = MBs(row.in, tc);
  row.decomp_mbs = MBs(row.in, td);
  row.verified = !ZSTD_isError(dsize) && dsize == data.size() && back == data;
  return row;
}

Row BenchLz4(const std::vector<uint8_t>& data, unsigned repeats) {
  Row row;
  row.method = "lz4";
  row.in = data.size();
  if (data.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return row;
  int n = static_cast<int>(data.size());
  std::vector<char> comp(static_cast<size_t>(LZ4_compressBound(n)));
  int csize = 0;
  double tc = BestOf(repeats, [&] {
    csize = LZ4_compress_default(reinterpret_cast<const char*>(data.data()), comp.data(), n,
                                 static_cast<int>(comp.size()));
  });
  std::vector<uint8_t> back(data.size());
  int dsize = 0;
  double td = BestOf(repeats, [&] {
    dsize = LZ4_decompress_safe(comp.data(), reinterpret_cast<char*>(back.data()), csize, n);
  });
  row.out = static_cast<uint64_t>(csize);
  row.comp_mbs = MBs(row.in, tc);
  row.decomp_mbs = MBs(row.in, td);
  row.verified = dsize == n && back == data;
  return row;
}

// Per-chunk order-0 entropy of the regrouped streams: the ratio target.
uint64_t EntropyBoundBytes(const std::vector<uint8_t>& data, uint32_t chunk, Format* fmt) {
  ChunkerOptions co;
  if (chunk) co.chunk_size = chunk;
  std::vector<ChunkSpec> chunks = PlanChunks(data.data(), data.size(), co, fmt);
  std::vector<uint8_t> scratch(co.chunk_size);
  double bytes = 0;
  for (const ChunkSpec& c : chunks)
    bytes +=
        std::ceil(GroupedEntropyBits(c.dtype, data.data() + c.offset, c.length, nullptr, scratch.data()) / 8);
  return static_cast<uint64_t>(bytes);
}

}  // namespace

int RunBench(const BenchOptions& o) {
  size_t threads = o.threads ? o.threads : ThreadPool::Shared().size();
  nlohmann::json all = nlohmann::json::array();
  bool all_ok = true;
  for (const std::string& path : o.files) {
    Result<std::vector<uint8_t>> data = ReadFile(path);
    if (!data.ok()) {
      std::fprintf(stderr, "lmc bench: %s: %s\n", path.c_str(), data.status().ToString().c_str());
      return 1;
    }
    Format fmt = Format::kUnknown;
    uint64_t bound = EntropyBoundBytes(*data, o.chunk_size, &fmt);
    std::vector<Row> rows;
    auto add = [&](Result<Row> r) {
      if (!r.ok()) {
        std::fprintf(stderr, "lmc bench: %s: %s\n", path.c_str(), r.status().ToString().c_str());
        all_ok = false;
        return;
      }
      rows.push_back(*r);
    };
    add(BenchLmc(*data, 1, o.repeats, o.chunk_size));
    if (threads > 1) add(BenchLmc(*data, threads, o.repeats, o.chunk_size));
    if (o.gpu) add(BenchLmc(*data, threads, o.repeats, o.chunk_size, o.gpu));
    add(BenchZstd(*data, 1, 1, o.repeats));
    if (threads > 1) add(BenchZstd(*data, 1, threads, o.repeats));
    add(BenchZstd(*data, 3, 1, o.repeats));
    if (!o.skip_zstd19) add(BenchZstd(*data, 19, 1, 1));
    add(BenchLz4(*data, o.repeats));
    const Row* z1 = nullptr;
    for (const Row& r : rows)
      if (r.method == "zstd -1" && r.threads == 1) z1 = &r;
    for (const Row& r : rows) all_ok &= r.verified;

    double in = static_cast<double>(data->size());
    if (o.json) {
      nlohmann::json f;
      f["file"] = path;
      f["bytes"] = data->size();
      f["format"] = std::string(FormatName(fmt));
      f["entropy_bound_bytes"] = bound;
      f["entropy_bound_ratio"] = in > 0 ? bound / in : 0;
      for (const Row& r : rows)
        f["rows"].push_back({{"method", r.method},
                             {"threads", r.threads},
                             {"bytes_out", r.out},
                             {"ratio", in > 0 ? r.out / in : 0},
                             {"compress_MBps", r.comp_mbs},
                             {"decompress_MBps", r.decomp_mbs},
                             {"verified", r.verified}});
      all.push_back(f);
      continue;
    }
    std::printf("%s: %.1f MiB, %s; order-0 entropy bound %.2f%% of input\n", path.c_str(), in / (1 << 20),
                std::string(FormatName(fmt)).c_str(), in > 0 ? 100 * bound / in : 0);
    std::printf("  %-9s %3s %8s %9s %10s %12s %12s  %s\n", "method", "thr", "ratio", "vs bound", "comp MB/s",
                "decomp MB/s", "vs zstd -1", "round trip");
    for (const Row& r : rows) {
      char rel[32] = "";
      if (z1 && z1->comp_mbs > 0 && z1->decomp_mbs > 0)
        std::snprintf(rel, sizeof rel, "%.2fx/%.2fx", r.comp_mbs / z1->comp_mbs,
                      r.decomp_mbs / z1->decomp_mbs);
      std::printf("  %-9s %3zu %7.2f%% %+8.2f%% %10.0f %12.0f %12s  %s\n", r.method.c_str(), r.threads,
                  100 * r.out / in, bound ? 100.0 * (double(r.out) / bound - 1) : 0.0, r.comp_mbs,
                  r.decomp_mbs, rel, r.verified ? "ok" : "MISMATCH");
    }
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  if (!all_ok) std::fprintf(stderr, "lmc bench: a round trip did not reproduce the input\n");
  return all_ok ? 0 : 1;
}

}  // namespace lmc::cli
