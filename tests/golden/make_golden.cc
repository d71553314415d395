// Writes the golden files of one format version (docs/FORMAT.md, "Golden
// files"): a frame, a .lmc container, a small chunk store and a small
// filesystem written through fs::Filesystem, each with the bytes it decodes
// to. Built only on demand (target lmc_make_golden) and run
// by scripts/make_golden.sh; the tests read the checked-in output and never
// run this.
//
// Inputs are deterministic: normal-ish weights from a fixed-seed
// mt19937_64 through Box-Muller (no std::normal_distribution, whose output
// differs between standard libraries).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fs_tree.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/snapshots.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"

namespace {

namespace fsys = std::filesystem;
using lmc::store::ChunkKey;

constexpr uint32_t kChunk = 16 << 10;  // bytes of every store chunk and container chunk
constexpr size_t kFsFile = 64 << 10;   // bytes of each checkpoint in the fs store
constexpr lmc::fs::Caller kOwner{1000, 1000};

std::vector<float> Weights(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53; };
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(0.02 * std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()));
  }
  return v;
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// bf16: the top half of each f32 (truncation), little-endian.
std::vector<uint8_t> Bf16Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    out[2 * i] = static_cast<uint8_t>(bits >> 16);
    out[2 * i + 1] = static_cast<uint8_t>(bits >> 24);
  }
  return out;
}

void Die(const std::string& what, const lmc::Status& s) {
  std::fprintf(stderr, "make_golden: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

void WriteFile(const fsys::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "make_golden: cannot write %s\n", p.c_str());
    std::exit(1);
  }
}

std::vector<uint8_t> Encode(const std::vector<uint8_t>& data, lmc::DType dtype,
                            const std::vector<uint8_t>* base = nullptr) {
  lmc::Workspace ws;
  std::vector<uint8_t> frame(lmc::MaxEncodedSize(data.size()));
  lmc::EncodeParams p;
  p.dtype = dtype;
  p.base = base ? base->data() : nullptr;
  auto n = lmc::EncodeChunk(data.data(), data.size(), p, frame.data(), frame.size(), ws);
  if (!n.ok()) Die("encode", n.status());
  frame.resize(*n);
  return frame;
}

// Removes what opening a store writes again and does not need: RocksDB
// logs, options files and lock files.
void TrimStore(const fsys::path& dir) {
  std::vector<fsys::path> drop;
  for (const auto& e : fsys::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("LOG") || name.starts_with("OPTIONS-") || name == "LOCK") drop.push_back(e.path());
  }
  for (const auto& p : drop) fsys::remove(p);
}

// One file chunk of the golden store: stored (as a delta when base is set)
// and referenced by one extent, as the filesystem would.
struct StoreChunk {
  uint64_t inode;
  uint64_t offset;
  std::vector<uint8_t> data;
  const StoreChunk* base;  // nullptr: standalone
};

void AddToBatch(const StoreChunk& c, const lmc::store::KeyScheme& keys, lmc::store::Batch* batch) {
  const ChunkKey key = keys.Of(c.data.data(), c.data.size());
  std::optional<ChunkKey> base;
  if (c.base) base = keys.Of(c.base->data.data(), c.base->data.size());
  auto frame = Encode(c.data, lmc::DType::kBF16, c.base ? &c.base->data : nullptr);
  batch->AddChunk(key, frame, static_cast<uint32_t>(c.data.size()), base);
  lmc::store::Extent e;
  e.length = static_cast<uint32_t>(c.data.size());
  e.chunk = key;
  batch->Put(lmc::store::Cf::kExtents, lmc::store::ExtentKey(c.inode, c.offset), lmc::store::EncodeExtent(e));
}

void MakeStore(const fsys::path& dir) {
  // Inode 2: two standalone chunks. Inode 3: the next "checkpoint" of inode
  // 2's first chunk (every 97th value changed), stored as a delta on it.
  std::vector<StoreChunk> chunks;
  chunks.reserve(3);
  chunks.push_back({2, 0, Bf16Bytes(Weights(kChunk / 2, 3)), nullptr});
  chunks.push_back({2, kChunk, Bf16Bytes(Weights(kChunk / 2, 4)), nullptr});
  std::vector<float> next = Weights(kChunk / 2, 3);
  for (size_t i = 0; i < next.size(); i += 97) next[i] *= 1.01f;
  chunks.push_back({3, 0, Bf16Bytes(next), &chunks[0]});

  lmc::store::StoreOptions so;
  so.chunk_size = kChunk;
  auto store = lmc::store::Store::Open(dir.string(), so);
  if (!store.ok()) Die("open store", store.status());
  for (const auto& group : {std::vector<size_t>{0, 1}, std::vector<size_t>{2}}) {
    lmc::store::Batch batch;
    for (size_t i : group) AddToBatch(chunks[i], (*store)->keys(), &batch);
    if (auto s = (*store)->Commit(batch); !s.ok()) Die("commit", s);
  }

  // The manifest the test checks the store against.
  std::ofstream m(dir.parent_path() / "store.manifest");
  m << "# Written by tests/golden/make_golden.cc. chunk <key = the store's hash of the decoded bytes>"
       " <decoded bytes> <delta depth> <base key or ->\n"
       "# extent <inode> <file offset> <length> <chunk key>\n";
  for (const auto& c : chunks) {
    const ChunkKey key = (*store)->keys().Of(c.data.data(), c.data.size());
    auto info = (*store)->GetChunkInfo(key);
    if (!info.ok()) Die("chunk info", info.status());
    m << "chunk " << key.ToHex() << ' ' << info->decoded_len << ' ' << static_cast<int>(info->delta_depth)
      << ' ' << (info->base ? info->base->ToHex() : "-") << '\n';
  }
  for (const auto& c : chunks) {
    m << "extent " << c.inode << ' ' << c.offset << ' ' << c.data.size() << ' '
      << (*store)->keys().Of(c.data.data(), c.data.size()).ToHex() << '\n';
  }
  store->reset();  // closes RocksDB cleanly

  TrimStore(dir);
}

void Check(const std::string& what, int err) {
  if (err != 0) Die(what, lmc::Status::IOError("errno " + std::to_string(err)));
}

// One "checkpoint" of the fs store: step `step` of a series where each step
// changes every 97th value of the one before by 1%.
std::vector<uint8_t> Checkpoint(int step) {
  std::vector<float> w = Weights(kFsFile / 2, 5);
  for (int s = 1; s < step; ++s)
    for (size_t i = static_cast<size_t>(s); i < w.size(); i += 97) w[i] *= 1.01f;
  return Bf16Bytes(w);
}

uint64_t WriteNewFile(lmc::fs::Filesystem& fs, uint64_t parent, const std::string& name, mode_t mode,
                      const std::vector<uint8_t>& bytes) {
  struct stat st;
  Check("create " + name, fs.Create(parent, name, mode, kOwner, &st));
  for (size_t off = 0; off < bytes.size(); off += kChunk / 2)  // writes of half a chunk, as a writer might
    Check("write " + name,
          fs.Write(st.st_ino, off, bytes.data() + off, std::min<size_t>(kChunk / 2, bytes.size() - off)));
  Check("flush " + name, fs.Flush(st.st_ino));
  Check("release " + name, fs.Release(st.st_ino, true));
  return st.st_ino;
}

struct OpenFs {
  std::unique_ptr<lmc::store::Store> store;
  std::unique_ptr<lmc::fs::Filesystem> fs;
  void Close() {
    if (fs)
      if (auto s = fs->Shutdown(); !s.ok()) Die("shutdown", s);
    fs.reset();
    store.reset();  // closes RocksDB cleanly
  }
};

OpenFs OpenFsStore(const fsys::path& dir, bool read_only) {
  lmc::store::StoreOptions so;
  so.chunk_size = kChunk;
  auto store = lmc::store::Store::Open(dir.string(), so);
  if (!store.ok()) Die("open fs store", store.status());
  lmc::fs::FsOptions fo;
  fo.chunk_size = kChunk;
  fo.encode_threads = 1;
  fo.read_only = read_only;
  auto fs = lmc::fs::Filesystem::Open(store->get(), dir.string(), fo);
  if (!fs.ok()) Die("open filesystem", fs.status());
  return {std::move(*store), std::move(*fs)};
}

// The filesystem-level golden store: metadata of every kind the filesystem
// and its snapshot policy write (docs/FORMAT.md, section 8), through the
// real core. /ckpt (0750) holds three checkpoints of kFsFile bytes with
// reverse deltas on: step 1 is rebased onto step 2 (delta chunks); step 3
// is written by a mount whose rebase thread never runs, so the rebases of
// step 2 onto it stay queued (rebase/ records). /ckpt/best.bin is a hard
// link to step 2, which has an xattr; /latest is a symlink to step 3.
void MakeFsStore(const fsys::path& dir) {
  {
    OpenFs o = OpenFsStore(dir, false);
    lmc::fs::DeltaOptions d;  // reverse deltas, background rebases
    d.max_chain = 4;
    lmc::fs::InstallSnapshotPolicy(o.fs.get(), d);
    struct stat st;
    Check("mkdir", o.fs->Mkdir(lmc::fs::kRootIno, "ckpt", 0750, kOwner, &st));
    const uint64_t ckpt = st.st_ino;
    WriteNewFile(*o.fs, ckpt, "ckpt-step1.bin", 0644, Checkpoint(1));
    const uint64_t step2 = WriteNewFile(*o.fs, ckpt, "ckpt-step2.bin", 0640, Checkpoint(2));
    o.fs->FlushBackground();
    Check("link", o.fs->Link(step2, ckpt, "best.bin", &st));
    Check("setxattr", o.fs->SetXattr(step2, "user.lmc.step", "2", 0));
    Check("symlink", o.fs->Symlink("ckpt/ckpt-step3.bin", lmc::fs::kRootIno, "latest", kOwner, &st));
    o.Close();
  }
  {
    OpenFs o = OpenFsStore(dir, false);
    lmc::fs::DeltaOptions d;
    d.max_chain = 4;
    d.background = false;  // rebases only queued and persisted
    lmc::fs::InstallSnapshotPolicy(o.fs.get(), d);
    struct stat st;
    Check("lookup ckpt", o.fs->Lookup(lmc::fs::kRootIno, "ckpt", &st));
    WriteNewFile(*o.fs, st.st_ino, "ckpt-step3.bin", 0644, Checkpoint(3));
    o.Close();
  }
  {
    OpenFs o = OpenFsStore(dir, true);
    std::ofstream m(dir.parent_path() / "fs-store.manifest");
    m << "# Written by tests/golden/make_golden.cc; lines as tests/golden/fs_tree.h DescribeFs.\n";
    for (const auto& line : lmc::golden::DescribeFs(*o.fs, *o.store)) {
      if (line.starts_with("error")) Die("describe fs store", lmc::Status::Corruption(line));
      m << line << '\n';
    }
    o.Close();
  }
  TrimStore(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (a directory that does not exist yet)\n", argv[0]);
    return 2;
  }
  const fsys::path out = argv[1];
  if (fsys::exists(out)) {
    std::fprintf(stderr, "make_golden: %s exists; remove it first\n", out.c_str());
    return 2;
  }
  fsys::create_directories(out);

  // A single frame: 8192 bf16 values.
  const auto frame_raw = Bf16Bytes(Weights(kChunk / 2, 1));
  WriteFile(out / "frame_bf16.raw", frame_raw);
  WriteFile(out / "frame_bf16.lmcf", Encode(frame_raw, lmc::DType::kBF16));

  // A container of three 16 KiB chunks of f32.
  const auto container_raw = F32Bytes(Weights(3 * kChunk / 4, 2));
  lmc::CompressOptions co;
  co.chunk_size = kChunk;
  co.threads = 1;
  auto container = lmc::CompressBuffer(container_raw.data(), container_raw.size(), co);
  if (!container.ok()) Die("compress", container.status());
  WriteFile(out / "container_f32.raw", container_raw);
  WriteFile(out / "container_f32.lmc", *container);

  MakeStore(out / "store");
  MakeFsStore(out / "fs-store");
  return 0;
}
