// Round trips, dedup, reference counts, delta chains, fs column families,
// the store lock across processes, and concurrent writers and readers.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

TEST(ChunkKeyTest, Sha256AndHex) {
  const uint8_t abc[] = {'a', 'b', 'c'};
  ChunkKey k = ChunkKey::Of(abc, 3);
  EXPECT_EQ(k.ToHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto back = ChunkKey::FromHex(k.ToHex());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(ChunkKey::FromHex("xyz").has_value());
}

TEST(ExtentTest, EncodingRoundTrip) {
  Extent e;
  e.length = 12345;
  e.chunk = ChunkKey::Of(reinterpret_cast<const uint8_t*>("x"), 1);
  e.chunk_offset = 77;
  e.trailer = "fs";
  std::string v = EncodeExtent(e);
  EXPECT_EQ(v.size(), Extent::kEncodedSize + 2);
  auto d = DecodeExtent(v);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->length, 12345u);
  EXPECT_EQ(d->chunk, e.chunk);
  EXPECT_EQ(d->chunk_offset, 77u);
  EXPECT_EQ(d->trailer, "fs");
  EXPECT_FALSE(DecodeExtent(v.substr(0, 40)).has_value());
  auto k = ParseExtentKey(ExtentKey(5, 1 << 20));
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->first, 5u);
  EXPECT_EQ(k->second, 1u << 20);
  EXPECT_LT(ExtentKey(1, 9), ExtentKey(2, 0));  // inode order first
}

TEST(StoreTest, RoundTripAndReopen) {
  TempDir t;
  std::vector<std::vector<uint8_t>> chunks;
  for (int i = 0; i < 20; ++i) chunks.push_back(RandomBytes(1000 + i * 37, i));
  {
    auto s = OpenOrDie(t.store(), TestOptions());
    ASSERT_TRUE(s);
    Batch b;
    for (size_t i = 0; i < chunks.size(); ++i) AddFileChunk(b, i + 1, chunks[i]);
    ASSERT_TRUE(s->Commit(b).ok());
    for (auto& c : chunks) {
      auto r = ReadAll(*s, KeyOf(c));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(*r, c);
    }
    EXPECT_EQ(s->Stats().chunks_stored, 20u);
  }
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  for (auto& c : chunks) {
    auto r = ReadAll(*s, KeyOf(c));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, c);
  }
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
  EXPECT_EQ(f->chunks_checked, 20u);
  EXPECT_EQ(f->ExitCode(), kFsckOk);

  auto missing = ReadAll(*s, KeyOf(RandomBytes(10, 999)));
  EXPECT_TRUE(missing.status().IsNotFound());
  std::vector<uint8_t> small(10);
  Workspace ws;
  EXPECT_EQ(s->ReadChunk(KeyOf(chunks[0]), small.data(), small.size(), ws).status().code(),
            Code::kInvalidArgument);
}

TEST(StoreTest, DedupAndRefcounts) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  auto d = RandomBytes(5000, 1);
  ChunkKey k = KeyOf(d);
  for (int i = 0; i < 3; ++i) {
    Batch b;
    AddFileChunk(b, 10 + i, d);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_EQ(s->Stats().chunks_stored, 1u);
  EXPECT_EQ(s->Stats().dedup_hits, 2u);
  EXPECT_EQ(s->GetChunkInfo(k)->refcount, 3u);
  const uint64_t live = s->Stats().live_bytes;
  EXPECT_EQ(live, 64u + 9 + 5000);

  for (int i = 0; i < 2; ++i) {
    Batch b;
    b.Unref(k);
    b.Delete(Cf::kExtents, ExtentKey(10 + i, 0));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_EQ(s->GetChunkInfo(k)->refcount, 1u);
  ASSERT_TRUE(ReadAll(*s, k).ok());
  EXPECT_EQ(s->Fsck({})->errors(), 0u);

  Batch last;
  last.Unref(k);
  last.Delete(Cf::kExtents, ExtentKey(12, 0));
  ASSERT_TRUE(s->Commit(last).ok());
  EXPECT_TRUE(s->GetChunkInfo(k).status().IsNotFound());
  EXPECT_EQ(s->Stats().live_bytes, 0u);

  // Underflow and unknown chunks fail the whole batch and change nothing.
  Batch bad;
  AddFileChunk(bad, 20, RandomBytes(100, 2));
  bad.Unref(k);
  Status st = s->Commit(bad);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(s->GetChunkInfo(KeyOf(RandomBytes(100, 2))).status().IsNotFound());
  EXPECT_TRUE(s->Get(Cf::kExtents, ExtentKey(20, 0)).status().IsNotFound());
  Batch badref;
  badref.Ref(k);
  EXPECT_EQ(s->Commit(badref).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

TEST(StoreTest, DeltaChainsHoldTheirBases) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  auto base = RandomBytes(4096, 5);
  auto next = base;
  for (size_t i = 0; i < next.size(); i += 100) next[i] ^= 0x5a;
  auto third = next;
  third[7] ^= 1;
  ChunkKey kb = KeyOf(base), kn = KeyOf(next), kt = KeyOf(third);
  {
    Batch b;
    AddFileChunk(b, 1, base);
    ASSERT_TRUE(s->Commit(b).ok());
  }
  {
    Batch b;
    b.AddChunk(kn, TestFrame(next, &base), 4096, kb);
    b.AddChunk(kt, TestFrame(third, &next), 4096, kn);
    b.Unref(kn);  // AddChunk's own reference: no file keeps the middle chunk
    Extent e;
    e.length = 4096;
    e.chunk = kt;
    b.Put(Cf::kExtents, ExtentKey(2, 0), EncodeExtent(e));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_EQ(s->GetChunkInfo(kb)->refcount, 2u);  // extent + dependant
  EXPECT_EQ(s->GetChunkInfo(kn)->refcount, 1u);  // dependant only
  EXPECT_EQ(s->GetChunkInfo(kt)->delta_depth, 2);
  EXPECT_EQ(*ReadAll(*s, kt), third);
  EXPECT_EQ(*ReadAll(*s, kn), next);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);

  // Dropping the file of the base keeps it alive for its dependants.
  {
    Batch b;
    b.Unref(kb);
    b.Delete(Cf::kExtents, ExtentKey(1, 0));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_EQ(*ReadAll(*s, kt), third);
  // Dropping the top of the chain releases the whole chain.
  {
    Batch b;
    b.Unref(kt);
    b.Delete(Cf::kExtents, ExtentKey(2, 0));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_TRUE(s->GetChunkInfo(kb).status().IsNotFound());
  EXPECT_TRUE(s->GetChunkInfo(kn).status().IsNotFound());
  EXPECT_EQ(s->Stats().live_bytes, 0u);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);

  Batch orphan;
  orphan.AddChunk(kn, TestFrame(next, &base), 4096, kb);  // base gone
  EXPECT_EQ(s->Commit(orphan).code(), Code::kInvalidArgument);
}

TEST(StoreTest, FsColumnFamiliesAndScan) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  Batch b;
  b.Put(Cf::kInodes, "a1", "x");
  b.Put(Cf::kInodes, "a2", "y");
  b.Put(Cf::kInodes, "b1", "z");
  b.Put(Cf::kDirents, "a1", "other cf");
  b.Put(Cf::kMeta, "k", "v");
  ASSERT_TRUE(s->Commit(b, false).ok());
  EXPECT_EQ(*s->Get(Cf::kInodes, "a2"), "y");
  EXPECT_EQ(*s->Get(Cf::kDirents, "a1"), "other cf");
  std::vector<std::string> seen;
  ASSERT_TRUE(s->Scan(Cf::kInodes, "a", [&](std::string_view k, std::string_view v) {
                 seen.push_back(std::string(k) + "=" + std::string(v));
                 return true;
               }).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a1=x", "a2=y"}));
  Batch d;
  d.Delete(Cf::kInodes, "a1");
  ASSERT_TRUE(s->Commit(d).ok());
  EXPECT_TRUE(s->Get(Cf::kInodes, "a1").status().IsNotFound());
}

TEST(StoreTest, SecondOpenIsBusyInProcessAndAcrossFork) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  auto again = Store::Open(t.store(), TestOptions());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kBusy) << again.status().ToString();
  EXPECT_NE(again.status().message().find("LOCK"), std::string::npos);

  // Another process: this binary again (exec right after fork: a child
  // that ran on in this threaded process could block on a lock some other
  // thread held at the fork, as ASan's allocator lock did), running
  // ChildOpensAStoreItsParentHolds.
  std::string filter = "--gtest_filter=StoreTest.ChildOpensAStoreItsParentHolds";
  std::string env = "LMC_TEST_CHILD_STORE=" + t.store();
  std::string exe = "/proc/self/exe";
  char* child_argv[] = {exe.data(), filter.data(), nullptr};
  char* child_env[] = {env.data(), nullptr};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve(exe.c_str(), child_argv, child_env);
    _exit(127);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "child opened a store held by its parent";
  s.reset();
  EXPECT_TRUE(Store::Open(t.store(), TestOptions()).ok());
}

// The other process of SecondOpenIsBusyInProcessAndAcrossFork; skips
// when run on its own.
TEST(StoreTest, ChildOpensAStoreItsParentHolds) {
  const char* dir = std::getenv("LMC_TEST_CHILD_STORE");
  if (!dir) GTEST_SKIP() << "run by StoreTest.SecondOpenIsBusyInProcessAndAcrossFork";
  auto r = Store::Open(dir, TestOptions());
  _exit(!r.ok() && r.status().code() == Code::kBusy ? 0 : 1);
}

TEST(StoreTest, RefusesNewerFormatAndMissingIndex) {
  TempDir t;
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), t.store(), "CONFIG", "format_version=5\nhash=sha256\n").ok());
  EXPECT_EQ(Store::Open(t.store(), TestOptions()).status().code(), Code::kUnsupported);
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), t.store(), "CONFIG", "format_version=1\nhash=sha256\n").ok());
  std::filesystem::remove_all(t.store() + "/index");
  EXPECT_EQ(Store::Open(t.store(), TestOptions()).status().code(), Code::kCorruption);
}

TEST(StoreTest, PacksSealAtTheSizeLimit) {
  TempDir t;
  auto o = TestOptions();
  o.pack_size_limit = 8192;
  auto s = OpenOrDie(t.store(), o);
  std::vector<std::vector<uint8_t>> chunks;
  for (int i = 0; i < 12; ++i) {
    chunks.push_back(RandomBytes(3000, 100 + i));
    Batch b;
    AddFileChunk(b, i + 1, chunks.back());
    ASSERT_TRUE(s->Commit(b).ok());
  }
  EXPECT_GE(s->Stats().packs, 4u);
  for (auto& c : chunks) EXPECT_EQ(*ReadAll(*s, KeyOf(c)), c);
}

TEST(StoreTest, ConcurrentWritersAndReadersGroupCommit) {
  TempDir t;
  auto o = TestOptions();
  o.pack_size_limit = 1 << 20;
  auto s = OpenOrDie(t.store(), o);
  constexpr int kWriters = 4, kPerWriter = 40;
  std::vector<std::vector<std::vector<uint8_t>>> data(kWriters);
  std::atomic<int> committed{0};
  std::atomic<bool> stop{false}, bad{false};
  std::vector<std::thread> th;
  for (int w = 0; w < kWriters; ++w) {
    th.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        auto d = RandomBytes(2000 + (i % 7) * 100, w * 1000 + i);
        Batch b;
        AddFileChunk(b, w * 1000 + i + 1, d);
        if (!s->Commit(b).ok()) bad = true;
        data[w].push_back(std::move(d));
        committed++;
      }
    });
  }
  // Readers hammer chunks committed so far.
  std::mutex mu;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      Workspace ws;
      std::vector<uint8_t> buf(8192);
      uint64_t i = r;
      while (!stop) {
        auto d = RandomBytes(2000 + (i % kPerWriter % 7) * 100, (i % kWriters) * 1000 + i % kPerWriter);
        auto n = s->ReadChunk(KeyOf(d), buf.data(), buf.size(), ws);
        if (n.ok() && (*n != d.size() || std::memcmp(buf.data(), d.data(), d.size()) != 0)) bad = true;
        if (!n.ok() && !n.status().IsNotFound()) bad = true;
        i += 3;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) th[w].join();
  stop = true;
  for (size_t i = kWriters; i < th.size(); ++i) th[i].join();
  EXPECT_FALSE(bad);
  auto st = s->Stats();
  EXPECT_EQ(st.commits, static_cast<uint64_t>(kWriters * kPerWriter));
  EXPECT_LE(st.commit_groups, st.commits);
  for (auto& v : data)
    for (auto& d : v) EXPECT_EQ(*ReadAll(*s, KeyOf(d)), d);
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

}  // namespace
}  // namespace lmc::store::testing
