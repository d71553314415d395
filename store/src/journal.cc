#include "journal.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <random>

#include "format.h"
#include "lmc/bytes.h"
#include "lmc/hash.h"
#include "lmc/text.h"

namespace lmc::store {

namespace {

constexpr uint32_t kRecordMagic = 0x524a4d4c;    // "LMJR"
constexpr uint32_t kSnapshotMagic = 0x534a4d4c;  // "LMJS"
constexpr size_t kRecordHeader = 24;
constexpr size_t kSnapshotHeader = 16;
constexpr size_t kPartBytes = size_t{8} << 20;
constexpr char kHeadName[] = "HEAD";
constexpr char kHeadMagic[] = "lmcfs-journal 1";

std::string Hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

std::string SegmentName(uint64_t first) { return "seg-" + Hex16(first); }
std::string PartName(uint64_t seq, uint32_t part) {
  char b[16];
  std::snprintf(b, sizeof b, "-%06u", part);
  return "snap-" + Hex16(seq) + b;
}

uint64_t RecordHash(uint64_t seq, const void* data, size_t n) { return hash::Xxh3_64WithSeed(data, n, seq); }

Result<std::string> ReadAll(Env* env, const std::string& path, File* open = nullptr) {
  std::unique_ptr<File> owned;
  if (!open) {
    LMC_ASSIGN_OR_RETURN(owned, env->OpenFile(path, Env::OpenMode::kRead));
    open = owned.get();
  }
  std::string out(open->Size(), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const size_t want = std::min(out.size() - done, size_t{8} << 20);
    LMC_ASSIGN_OR_RETURN(size_t n, open->ReadAt(done, want, reinterpret_cast<uint8_t*>(out.data() + done)));
    if (n == 0) break;
    done += n;
  }
  out.resize(done);
  return out;
}

}  // namespace

Result<std::unique_ptr<IndexJournal>> IndexJournal::Open(Env* env, const std::string& dir, bool create) {
  std::unique_ptr<IndexJournal> j(new IndexJournal(env, dir + "/journal"));
  if (create) {
    LMC_RETURN_IF_ERROR(env->CreateDir(j->dir_));
    std::random_device rd;
    j->id_ = Hex16((uint64_t{rd()} << 32) | rd()) + Hex16((uint64_t{rd()} << 32) | rd());
    LMC_RETURN_IF_ERROR(j->WriteHead(0, 0));
  } else {
    LMC_RETURN_IF_ERROR(j->ReadHead());
  }
  return j;
}

Status IndexJournal::WriteHead(uint64_t seq, uint32_t parts) {
  std::string text = std::string(kHeadMagic) + "\nid=" + id_ + "\nsnapshot=" + std::to_string(seq) +
                     "\nparts=" + std::to_string(parts) + "\n";
  // The lines above, checksummed (a reader without this line skips it).
  text += "check=" + Hex16(hash::Xxh3_64(text.data(), text.size())) + "\n";
  LMC_RETURN_IF_ERROR(WriteFileAtomic(env_, dir_, kHeadName, text));
  snapshot_seq_ = seq;
  snapshot_parts_ = parts;
  return Status::Ok();
}

Status IndexJournal::ReadHead() {
  auto text = ReadFileToString(env_, dir_ + "/" + kHeadName);
  if (!text.ok()) {
    if (text.status().IsNotFound())
      return Status::Corruption(
          dir_ + "/" + kHeadName +
          " is missing: the store's index journal is gone, so its packs cannot be indexed");
    return text.status();
  }
  if (text->rfind(kHeadMagic, 0) != 0) return Status::Corruption(dir_ + "/HEAD is not an lmcfs journal head");
  bool have_id = false, have_snap = false, have_parts = false, have_check = false, unknown = false;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    const std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    try {
      if (line.rfind("check=", 0) == 0) {
        if (line.substr(6) != Hex16(hash::Xxh3_64(text->data(), pos - line.size() - 1)))
          return Status::Corruption(dir_ + "/HEAD is damaged (its checksum fails)");
        have_check = true;
        continue;
      }
      if (line.rfind("id=", 0) == 0) {
        id_ = line.substr(3);
        have_id = id_.size() == 32;
      } else if (line.rfind("snapshot=", 0) == 0) {
        size_t used = 0;
        snapshot_seq_ = std::stoull(line.substr(9), &used);
        have_snap = used == line.size() - 9;
        unknown |= !have_snap;
      } else if (line.rfind("parts=", 0) == 0) {
        size_t used = 0;
        snapshot_parts_ = static_cast<uint32_t>(std::stoul(line.substr(6), &used));
        have_parts = used == line.size() - 6;
        unknown |= !have_parts;
      } else if (!line.empty() && line != kHeadMagic) {
        unknown = true;
      }
    } catch (const std::exception&) {
      return Status::Corruption(dir_ + "/HEAD: bad line '" + EscapeBytes(line, true) + "'");
    }
  }
  if (!have_id || !have_snap || !have_parts) return Status::Corruption(dir_ + "/HEAD is incomplete");
  // The parts HEAD names are written before it and never change after:
  // the snapshot whose parts were all sized before keeps its bytes (a
  // follower reading HEAD again costs no round trip per part).
  if (sized_seq_ != snapshot_seq_ || sized_parts_ != snapshot_parts_) {
    uint64_t parts_bytes = 0;
    bool all = true;
    for (uint32_t i = 0; i < snapshot_parts_; ++i) {
      auto f = env_->OpenFile(dir_ + "/" + PartName(snapshot_seq_, i), Env::OpenMode::kRead);
      if (f.ok())
        parts_bytes += (*f)->Size();
      else
        all = false;
    }
    snapshot_bytes_ = parts_bytes;
    sized_seq_ = all ? snapshot_seq_ : UINT64_MAX;
    sized_parts_ = snapshot_parts_;
  }
  // Every HEAD this lmcfs writes has the check line; one without it is an
  // older writer's, which has only the lines above: a line of neither kind
  // is a damaged check line (its name flipped, so nothing checked it).
  if (!have_check && unknown) return Status::Corruption(dir_ + "/HEAD is damaged (a line it cannot read)");
  return Status::Ok();
}

Status IndexJournal::FollowHead() {
  LMC_RETURN_IF_ERROR(ReadHead());
  size_t drop = 0;
  uint64_t bytes = 0;
  while (drop < read_since_snapshot_.size() && read_since_snapshot_[drop].first <= snapshot_seq_)
    bytes += read_since_snapshot_[drop++].second;
  read_since_snapshot_.erase(read_since_snapshot_.begin(),
                             read_since_snapshot_.begin() + static_cast<std::ptrdiff_t>(drop));
  since_snapshot_ -= std::min(since_snapshot_.load(), bytes);
  return Status::Ok();
}

Result<std::vector<IndexJournal::Segment>> IndexJournal::Segments() {
  LMC_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(dir_));
  std::vector<Segment> segs;
  for (auto& n : names) {
    if (n.rfind("seg-", 0) != 0) continue;
    if (auto first = fmt::ParseHex16(std::string_view(n).substr(4))) segs.push_back({*first, n});
  }
  std::sort(segs.begin(), segs.end(), [](const Segment& a, const Segment& b) { return a.first < b.first; });
  return segs;
}

Status IndexJournal::LoadSnapshot(const PutFn& put) {
  for (uint32_t part = 0; part < snapshot_parts_; ++part) {
    const std::string path = dir_ + "/" + PartName(snapshot_seq_, part);
    LMC_ASSIGN_OR_RETURN(std::string data, ReadAll(env_, path));
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    if (data.size() < kSnapshotHeader + 8 || LoadLE32(p) != kSnapshotMagic || LoadLE32(p + 4) != part ||
        LoadLE64(p + 8) != snapshot_seq_ ||
        LoadLE64(p + data.size() - 8) != hash::Xxh3_64(p, data.size() - 8))
      return Status::Corruption(path + ": index snapshot part fails its checks");
    size_t pos = kSnapshotHeader;
    const size_t end = data.size() - 8;
    while (pos < end) {
      if (end - pos < 12) return Status::Corruption(path + ": truncated entry");
      const uint32_t cf = LoadLE32(p + pos), kl = LoadLE32(p + pos + 4), vl = LoadLE32(p + pos + 8);
      pos += 12;
      if (uint64_t{kl} + vl > end - pos) return Status::Corruption(path + ": entry overruns the part");
      LMC_RETURN_IF_ERROR(
          put(cf, std::string_view(data.data() + pos, kl), std::string_view(data.data() + pos + kl, vl)));
      pos += kl + vl;
    }
  }
  return Status::Ok();
}

Status IndexJournal::Replay(uint64_t after, const std::function<Status(uint64_t, std::string_view)>& apply,
                            uint64_t* replayed, bool writable) {
  *replayed = 0;
  if (after < snapshot_seq_)
    return Status::InvalidArgument("journal replay from " + std::to_string(after) +
                                   " before the snapshot at " + std::to_string(snapshot_seq_));
  // A reader goes on from its cursor when it is where it stopped. It lists
  // nothing then (a listing of a RADOS store visits every object of its
  // pool's placement groups, and a follower replays after each of the
  // writer's commits): it reads its segment from the cursor on, then the
  // segment that would follow, named by the next record's number (a
  // segment starts at the record after the last one of the one before).
  // Its segment gone (a snapshot deleted it) or the next one found after
  // a record it could not read yet: the listed replay below decides.
  const bool resume = !writable && !cursor_seg_.empty() && cursor_seq_ == after;
  std::vector<Segment> segs;
  if (resume) {
    if (auto first = fmt::ParseHex16(std::string_view(cursor_seg_).substr(4)))
      segs.push_back({*first, cursor_seg_});
  }
  if (segs.empty()) {
    LMC_ASSIGN_OR_RETURN(segs, Segments());
    // A reader behind the writer's last snapshot: the records it lacks
    // went into the snapshot with the segments that held them (before, a
    // reader found no segment and replayed nothing, as if nothing was new).
    if (!writable && (segs.empty() || segs.front().first > after + 1)) {
      LMC_RETURN_IF_ERROR(ReadHead());
      if (snapshot_seq_ > after)
        return Status::Aborted("the writer's index snapshot at journal record " +
                               std::to_string(snapshot_seq_) + " holds records after this reader's " +
                               std::to_string(after) + " that the journal no longer has");
    }
  }
  uint64_t expected = after + 1;
  // The journal's last record (0: none seen); a reader resuming read it up
  // to `after` before.
  uint64_t last_seq = resume ? after : 0;
  if (!resume) {
    since_snapshot_ = 0;
    read_since_snapshot_.clear();
  }
  // The listed replay from record `at` on (the cursor forgotten).
  const auto listed_again = [&](uint64_t at) -> Status {
    cursor_seg_.clear();
    uint64_t more = 0;
    Status st = Replay(at, apply, &more, writable);
    *replayed += more;
    return st;
  };
  for (size_t i = 0; i < segs.size(); ++i) {
    const bool last = i + 1 == segs.size();
    if (resume && segs[i].name < cursor_seg_) {
      last_seq = std::max(last_seq, after);
      continue;
    }
    // A segment whose successor starts at or before `after + 1` holds
    // nothing to apply.
    if (!last && segs[i + 1].first <= after + 1) {
      last_seq = std::max(last_seq, segs[i + 1].first - 1);
      continue;
    }
    const std::string path = dir_ + "/" + segs[i].name;
    // The last segment is opened for writing: that claims it (a previous
    // writer that lost the store can no longer append to it) and lets a
    // torn tail be cut.
    std::unique_ptr<File> f;
    {
      auto opened = env_->OpenFile(path, last && writable ? Env::OpenMode::kReadWrite : Env::OpenMode::kRead);
      if (resume && !opened.ok() && opened.status().IsNotFound()) return listed_again(expected - 1);
      LMC_RETURN_IF_ERROR(opened.status());
      f = std::move(opened).value();
    }
    const uint64_t base = resume && segs[i].name == cursor_seg_ ? cursor_off_ : 0;
    std::string data;
    if (base > 0) {
      if (f->Size() < base) return Status::Aborted(path + " is shorter than this reader has read: rewritten");
      data.resize(f->Size() - base);
      LMC_ASSIGN_OR_RETURN(size_t n, f->ReadAt(base, data.size(), reinterpret_cast<uint8_t*>(data.data())));
      data.resize(n);
    } else {
      LMC_ASSIGN_OR_RETURN(data, ReadAll(env_, path, f.get()));
    }
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    size_t pos = 0;
    uint64_t prev = base > 0 ? cursor_seq_ : segs[i].first - 1;
    if (base > 0) last_seq = std::max(last_seq, prev);
    while (pos < data.size()) {
      const size_t left = data.size() - pos;
      bool ok = left >= kRecordHeader && LoadLE32(p + pos) == kRecordMagic &&
                LoadLE32(p + pos + 4) <= left - kRecordHeader;
      uint32_t len = 0;
      uint64_t seq = 0;
      if (ok) {
        len = LoadLE32(p + pos + 4);
        seq = LoadLE64(p + pos + 8);
        ok = LoadLE64(p + pos + 16) == RecordHash(seq, p + pos + kRecordHeader, len);
      }
      if (!ok && !writable && last) break;  // being written, or torn: not a reader's to judge
      if (!ok && writable && prev < after) {
        // Record prev + 1 is in the local index, so it was whole when it
        // was appended (the index applies a record only after the journal
        // took it): this is rot, not a torn write. Cut nothing; go on from
        // the next whole record, and heal the journal afterwards.
        size_t q = pos + 1;
        uint64_t qseq = 0;
        for (; q + kRecordHeader <= data.size(); ++q) {
          if (LoadLE32(p + q) != kRecordMagic) continue;
          const uint32_t qlen = LoadLE32(p + q + 4);
          if (qlen > data.size() - q - kRecordHeader) continue;
          qseq = LoadLE64(p + q + 8);
          if (qseq > prev && LoadLE64(p + q + 16) == RecordHash(qseq, p + q + kRecordHeader, qlen)) break;
        }
        const bool found = q + kRecordHeader <= data.size();
        spdlog::warn(
            "{}: journal record after {} damaged at offset {}; the local index holds it (it is at "
            "record {}), so nothing is lost: {}",
            path, prev, pos, after,
            found ? "going on at record " + std::to_string(qseq) : "no whole record follows");
        damaged_ = true;
        if (!found) {
          // Everything after the damage is unreadable; the local index is
          // where the journal ends (Heal rewrites it from there).
          prev = after;
          last_seq = after;
          expected = std::max(expected, after + 1);
          break;
        }
        if (qseq > after + 1)
          return Status::Corruption(path + ": journal records " + std::to_string(after + 1) + " to " +
                                    std::to_string(qseq - 1) +
                                    " are damaged and not in the local index; the index records they held "
                                    "cannot be replayed (restore the store from a copy)");
        prev = qseq - 1;
        pos = q;
        continue;
      }
      if (!ok) {
        if (!last)
          return Status::Corruption(path + ": journal record damaged at offset " + std::to_string(pos) +
                                    "; the index records after it cannot be replayed (restore the store's "
                                    "journal or run lmcfs-fsck)");
        // A record whose write never completed: never acknowledged.
        spdlog::info(
            "{}: cutting a torn journal record at offset {} ({} bytes; a write that never completed)", path,
            pos, left);
        LMC_RETURN_IF_ERROR(f->Truncate(pos));
        LMC_RETURN_IF_ERROR(f->Sync());
        break;
      }
      if (seq != prev + 1)
        return Status::Corruption(path + ": journal record " + std::to_string(seq) + " follows " +
                                  std::to_string(prev) + " (a gap in the index journal)");
      if (seq > after) {
        if (seq != expected)
          return Status::Corruption(path + ": journal record " + std::to_string(seq) + " where " +
                                    std::to_string(expected) + " was expected (a gap in the index journal)");
        LMC_RETURN_IF_ERROR(apply(seq, std::string_view(data.data() + pos + kRecordHeader, len)));
        expected++;
        *replayed += len;
      }
      if (seq > snapshot_seq_) {
        since_snapshot_ += kRecordHeader + len;
        if (!writable) read_since_snapshot_.emplace_back(seq, kRecordHeader + len);
      }
      prev = seq;
      last_seq = seq;
      pos += kRecordHeader + len;
    }
    // A last segment without a record (created by a writer that stopped
    // before its first record landed) goes, so that the next writer can
    // start the segment of the same number.
    cursor_seg_ = segs[i].name;
    cursor_off_ = base + pos;
    cursor_seq_ = prev;
    // Without a listing, the segment read is the last one until the next
    // is found by its name.
    if (resume && last) {
      const std::string next = SegmentName(prev + 1);
      if (env_->FileExists(dir_ + "/" + next)) {
        // Every record here read: go on there. Else the writer began
        // the next segment after this one's tail was read: the record
        // there is whole now, or damaged.
        if (pos != data.size()) return listed_again(expected - 1);
        segs.push_back({prev + 1, next});
      }
    }
    if (last && pos == 0 && base == 0 && writable) {
      f.reset();
      LMC_RETURN_IF_ERROR(env_->DeleteFile(path));
      LMC_RETURN_IF_ERROR(env_->SyncDir(dir_));
    }
  }
  if (damaged_) last_seq = std::max(last_seq, after);
  if (last_seq != 0 && last_seq < after)
    return Status::Aborted("the local index is at journal record " + std::to_string(after) +
                           " but the journal ends at " + std::to_string(last_seq));
  if (last_seq == 0 && expected - 1 > snapshot_seq_ && !segs.empty())
    return Status::Aborted("the local index is at journal record " + std::to_string(after) +
                           " but the journal holds none after the snapshot at " +
                           std::to_string(snapshot_seq_));
  next_seq_ = expected;
  if (!writable) {
    cursor_seq_ = expected - 1;
    return Status::Ok();
  }
  replayed_ = true;
  seg_.reset();
  cursor_seg_.clear();
  return Status::Ok();
}

Status IndexJournal::StartSegment() {
  // A later synced append makes only its own segment durable: the one
  // before goes to disk first.
  if (seg_ && unsynced_) LMC_RETURN_IF_ERROR(seg_->Sync());
  unsynced_ = false;
  seg_.reset();
  const std::string path = dir_ + "/" + SegmentName(next_seq_);
  auto f = env_->OpenFile(path, Env::OpenMode::kCreate);
  if (!f.ok()) return f.status();
  seg_ = std::move(f).value();
  return env_->SyncDir(dir_);
}

Status IndexJournal::Append(std::string_view data, bool sync) {
  if (!replayed_) return Status::InvalidArgument("journal append before replay");
  if (broken_)
    return Status::IOError(dir_ +
                           ": an earlier journal write failed and could not be undone; no index change is "
                           "accepted until the store is reopened (unmount and remount)");
  if (data.size() > UINT32_MAX - kRecordHeader) return Status::InvalidArgument("journal record too large");
  if (!seg_ || seg_->Size() >= kSegmentBytes) {
    Status st = StartSegment();
    if (!st.ok()) {
      seg_.reset();
      return st;
    }
  }
  uint8_t h[kRecordHeader];
  StoreLE32(h, kRecordMagic);
  StoreLE32(h + 4, static_cast<uint32_t>(data.size()));
  StoreLE64(h + 8, next_seq_);
  StoreLE64(h + 16, RecordHash(next_seq_, data.data(), data.size()));
  const uint64_t before = seg_->Size();
  const std::span<const uint8_t> pieces[2] = {{h, kRecordHeader},
                                              {reinterpret_cast<const uint8_t*>(data.data()), data.size()}};
  Status st = seg_->AppendV(pieces);
  if (st.ok() && sync) st = seg_->Sync();
  if (!st.ok()) {
    if (seg_->Size() != before && !seg_->Truncate(before).ok()) broken_ = true;
    return st;
  }
  unsynced_ = !sync;  // a synced append makes every earlier one durable too
  last_append_at_ = before;
  next_seq_++;
  since_snapshot_ += kRecordHeader + data.size();
  return Status::Ok();
}

Status IndexJournal::Unappend() {
  if (!seg_ || last_append_at_ == UINT64_MAX || broken_)
    return Status::InvalidArgument("journal: no append to take back");
  const uint64_t size = seg_->Size();
  Status st = seg_->Truncate(last_append_at_);
  if (st.ok()) st = seg_->Sync();
  if (!st.ok()) {
    broken_ = true;
    return st;
  }
  next_seq_--;
  since_snapshot_ -= std::min(since_snapshot_.load(), size - last_append_at_);
  last_append_at_ = UINT64_MAX;
  return Status::Ok();
}

Status IndexJournal::WriteSnapshot(uint64_t seq, const std::function<Status(const SinkFn&)>& scan) {
  uint32_t part = 0;
  uint64_t written = 0;
  std::string buf;
  auto flush = [&]() -> Status {
    std::string out(kSnapshotHeader, '\0');
    StoreLE32(out.data(), kSnapshotMagic);
    StoreLE32(out.data() + 4, part);
    StoreLE64(out.data() + 8, seq);
    out += buf;
    uint8_t t[8];
    StoreLE64(t, hash::Xxh3_64(out.data(), out.size()));
    out.append(reinterpret_cast<const char*>(t), 8);
    const std::string path = dir_ + "/" + PartName(seq, part);
    if (env_->FileExists(path)) LMC_RETURN_IF_ERROR(env_->DeleteFile(path));  // an earlier attempt's
    LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(path, Env::OpenMode::kCreate));
    LMC_RETURN_IF_ERROR(f->Append(reinterpret_cast<const uint8_t*>(out.data()), out.size()));
    LMC_RETURN_IF_ERROR(f->Sync());
    written += out.size();
    part++;
    buf.clear();
    return Status::Ok();
  };
  LMC_RETURN_IF_ERROR(scan([&](uint32_t cf, std::string_view k, std::string_view v) -> Status {
    uint8_t h[12];
    StoreLE32(h, cf);
    StoreLE32(h + 4, static_cast<uint32_t>(k.size()));
    StoreLE32(h + 8, static_cast<uint32_t>(v.size()));
    buf.append(reinterpret_cast<const char*>(h), 12);
    buf.append(k);
    buf.append(v);
    if (buf.size() >= kPartBytes) return flush();
    return Status::Ok();
  }));
  if (!buf.empty() || part == 0) LMC_RETURN_IF_ERROR(flush());
  LMC_RETURN_IF_ERROR(env_->SyncDir(dir_));
  const uint64_t old_seq = snapshot_seq_;
  const uint32_t old_parts = snapshot_parts_;
  LMC_RETURN_IF_ERROR(WriteHead(seq, part));
  since_snapshot_ = 0;
  snapshot_bytes_ = written;
  sized_seq_ = seq;
  sized_parts_ = part;
  // What the new snapshot makes unnecessary: the old one's parts, and every
  // segment whose records all precede it (its successor starts at or
  // before seq + 1). The last segment always stays.
  for (uint32_t i = 0; i < old_parts && old_seq != seq; ++i) {
    const std::string path = dir_ + "/" + PartName(old_seq, i);
    if (env_->FileExists(path)) LMC_RETURN_IF_ERROR(env_->DeleteFile(path));
  }
  LMC_ASSIGN_OR_RETURN(std::vector<Segment> segs, Segments());
  for (size_t i = 0; i + 1 < segs.size(); ++i) {
    if (segs[i + 1].first > seq + 1) break;
    LMC_RETURN_IF_ERROR(env_->DeleteFile(dir_ + "/" + segs[i].name));
  }
  // The writer's snapshot of everything it appended: the last segment goes
  // too (the next append starts a new one), so that the journal of a store
  // is its snapshot plus what came after, not a 64 MiB segment kept whole.
  if (replayed_ && seq + 1 == next_seq_ && !segs.empty()) {
    seg_.reset();
    unsynced_ = false;
    last_append_at_ = UINT64_MAX;
    LMC_RETURN_IF_ERROR(env_->DeleteFile(dir_ + "/" + segs.back().name));
  }
  return env_->SyncDir(dir_);
}

Result<std::unique_ptr<IndexJournal>> IndexJournal::Recreate(
    Env* env, const std::string& dir, std::string id, uint64_t seq,
    const std::function<Status(const SinkFn&)>& scan) {
  std::unique_ptr<IndexJournal> j(new IndexJournal(env, dir + "/journal"));
  j->id_ = std::move(id);
  LMC_ASSIGN_OR_RETURN(std::vector<std::string> before, env->ListDir(j->dir_));
  LMC_RETURN_IF_ERROR(j->WriteSnapshot(seq, scan));
  // Whatever HEAD named before is unknown: every other segment and part goes.
  const std::string keep = PartName(seq, 0).substr(0, 5 + 16);
  for (const std::string& n : before)
    if (n.rfind("seg-", 0) == 0 || (n.rfind("snap-", 0) == 0 && n.rfind(keep, 0) != 0))
      LMC_RETURN_IF_ERROR(env->DeleteFile(j->dir_ + "/" + n));
  LMC_RETURN_IF_ERROR(env->SyncDir(j->dir_));
  j->next_seq_ = seq + 1;
  j->replayed_ = true;
  spdlog::warn("{}: journal written again from the local index (a snapshot at record {})", j->dir_, seq);
  return j;
}

Status IndexJournal::Heal(const std::function<Status(const SinkFn&)>& scan) {
  if (!replayed_) return Status::InvalidArgument("journal heal before replay");
  const uint64_t seq = next_seq_ - 1;
  if (seg_ && unsynced_) LMC_RETURN_IF_ERROR(seg_->Sync());
  // A writer's snapshot of every record deletes every segment, the damaged
  // ones with the rest.
  LMC_RETURN_IF_ERROR(WriteSnapshot(seq, scan));
  damaged_ = false;
  spdlog::info(
      "{}: journal rewritten from the local index (a snapshot at record {}; its damaged segments "
      "removed)",
      dir_, seq);
  return Status::Ok();
}

Status IndexJournal::Verify() {
  LMC_RETURN_IF_ERROR(
      LoadSnapshot([](uint32_t, std::string_view, std::string_view) { return Status::Ok(); }));
  return ForEachRecord([](uint64_t, std::string_view) { return Status::Ok(); });
}

Status IndexJournal::ForEachRecord(const std::function<Status(uint64_t seq, std::string_view data)>& fn) {
  LMC_ASSIGN_OR_RETURN(std::vector<Segment> segs, Segments());
  uint64_t prev = 0;
  for (const Segment& g : segs) {
    const std::string path = dir_ + "/" + g.name;
    LMC_ASSIGN_OR_RETURN(std::string data, ReadAll(env_, path));
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    size_t pos = 0;
    if (prev != 0 && g.first != prev + 1)
      return Status::Corruption(path + ": starts at record " + std::to_string(g.first) + " after record " +
                                std::to_string(prev) + " (a gap in the index journal)");
    prev = g.first - 1;
    while (pos < data.size()) {
      const size_t left = data.size() - pos;
      bool ok = left >= kRecordHeader && LoadLE32(p + pos) == kRecordMagic &&
                LoadLE32(p + pos + 4) <= left - kRecordHeader;
      const uint32_t len = ok ? LoadLE32(p + pos + 4) : 0;
      const uint64_t seq = ok ? LoadLE64(p + pos + 8) : 0;
      ok = ok && seq == prev + 1 && LoadLE64(p + pos + 16) == RecordHash(seq, p + pos + kRecordHeader, len);
      if (!ok)
        return Status::Corruption(path + ": journal record after " + std::to_string(prev) +
                                  " damaged at offset " + std::to_string(pos));
      if (seq > snapshot_seq_)
        LMC_RETURN_IF_ERROR(fn(seq, std::string_view(data.data() + pos + kRecordHeader, len)));
      prev = seq;
      pos += kRecordHeader + len;
    }
  }
  if (prev != 0 && prev < snapshot_seq_)
    return Status::Corruption(dir_ + ": the journal ends at record " + std::to_string(prev) +
                              ", before its snapshot at " + std::to_string(snapshot_seq_));
  return Status::Ok();
}

}  // namespace lmc::store
