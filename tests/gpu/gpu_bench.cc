// GPU codec benchmark (docs/BENCHMARKS.md, "GPU codec"):
// the same chunks through the CPU codec on all cores, and through the GPU
// codec device to device and host to host, in one run. Prints a table and
// writes JSON.
//
//   lmc_gpu_bench [--data FILE] [--mib N] [--dtype bf16|f32|bytes]
//                 [--chunk-mib 1] [--reps 5] [--threads N] [--json OUT] [--skip-host]
//
// --skip-host leaves out the host-to-host passes (for a profiler run).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lmc/codec.h"
#include "lmc/gpu.h"

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CUDA_OK(x)                                                                 \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "lmc_gpu_bench: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

std::vector<uint8_t> Synthetic(size_t bytes) {
  // bf16 weights of N(0, sigma) with sigma varying per 1 MiB, as layers do.
  std::vector<uint8_t> out(bytes);
  std::mt19937 rng(42);
  for (size_t i = 0; i + 2 <= bytes; i += 2) {
    if (i % (1 << 20) == 0) rng.seed(static_cast<uint32_t>(i >> 20));
    static thread_local std::normal_distribution<float> nd(0.0f, 1.0f);
    float sigma = 0.01f + 0.002f * static_cast<float>((i >> 20) % 16);
    float f = nd(rng) * sigma;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t h = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    std::memcpy(&out[i], &h, 2);
  }
  return out;
}

template <typename F>
void Parallel(size_t count, unsigned threads, F f) {
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      lmc::Workspace ws;
      for (size_t i = t; i < count; i += threads) f(i, ws);
    });
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_path, json_path, dtype_name = "bf16";
  size_t mib = 512, chunk_mib = 1;
  int reps = 5;
  bool skip_host = false;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--data")
      data_path = next();
    else if (a == "--mib")
      mib = std::stoul(next());
    else if (a == "--chunk-mib")
      chunk_mib = std::stoul(next());
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--threads")
      threads = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--json")
      json_path = next();
    else if (a == "--dtype")
      dtype_name = next();
    else if (a == "--skip-host")
      skip_host = true;
    else {
      std::fprintf(stderr,
                   "usage: lmc_gpu_bench [--data FILE] [--mib N] [--dtype bf16|f32|bytes] "
                   "[--chunk-mib 1] [--reps 5] [--threads N] [--json OUT] [--skip-host]\n");
      return 2;
    }
  }
  const lmc::DType dtype = dtype_name == "f32"     ? lmc::DType::kF32
                           : dtype_name == "bytes" ? lmc::DType::kBytes
                                                   : lmc::DType::kBF16;
  std::vector<uint8_t> data;
  if (!data_path.empty()) {
    std::ifstream f(data_path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "lmc_gpu_bench: cannot open %s\n", data_path.c_str());
      return 1;
    }
    data.assign(std::istreambuf_iterator<char>(f), {});
    if (mib && data.size() > (mib << 20)) data.resize(mib << 20);
  } else {
    data = Synthetic(mib << 20);
  }
  const size_t chunk = chunk_mib << 20, total = data.size(), nchunks = (total + chunk - 1) / chunk;
  auto csize = [&](size_t c) { return std::min(chunk, total - c * chunk); };
  std::printf("data: %s, %.1f MiB, %zu chunks of %zu KiB, dtype %s\n",
              data_path.empty() ? "synthetic bf16" : data_path.c_str(), total / 1048576.0, nchunks,
              chunk >> 10, dtype_name.c_str());
  std::printf("GPU: %s; CPU threads: %u\n", lmc::GpuDescription().c_str(), threads);

  // ---- CPU, all cores, default profile and GPU profile.
  std::vector<std::vector<uint8_t>> cpu_frames(nchunks), gpu_ref(nchunks);
  std::vector<size_t> cpu_len(nchunks), ref_len(nchunks);
  std::vector<double> t_cpu_enc, t_cpu_dec;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
      cpu_frames[c].resize(lmc::MaxEncodedSize(csize(c)));
      auto e = lmc::EncodeChunk(data.data() + c * chunk, csize(c), {dtype, nullptr}, cpu_frames[c].data(),
                                cpu_frames[c].size(), ws);
      cpu_len[c] = e.ok() ? *e : 0;
    });
    t_cpu_enc.push_back(Seconds(t0));
  }
  std::vector<uint8_t> back(total);
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
      auto d = lmc::DecodeChunk(cpu_frames[c].data(), cpu_len[c], nullptr, 0, back.data() + c * chunk,
                                csize(c), ws);
      if (!d.ok()) std::fprintf(stderr, "CPU decode failed: %s\n", d.status().ToString().c_str());
    });
    t_cpu_dec.push_back(Seconds(t0));
  }
  const bool cpu_exact = back == data;
  Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
    gpu_ref[c].resize(lmc::MaxEncodedSize(csize(c)));
    auto e = lmc::EncodeChunk(data.data() + c * chunk, csize(c), {dtype, nullptr, lmc::EncodeProfile::kGpu},
                              gpu_ref[c].data(), gpu_ref[c].size(), ws);
    ref_len[c] = e.ok() ? *e : 0;
  });
  size_t cpu_bytes = 0, ref_bytes = 0;
  for (size_t c = 0; c < nchunks; ++c) cpu_bytes += cpu_len[c], ref_bytes += ref_len[c];

  auto opened = lmc::GpuCodec::Open({0, total + 1});
  if (!opened.ok()) {
    std::fprintf(stderr, "lmc_gpu_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  size_t free_before = 0, free_after = 0, device_total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &device_total));
  auto& codec = *opened;

  // ---- Device to device.
  uint8_t *d_in = nullptr, *d_frames = nullptr, *d_out = nullptr;
  const size_t fcap = lmc::MaxEncodedSize(chunk);
  CUDA_OK(cudaMalloc(&d_in, total));
  CUDA_OK(cudaMalloc(&d_frames, fcap * nchunks));
  CUDA_OK(cudaMalloc(&d_out, total));
  CUDA_OK(cudaMemcpy(d_in, data.data(), total, cudaMemcpyHostToDevice));
  // The card's copy bandwidth, for the fraction reached.
  std::vector<double> t_copy;
  for (int r = 0; r < reps + 1; ++r) {
    CUDA_OK(cudaDeviceSynchronize());
    auto t0 = Clock::now();
    CUDA_OK(cudaMemcpy(d_out, d_in, total, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaDeviceSynchronize());
    if (r) t_copy.push_back(Seconds(t0));
  }
  std::vector<lmc::GpuEncodeItem> enc(nchunks);
  // Item c of an encode batch (in: the chunk, out: cap bytes for its frame)
  // and of a decode batch (frame: encoded by enc[c], out: the chunk's bytes).
  auto set_enc = [&](size_t c, const uint8_t* in, uint8_t* out, size_t cap) {
    enc[c] = {};
    enc[c].src = in;
    enc[c].n = csize(c);
    enc[c].dtype = dtype;
    enc[c].dst = out;
    enc[c].cap = cap;
  };
  // The default (verify_encode: every frame decoded back on the device
  // before the call returns) alternating round by round with a codec that
  // does not check (the encoder alone), on the same card in the same run.
  lmc::GpuCodecOptions unchecked_options{0, total + 1};
  unchecked_options.verify_encode = false;
  auto unchecked = lmc::GpuCodec::Open(unchecked_options);
  if (!unchecked.ok()) {
    std::fprintf(stderr, "lmc_gpu_bench: %s\n", unchecked.status().ToString().c_str());
    return 1;
  }
  std::vector<double> t_dev_enc, t_dev_enc_unchecked, t_dev_dec;
  for (int r = 0; r < reps + 1; ++r) {
    // The checked codec first, so that the device memory read after its
    // first encode is its own (the unchecked one has allocated none yet).
    for (lmc::GpuCodec* ec : {codec.get(), unchecked->get()}) {
      for (size_t c = 0; c < nchunks; ++c) {
        set_enc(c, d_in + c * chunk, d_frames + c * fcap, fcap);
      }
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = ec->EncodeBatchDevice(enc.data(), enc.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r) (ec == codec.get() ? t_dev_enc : t_dev_enc_unchecked).push_back(Seconds(t0));
      if (!st.ok()) {
        std::fprintf(stderr, "GPU encode failed: %s\n", st.ToString().c_str());
        return 1;
      }
      if (r == 0 && ec == codec.get()) {
        // What the codec holds once it has encoded: its slabs, and the local
        // memory the driver reserves for the largest kernel stack frame on
        // every thread the card holds (tests/gpu/stack_check.sh).
        CUDA_OK(cudaMemGetInfo(&free_after, &device_total));
        size_t stack = 0;
        CUDA_OK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
        cudaDeviceProp p;
        CUDA_OK(cudaGetDeviceProperties(&p, 0));
        const double reserved =
            static_cast<double>(stack) * p.maxThreadsPerMultiProcessor * p.multiProcessorCount;
        std::printf(
            "device memory after the first device encode of %.0f MiB: %.0f MiB more in use (the codec's "
            "slabs and the stacks); per-thread stack %zu bytes, %.0f MiB reserved over %d SMs x %d "
            "threads\n",
            total / 1048576.0,
            (static_cast<double>(free_before) - static_cast<double>(free_after)) / 1048576.0, stack,
            reserved / 1048576.0, p.multiProcessorCount, p.maxThreadsPerMultiProcessor);
      }
    }
  }
  const lmc::GpuCodecStats checked_stats = codec->stats();
  size_t gpu_bytes = 0, identical = 0;
  for (size_t c = 0; c < nchunks; ++c) {
    gpu_bytes += enc[c].len;
    std::vector<uint8_t> f(enc[c].len);
    CUDA_OK(cudaMemcpy(f.data(), enc[c].dst, f.size(), cudaMemcpyDeviceToHost));
    identical += f.size() == ref_len[c] && std::memcmp(f.data(), gpu_ref[c].data(), f.size()) == 0;
  }
  std::vector<lmc::GpuDecodeItem> dec(nchunks);
  auto set_dec = [&](size_t c, const uint8_t* frame, size_t len, uint8_t* out) {
    dec[c] = {};
    dec[c].frame = frame;
    dec[c].len = len;
    dec[c].dst = out;
    dec[c].cap = csize(c);
  };
  // The same decode by the fused decoder without its hash sums
  // (GpuCodecOptions::fuse_hash off) and with the merge pass instead
  // (fuse_merge off), alternating with the default round by round: an A-B-C
  // on the same card in the same run.
  lmc::GpuCodecOptions nohash_options{0, total + 1}, unfused_options{0, total + 1};
  nohash_options.fuse_hash = false;
  unfused_options.fuse_merge = false;
  auto nohash = lmc::GpuCodec::Open(nohash_options);
  auto unfused = lmc::GpuCodec::Open(unfused_options);
  if (!nohash.ok() || !unfused.ok()) {
    std::fprintf(stderr, "lmc_gpu_bench: %s\n",
                 (nohash.ok() ? unfused.status() : nohash.status()).ToString().c_str());
    return 1;
  }
  std::vector<double> t_dev_dec_nohash, t_dev_dec_unfused;
  bool dev_ok = true;
  for (int r = 0; r < reps + 1; ++r) {
    for (lmc::GpuCodec* c : {codec.get(), nohash->get(), unfused->get()}) {
      for (size_t k = 0; k < nchunks; ++k) {
        set_dec(k, enc[k].dst, enc[k].len, d_out + k * chunk);
      }
      CUDA_OK(cudaMemset(d_out, 0, total));
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = c->DecodeBatchDevice(dec.data(), dec.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r)
        (c == codec.get()     ? t_dev_dec
         : c == nohash->get() ? t_dev_dec_nohash
                              : t_dev_dec_unfused)
            .push_back(Seconds(t0));
      if (!st.ok()) {
        std::fprintf(stderr, "GPU decode failed: %s\n", st.ToString().c_str());
        return 1;
      }
      std::fill(back.begin(), back.end(), 0);
      CUDA_OK(cudaMemcpy(back.data(), d_out, total, cudaMemcpyDeviceToHost));
      dev_ok &= back == data;
      for (auto& d : dec) dev_ok &= d.status.ok();
    }
  }
  const uint64_t fused_chunks = codec->stats().decode_fused_chunks / (reps + 1);

  // ---- Huffman block sizes (GpuCodecOptions::huffman_block_log2): the
  // data encoded in blocks of 2^11 and 2^10 symbols (twice and four times
  // the decoding threads, 2 bytes a block more), each size's frames decoded
  // by a codec of that size, alternating round by round with the default's
  // decode of its own frames: an A-B-C on the same card in the same run.
  struct BlockRun {
    int log2 = 0;
    std::unique_ptr<lmc::GpuCodec> codec;
    uint8_t* frames = nullptr;
    std::vector<lmc::GpuEncodeItem> enc;
    std::vector<double> t_enc, t_dec;
    size_t bytes = 0, identical = 0;
    uint64_t fused = 0;
    bool ok = true;
  };
  std::vector<BlockRun> block_runs;
  for (int log2 : {11, 10}) {
    lmc::GpuCodecOptions o{0, total + 1};
    o.huffman_block_log2 = log2;
    auto c = lmc::GpuCodec::Open(o);
    if (!c.ok()) {
      std::fprintf(stderr, "lmc_gpu_bench: %s\n", c.status().ToString().c_str());
      return 1;
    }
    BlockRun& b = block_runs.emplace_back();
    b.log2 = log2;
    b.codec = std::move(*c);
    CUDA_OK(cudaMalloc(&b.frames, fcap * nchunks));
    b.enc.resize(nchunks);
    for (int r = 0; r < reps + 1; ++r) {
      for (size_t k = 0; k < nchunks; ++k) {
        b.enc[k] = {};
        b.enc[k].src = d_in + k * chunk;
        b.enc[k].n = csize(k);
        b.enc[k].dtype = dtype;
        b.enc[k].dst = b.frames + k * fcap;
        b.enc[k].cap = fcap;
      }
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = b.codec->EncodeBatchDevice(b.enc.data(), b.enc.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r) b.t_enc.push_back(Seconds(t0));
      if (!st.ok()) {
        std::fprintf(stderr, "GPU encode (blocks of 2^%d) failed: %s\n", log2, st.ToString().c_str());
        return 1;
      }
    }
    std::vector<std::vector<uint8_t>> got(nchunks);
    for (size_t k = 0; k < nchunks; ++k) {
      b.bytes += b.enc[k].len;
      got[k].resize(b.enc[k].len);
      CUDA_OK(cudaMemcpy(got[k].data(), b.enc[k].dst, got[k].size(), cudaMemcpyDeviceToHost));
    }
    std::vector<char> same(nchunks, 0);
    Parallel(nchunks, threads, [&](size_t k, lmc::Workspace& ws) {
      lmc::EncodeParams p{dtype, nullptr, lmc::EncodeProfile::kGpu};
      p.huffman_block_log2 = log2;
      std::vector<uint8_t> ref(lmc::MaxEncodedSize(csize(k)));
      auto e = lmc::EncodeChunk(data.data() + k * chunk, csize(k), p, ref.data(), ref.size(), ws);
      same[k] = e.ok() && *e == got[k].size() && std::memcmp(ref.data(), got[k].data(), *e) == 0;
    });
    for (char x : same) b.identical += x != 0;
  }
  std::vector<double> t_dev_dec_blocks_default;
  for (int r = 0; r < reps + 1; ++r) {
    for (size_t v = 0; v <= block_runs.size(); ++v) {
      lmc::GpuCodec* c = v == 0 ? codec.get() : block_runs[v - 1].codec.get();
      const std::vector<lmc::GpuEncodeItem>& e = v == 0 ? enc : block_runs[v - 1].enc;
      for (size_t k = 0; k < nchunks; ++k) set_dec(k, e[k].dst, e[k].len, d_out + k * chunk);
      CUDA_OK(cudaMemset(d_out, 0, total));
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = c->DecodeBatchDevice(dec.data(), dec.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r) (v == 0 ? t_dev_dec_blocks_default : block_runs[v - 1].t_dec).push_back(Seconds(t0));
      if (!st.ok()) {
        std::fprintf(stderr, "GPU decode failed: %s\n", st.ToString().c_str());
        return 1;
      }
      std::fill(back.begin(), back.end(), 0);
      CUDA_OK(cudaMemcpy(back.data(), d_out, total, cudaMemcpyDeviceToHost));
      bool ok = back == data;
      for (auto& d : dec) ok &= d.status.ok();
      if (v == 0) {
        dev_ok &= ok;
      } else {
        block_runs[v - 1].ok &= ok;
      }
    }
  }
  for (BlockRun& b : block_runs) b.fused = b.codec->stats().decode_fused_chunks / (reps + 1);

  // ---- Deltas (rANS streams): the data as the base of a next version in
  // which one byte in 26 changed a little (bf16: the low byte of one
  // element in 13), as an optimizer step moves weights; the CPU profile's delta frames (XOR streams coded
  // with rANS), decoded by the CPU on all threads and by the GPU device to
  // device, the base on the device; then the deltas encoded by the GPU.
  std::vector<uint8_t> next = data;
  for (size_t i = 0; i + 1 < total; i += 26) next[i] ^= static_cast<uint8_t>(1 + (i / 26) % 3);
  std::vector<std::vector<uint8_t>> delta_frames(nchunks);
  std::vector<size_t> delta_len(nchunks);
  std::vector<int> delta_rans(nchunks);
  Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
    delta_frames[c].resize(lmc::MaxEncodedSize(csize(c)));
    auto e = lmc::EncodeChunk(next.data() + c * chunk, csize(c), {dtype, data.data() + c * chunk},
                              delta_frames[c].data(), delta_frames[c].size(), ws);
    delta_len[c] = e.ok() ? *e : 0;
    auto fi = lmc::ReadFrameInfo(delta_frames[c].data(), delta_len[c]);
    for (const lmc::StreamInfo& si : fi.ok() ? fi->streams : lmc::StreamList{})
      delta_rans[c] |= si.coder == lmc::Coder::kRans || si.coder == lmc::Coder::kRansX32;
  });
  size_t delta_bytes = 0, delta_rans_chunks = 0;
  for (size_t c = 0; c < nchunks; ++c) delta_bytes += delta_len[c], delta_rans_chunks += delta_rans[c];
  std::vector<double> t_cpu_delta, t_dev_delta;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
      auto d = lmc::DecodeChunk(delta_frames[c].data(), delta_len[c], data.data() + c * chunk, csize(c),
                                back.data() + c * chunk, csize(c), ws);
      if (!d.ok()) std::fprintf(stderr, "CPU delta decode failed: %s\n", d.status().ToString().c_str());
    });
    t_cpu_delta.push_back(Seconds(t0));
  }
  const bool cpu_delta_ok = back == next;
  for (size_t c = 0; c < nchunks; ++c)
    CUDA_OK(cudaMemcpy(d_frames + c * fcap, delta_frames[c].data(), delta_len[c], cudaMemcpyHostToDevice));
  const uint64_t dev_chunks_before = codec->stats().decode_chunks;
  bool dev_delta_ok = true;
  for (int r = 0; r < reps + 1; ++r) {
    for (size_t c = 0; c < nchunks; ++c) {
      dec[c] = {};
      dec[c].frame = d_frames + c * fcap;
      dec[c].len = delta_len[c];
      dec[c].base = d_in + c * chunk;
      dec[c].base_len = csize(c);
      dec[c].dst = d_out + c * chunk;
      dec[c].cap = csize(c);
    }
    CUDA_OK(cudaMemset(d_out, 0, total));
    CUDA_OK(cudaDeviceSynchronize());
    auto t0 = Clock::now();
    auto st = codec->DecodeBatchDevice(dec.data(), dec.size());
    CUDA_OK(cudaDeviceSynchronize());
    if (r) t_dev_delta.push_back(Seconds(t0));
    dev_delta_ok &= st.ok();
    for (auto& d : dec) dev_delta_ok &= d.status.ok();
  }
  std::fill(back.begin(), back.end(), 0);
  CUDA_OK(cudaMemcpy(back.data(), d_out, total, cudaMemcpyDeviceToHost));
  dev_delta_ok &= back == next;
  const uint64_t dev_delta_chunks = (codec->stats().decode_chunks - dev_chunks_before) / (reps + 1);
  // The same deltas encoded device to device (the next version and its
  // base on the device), against the CPU's GPU-profile delta frames.
  std::vector<std::vector<uint8_t>> delta_ref(nchunks);
  Parallel(nchunks, threads, [&](size_t c, lmc::Workspace& ws) {
    delta_ref[c].resize(lmc::MaxEncodedSize(csize(c)));
    auto e = lmc::EncodeChunk(next.data() + c * chunk, csize(c),
                              {dtype, data.data() + c * chunk, lmc::EncodeProfile::kGpu}, delta_ref[c].data(),
                              delta_ref[c].size(), ws);
    delta_ref[c].resize(e.ok() ? *e : 0);
  });
  CUDA_OK(cudaMemcpy(d_out, next.data(), total, cudaMemcpyHostToDevice));
  std::vector<double> t_dev_delta_enc;
  bool dev_delta_enc_ok = true;
  for (int r = 0; r < reps + 1; ++r) {
    for (size_t c = 0; c < nchunks; ++c) {
      set_enc(c, d_out + c * chunk, d_frames + c * fcap, fcap);
      enc[c].base = d_in + c * chunk;
    }
    CUDA_OK(cudaDeviceSynchronize());
    auto t0 = Clock::now();
    auto st = codec->EncodeBatchDevice(enc.data(), enc.size());
    CUDA_OK(cudaDeviceSynchronize());
    if (r) t_dev_delta_enc.push_back(Seconds(t0));
    dev_delta_enc_ok &= st.ok();
  }
  size_t gpu_delta_bytes = 0, delta_identical = 0;
  for (size_t c = 0; c < nchunks; ++c) {
    dev_delta_enc_ok &= enc[c].status.ok();
    gpu_delta_bytes += enc[c].len;
    std::vector<uint8_t> f(enc[c].len);
    CUDA_OK(cudaMemcpy(f.data(), enc[c].dst, f.size(), cudaMemcpyDeviceToHost));
    delta_identical += f == delta_ref[c];
  }

  // ---- Paired fp32 masters (bf16 data only): a master a value whose bf16
  // rounding to nearest is the data's element, its low half random; the
  // data is the twins. Master chunk m (chunk bytes, chunk / 4 values) is
  // paired with half of twin chunk m / 2. Encoded and decoded device to
  // device; the frames against the CPU's GPU-profile frames.
  const size_t pair_chunks = dtype == lmc::DType::kBF16 ? total / chunk * 2 : 0;
  std::vector<uint8_t> masters(pair_chunks * chunk);
  {
    std::mt19937 rng(7);
    for (size_t e = 0; e < masters.size() / 4; ++e) {
      const uint32_t b = data[2 * e] | uint32_t{data[2 * e + 1]} << 8, lo = rng() & 0xffff;
      const uint32_t v = (lo > 0x8000 ? (b - 1) & 0xffff : b) << 16 | lo;
      std::memcpy(masters.data() + 4 * e, &v, 4);
    }
  }
  auto pair_offset = [&](size_t m) { return static_cast<uint32_t>((m % 2) * (chunk / 4)); };
  std::vector<std::vector<uint8_t>> pair_ref(pair_chunks);
  std::vector<size_t> pair_cpu_len(pair_chunks);
  Parallel(pair_chunks, threads, [&](size_t m, lmc::Workspace& ws) {
    lmc::EncodeParams p{lmc::DType::kF32, data.data() + m / 2 * chunk, lmc::EncodeProfile::kGpu};
    p.widened_base_offset = pair_offset(m);
    p.base_len = chunk;
    pair_ref[m].resize(lmc::MaxEncodedSize(chunk));
    auto e =
        lmc::EncodeChunk(masters.data() + m * chunk, chunk, p, pair_ref[m].data(), pair_ref[m].size(), ws);
    pair_ref[m].resize(e.ok() ? *e : 0);
    std::vector<uint8_t> f(lmc::MaxEncodedSize(chunk));
    p.profile = lmc::EncodeProfile::kCpu;
    auto c = lmc::EncodeChunk(masters.data() + m * chunk, chunk, p, f.data(), f.size(), ws);
    pair_cpu_len[m] = c.ok() ? *c : 0;
  });
  std::vector<double> t_pair_enc, t_pair_dec;
  size_t pair_bytes = 0, pair_cpu_bytes = 0, pair_identical = 0;
  bool pair_ok = true;
  if (pair_chunks) {
    uint8_t *d_masters = nullptr, *d_pframes = nullptr, *d_pout = nullptr;
    CUDA_OK(cudaMalloc(&d_masters, masters.size()));
    CUDA_OK(cudaMalloc(&d_pframes, fcap * pair_chunks));
    CUDA_OK(cudaMalloc(&d_pout, masters.size()));
    CUDA_OK(cudaMemcpy(d_masters, masters.data(), masters.size(), cudaMemcpyHostToDevice));
    std::vector<lmc::GpuEncodeItem> pe(pair_chunks);
    for (int r = 0; r < reps + 1; ++r) {
      for (size_t m = 0; m < pair_chunks; ++m) {
        pe[m] = {};
        pe[m].src = d_masters + m * chunk;
        pe[m].n = chunk;
        pe[m].dtype = lmc::DType::kF32;
        pe[m].base = d_in + m / 2 * chunk;
        pe[m].base_len = chunk;
        pe[m].widened_base_offset = pair_offset(m);
        pe[m].dst = d_pframes + m * fcap;
        pe[m].cap = fcap;
      }
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = codec->EncodeBatchDevice(pe.data(), pe.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r) t_pair_enc.push_back(Seconds(t0));
      pair_ok &= st.ok();
    }
    for (size_t m = 0; m < pair_chunks; ++m) {
      pair_ok &= pe[m].status.ok();
      pair_bytes += pe[m].len;
      pair_cpu_bytes += pair_cpu_len[m];
      std::vector<uint8_t> f(pe[m].len);
      CUDA_OK(cudaMemcpy(f.data(), pe[m].dst, f.size(), cudaMemcpyDeviceToHost));
      pair_identical += f == pair_ref[m];
    }
    std::vector<lmc::GpuDecodeItem> pd(pair_chunks);
    for (int r = 0; r < reps + 1; ++r) {
      for (size_t m = 0; m < pair_chunks; ++m) {
        pd[m] = {};
        pd[m].frame = pe[m].dst;
        pd[m].len = pe[m].len;
        pd[m].base = d_in + m / 2 * chunk;
        pd[m].base_len = chunk;
        pd[m].dst = d_pout + m * chunk;
        pd[m].cap = chunk;
      }
      CUDA_OK(cudaMemset(d_pout, 0, masters.size()));
      CUDA_OK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      auto st = codec->DecodeBatchDevice(pd.data(), pd.size());
      CUDA_OK(cudaDeviceSynchronize());
      if (r) t_pair_dec.push_back(Seconds(t0));
      pair_ok &= st.ok();
      for (auto& d : pd) pair_ok &= d.status.ok();
    }
    std::vector<uint8_t> back_m(masters.size());
    CUDA_OK(cudaMemcpy(back_m.data(), d_pout, back_m.size(), cudaMemcpyDeviceToHost));
    pair_ok &= back_m == masters;
    cudaFree(d_masters);
    cudaFree(d_pframes);
    cudaFree(d_pout);
  }

  // ---- Host to host (the mount's case): calls of call_mib MiB (0: all the
  // data in one call) on a codec with `lanes` lanes; the frames checked
  // against the CPU's GPU profile and the bytes back against the data.
  const double gb = total / 1e9;
  auto rate = [&](const std::vector<double>& t) { return gb / Median(t); };
  struct HostRun {
    int lanes = 0;
    double enc = 0, dec = 0;  // GB/s
    bool ok = false;
    size_t identical = 0;
  };
  std::vector<std::vector<uint8_t>> hframes(nchunks);
  auto host_pass = [&](int lanes, size_t call_mib, int rounds) {
    HostRun h;
    h.lanes = lanes;
    lmc::GpuCodecOptions o;
    o.batch_bytes = size_t{128} << 20;
    o.lanes = lanes;
    auto hopened = lmc::GpuCodec::Open(o);
    if (!hopened.ok()) return h;
    auto& hcodec = *hopened;
    const size_t per_call = call_mib ? std::max<size_t>(1, (call_mib << 20) / chunk) : nchunks;
    std::vector<double> te, td;
    bool ok = true;
    for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up
      for (size_t c = 0; c < nchunks; ++c) {
        hframes[c].resize(lmc::MaxEncodedSize(csize(c)));
        set_enc(c, data.data() + c * chunk, hframes[c].data(), hframes[c].size());
      }
      auto t0 = Clock::now();
      for (size_t c = 0; c < nchunks; c += per_call)
        ok &= hcodec->EncodeBatch(enc.data() + c, std::min(per_call, nchunks - c)).ok();
      if (r) te.push_back(Seconds(t0));
    }
    for (size_t c = 0; c < nchunks; ++c)
      h.identical +=
          enc[c].len == ref_len[c] && std::memcmp(hframes[c].data(), gpu_ref[c].data(), enc[c].len) == 0;
    for (int r = 0; r < rounds + 1; ++r) {
      std::fill(back.begin(), back.end(), 0);
      for (size_t c = 0; c < nchunks; ++c) set_dec(c, hframes[c].data(), enc[c].len, back.data() + c * chunk);
      auto t0 = Clock::now();
      for (size_t c = 0; c < nchunks; c += per_call)
        ok &= hcodec->DecodeBatch(dec.data() + c, std::min(per_call, nchunks - c)).ok();
      if (r) td.push_back(Seconds(t0));
    }
    for (auto& d : dec) ok &= d.status.ok();
    h.ok = ok && back == data;
    h.enc = gb / Median(te);
    h.dec = gb / Median(td);
    return h;
  };
  // Whole-data calls with 1 to 6 lanes; then the default lanes at the call
  // sizes the mount makes, against the CPU's throughput (the crossover for
  // gpu=auto).
  const double rate_cpu_enc = rate(t_cpu_enc), rate_cpu_dec = rate(t_cpu_dec);
  std::vector<HostRun> lane_runs;
  const int default_lanes = lmc::GpuCodecOptions{}.lanes;
  for (int lanes : {1, 2, 3, 4, 6})
    if (!skip_host) lane_runs.push_back(host_pass(lanes, 0, reps));
  HostRun host_default;
  for (const HostRun& h : lane_runs)
    if (h.lanes == default_lanes) host_default = h;
  const bool host_ok = skip_host || host_default.ok;
  const size_t host_identical = host_default.identical;
  struct Cross {
    size_t mib;
    HostRun gpu;
  };
  std::vector<Cross> cross;
  // The CPU's figure is its throughput on all threads (above): the mount's
  // encoder threads run steadily, whatever the GPU's call size.
  for (size_t call : {1, 2, 4, 8, 16, 32, 64}) {
    if (skip_host || (call << 20) > total) break;
    cross.push_back({call, host_pass(default_lanes, call, 2)});
  }

  // One more pass of each device-to-device call with every kernel timed
  // (the encode without its check, whose decode kernels would add to the
  // decode pass's names).
  {
    lmc::GpuCodecOptions prof_options{0, total + 1, true};
    prof_options.verify_encode = false;
    auto prof = lmc::GpuCodec::Open(prof_options);
    if (prof.ok()) {
      for (size_t c = 0; c < nchunks; ++c) {
        set_enc(c, d_in + c * chunk, d_frames + c * fcap, fcap);
      }
      auto st = (*prof)->EncodeBatchDevice(enc.data(), enc.size());
      for (size_t c = 0; c < nchunks && st.ok(); ++c) {
        set_dec(c, enc[c].dst, enc[c].len, d_out + c * chunk);
      }
      if (st.ok()) st = (*prof)->DecodeBatchDevice(dec.data(), dec.size());
      std::printf("kernel times, one encode and one decode pass (%s):\n%s\n", st.ToString().c_str(),
                  (*prof)->profile().c_str());
    }
  }
  const double copy_bw = 2 * gb / Median(t_copy);  // read + write
  const double cpu_ratio = 100.0 * cpu_bytes / total, ref_ratio = 100.0 * ref_bytes / total,
               gpu_ratio = 100.0 * gpu_bytes / total;
  std::printf("\n%-34s %10s %10s %8s %s\n", "path", "enc GB/s", "dec GB/s", "ratio%", "check");
  std::printf("%-34s %10.2f %10.2f %8.3f %s\n",
              ("CPU codec, " + std::to_string(threads) + " threads").c_str(), rate(t_cpu_enc),
              rate(t_cpu_dec), cpu_ratio, cpu_exact ? "exact" : "MISMATCH");
  std::printf("%-34s %10s %10s %8.3f %s\n", "CPU, GPU profile (reference)", "-", "-", ref_ratio, "");
  std::printf("%-34s %10.2f %10.2f %8.3f %s, frames identical %zu/%zu, fused decodes %llu/%zu\n",
              "GPU device->device", rate(t_dev_enc), rate(t_dev_dec), gpu_ratio,
              dev_ok ? "exact" : "MISMATCH", identical, nchunks,
              static_cast<unsigned long long>(fused_chunks), nchunks);
  std::printf(
      "%-34s %10.2f %10s %8.3f frames checked on the device %llu/%llu, %llu did not decode back "
      "(rounds alternating with the checked encode above)\n",
      "GPU device->device, unchecked enc", rate(t_dev_enc_unchecked), "-", gpu_ratio,
      static_cast<unsigned long long>(checked_stats.encode_verified_chunks),
      static_cast<unsigned long long>(checked_stats.encode_chunks),
      static_cast<unsigned long long>(checked_stats.encode_verify_failures));
  std::printf("%-34s %10s %10.2f %8.3f %s (rounds alternating with the line above)\n",
              "GPU device->device, fused, no hash", "-", rate(t_dev_dec_nohash), gpu_ratio,
              dev_ok ? "exact" : "MISMATCH");
  std::printf("%-34s %10s %10.2f %8.3f %s (rounds alternating with the lines above)\n",
              "GPU device->device, merge pass", "-", rate(t_dev_dec_unfused), gpu_ratio,
              dev_ok ? "exact" : "MISMATCH");
  for (const BlockRun& b : block_runs)
    std::printf(
        "%-34s %10.2f %10.2f %8.3f %s, frames identical %zu/%zu, fused decodes %llu/%zu; default %.2f in the "
        "same rounds\n",
        ("GPU device->device, blocks of 2^" + std::to_string(b.log2)).c_str(), rate(b.t_enc), rate(b.t_dec),
        100.0 * b.bytes / total, b.ok ? "exact" : "MISMATCH", b.identical, nchunks,
        static_cast<unsigned long long>(b.fused), nchunks, rate(t_dev_dec_blocks_default));
  const double delta_ratio = 100.0 * delta_bytes / total;
  std::printf("%-34s %10s %10.2f %8.3f %s, %zu of %zu frames with rANS streams\n", "CPU codec, deltas", "-",
              rate(t_cpu_delta), delta_ratio, cpu_delta_ok ? "exact" : "MISMATCH", delta_rans_chunks,
              nchunks);
  std::printf("%-34s %10s %10.2f %8.3f %s, %llu of %zu frames decoded on the device\n",
              "GPU device->device, deltas", "-", rate(t_dev_delta), delta_ratio,
              dev_delta_ok ? "exact" : "MISMATCH", static_cast<unsigned long long>(dev_delta_chunks),
              nchunks);
  const double gpu_delta_ratio = 100.0 * gpu_delta_bytes / total;
  std::printf("%-34s %10.2f %10s %8.3f %s, frames identical to the CPU's GPU profile %zu/%zu\n",
              "GPU device->device, deltas, encode", rate(t_dev_delta_enc), "-", gpu_delta_ratio,
              dev_delta_enc_ok ? "ok" : "FAILED", delta_identical, nchunks);
  if (pair_chunks) {
    const double pgb = masters.size() / 1e9;
    std::printf("%-34s %10.2f %10.2f %8.3f %s, frames identical %zu/%zu, CPU profile %.3f%%\n",
                "GPU device->device, paired fp32", pgb / Median(t_pair_enc), pgb / Median(t_pair_dec),
                100.0 * pair_bytes / masters.size(), pair_ok ? "exact" : "MISMATCH", pair_identical,
                pair_chunks, 100.0 * pair_cpu_bytes / masters.size());
  }
  for (const HostRun& h : lane_runs)
    std::printf("%-34s %10.2f %10.2f %8.3f %s, frames identical %zu/%zu\n",
                ("GPU host->host, " + std::to_string(h.lanes) + " lane" + (h.lanes > 1 ? "s" : "")).c_str(),
                h.enc, h.dec, gpu_ratio, h.ok ? "exact" : "MISMATCH", h.identical, nchunks);
  std::printf(
      "\nhost calls of N MiB (the mount's batches), GPU host->host (%d lanes), against the CPU's throughput "
      "on %u threads\n",
      default_lanes, threads);
  std::printf("%8s %10s %10s %10s %10s %s\n", "MiB", "CPU enc", "GPU enc", "CPU dec", "GPU dec", "check");
  size_t enc_cross = 0, dec_cross = 0;
  bool cross_ok = true;
  for (const Cross& x : cross) {
    std::printf("%8zu %10.2f %10.2f %10.2f %10.2f %s\n", x.mib, rate_cpu_enc, x.gpu.enc, rate_cpu_dec,
                x.gpu.dec, x.gpu.ok ? "exact" : "MISMATCH");
    cross_ok &= x.gpu.ok && x.gpu.identical == nchunks;
    if (!enc_cross && x.gpu.enc > rate_cpu_enc) enc_cross = x.mib;
    if (!dec_cross && x.gpu.dec > rate_cpu_dec) dec_cross = x.mib;
  }
  std::printf(
      "crossover (smallest call where the GPU beats all CPU threads): encode %zu MiB, decode %zu MiB "
      "(0: none)\n",
      enc_cross, dec_cross);
  std::printf("device copy bandwidth (read+write): %.1f GB/s; GPU decode moves %.1f%% of it, encode %.1f%%\n",
              copy_bw, 100.0 * (gb * (1 + gpu_ratio / 100)) / Median(t_dev_dec) / copy_bw,
              100.0 * (gb * (1 + gpu_ratio / 100)) / Median(t_dev_enc) / copy_bw);
  std::printf("ratio cost of the GPU profile: %+.3f points\n", gpu_ratio - cpu_ratio);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(
          f,
          "{\"gpu\": \"%s\", \"bytes\": %zu, \"chunks\": %zu, \"chunk_bytes\": %zu, \"dtype\": \"%s\", "
          "\"cpu_threads\": %u,\n \"cpu\": {\"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"ratio\": %.4f, "
          "\"exact\": %s},\n \"gpu_profile_cpu_ratio\": %.4f,\n"
          " \"gpu_d2d\": {\"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"ratio\": %.4f, \"exact\": %s, "
          "\"frames_identical\": %zu, \"fused_chunks\": %llu, \"dec_gbps_fused_no_hash\": %.3f, "
          "\"dec_gbps_merge_pass\": %.3f, \"enc_gbps_unchecked\": %.3f, \"enc_verify_failures\": %llu},\n"
          " \"gpu_h2h\": {\"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"exact\": %s, \"frames_identical\": "
          "%zu},\n"
          " \"copy_bw_gbps\": %.3f,\n",
          lmc::GpuDescription().c_str(), total, nchunks, chunk, dtype_name.c_str(), threads, rate(t_cpu_enc),
          rate(t_cpu_dec), cpu_ratio, cpu_exact ? "true" : "false", ref_ratio, rate(t_dev_enc),
          rate(t_dev_dec), gpu_ratio, dev_ok ? "true" : "false", identical,
          static_cast<unsigned long long>(fused_chunks), rate(t_dev_dec_nohash), rate(t_dev_dec_unfused),
          rate(t_dev_enc_unchecked), static_cast<unsigned long long>(checked_stats.encode_verify_failures),
          host_default.enc, host_default.dec, host_ok ? "true" : "false", host_identical, copy_bw);
      std::fprintf(
          f,
          " \"deltas\": {\"ratio\": %.4f, \"rans_chunks\": %zu, \"cpu_dec_gbps\": %.3f, \"cpu_exact\": %s, "
          "\"gpu_d2d_dec_gbps\": %.3f, \"gpu_exact\": %s, \"gpu_chunks\": %llu, \"gpu_d2d_enc_gbps\": %.3f, "
          "\"gpu_ratio\": %.4f, \"gpu_frames_identical\": %zu},\n",
          delta_ratio, delta_rans_chunks, rate(t_cpu_delta), cpu_delta_ok ? "true" : "false",
          rate(t_dev_delta), dev_delta_ok ? "true" : "false",
          static_cast<unsigned long long>(dev_delta_chunks), rate(t_dev_delta_enc), gpu_delta_ratio,
          delta_identical);
      if (pair_chunks)
        std::fprintf(f,
                     " \"paired\": {\"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"ratio\": %.4f, \"cpu_ratio\": "
                     "%.4f, \"exact\": %s, \"frames_identical\": %zu, \"chunks\": %zu},\n",
                     masters.size() / 1e9 / Median(t_pair_enc), masters.size() / 1e9 / Median(t_pair_dec),
                     100.0 * pair_bytes / masters.size(), 100.0 * pair_cpu_bytes / masters.size(),
                     pair_ok ? "true" : "false", pair_identical, pair_chunks);
      std::fprintf(f, " \"block_sizes\": [");
      for (size_t k = 0; k < block_runs.size(); ++k)
        std::fprintf(
            f,
            "%s{\"log2\": %d, \"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"ratio\": %.4f, \"exact\": %s, "
            "\"frames_identical\": %zu, \"fused_chunks\": %llu, \"default_dec_gbps\": %.3f}",
            k ? ", " : "", block_runs[k].log2, rate(block_runs[k].t_enc), rate(block_runs[k].t_dec),
            100.0 * block_runs[k].bytes / total, block_runs[k].ok ? "true" : "false", block_runs[k].identical,
            static_cast<unsigned long long>(block_runs[k].fused), rate(t_dev_dec_blocks_default));
      std::fprintf(f, "],\n \"gpu_h2h_lanes\": [");
      for (size_t k = 0; k < lane_runs.size(); ++k)
        std::fprintf(f, "%s{\"lanes\": %d, \"enc_gbps\": %.3f, \"dec_gbps\": %.3f, \"exact\": %s}",
                     k ? ", " : "", lane_runs[k].lanes, lane_runs[k].enc, lane_runs[k].dec,
                     lane_runs[k].ok ? "true" : "false");
      std::fprintf(f, "],\n \"host_calls\": [");
      for (size_t k = 0; k < cross.size(); ++k)
        std::fprintf(f,
                     "%s{\"mib\": %zu, \"cpu_enc_gbps\": %.3f, \"gpu_enc_gbps\": %.3f, \"cpu_dec_gbps\": "
                     "%.3f, \"gpu_dec_gbps\": %.3f, \"exact\": %s}",
                     k ? ", " : "", cross[k].mib, rate_cpu_enc, cross[k].gpu.enc, rate_cpu_dec,
                     cross[k].gpu.dec, cross[k].gpu.ok ? "true" : "false");
      std::fprintf(f, "],\n \"crossover_mib\": {\"encode\": %zu, \"decode\": %zu}}\n", enc_cross, dec_cross);
      std::fclose(f);
    }
  }
  cudaFree(d_in);
  cudaFree(d_frames);
  cudaFree(d_out);
  bool lanes_ok = true;
  for (const HostRun& h : lane_runs) lanes_ok &= h.ok && h.identical == nchunks;
  for (BlockRun& b : block_runs) {
    cudaFree(b.frames);
    lanes_ok &= b.ok && b.identical == nchunks;
  }
  return cpu_exact && dev_ok && lanes_ok && cross_ok && identical == nchunks && cpu_delta_ok &&
                 dev_delta_ok && dev_delta_enc_ok && delta_identical == nchunks && pair_ok &&
                 pair_identical == pair_chunks
             ? 0
             : 1;
}
