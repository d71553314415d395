#include "cli.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "io.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/gpu.h"
#include "lmc/layout.h"
#include "lmc/thread_pool.h"
#include "lmc/transform.h"
#include "lmc/version.h"

namespace lmc::cli {
namespace {

constexpr const char* kSuffix = ".lmc";

std::string HumanSize(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "lmc: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<int> OpenInput(const std::string& in) {
  if (in == "-") return 0;
  int fd = ::open(in.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open");
  return fd;
}

// Opens IN and OUT, runs `op` from one to the other, then closes IN and
// commits OUT. Returns the exit status. On failure a file OUT is never left
// behind (OutputFile), and the user is told what happened and what to do.
// *op_done: when op finished, before OUT's fsync and rename.
int RunPipe(const std::string& in, const std::string& out, bool force, bool decoding,
            const std::function<Status(const ReadFn&, const WriteFn&)>& op,
            std::chrono::steady_clock::time_point* op_done) {
  Result<int> fd = OpenInput(in);
  if (!fd.ok()) return Fail(in, fd.status());
  Result<OutputFile> of = OutputFile::Open(out, force);
  if (!of.ok()) {
    if (*fd > 0) ::close(*fd);
    return Fail(out, of.status());
  }
  Status st = op(FdReader(*fd, in), FdWriter(of->fd(), out));
  *op_done = std::chrono::steady_clock::now();
  if (*fd > 0) ::close(*fd);
  if (st.ok()) st = of->Commit();
  if (st.ok()) return 0;
  if (out == "-")
    std::fprintf(stderr, "lmc: the data already written to stdout is incomplete; discard it\n");
  else if (decoding && st.IsCorruption())
    std::fprintf(stderr, "lmc: %s is damaged; no output was written\n", in.c_str());
  return Fail(in, st);
}

// The speed of a run over `bytes`: with a file OUT, also without its final
// fsync (what zstd and gzip, which do not sync, would show), so that the
// two compare.
std::string Speed(double bytes, std::chrono::steady_clock::time_point t0,
                  std::chrono::steady_clock::time_point op_done, const std::string& out) {
  const double s = Seconds(t0);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%.0f MB/s", s > 0 ? bytes / s / 1e6 : 0.0);
  const double before = std::chrono::duration<double>(op_done - t0).count();
  if (out == "-" || before <= 0) return buf;
  const size_t k = std::strlen(buf);
  std::snprintf(buf + k, sizeof(buf) - k, " (%.0f MB/s before the final fsync)", bytes / before / 1e6);
  return buf;
}

// A GPU that failed during a run: the CPU did the rest, and the output is whole.
void WarnGpuFailure(const std::string& in, uint64_t failed, const std::string& why) {
  if (failed)
    std::fprintf(stderr, "lmc: warning: %s: the GPU failed (%s); the rest ran on the CPU, nothing is lost\n",
                 in.c_str(), why.c_str());
}

int Compress(const std::string& in, std::string out, size_t threads, uint32_t chunk, bool force, bool quiet,
             GpuCodec* gpu) {
  if (out.empty()) out = in == "-" ? "-" : in + kSuffix;
  if (out == "-" && ::isatty(1)) {
    std::fprintf(stderr, "lmc: refusing to write compressed data to a terminal (use OUT or a pipe)\n");
    return 1;
  }
  CompressOptions opts;
  opts.threads = threads;
  opts.gpu = gpu;
  if (chunk) opts.chunk_size = chunk;
  CompressStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  auto op_done = t0;
  int rc = RunPipe(
      in, out, force, false,
      [&](const ReadFn& r, const WriteFn& w) { return CompressStream(r, w, opts, &stats); }, &op_done);
  if (rc == 0) WarnGpuFailure(in, stats.gpu_failed_batches, stats.gpu_failure);
  if (rc == 0 && stats.gpu_verify_failures)
    std::fprintf(
        stderr,
        "lmc: warning: %s: the GPU wrote %llu frame(s) that did not decode back on it (a faulty device "
        "or a GPU codec bug); the CPU encoded those chunks and the rest, nothing is lost; check the device "
        "(nvidia-smi -q, Xid lines in the kernel log)\n",
        in.c_str(), static_cast<unsigned long long>(stats.gpu_verify_failures));
  if (rc == 0 && !quiet) {
    std::string on_gpu;
    if (gpu)
      on_gpu =
          ", GPU " + std::to_string(stats.gpu_chunks) + " of " + std::to_string(stats.chunks) + " chunks";
    std::fprintf(stderr, "%s: %s -> %s (%.2f%%), %s, %s%s\n", in.c_str(),
                 HumanSize(static_cast<double>(stats.input_bytes)).c_str(),
                 HumanSize(static_cast<double>(stats.output_bytes)).c_str(),
                 stats.input_bytes ? 100.0 * stats.output_bytes / stats.input_bytes : 0.0,
                 std::string(FormatName(stats.format)).c_str(),
                 Speed(static_cast<double>(stats.input_bytes), t0, op_done, out).c_str(), on_gpu.c_str());
  }
  return rc;
}

int Decompress(const std::string& in, std::string out, size_t threads, bool force, bool quiet,
               GpuCodec* gpu) {
  if (out.empty()) {
    if (in == "-") {
      out = "-";
    } else if (in.size() > 4 && in.compare(in.size() - 4, 4, kSuffix) == 0) {
      out = in.substr(0, in.size() - 4);
    } else {
      std::fprintf(stderr, "lmc: %s: unknown suffix (expected .lmc); name the output file\n", in.c_str());
      return 1;
    }
  }
  DecompressOptions opts;
  opts.threads = threads;
  opts.gpu = gpu;
  DecompressStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  auto op_done = t0;
  int rc = RunPipe(
      in, out, force, true,
      [&](const ReadFn& r, const WriteFn& w) { return DecompressStream(r, w, opts, &stats); }, &op_done);
  if (rc == 0) WarnGpuFailure(in, stats.gpu_failed_batches, stats.gpu_failure);
  if (rc == 0 && !quiet) {
    std::string on_gpu;
    if (gpu)
      on_gpu =
          ", GPU " + std::to_string(stats.gpu_chunks) + " of " + std::to_string(stats.chunks) + " chunks";
    std::fprintf(stderr, "%s: %s -> %s, %s%s\n", in.c_str(),
                 HumanSize(static_cast<double>(stats.input_bytes)).c_str(),
                 HumanSize(static_cast<double>(stats.output_bytes)).c_str(),
                 Speed(static_cast<double>(stats.output_bytes), t0, op_done, out).c_str(), on_gpu.c_str());
  }
  return rc;
}

// `lmc info` on a .lmc file: what its frames hold.
int InfoContainer(const std::string& path, const std::vector<uint8_t>& data) {
  // Walk the frames without decoding payloads: header 16 bytes, then
  // length-prefixed frames until the 0 marker.
  std::map<DType, std::pair<uint64_t, uint64_t>> by_dtype;  // decoded, stored
  std::map<Coder, uint64_t> by_coder;
  uint64_t frames = 0;
  size_t pos = 16;
  while (pos + 4 <= data.size()) {
    const uint32_t len = LoadLE32(data.data() + pos);
    pos += 4;
    if (len == 0) break;
    Result<FrameInfo> fi = ReadFrameInfo(data.data() + pos, data.size() - pos);
    if (!fi.ok()) return Fail(path + " frame " + std::to_string(frames), fi.status());
    by_dtype[fi->dtype].first += fi->decoded_size;
    by_dtype[fi->dtype].second += fi->frame_size;
    for (const auto& s : fi->streams) by_coder[s.coder] += s.encoded_size;
    pos += len;
    ++frames;
  }
  uint64_t in = 0, out = data.size();
  for (auto& [d, v] : by_dtype) in += v.first;
  std::printf("%s: .lmc container, %llu frames, %s -> %s (%.2f%%)\n", path.c_str(),
              static_cast<unsigned long long>(frames), HumanSize(static_cast<double>(in)).c_str(),
              HumanSize(static_cast<double>(out)).c_str(), in ? 100.0 * out / in : 0.0);
  std::printf("%-8s %14s %14s %8s\n", "dtype", "bytes", "stored", "ratio");
  for (auto& [d, v] : by_dtype)
    std::printf("%-8s %14llu %14llu %7.2f%%\n", std::string(DTypeName(d)).c_str(),
                static_cast<unsigned long long>(v.first), static_cast<unsigned long long>(v.second),
                v.first ? 100.0 * v.second / v.first : 0.0);
  std::printf("stream payload by coder:");
  for (auto& [c, b] : by_coder)
    std::printf(" %s=%s", CoderName(c), HumanSize(static_cast<double>(b)).c_str());
  std::printf("\n");
  return 0;
}

// `lmc info` on a checkpoint: its regions and what each costs.
int InfoCheckpoint(const std::string& path, const std::vector<uint8_t>& data, size_t max_rows) {
  Format fmt;
  std::vector<Region> regions = ParseLayout(data.data(), data.size(), &fmt);
  std::printf("%s: %s, %s, %zu regions\n", path.c_str(), std::string(FormatName(fmt)).c_str(),
              HumanSize(static_cast<double>(data.size())).c_str(), regions.size());
  std::printf("%12s %12s %-7s %8s  %s\n", "offset", "length", "dtype", "ratio", "name");
  Workspace ws;
  std::vector<uint8_t> buf(MaxEncodedSize(kDefaultChunkSize));
  uint64_t total_in = 0, total_out = 0;
  size_t row = 0;
  for (const Region& r : regions) {
    uint64_t stored = 0;
    for (uint64_t off = 0; off < r.length; off += kDefaultChunkSize) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kDefaultChunkSize, r.length - off));
      Result<size_t> e = EncodeChunk(data.data() + r.offset + off, n, EncodeParams{r.dtype, nullptr},
                                     buf.data(), buf.size(), ws);
      if (!e.ok()) return Fail(path, e.status());
      stored += *e;
    }
    total_in += r.length;
    total_out += stored;
    if (row++ < max_rows)
      std::printf("%12llu %12llu %-7s %7.2f%%  %s%s\n", static_cast<unsigned long long>(r.offset),
                  static_cast<unsigned long long>(r.length), std::string(DTypeName(r.dtype)).c_str(),
                  r.length ? 100.0 * stored / r.length : 0.0, r.name.c_str(), r.is_tensor ? "" : " (header)");
  }
  if (row > max_rows) std::printf("... %zu more regions (use --max-rows)\n", row - max_rows);
  std::printf("total: %s -> %s (%.2f%%), regions coded separately\n",
              HumanSize(static_cast<double>(total_in)).c_str(),
              HumanSize(static_cast<double>(total_out)).c_str(),
              total_in ? 100.0 * total_out / total_in : 0.0);
  return 0;
}

int Info(const std::string& path, size_t max_rows) {
  Result<std::vector<uint8_t>> data = ReadFile(path);
  if (!data.ok()) return Fail(path, data.status());
  if (IsContainer(data->data(), data->size())) return InfoContainer(path, *data);
  return InfoCheckpoint(path, *data, max_rows);
}

}  // namespace

int LmcMain(const std::vector<std::string>& args) {
  return LmcMain(args, [] { return GpuCodec::Open(); });
}

int LmcMain(const std::vector<std::string>& args, const GpuOpenFn& open_gpu) {
  CLI::App app{"lmc: lossless compression of LLM checkpoints (safetensors, PyTorch, GGUF, npy)", "lmc"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", "lmc (lmcfs) " LMC_VERSION "\nformats: " + CodecFormats());

  size_t threads = 0;
  uint32_t chunk = 0;
  bool force = false, quiet = false, gpu = false;
  constexpr const char* kGpuHelp =
      "use the GPU codec (batches on a CUDA GPU; fails with exit code 2 where none is usable)";
  std::string in, out;

  auto* c = app.add_subcommand("compress", "compress IN to OUT (default IN.lmc; '-' is stdin/stdout)");
  c->add_option("-T,--threads", threads, "worker threads (default: all cores)");
  c->add_option("-c,--chunk-size", chunk, "chunk size in bytes (default 1 MiB)")
      ->check(CLI::Range(4096u, 1u << 30));
  c->add_flag("-f,--force", force, "overwrite OUT if it exists");
  c->add_flag("-q,--quiet", quiet, "print nothing on success");
  c->add_flag("--gpu", gpu, kGpuHelp);
  c->add_option("IN", in, "input file, or - for stdin")->required();
  c->add_option("OUT", out, "output file, or - for stdout");

  auto* d = app.add_subcommand("decompress", "decompress IN (.lmc) to OUT (default IN without .lmc)");
  d->add_option("-T,--threads", threads, "worker threads (default: all cores)");
  d->add_flag("-f,--force", force, "overwrite OUT if it exists");
  d->add_flag("-q,--quiet", quiet, "print nothing on success");
  d->add_flag("--gpu", gpu, kGpuHelp);
  d->add_option("IN", in, "input file, or - for stdin")->required();
  d->add_option("OUT", out, "output file, or - for stdout");

  size_t max_rows = 200;
  auto* i =
      app.add_subcommand("info", "show a checkpoint's regions and per-region ratio, or a .lmc file's frames");
  i->add_option("--max-rows", max_rows, "regions to list (default 200)");
  i->add_option("FILE", in, "checkpoint or .lmc file")->required();

  BenchOptions bo;
  auto* b = app.add_subcommand("bench", "compare lmc with zstd and lz4 on files (ratio, MB/s)");
  b->add_option("-T,--threads", bo.threads, "threads for the multi-thread rows (default: all cores)");
  b->add_option("-r,--repeats", bo.repeats, "timing repeats, best kept (default 3)")
      ->check(CLI::Range(1u, 100u));
  b->add_option("-c,--chunk-size", bo.chunk_size, "lmc chunk size in bytes (default 1 MiB)")
      ->check(CLI::Range(4096u, 1u << 30));
  b->add_flag("--json", bo.json, "print JSON instead of a table");
  b->add_flag("--no-zstd19", bo.skip_zstd19, "skip zstd -19 (slow)");
  b->add_flag("--gpu", gpu,
              "also measure lmc on the GPU codec (rows \"lmc gpu\"); exit code 2 where none is usable");
  b->add_option("FILE", bo.files, "files to measure")->required();

  BoundOptions bd;
  auto* bnd = app.add_subcommand(
      "bound",
      "per-chunk min(standalone, XOR vs PREV) order-0 entropy bound of FILE (incremental snapshots)");
  bnd->add_option("-c,--chunk-size", bd.chunk_size, "chunk size in bytes (default 1 MiB)")
      ->check(CLI::Range(4096u, 1u << 30));
  bnd->add_flag("--per-chunk", bd.per_chunk, "print one row per chunk");
  bnd->add_flag("--encode", bd.encode,
                "also encode each chunk standalone and as XOR (frame sizes, the estimate's pick)");
  bnd->add_flag("--pair", bd.pair,
                "also pair fp32 tensor chunks with their bf16 twins in FILE (found by content, as pair=on "
                "does) and count the smallest of the bounds");
  bnd->add_option("FILE", bd.file, "checkpoint")->required();
  bnd->add_option("PREV", bd.prev, "its predecessor (same role, earlier step)");

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    // --gpu: a GPU codec or nothing at all (no silent CPU run).
    std::unique_ptr<GpuCodec> codec;
    if (gpu) {
      auto g = open_gpu();
      if (!g.ok()) {
        std::fprintf(stderr,
                     "lmc: --gpu: the GPU codec cannot be used (%s; GPU: %s); run without --gpu to use the "
                     "CPU codec\n",
                     g.status().message().c_str(), GpuDescription().c_str());
        return 2;
      }
      codec = std::move(g).value();
    }
    if (c->parsed()) return Compress(in, out, threads, chunk, force, quiet, codec.get());
    if (d->parsed()) return Decompress(in, out, threads, force, quiet, codec.get());
    if (i->parsed()) return Info(in, max_rows);
    bo.gpu = codec.get();
    if (b->parsed()) return RunBench(bo);
    if (bnd->parsed()) return RunBound(bd);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lmc: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lmc: internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}

}  // namespace lmc::cli
