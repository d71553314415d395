// store_bench: append bandwidth of the chunk store against plain
// write+fdatasync of the same bytes to the same disk (what
// `dd bs=4M conv=fdatasync` measures), and index inserts and lookups per
// second. Usage: store_bench DIR [MiB to append, default 512]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "lmc/bytes.h"
#include "lmc/store/store.h"

using namespace lmc::store;
using Clock = std::chrono::steady_clock;

static double Secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: store_bench DIR [MiB]\n");
    return 16;
  }
  const std::string dir = argv[1];
  const size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 512;
  const size_t chunk = 4 << 20, batch_chunks = 4;
  std::filesystem::remove_all(dir + "/bench_store");
  std::filesystem::create_directories(dir);

  std::mt19937_64 rng(1);
  std::vector<uint8_t> frame(chunk);
  for (auto& b : frame) b = static_cast<uint8_t>(rng());

  // 1. Plain sequential write + fdatasync every 16 MiB (same sync cadence).
  {
    const std::string p = dir + "/bench_plain.bin";
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    auto t = Clock::now();
    for (size_t i = 0; i < mib / 4; ++i) {
      if (::write(fd, frame.data(), chunk) != static_cast<ssize_t>(chunk)) return 8;
      if ((i + 1) % batch_chunks == 0) ::fdatasync(fd);
    }
    ::fdatasync(fd);
    double s = Secs(t);
    ::close(fd);
    ::unlink(p.c_str());
    std::printf("plain write+fdatasync: %zu MiB in %.2f s = %.0f MiB/s\n", mib, s, mib / s);
  }

  StoreOptions o;
  auto st = Store::Open(dir + "/bench_store", o);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.status().ToString().c_str());
    return 8;
  }
  std::unique_ptr<Store> owned = std::move(*st);
  Store& s = *owned;
  // 2. Store appends: batches of 4 distinct 4 MiB frames, sync commits.
  {
    auto t = Clock::now();
    for (size_t i = 0; i < mib / 4; i += batch_chunks) {
      Batch b;
      for (size_t j = 0; j < batch_chunks; ++j) {
        uint64_t tag = i + j;
        lmc::StoreLE64(frame.data(), tag);  // distinct chunks
        ChunkKey k =
            ChunkKey::Of(reinterpret_cast<uint8_t*>(&tag), 8);  // keys: bench only, not content hashes
        b.AddChunk(k, frame, chunk);
      }
      lmc::Status cs = s.Commit(b, true);
      if (!cs.ok()) {
        std::fprintf(stderr, "%s\n", cs.ToString().c_str());
        return 8;
      }
    }
    double sec = Secs(t);
    std::printf("store append (16 MiB sync commits): %zu MiB in %.2f s = %.0f MiB/s\n", mib, sec, mib / sec);
  }
  // 3. Index: batches of 1000 small chunks.
  {
    const size_t n = 200000, per = 1000;
    std::vector<uint8_t> tiny(16, 7);
    auto t = Clock::now();
    for (size_t i = 0; i < n; i += per) {
      Batch b;
      for (size_t j = 0; j < per; ++j) {
        uint64_t tag = (uint64_t{1} << 40) + i + j;
        b.AddChunk(ChunkKey::Of(reinterpret_cast<uint8_t*>(&tag), 8), tiny, 16);
      }
      if (!s.Commit(b, true).ok()) return 8;
    }
    double sec = Secs(t);
    std::printf("index inserts (1000 per sync commit): %zu in %.2f s = %.0f /s\n", n, sec, n / sec);
    t = Clock::now();
    const size_t looks = 100000;
    for (size_t i = 0; i < looks; ++i) {
      uint64_t tag = (uint64_t{1} << 40) + (i * 7919) % n;
      if (!s.GetChunkInfo(ChunkKey::Of(reinterpret_cast<uint8_t*>(&tag), 8)).ok()) return 8;
    }
    sec = Secs(t);
    std::printf("index lookups: %zu in %.2f s = %.1f us each\n", looks, sec, sec * 1e6 / looks);
  }
  owned.reset();  // closed before its directory goes
  std::filesystem::remove_all(dir + "/bench_store");
  return 0;
}
