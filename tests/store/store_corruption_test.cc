// Bit flips in every on-disk structure are detected: record header, frame,
// chunk index value, pack header. Never wrong bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "format.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

void FlipByte(const std::string& path, uint64_t off, uint8_t mask = 0x01) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off)), 1);
  b ^= mask;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
  ::close(fd);
}

std::string PackPath(const std::string& store, uint64_t id) {
  return store + "/packs/" + fmt::PackFileName(id);
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = OpenOrDie(t_.store(), TestOptions());
    data_ = RandomBytes(3000, 42);
    key_ = KeyOf(data_);
    Batch b;
    AddFileChunk(b, 1, data_);
    ASSERT_TRUE(s_->Commit(b).ok());
    info_ = *s_->GetChunkInfo(key_);
    pack_ = PackPath(t_.store(), info_.pack_id);
  }
  void ExpectCorrupt() {
    auto r = ReadAll(*s_, key_);
    ASSERT_FALSE(r.ok()) << "corrupted chunk read back as ok";
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().message().find(key_.ToHex()), std::string::npos);
    EXPECT_NE(r.status().message().find("offset"), std::string::npos);
  }
  // Bad records fsck finds, with or without decoding the frames.
  uint64_t FsckBadRecords(bool decode) {
    FsckOptions o;
    o.decode = decode;
    auto f = s_->Fsck(o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? f->Count(FsckProblem::Kind::kBadRecord) : ~uint64_t{0};
  }
  TempDir t_;
  std::unique_ptr<Store> s_;
  std::vector<uint8_t> data_;
  ChunkKey key_;
  ChunkInfo info_;
  std::string pack_;
};

TEST_F(CorruptionTest, EveryRecordHeaderByte) {
  for (uint64_t i = 0; i < fmt::kRecordHeaderSize; ++i) {
    FlipByte(pack_, info_.offset + i, 0x10);
    ExpectCorrupt();
    FlipByte(pack_, info_.offset + i, 0x10);
  }
  EXPECT_EQ(s_->Stats().corruptions, fmt::kRecordHeaderSize);
  EXPECT_EQ(*ReadAll(*s_, key_), data_);
}

TEST_F(CorruptionTest, FrameBytes) {
  for (uint64_t i : {0ul, 1ul, 8ul, 9ul, 500ul, 3008ul}) {
    FlipByte(pack_, info_.offset + fmt::kRecordHeaderSize + i, 0x80);
    ExpectCorrupt();
    auto f = s_->Fsck({});
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->Count(FsckProblem::Kind::kBadRecord), 1u);
    EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
    // The problem names the chunk and where its record lies.
    ASSERT_EQ(f->problems.size(), 1u);
    EXPECT_EQ(f->problems[0].key, key_);
    EXPECT_EQ(f->problems[0].pack_id, info_.pack_id);
    EXPECT_EQ(f->problems[0].offset, info_.offset);
    EXPECT_FALSE(f->problems[0].repaired);
    // The scrub without decoding finds it by the record checksum.
    EXPECT_EQ(FsckBadRecords(false), 1u);
    FlipByte(pack_, info_.offset + fmt::kRecordHeaderSize + i, 0x80);
  }
}

// A frame damaged with its record checksum recomputed (a bug upstream of the
// pack writer, say) is still caught by the frame's own decoded checksum.
TEST_F(CorruptionTest, FrameCheckedByDecodedChecksum) {
  int fd = ::open(pack_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> rec(fmt::kRecordHeaderSize + info_.frame_len);
  ASSERT_EQ(::pread(fd, rec.data(), rec.size(), static_cast<off_t>(info_.offset)),
            static_cast<ssize_t>(rec.size()));
  rec[fmt::kRecordHeaderSize + 100] ^= 4;
  StoreLE64(rec.data() + fmt::kRecordChecksumOffset,
            fmt::RecordChecksum(rec.data(), rec.data() + fmt::kRecordHeaderSize, info_.frame_len));
  ASSERT_EQ(::pwrite(fd, rec.data(), rec.size(), static_cast<off_t>(info_.offset)),
            static_cast<ssize_t>(rec.size()));
  ::close(fd);
  ExpectCorrupt();
  // Only decoding finds this one: the scrub sees a consistent record.
  EXPECT_EQ(FsckBadRecords(false), 0u);
  EXPECT_EQ(FsckBadRecords(true), 1u);
}

TEST_F(CorruptionTest, PackHeaderFoundByFsck) {
  FlipByte(pack_, 3);
  auto f = s_->Fsck({});
  ASSERT_TRUE(f.ok());
  EXPECT_GE(f->errors(), 1u);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
}

TEST_F(CorruptionTest, ChunkIndexValue) {
  s_.reset();
  testing::WithRawIndex(t_.store(), [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& h) {
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), h[1], key_.view(), &v).ok());
    v[9] ^= 1;  // pack id
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h[1], key_.view(), v).ok());
  });
  s_ = OpenOrDie(t_.store(), TestOptions());
  auto r = ReadAll(*s_, key_);
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  Workspace ws;
  std::vector<uint8_t> buf(4096);
  EXPECT_TRUE(s_->ReadChunk(key_, buf.data(), buf.size(), ws).status().IsCorruption());
  FsckOptions fo;
  fo.repair = true;
  auto f = s_->Fsck(fo);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Count(FsckProblem::Kind::kBadIndexValue), 1u);
  EXPECT_EQ(f->ExitCode(), kFsckUncorrected);
  // Compaction refuses to run over an index it cannot read.
  CompactOptions co;
  co.live_fraction_threshold = 2.0;
  EXPECT_TRUE(s_->Compact(co).status().IsCorruption());
}

// Records of 64 KiB and more are read past the page cache (File::ReadDirect,
// the aligned blocks around them): records at many alignments, the last
// one ending inside the pack's last block, read back exactly; a byte
// flipped in one (first, middle and last of its frame, through the page
// cache, as rot or another program would) is caught, and the record reads
// back once the byte is restored.
TEST(LargeRecords, ReadPastThePageCacheAtAnyAlignmentAndFlipsAreCaught) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < 6; ++i) {
    data.push_back(RandomBytes(100 + 37 * i, 800 + i));
    data.push_back(RandomBytes((size_t{64} << 10) + 977 * i + 1, 700 + i));
  }
  Batch b;
  for (size_t i = 0; i < data.size(); ++i) AddFileChunk(b, i + 1, data[i]);
  ASSERT_TRUE(s->Commit(b).ok());
  std::set<uint64_t> alignments;
  for (const auto& d : data) {
    auto r = ReadAll(*s, KeyOf(d));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(*r == d);
    alignments.insert(s->GetChunkInfo(KeyOf(d))->offset % 4096);
  }
  EXPECT_GT(alignments.size(), 6u);
  const std::vector<uint8_t>& big = data.back();
  const ChunkInfo info = *s->GetChunkInfo(KeyOf(big));
  const std::string pack = PackPath(t.store(), info.pack_id);
  EXPECT_EQ(std::filesystem::file_size(pack), info.offset + fmt::kRecordHeaderSize + info.frame_len);
  for (uint64_t at : {uint64_t{0}, uint64_t{info.frame_len / 2}, uint64_t{info.frame_len - 1}}) {
    const uint64_t off = info.offset + fmt::kRecordHeaderSize + at;
    FlipByte(pack, off, 0x10);
    auto r = ReadAll(*s, KeyOf(big));
    ASSERT_FALSE(r.ok()) << "a flipped byte at " << at << " of the frame read back as ok";
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    FlipByte(pack, off, 0x10);
    r = ReadAll(*s, KeyOf(big));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(*r == big);
  }
}

TEST(LmcCodecStoreTest, RealFramesRoundTripAndCatchFlips) {
  TempDir t;
  StoreOptions o;
  o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
  o.verify_content_hash = true;
  auto s = OpenOrDie(t.store(), o);
  Workspace ws;
  std::vector<uint8_t> data(64 * 1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 7) ^ (i >> 9));
  std::vector<uint8_t> frame(MaxEncodedSize(data.size()));
  auto n = EncodeChunk(data.data(), data.size(), EncodeParams{}, frame.data(), frame.size(), ws);
  if (!n.ok()) GTEST_SKIP() << "codec not available yet: " << n.status().ToString();
  frame.resize(*n);
  ChunkKey k = KeyOf(data);
  Batch b;
  b.AddChunk(k, frame, static_cast<uint32_t>(data.size()));
  ASSERT_TRUE(s->Commit(b).ok());
  std::vector<uint8_t> out(data.size());
  auto got = s->ReadChunk(k, out.data(), out.size(), ws);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(out, data);
  ChunkInfo info = *s->GetChunkInfo(k);
  FlipByte(PackPath(t.store(), info.pack_id), info.offset + fmt::kRecordHeaderSize + info.frame_len / 2);
  EXPECT_TRUE(s->ReadChunk(k, out.data(), out.size(), ws).status().IsCorruption());
}

// Commits 40 one-chunk files of 1000 random bytes (seeds from `seed`) to a
// store at `dir`, then closes it (what they committed is in the index's
// write-ahead log); returns the chunks' bytes.
std::vector<std::vector<uint8_t>> CommitFortyChunks(const std::string& dir, uint32_t seed) {
  std::vector<std::vector<uint8_t>> chunks;
  auto s = OpenOrDie(dir, TestOptions());
  for (uint64_t i = 0; i < 40; ++i) {
    Batch b;
    chunks.push_back(RandomBytes(1000, seed + static_cast<uint32_t>(i)));
    AddFileChunk(b, i + 1, chunks.back());
    EXPECT_TRUE(s->Commit(b).ok());
  }
  return chunks;
}

// Every chunk of `chunks` reads back from `s`, byte for byte.
void ExpectEveryChunk(Store& s, const std::vector<std::vector<uint8_t>>& chunks) {
  for (const auto& c : chunks) {
    auto got = ReadAll(s, KeyOf(c));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, c);
  }
}

// A byte flipped in one of RocksDB's table files of the index: the open
// stops with an error that names the index and the file (their whole-file
// checksums are verified before any block is parsed: scripts/rot_run.py
// once found a flip that made RocksDB's block parser abort the process),
// and fsck of an open store finds it too. Never a crash, never wrong data.
TEST(IndexRot, AFlippedTableFileByteStopsTheOpenAndFsckNamingIt) {
  TempDir t;
  CommitFortyChunks(t.store(), 0);
  // Reopened, RocksDB writes what its log held into table files.
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }
  std::vector<std::string> tables;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index"))
    if (e.path().extension() == ".sst") tables.push_back(e.path().string());
  ASSERT_FALSE(tables.empty());
  for (const std::string& sst : tables) {
    SCOPED_TRACE(sst);
    const uint64_t mid = std::filesystem::file_size(sst) / 2;
    FlipByte(sst, mid, 0x04);
    auto r = Store::Open(t.store(), TestOptions());
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().message().find("is damaged"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(std::filesystem::path(sst).filename().string()), std::string::npos)
        << r.status().ToString();
    FlipByte(sst, mid, 0x04);
  }
  // Damage while the store is open: fsck names it.
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->Fsck({}).ok());
  FlipByte(tables[0], std::filesystem::file_size(tables[0]) / 3, 0x40);
  auto f = s->Fsck({});
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.status().IsCorruption()) << f.status().ToString();
  EXPECT_NE(f.status().message().find("is damaged"), std::string::npos) << f.status().ToString();
}

// Bytes of the index's table files that rot while the store is open (its
// whole-file checksums were verified at the open): a chunk lookup reads
// back the right bytes (the block is cached or was not hit) or fails as
// corruption, never other bytes, and the process does not abort in a
// block parser. Each position gets a fresh open, so that no earlier read
// has cached the block it damages.
TEST(IndexRot, TableFileBytesFlippedAfterTheOpenFailReadsNeverTheProcess) {
  TempDir t;
  const auto chunks = CommitFortyChunks(t.store(), 100);
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }  // the log into table files
  std::vector<std::string> tables;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index"))
    if (e.path().extension() == ".sst") tables.push_back(e.path().string());
  ASSERT_FALSE(tables.empty());
  size_t failed = 0, positions = 0;
  for (const std::string& sst : tables) {
    const uint64_t size = std::filesystem::file_size(sst);
    for (uint64_t off = 0; off < size; off += std::max<uint64_t>(1, size / 24)) {
      SCOPED_TRACE(sst + " byte " + std::to_string(off));
      auto s = OpenOrDie(t.store(), TestOptions());
      ASSERT_TRUE(s);
      FlipByte(sst, off, 0x20);
      for (const auto& c : chunks) {
        auto got = ReadAll(*s, KeyOf(c));
        if (got.ok()) {
          ASSERT_EQ(*got, c) << "a lookup through a damaged table read back other bytes";
        } else {
          ++failed;
        }
      }
      s.reset();
      FlipByte(sst, off, 0x20);
      ++positions;
    }
  }
  EXPECT_GT(positions, 24u);
  EXPECT_GT(failed, 0u) << "no flip reached a block that a lookup read: the test checks nothing";
}

// A byte flipped in the middle of the index's write-ahead log (what the
// store committed since the index last wrote table files): the open stops
// naming the index, and the packs keep every byte. RocksDB's default
// recovery (point in time) replayed the log up to the damaged record and
// opened without a word; Recover then cut the packs back to the index's
// shorter idea of them, so every commit after the damaged one was gone from
// the index and from the packs, and fsck said clean.
TEST(IndexRot, AFlippedLogByteStopsTheOpenAndKeepsThePacks) {
  TempDir t;
  const auto chunks = CommitFortyChunks(t.store(), 0);
  std::string log;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index"))
    if (e.path().extension() == ".log" && e.file_size() > 0) log = e.path().string();
  ASSERT_FALSE(log.empty()) << "no write-ahead log holding the commits";
  std::map<std::string, uint64_t> pack_sizes;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/packs"))
    pack_sizes[e.path().string()] = e.file_size();
  const uint64_t mid = std::filesystem::file_size(log) / 2;
  FlipByte(log, mid, 0x40);
  auto r = Store::Open(t.store(), TestOptions());
  ASSERT_FALSE(r.ok()) << "the open replayed a damaged log without an error";
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("is damaged"), std::string::npos) << r.status().ToString();
  for (const auto& [path, size] : pack_sizes) EXPECT_EQ(std::filesystem::file_size(path), size) << path;
  // The byte put back (a copy of the store from before the damage): every
  // chunk is there.
  FlipByte(log, mid, 0x40);
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  ExpectEveryChunk(*s, chunks);
}

// The index's MANIFEST with the length of one of its last records flipped
// past the end of the file: RocksDB reads that as a torn tail and drops the
// records after it, here the creation of column families. The open stops
// naming the index; it created them empty, and the files they described
// read back as zeros.
TEST(IndexRot, AManifestThatLostColumnFamiliesStopsTheOpen) {
  TempDir t;
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }
  std::string manifest;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index"))
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) manifest = e.path().string();
  ASSERT_FALSE(manifest.empty());
  // The records (RocksDB's log format: crc32c 4, length 2, type 1, data);
  // the one that adds the column family "extents" gets a length past the end.
  std::string m;
  {
    std::ifstream f(manifest, std::ios::binary);
    m.assign(std::istreambuf_iterator<char>(f), {});
  }
  size_t off = 0, target = std::string::npos;
  while (off + 7 <= m.size()) {
    const size_t len =
        static_cast<uint8_t>(m[off + 4]) | static_cast<size_t>(static_cast<uint8_t>(m[off + 5])) << 8;
    if (m.substr(off + 7, len).find("extents") != std::string::npos) target = off;
    off += 7 + len;
  }
  ASSERT_NE(target, std::string::npos) << "no record adding the column family extents in " << manifest;
  FlipByte(manifest, target + 5, 0x40);
  auto r = Store::Open(t.store(), TestOptions());
  ASSERT_FALSE(r.ok()) << "the open made the lost column families again, empty";
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("is damaged"), std::string::npos) << r.status().ToString();
}

// The index's own files damaged in each way above, in a store whose index
// is journaled (the default for a new store): the open stops and says how
// to rebuild it; the open of lmcfs-fsck --repair (rebuild_damaged_index)
// moves the damaged index aside and makes it again from the journal, and
// every chunk and every index value is back, fsck clean.
TEST(IndexRot, RepairRebuildsADamagedIndexFromTheJournal) {
  for (const std::string what : {"log", "table", "manifest", "current"}) {
    SCOPED_TRACE(what);
    TempDir t;
    const auto chunks = CommitFortyChunks(t.store(), 7);
    if (what != "log") {
      ASSERT_TRUE(OpenOrDie(t.store(), TestOptions()));  // the log into table files
    }
    std::string target;
    for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index")) {
      const std::string name = e.path().filename().string();
      if ((what == "log" && e.path().extension() == ".log" && e.file_size() > 0) ||
          (what == "table" && e.path().extension() == ".sst") ||
          (what == "manifest" && name.rfind("MANIFEST-", 0) == 0) || (what == "current" && name == "CURRENT"))
        target = e.path().string();
    }
    ASSERT_FALSE(target.empty());
    // CURRENT: a digit of the MANIFEST's number; else the middle.
    FlipByte(target, what == "current" ? 12 : std::filesystem::file_size(target) / 2,
             what == "current" ? 0x02 : 0x40);
    auto r = Store::Open(t.store(), TestOptions());
    ASSERT_FALSE(r.ok()) << "the open took a damaged index";
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().message().find("rebuilds the index"), std::string::npos) << r.status().ToString();

    StoreOptions o = TestOptions();
    o.rebuild_damaged_index = true;
    auto s = OpenOrDie(t.store(), o);
    ASSERT_TRUE(s);
    ASSERT_FALSE(s->RebuiltIndex().empty());
    EXPECT_TRUE(
        std::filesystem::exists(s->RebuiltIndex() + "/" + std::filesystem::path(target).filename().string()))
        << "the damaged index is kept aside";
    for (uint64_t i = 0; i < chunks.size(); ++i) {
      auto got = ReadAll(*s, KeyOf(chunks[i]));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, chunks[i]);
      auto v = s->Get(Cf::kExtents, ExtentKey(i + 1, 0));
      ASSERT_TRUE(v.ok()) << "inode " << i + 1;
      EXPECT_EQ(DecodeExtent(*v)->chunk, KeyOf(chunks[i]));
    }
    auto f = s->Fsck({});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
    s.reset();
    auto again = OpenOrDie(t.store(), TestOptions());  // an ordinary open takes the rebuilt index
    EXPECT_TRUE(again && again->RebuiltIndex().empty());
  }
}

// A record of the index's MANIFEST with its length flipped past the end of
// the file: RocksDB reads a torn tail and drops the edits from there (a
// flush, whose table file it then deletes as obsolete) and opens without an
// error, short of what it acknowledged. fsck had nothing to compare with
// and said clean; Recover then deleted the packs that the lost entries
// named, and the files read as holes. Every record is tried in turn, on a
// copy of the store:
// - as a clean close left it (index.sum records the MANIFEST): the open
//   refuses, the index is damaged;
// - without that record (rot after a crash): the open refuses (damaged,
//   or the index's packs differ from its journal, so nothing is deleted),
//   or it opens, and then CompareIndexWithJournal reports a difference
//   whenever an entry is gone, and fsck names it.
// Either way an index rebuilt from the journal has every chunk.
TEST(IndexRot, AManifestThatLostItsLastEditsIsCaught) {
  TempDir t;
  const auto chunks = CommitFortyChunks(t.store(), 81);
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }  // the log into a table file
  std::string manifest_name;
  for (const auto& e : std::filesystem::directory_iterator(t.store() + "/index"))
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) manifest_name = e.path().filename().string();
  ASSERT_FALSE(manifest_name.empty());
  ASSERT_TRUE(std::filesystem::exists(t.store() + "/index.sum"));
  std::string m;
  {
    std::ifstream f(t.store() + "/index/" + manifest_name, std::ios::binary);
    m.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::vector<size_t> records;
  for (size_t off = 0; off + 7 <= m.size();) {
    const size_t len =
        static_cast<uint8_t>(m[off + 4]) | static_cast<size_t>(static_cast<uint8_t>(m[off + 5])) << 8;
    if (off + 7 + len > m.size()) break;
    records.push_back(off);
    off += 7 + len;
  }
  ASSERT_GE(records.size(), 4u);
  for (const bool with_sum : {true, false}) {
    size_t refused = 0, lost = 0;
    for (size_t n = 0; n < records.size(); ++n) {
      SCOPED_TRACE(std::string(with_sum ? "after a clean close" : "without index.sum") +
                   ", MANIFEST record " + std::to_string(n) + " of " + std::to_string(records.size()));
      const std::string work = t.path() + "/copy";
      std::filesystem::remove_all(work);
      std::filesystem::copy(t.store(), work, std::filesystem::copy_options::recursive);
      if (!with_sum) std::filesystem::remove(work + "/index.sum");
      FlipByte(work + "/index/" + manifest_name, records[n] + 5, 0x40);  // its length past the end
      auto r = Store::Open(work, TestOptions());
      if (r.ok()) {
        EXPECT_FALSE(with_sum) << "a MANIFEST changed since the clean close was taken";
        auto diff = (*r)->CompareIndexWithJournal();
        ASSERT_TRUE(diff.ok()) << diff.status().ToString();
        size_t missing = 0;
        for (const auto& c : chunks) missing += !(*r)->GetChunkInfo(KeyOf(c)).ok();
        uint64_t extents = 0;
        for (uint64_t i = 0; i < chunks.size(); ++i)
          extents += (*r)->Get(Cf::kExtents, ExtentKey(i + 1, 0)).ok();
        if (missing > 0 || extents < chunks.size()) {
          ++lost;
          EXPECT_FALSE(diff->empty()) << "entries gone from the index, and it matches its journal";
        }
        auto f = (*r)->Fsck({});
        ASSERT_TRUE(f.ok()) << f.status().ToString();
        EXPECT_EQ(f->Count(FsckProblem::Kind::kIndexJournalMismatch), diff->size());
        r->reset();
      } else {
        ++refused;
        const std::string& msg = r.status().message();
        EXPECT_TRUE(msg.find("is damaged") != std::string::npos ||
                    msg.find("differs from its journal") != std::string::npos)
            << r.status().ToString();
      }
      StoreOptions o = TestOptions();
      o.rebuild_damaged_index = true;
      o.rebuild_index = true;
      auto s = OpenOrDie(work, o);
      ASSERT_TRUE(s);
      ExpectEveryChunk(*s, chunks);
      EXPECT_TRUE(s->CompareIndexWithJournal()->empty());
    }
    if (with_sum) {
      EXPECT_EQ(refused, records.size());
    } else {
      EXPECT_GT(refused + lost, 0u) << "no flip did any harm: the test checks nothing";
    }
  }
}

std::string JournalFile(const std::string& store, const std::string& prefix) {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator(store + "/journal"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out = e.path().string();
  return out;
}

// A byte flipped in a journal record that the index already holds: rot,
// not a torn write, since the index applies a record only after the journal
// took it whole. The open used to cut the journal there as a torn tail: the
// records after it were gone from the journal while the index kept them,
// and the next open, finding the index ahead of the journal, rebuilt the
// index from the journal without them. Now nothing is cut: the open writes
// the journal again from the index, and an index rebuilt from that journal
// still has every chunk.
TEST(JournalRot, ADamagedRecordTheIndexHoldsIsHealedNotCut) {
  TempDir t;
  const auto chunks = CommitFortyChunks(t.store(), 21);
  const std::string seg = JournalFile(t.store(), "seg-");
  ASSERT_FALSE(seg.empty());
  FlipByte(seg, std::filesystem::file_size(seg) / 2, 0x08);
  {
    auto s = OpenOrDie(t.store(), TestOptions());
    ASSERT_TRUE(s);
    for (const auto& c : chunks) EXPECT_EQ(*ReadAll(*s, KeyOf(c)), c);
    auto f = s->Fsck({});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
  }
  EXPECT_FALSE(std::filesystem::exists(seg)) << "the damaged segment is still there";
  // The index lost: made again from the journal alone.
  std::filesystem::remove_all(t.store() + "/index");
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  ExpectEveryChunk(*s, chunks);
}

// Damage to the journal that no open reads (a snapshot part, while the
// index is whole): fsck reports it, --repair writes the journal again from
// the index, and the journal alone then rebuilds the index.
TEST(JournalRot, FsckFindsADamagedSnapshotAndRepairWritesItAgain) {
  TempDir t;
  StoreOptions o = TestOptions();
  o.journal_snapshot_bytes = 1;  // a snapshot at every close
  std::vector<std::vector<uint8_t>> chunks;
  {
    auto s = OpenOrDie(t.store(), o);
    for (uint64_t i = 0; i < 10; ++i) {
      Batch b;
      chunks.push_back(RandomBytes(3000, 500 + static_cast<uint32_t>(i)));
      AddFileChunk(b, i + 1, chunks.back());
      ASSERT_TRUE(s->Commit(b).ok());
    }
  }
  const std::string part = JournalFile(t.store(), "snap-");
  ASSERT_FALSE(part.empty());
  FlipByte(part, std::filesystem::file_size(part) / 2, 0x10);
  {
    auto s = OpenOrDie(t.store(), o);
    auto f = s->Fsck({});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(f->Count(FsckProblem::Kind::kJournal), 1u);
    EXPECT_EQ(f->fixed(), 0u);
    FsckOptions repair;
    repair.repair = true;
    f = s->Fsck(repair);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->Count(FsckProblem::Kind::kJournal), 1u);
    EXPECT_EQ(f->fixed(), 1u);
    EXPECT_EQ(s->Fsck({})->errors(), 0u);
  }
  std::filesystem::remove_all(t.store() + "/index");
  auto s = OpenOrDie(t.store(), o);
  for (const auto& c : chunks) EXPECT_EQ(*ReadAll(*s, KeyOf(c)), c);
}

// A byte flipped in the journal's HEAD (which names the journal and its
// snapshot): the open stops and says what to do; lmcfs-fsck --repair's open
// writes the journal again from the whole index, and the journal alone then
// rebuilds the index.
TEST(JournalRot, ADamagedHeadIsWrittenAgainFromTheIndex) {
  TempDir t;
  const auto chunks = CommitFortyChunks(t.store(), 61);
  // Every byte of HEAD, flipped in turn, stops the open (the rot run found
  // the '=' of its check line: the line was skipped as unknown, unchecked).
  const std::string head = t.store() + "/journal/HEAD";
  for (uint64_t off = 0; off < std::filesystem::file_size(head); ++off) {
    SCOPED_TRACE("HEAD byte " + std::to_string(off));
    FlipByte(head, off, 0x01);
    auto r = Store::Open(t.store(), TestOptions());
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().message().find("lmcfs-fsck --repair"), std::string::npos) << r.status().ToString();
    FlipByte(head, off, 0x01);
  }
  FlipByte(head, 20, 0x01);  // a digit of the journal's id
  StoreOptions o = TestOptions();
  o.rebuild_damaged_index = true;
  {
    auto s = OpenOrDie(t.store(), o);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->OpenRepairs().size(), 1u);
    EXPECT_TRUE(s->RebuiltIndex().empty());
    for (const auto& c : chunks) EXPECT_EQ(*ReadAll(*s, KeyOf(c)), c);
    Batch b;  // and it takes commits
    AddFileChunk(b, 100, RandomBytes(500, 1));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  std::filesystem::remove_all(t.store() + "/index");
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  for (const auto& c : chunks) EXPECT_EQ(*ReadAll(*s, KeyOf(c)), c);
  EXPECT_TRUE(s->Get(Cf::kExtents, ExtentKey(100, 0)).ok());
  EXPECT_EQ(s->Fsck({})->errors(), 0u);
}

// A new store journals its index (CONFIG index_journal=1, format 3, which
// an lmcfs that would not append to the journal refuses), and stays
// journaled whatever a later open asks for; journal_new_stores=false makes
// a store as before (format 1, no journal).
TEST(JournalConfig, NewStoresAreJournaledAndStaySo) {
  TempDir t;
  { ASSERT_TRUE(OpenOrDie(t.store(), TestOptions())); }
  std::string config;
  {
    std::ifstream f(t.store() + "/CONFIG");
    config.assign(std::istreambuf_iterator<char>(f), {});
  }
  EXPECT_NE(config.find("format_version=3\n"), std::string::npos) << config;
  EXPECT_NE(config.find("index_journal=1\n"), std::string::npos) << config;
  StoreOptions o = TestOptions();
  o.journal_new_stores = false;
  {
    auto s = OpenOrDie(t.store(), o);
    Batch b;
    AddFileChunk(b, 1, RandomBytes(100, 1));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  std::filesystem::remove_all(t.store() + "/index");
  {
    auto s = OpenOrDie(t.store(), o);  // rebuilt from the journal: the commit above went there too
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->Get(Cf::kExtents, ExtentKey(1, 0)).ok());
  }
  TempDir plain;
  { ASSERT_TRUE(OpenOrDie(plain.store(), o)); }
  EXPECT_FALSE(std::filesystem::exists(plain.store() + "/journal"));
  std::ifstream f(plain.store() + "/CONFIG");
  config.assign(std::istreambuf_iterator<char>(f), {});
  EXPECT_NE(config.find("format_version=1\n"), std::string::npos) << config;
  EXPECT_EQ(config.find("index_journal"), std::string::npos) << config;
}

}  // namespace
}  // namespace lmc::store::testing
