// The tools as processes against a real mount (mount.lmcfs -f as a child):
// stat agrees with du, gc refuses the mounted store offline and reclaims
// exactly the deleted file's bytes online, online gc during concurrent
// writes loses nothing, fsck online. Suite MountTools: label integration;
// always unmounts (fusermount3 -u -z); skips without /dev/fuse.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../fs/mount_util.h"
#include "tools_test_util.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;
using testing::PackBytesOnDisk;
using testing::RandomData;
namespace fsys = std::filesystem;

class MountTools : public lmc::testing::MountTest {
 protected:
  MountTools() {
    options_.wait_for_control_socket = true;
    // These tests measure what an explicit lmcfs-gc reclaims: no background
    // reclamation racing it (MountReclaim tests that), no holes punched
    // before it runs (PunchTest, MountReclaim).
    options_.mount_options = "gc=off,punch=off";
  }
  json Stat() {
    std::string out, err;
    EXPECT_EQ(Tool("lmcfs-stat", mnt_ + " --json", &out, &err), 0) << err;
    return out.empty() ? json() : json::parse(out);
  }

  // Runs a tool binary; returns its exit code, stdout in *out, stderr in *err.
  int Tool(const std::string& name, const std::string& args, std::string* out, std::string* err = nullptr) {
    const std::string o = root_ + "/tool.out", e = root_ + "/tool.err";
    int rc = Sh(std::string(LMC_TOOLS_BIN_DIR) + "/" + name + " " + args + " >" + o + " 2>" + e);
    *out = ReadFile(o);
    if (err) *err = ReadFile(e);
    return rc;
  }
};

// What each codec path did (docs/ARCHITECTURE.md, "GPU codec in the
// mount"): here the CPU's, with the reason there is no GPU.
TEST_F(MountTools, StatShowsTheCodecPaths) {
  const std::string data = RandomData(3 << 20, 21);
  WriteFile(P("d.bin"), data);
  Remount("gc=off,punch=off,gpu=off");
  EXPECT_EQ(ReadFile(P("d.bin")), data);  // decoded by the daemon
  json d = Stat()["daemon"];
  EXPECT_EQ(d["gpu"], "none (gpu=off)");
  EXPECT_EQ(d["gpu_encode_chunks"], 0u);
  EXPECT_EQ(d["gpu_decode_chunks"], 0u);
  EXPECT_GE(d["cpu_decode_chunks"].get<uint64_t>(), 3u);
  EXPECT_EQ(d["cpu_decode_bytes"].get<uint64_t>(), 3u << 20);
  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_, &out, &err), 0) << err;
  EXPECT_NE(
      out.find(
          "  codec: CPU encoded 0 B in 0 chunks, GPU encoded 0 B in 0 chunks; reads: CPU decoded 3.00 MiB"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("  GPU: none (gpu=off); batches: 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  dedup: all (chunks shared across all files of the store)\n"), std::string::npos)
      << out;
  char v[256] = {};
  ASSERT_GT(::getxattr(mnt_.c_str(), "user.lmcfs.gpu", v, sizeof v - 1), 0);
  EXPECT_STREQ(v, "none (gpu=off)");
  // Writes count too; and gpu=auto without a usable GPU says why.
  Remount("gc=off,punch=off");
  const std::string other = RandomData(3 << 20, 8);
  WriteFile(P("e.bin"), other);
  d = Stat()["daemon"];
  EXPECT_GE(d["cpu_encode_chunks"].get<uint64_t>() + d["gpu_encode_chunks"].get<uint64_t>(), 3u);
  EXPECT_EQ(d["cpu_encode_bytes"].get<uint64_t>() + d["gpu_encode_bytes"].get<uint64_t>(), 3u << 20);
  EXPECT_EQ(d["matched_chunks"], 0u);
  if (Sh("nvidia-smi >/dev/null 2>&1") != 0) {
    EXPECT_EQ(d["gpu"].get<std::string>().rfind("none (gpu=auto: ", 0), 0u) << d["gpu"];
  }
  // A copy of a stored file: its chunks are compared with the store's, not encoded.
  WriteFile(P("copy.bin"), data);
  d = Stat()["daemon"];
  EXPECT_EQ(d["cpu_encode_bytes"].get<uint64_t>() + d["gpu_encode_bytes"].get<uint64_t>(), 3u << 20);
  EXPECT_EQ(d["matched_bytes"].get<uint64_t>(), 3u << 20);
  ASSERT_EQ(Tool("lmcfs-stat", mnt_, &out, &err), 0) << err;
  EXPECT_NE(out.find("  already stored: 3.00 MiB in "), std::string::npos) << out;
  EXPECT_EQ(ReadFile(P("copy.bin")), data);
}

// Reads from the page cache cost no request to the daemon: the kernel
// keeps a file's attributes for a second (fuse_ops.h), so it does not ask
// for them before each read (with a timeout of 0 each 4 KiB read was a
// GETATTR first, 16 us instead of 1). The daemon counts the stats it
// answered (getattr_calls).
TEST_F(MountTools, CachedReadsAskTheDaemonForNothing) {
  const std::string data = RandomData(8 << 20, 41);
  WriteFile(P("r.bin"), data);
  const int fd = ::open(P("r.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(4096, '\0');
  for (size_t off = 0; off < data.size(); off += buf.size())  // into the page cache
    ASSERT_EQ(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off)), 4096);
  const uint64_t before = Stat()["daemon"]["getattr_calls"];
  uint64_t x = 1;
  for (int i = 0; i < 5000; ++i) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    const size_t off = (x >> 20) % (data.size() / buf.size()) * buf.size();
    ASSERT_EQ(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off)), 4096);
    ASSERT_EQ(buf, data.substr(off, buf.size())) << off;
  }
  ::close(fd);
  const uint64_t asked = Stat()["daemon"]["getattr_calls"].get<uint64_t>() - before;
  std::printf("5000 cached reads: %llu GETATTR requests\n", static_cast<unsigned long long>(asked));
  EXPECT_LT(asked, 100u) << "cached reads ask the daemon for the file's attributes";
}

// The daemon's memory by part: its resident size from the kernel, each
// bounded holder within its bound, and the bounds the mount was given.
TEST_F(MountTools, StatShowsTheDaemonsMemoryByPart) {
  Remount("gc=off,punch=off,gpu=off,cache_size=4M,write_buffer=32M,base_cache=16M,commit_queue=48M");
  const std::string data = RandomData(12 << 20, 31);
  WriteFile(P("m.bin"), data);
  EXPECT_EQ(ReadFile(P("m.bin")), data);
  const json m = Stat()["daemon"]["memory"];
  ASSERT_TRUE(m.is_object()) << m;
  const uint64_t resident = m["resident_bytes"];
  EXPECT_GT(resident, uint64_t{4} << 20);  // at least the chunk cache it filled
  EXPECT_GE(m["peak_resident_bytes"].get<uint64_t>(), resident);
  EXPECT_EQ(m["write_budget_bytes"], uint64_t{32} << 20);
  EXPECT_EQ(m["write_inflight_bytes"], 0u);                // every write committed by close
  EXPECT_EQ(m["commit_queue_bytes"], 0u);                  // and taken back from the committer
  EXPECT_EQ(m["commit_queue_limit"], uint64_t{48} << 20);  // commit_queue=
  // The chunks of m.bin sliced from its dirty blocks, still held as bases
  // of the next save: blocks alive or back in their pool (no more than
  // write_buffer=32M holds: 4 blocks), counted by the bytes that may hold
  // pages.
  EXPECT_GT(m["write_block_bytes"].get<uint64_t>() + m["write_block_pool_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(m["write_block_pool_capacity"], uint64_t{32} << 20);
  EXPECT_LE(m["write_block_pool_bytes"].get<uint64_t>(), m["write_block_pool_capacity"].get<uint64_t>());
  EXPECT_EQ(m["chunk_cache_capacity"], uint64_t{4} << 20);
  EXPECT_GT(m["chunk_cache_bytes"].get<uint64_t>(), 0u);  // the read decoded into it
  EXPECT_LE(m["chunk_cache_bytes"].get<uint64_t>(), uint64_t{4} << 20);
  EXPECT_EQ(m["base_cache_capacity"], uint64_t{16} << 20);
  EXPECT_LE(m["base_cache_bytes"].get<uint64_t>(), uint64_t{16} << 20);
  EXPECT_LE(m["delta_cache_bytes"].get<uint64_t>(), m["delta_cache_capacity"].get<uint64_t>());
  EXPECT_GT(m["delta_cache_bytes"].get<uint64_t>(), 0u);  // the chunks written: bases of the next save
  EXPECT_LE(m["frame_pool_bytes"].get<uint64_t>(), m["frame_pool_capacity"].get<uint64_t>());
  EXPECT_EQ(m["index_block_cache_capacity"], uint64_t{72} << 20);
  EXPECT_LE(m["index_block_cache_bytes"].get<uint64_t>(), uint64_t{72} << 20);
  EXPECT_GT(m["index_memtable_bytes"].get<uint64_t>(), 0u);  // the commits of m.bin
  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " -b", &out, &err), 0) << err;
  EXPECT_NE(out.find("  memory: resident "), std::string::npos) << out;
  EXPECT_NE(out.find("writes in flight 0 of 33554432, frames at the committer 0 of 50331648, write blocks "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  index memory: memtables "), std::string::npos) << out;
  EXPECT_NE(out.find(", block caches "), std::string::npos) << out;
  EXPECT_NE(out.find(" of 75497472\n"), std::string::npos) << out;
}

// Once the mount is quiet for trim_idle seconds (no read, write, removal,
// chunk, commit, flush, fsync or release, none running, no rebase queued),
// the daemon gives its free memory back: once a burst.
TEST_F(MountTools, TheDaemonGivesFreeMemoryBackOnceQuiet) {
  const std::string t = RandomData(24 << 20, 41);
  Remount("gc=off,punch=off,gpu=off,trim_idle=1");
  WriteFile(P("t.bin"), t);
  auto trims = [&] { return Stat()["daemon"]["memory"]["trims"].get<uint64_t>(); };
  uint64_t n = 0;
  for (int i = 0; i < 200 && (n = trims()) == 0; ++i) ::usleep(100 * 1000);
  ASSERT_GE(n, 1u) << "no trim within 20 s of quiet";
  // The mount may also have trimmed before the write (mounting and
  // creating a file are not work; a sanitized daemon beside other tests
  // spends the quiet time there), so the burst's own trim may come after
  // the first one seen: the count settles once it is the same 2.5 s
  // apart (a trim comes 1-2 s after the last work).
  for (int i = 0; i < 8; ++i) {
    ::usleep(2500 * 1000);
    const uint64_t again = trims();
    if (again == n) break;
    n = again;
  }
  // lmcfs-stat's own calls are not work: no trim after another 3 s.
  ::usleep(3000 * 1000);
  EXPECT_EQ(trims(), n);
  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_, &out, &err), 0) << err;
  EXPECT_NE(out.find("  memory given back when quiet: "), std::string::npos) << out;
  // A new burst earns another.
  WriteFile(P("u.bin"), RandomData(8 << 20, 42));
  uint64_t m = n;
  for (int i = 0; i < 200 && (m = trims()) == n; ++i) ::usleep(100 * 1000);
  EXPECT_GE(m, n + 1);
  // trim_idle=0: never.
  Remount("gc=off,punch=off,gpu=off,trim_idle=0");
  EXPECT_EQ(ReadFile(P("t.bin")).size(), size_t{24} << 20);
  ::usleep(2500 * 1000);
  EXPECT_EQ(trims(), 0u);
}

// While files are written, the free write blocks are kept for the next
// writes (up to 32: 256 MiB); once the mount is quiet, the trimmer frees
// all but 8 (64 MiB) with the allocator's free memory.
TEST_F(MountTools, TheWriteBlockPoolShrinksOnceQuiet) {
  Remount("gc=off,punch=off,gpu=off,delta=off,cache_size=4M,trim_idle=3");
  // 24 files written at once, 1 MiB to each in turn, 4 MiB each: each
  // holds a block of its own until it is closed, then the blocks are free.
  // The pool counts the bytes that may hold pages: at least the 4 MiB
  // written into each block (sealing may give back the rest), so more
  // than 8 free blocks are more than 64 MiB.
  constexpr int kFiles = 24, kPieces = 4;
  constexpr size_t kPiece = size_t{1} << 20;
  const std::string data = RandomData(kFiles * kPieces * kPiece, 43);
  std::vector<int> fds;
  for (int i = 0; i < kFiles; ++i) {
    fds.push_back(::open(P("f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    ASSERT_GE(fds.back(), 0) << std::strerror(errno);
  }
  for (int piece = 0; piece < kPieces; ++piece)
    for (int i = 0; i < kFiles; ++i)
      ASSERT_EQ(::write(fds[i], data.data() + (kPieces * i + piece) * kPiece, kPiece),
                static_cast<ssize_t>(kPiece));
  // The mount may have trimmed already before the writes began (opening
  // and creating files is not work for the trimmer; a slow sanitized
  // daemon spends the quiet time there): the trims of this burst count
  // from here.
  const uint64_t trims_before = Stat()["daemon"]["memory"]["trims"].get<uint64_t>();
  for (int fd : fds) {
    EXPECT_EQ(::fsync(fd), 0);
    EXPECT_EQ(::close(fd), 0);
  }
  // Each fsync and each close's flush was counted (the trimmer takes them
  // for work, and waits while one runs).
  EXPECT_GE(Stat()["daemon"]["flush_calls"].get<uint64_t>(), uint64_t{2 * kFiles});
  auto memory = [&] { return Stat()["daemon"]["memory"]; };
  // The last files' blocks come back with their release, which the kernel
  // sends after close returns: watched for up to 1.5 s (the trimmer waits
  // for 3 s of quiet).
  json busy;
  for (int i = 0; i < 15; ++i) {
    busy = memory();
    if (busy["write_block_pool_bytes"].get<uint64_t>() > (uint64_t{64} << 20)) break;
    ::usleep(100 * 1000);
  }
  EXPECT_GT(busy["write_block_pool_bytes"].get<uint64_t>(), uint64_t{64} << 20) << busy;
  EXPECT_LE(busy["write_block_pool_bytes"].get<uint64_t>(), uint64_t{256} << 20) << busy;
  EXPECT_EQ(busy["trims"].get<uint64_t>(), trims_before) << busy;
  json quiet;
  for (int i = 0; i < 200; ++i) {
    quiet = memory();
    if (quiet["trims"].get<uint64_t>() > trims_before) break;
    ::usleep(100 * 1000);
  }
  ASSERT_GT(quiet["trims"].get<uint64_t>(), trims_before) << "no trim within 20 s of quiet";
  EXPECT_LE(quiet["write_block_pool_bytes"].get<uint64_t>(), uint64_t{64} << 20) << quiet;
  EXPECT_EQ(Stat()["daemon"]["flushes_in_flight"].get<uint64_t>(), 0u);  // the releases ended before
  for (int i = 0; i < kFiles; ++i)
    ASSERT_EQ(ReadFile(P("f" + std::to_string(i))), data.substr(kPieces * i * kPiece, kPieces * kPiece)) << i;
}

TEST_F(MountTools, StatAgreesWithDuAndGcReclaimsTheDeletedFile) {
  const std::string keep = RandomData(2 << 20, 11), gone = RandomData(3 << 20, 12);
  std::string zeros(4 << 20, '\0');
  fsys::create_directories(P("ck"));
  WriteFile(P("ck/keep.bin"), keep);
  WriteFile(P("ck/zeros.bin"), zeros);
  WriteFile(P("gone.bin"), gone);
  Remount();  // the pack written so far is no longer the active one

  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " --json", &out, &err), 0) << err;
  json j = json::parse(out);
  std::map<std::string, json> by;
  for (const auto& e : j["entries"]) by[e["path"]] = e;
  ASSERT_TRUE(by.count("/gone.bin")) << out;
  EXPECT_EQ(j["mountpoint"], mnt_);
  EXPECT_TRUE(j.contains("daemon"));
  // du (allocated blocks) and du --apparent-size agree with stored/logical.
  for (const char* p : {"/ck/keep.bin", "/ck/zeros.bin", "/gone.bin"}) {
    struct stat st;
    ASSERT_EQ(::stat((mnt_ + p).c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), by[p]["logical"].get<uint64_t>()) << p;
    const uint64_t du = static_cast<uint64_t>(st.st_blocks) * 512, stored = by[p]["stored"];
    EXPECT_LE(stored, du) << p;
    EXPECT_LT(du - stored, 512u) << p;
  }
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " " + P("ck") + " --sort size", &out, &err), 0) << err;
  EXPECT_EQ(out.find("/gone.bin"), std::string::npos) << out;
  EXPECT_LT(out.find("/ck/zeros.bin"), out.find("/ck/keep.bin")) << out;

  // Offline gc on the mounted store is refused with the way out.
  ASSERT_EQ(Tool("lmcfs-gc", store_, &out, &err), 1);
  EXPECT_NE(err.find("is mounted at " + mnt_ + "; run lmcfs-gc on the mountpoint"), std::string::npos) << err;
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " --repair", &out, &err), 8);
  EXPECT_NE(err.find("is mounted at"), std::string::npos) << err;

  // Online gc reclaims exactly the deleted file's records.
  const uint64_t want =
      by["/gone.bin"]["stored"].get<uint64_t>() + 64 * by["/gone.bin"]["chunks"].get<uint64_t>();
  ASSERT_EQ(::unlink(P("gone.bin").c_str()), 0);
  const uint64_t before = PackBytesOnDisk(store_);
  ASSERT_EQ(Tool("lmcfs-gc", mnt_ + " --json --threshold 0.9", &out, &err), 0) << err;
  json g = json::parse(out);
  EXPECT_TRUE(g["online"].get<bool>());
  EXPECT_EQ(g["packs_rewritten"], 1u) << out;
  EXPECT_EQ(before - PackBytesOnDisk(store_), want) << out;
  EXPECT_EQ(g["pack_bytes_before"].get<uint64_t>() - g["pack_bytes_after"].get<uint64_t>(), want) << out;

  EXPECT_TRUE(FileEquals(P("ck/keep.bin"), keep));
  EXPECT_TRUE(FileEquals(P("ck/zeros.bin"), zeros));
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_ + " --json", &out, &err), 0) << out << err;
  EXPECT_EQ(json::parse(out)["exit_code"], 0);
  Unmount();
  ASSERT_EQ(Tool("lmcfs-fsck", store_, &out, &err), 0) << out << err;
  ASSERT_EQ(Tool("lmcfs-stat", store_ + " --json", &out, &err), 0) << err;
  EXPECT_EQ(json::parse(out)["totals"]["files"], 2u);
  Mount();
  EXPECT_TRUE(FileEquals(P("ck/keep.bin"), keep));
}

TEST_F(MountTools, OnlineGcDuringConcurrentWritesLosesNothing) {
  for (int i = 0; i < 8; i++) WriteFile(P("old" + std::to_string(i)), RandomData(1 << 20, 300 + i));
  Remount();
  for (int i = 0; i < 8; i += 2) ASSERT_EQ(::unlink(P("old" + std::to_string(i)).c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop || i < 8; i++) {
      WriteFile(P("new" + std::to_string(i)), RandomData((512 << 10) + i * 4099, 400 + i));
      written = i + 1;
    }
  });
  std::string out, err;
  const int rc = Tool("lmcfs-gc", mnt_ + " --threshold 0.9 --rate 1G --json", &out, &err);
  stop = true;
  writer.join();
  ASSERT_EQ(rc, 0) << err;
  EXPECT_GT(json::parse(out)["bytes_reclaimed"].get<uint64_t>(), 0u) << out;
  auto check = [&] {
    for (int i = 1; i < 8; i += 2)
      EXPECT_TRUE(FileEquals(P("old" + std::to_string(i)), RandomData(1 << 20, 300 + i))) << i;
    for (int i = 0; i < written; i++)
      EXPECT_TRUE(FileEquals(P("new" + std::to_string(i)), RandomData((512 << 10) + i * 4099, 400 + i))) << i;
  };
  check();
  Remount();
  check();
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_, &out, &err), 0) << out << err;
}

// Paths under DIR (and DIR) with a group or other permission bit, links
// not followed.
std::vector<std::string> LooseModes(const std::string& dir) {
  std::vector<std::string> out;
  auto check = [&](const fsys::path& p) {
    const fsys::file_status st = fsys::symlink_status(p);
    if (!fsys::is_symlink(st) &&
        (st.permissions() & (fsys::perms::group_all | fsys::perms::others_all)) != fsys::perms::none)
      out.push_back(p.string());
  };
  check(dir);
  for (const auto& e : fsys::recursive_directory_iterator(dir)) check(e.path());
  return out;
}

// docs/ARCHITECTURE.md, "Store permissions": the store mount.lmcfs creates
// is the owner's only (control socket included); a loosened one is refused
// with the path and the fix, mounts with unsafe_store_perms, and lmcfs-fsck
// reports it and --repair tightens it.
// `mkdir S && mount.lmcfs S M` (the README's and the scripts' way): an empty
// directory the user made for a new store becomes the owner's only, where a
// store with anything in it would be refused.
TEST_F(MountTools, EmptyDirectoryMadeForANewStoreBecomesPrivate) {
  Unmount();
  WaitStoreFree();
  fsys::remove_all(store_);
  ASSERT_TRUE(fsys::create_directory(store_));
  fsys::permissions(store_, fsys::perms::owner_all | fsys::perms::group_read | fsys::perms::group_exec |
                                fsys::perms::others_read | fsys::perms::others_exec);
  Mount();
  EXPECT_EQ(fsys::status(store_).permissions(), fsys::perms::owner_all);
  WriteFile(P("a.bin"), RandomData(1 << 20, 22));
  EXPECT_TRUE(FileEquals(P("a.bin"), RandomData(1 << 20, 22)));
}

TEST_F(MountTools, LoosenedStoreIsRefusedReportedAndRepaired) {
  WriteFile(P("a.bin"), RandomData(1 << 20, 21));
  EXPECT_EQ(fsys::status(store_).permissions(), fsys::perms::owner_all);
  ASSERT_TRUE(fsys::exists(store_ + "/control.sock"));
  EXPECT_EQ(LooseModes(store_), std::vector<std::string>{});
  Unmount();
  WaitStoreFree();
  std::string pack;
  for (const auto& e : fsys::directory_iterator(store_ + "/packs")) pack = e.path().string();
  ASSERT_FALSE(pack.empty());
  fsys::permissions(pack, fsys::perms::group_read, fsys::perm_options::add);
  fsys::permissions(store_, fsys::perms::others_exec, fsys::perm_options::add);

  // Refused, naming the paths and the fix; nothing mounted.
  const std::string err_file = root_ + "/mount.err";
  EXPECT_EQ(Sh("timeout 20 " LMC_MOUNT_BIN " " + store_ + " " + mnt_ + " -f 2>" + err_file), 32);
  const std::string err = ReadFile(err_file);
  EXPECT_NE(err.find(pack + ": mode 0640"), std::string::npos) << err;
  EXPECT_NE(err.find(store_ + ": mode 0701"), std::string::npos) << err;
  EXPECT_NE(err.find("chmod -R go-rwx " + store_), std::string::npos) << err;
  EXPECT_NE(err.find("lmcfs-fsck --repair " + store_), std::string::npos) << err;
  EXPECT_NE(err.find("unsafe_store_perms"), std::string::npos) << err;
  EXPECT_FALSE(IsMounted(mnt_));

  // The owner means it: mounts, and leaves the modes alone.
  Remount("gc=off,punch=off,unsafe_store_perms");
  EXPECT_TRUE(FileEquals(P("a.bin"), RandomData(1 << 20, 21)));
  Unmount();
  WaitStoreFree();
  EXPECT_EQ(LooseModes(store_), (std::vector<std::string>{store_, pack}));

  std::string out;
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " -q --json", &out), 4) << out;
  json j = json::parse(out);
  std::vector<std::string> paths;
  for (const auto& p : j["store"]["problems"]) {
    EXPECT_EQ(p["kind"], "loose_permissions") << p;
    paths.push_back(p["path"]);
  }
  EXPECT_EQ(paths, (std::vector<std::string>{store_, pack}));
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " -q --repair", &out), 1) << out;
  EXPECT_NE(out.find("(repaired)"), std::string::npos) << out;
  EXPECT_EQ(LooseModes(store_), std::vector<std::string>{});
  ASSERT_EQ(Tool("lmcfs-fsck", store_ + " -q", &out), 0) << out;
  Remount("gc=off,punch=off");
  EXPECT_TRUE(FileEquals(P("a.bin"), RandomData(1 << 20, 21)));
}

// Background reclamation (gc=auto, the default) on a real mount, while
// writers, readers and deletes go on in bursts: nothing read ever differs,
// dead bytes come down to the bound between bursts without any lmcfs-gc,
// deleting everything gives the space back, fsck is clean.
class MountReclaim : public MountTools {
 protected:
  MountReclaim() { options_.mount_options = "gc=auto,delta=off"; }
  uint64_t PackDiskBytes() { return PackBytesOnDisk(store_); }
};

TEST_F(MountReclaim, ReclaimsBetweenBurstsOfWritesReadsAndDeletes) {
  std::map<std::string, std::string> files;  // what the mount must hold
  std::mutex mu;
  int next = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w)
      threads.emplace_back([&, w] {
        for (int i = 0; i < 4; ++i) {
          int n;
          {
            std::lock_guard l(mu);
            n = next++;
          }
          const std::string name = "f" + std::to_string(n);
          const std::string data = RandomData((1 << 20) + 4099 * i + w, 1000 + (n + 1) * 7 + w);
          WriteFile(P(name), data);
          std::lock_guard l(mu);
          files[name] = data;
        }
      });
    threads.emplace_back([&] {  // reader: every file it finds is exactly right
      for (int k = 0; k < 6; ++k) {
        std::map<std::string, std::string> snap;
        {
          std::lock_guard l(mu);
          snap = files;
        }
        for (const auto& [name, data] : snap) EXPECT_TRUE(FileEquals(P(name), data)) << name;
      }
    });
    for (auto& t : threads) t.join();
    // Deletes: three quarters of what exists, oldest first.
    std::vector<std::string> names;
    for (const auto& [name, data] : files) names.push_back(name);
    for (size_t i = 0; i < names.size() * 3 / 4; ++i) {
      ASSERT_EQ(::unlink(P(names[i]).c_str()), 0);
      files.erase(names[i]);
    }
    // Idle: the daemon reclaims without being asked (holes punched at
    // once, compaction for the rest), down to the bound on disk.
    bool under = lmc::testing::WaitUntil(
        [&] {
          const json t = Stat()["totals"];
          return t["dead_disk_bytes"].get<double>() <= 0.10 * t["pack_disk_bytes"].get<double>() + (1 << 20);
        },
        std::chrono::seconds(30), std::chrono::milliseconds(250));
    EXPECT_TRUE(under) << "round " << round << ": " << Stat()["totals"].dump();
  }
  // Holes punched as records died did most of it (often all: then no
  // compaction pass was needed).
  const json d = Stat()["daemon"];
  EXPECT_GT(d["store_punched_bytes"].get<uint64_t>(), 0u) << d.dump();
  EXPECT_EQ(d["reclaim_errors"].get<uint64_t>(), 0u) << d.dump();
  for (const auto& [name, data] : files) EXPECT_TRUE(FileEquals(P(name), data)) << name;
  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_, &out, &err), 0) << out << err;

  // Delete everything: within a minute of idle the packs are (nearly) gone.
  for (const auto& [name, data] : files) ASSERT_EQ(::unlink(P(name).c_str()), 0);
  files.clear();
  // The sealed packs, left without a live record, go too (an idle pass
  // deletes them without copying): at most the active pack stays.
  EXPECT_TRUE(lmc::testing::WaitUntil(
      [&] { return PackDiskBytes() < (1 << 20) && Stat()["totals"]["packs"].get<uint64_t>() <= 1; },
      std::chrono::seconds(60), std::chrono::milliseconds(250)))
      << PackDiskBytes() << " bytes of packs left: " << Stat()["totals"].dump();
  EXPECT_GE(Stat()["daemon"]["reclaim_passes"].get<uint64_t>(), 1u);
  Remount();
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_, &out, &err), 0) << out << err;
}

// Names that are not UTF-8, made through the kernel as any program may:
// lmcfs-stat shows them escaped with their bytes in path_hex and finds one
// given as an argument in its own bytes; fsck and gc run clean over them
// (the daemon's JSON refused such a name: stat failed outright).
TEST_F(MountTools, NamesThatAreNotUtf8) {
  const std::string dir = "d\xbd", file = "\xff\xfe.bin";
  ASSERT_TRUE(fsys::create_directory(P(dir)));
  const std::string data = RandomData(2 << 20, 77);
  WriteFile(P(dir + "/" + file), data);
  WriteFile(P("gone\xe2\x82"), RandomData(1 << 20, 78));  // cut in the middle of a character
  ASSERT_EQ(::unlink(P("gone\xe2\x82").c_str()), 0);
  Remount();  // the pack written so far is no longer the active one

  const json listed = Stat();  // (a temporary's member would dangle in the loop)
  std::map<std::string, json> by;
  for (const auto& e : listed["entries"]) by[e["path"]] = e;
  const std::string shown = "/d\\xbd/\\xff\\xfe.bin";
  ASSERT_TRUE(by.count(shown)) << Stat().dump();
  EXPECT_EQ(by[shown]["path_hex"], "2f64bd2ffffe2e62696e");
  EXPECT_EQ(by[shown]["logical"], data.size());
  std::string out, err;
  ASSERT_EQ(Tool("lmcfs-stat", mnt_ + " '" + P(dir) + "' --json", &out, &err), 0) << err;
  const json j = json::parse(out);
  ASSERT_EQ(j["entries"].size(), 2u) << out;
  EXPECT_EQ(j["entries"][0]["path"], "/d\\xbd");
  EXPECT_EQ(j["entries"][1]["path"], shown);
  ASSERT_EQ(Tool("lmcfs-stat", mnt_, &out, &err), 0) << err;
  EXPECT_NE(out.find(shown), std::string::npos) << out;
  // A name that is not there, given by a relative path from inside the
  // mount, is said by its place in the filesystem; the rest is shown.
  ASSERT_EQ(Sh("cd '" + P(dir) + "' && " LMC_TOOLS_BIN_DIR "/lmcfs-stat " + mnt_ + " 'no\xfe' '" + file +
               "' >" + root_ + "/o 2>" + root_ + "/e"),
            1);
  EXPECT_EQ(ReadFile(root_ + "/e"),
            "lmcfs-stat: cannot show '/d\\xbd/no\\xfe': no such file or directory in the filesystem\n");
  EXPECT_NE(ReadFile(root_ + "/o").find("  " + shown + "\n"), std::string::npos) << ReadFile(root_ + "/o");
  ASSERT_EQ(Tool("lmcfs-gc", mnt_ + " --threshold 1 --json", &out, &err), 0) << out << err;
  EXPECT_GT(json::parse(out)["bytes_reclaimed"].get<uint64_t>(), 0u) << out;
  ASSERT_EQ(Tool("lmcfs-fsck", mnt_ + " --deep --json", &out, &err), 0) << out << err;
  EXPECT_EQ(json::parse(out)["exit_code"], 0);
  EXPECT_TRUE(FileEquals(P(dir + "/" + file), data));
  Unmount();
  ASSERT_EQ(Tool("lmcfs-fsck", store_, &out, &err), 0) << out << err;
  ASSERT_EQ(Tool("lmcfs-stat", store_ + " '/" + dir + "/" + file + "' --json", &out, &err), 0) << err;
  EXPECT_EQ(json::parse(out)["entries"][0]["path_hex"], "2f64bd2ffffe2e62696e") << out;
  Mount();
  EXPECT_TRUE(FileEquals(P(dir + "/" + file), data));
}

}  // namespace
}  // namespace lmc::tools
