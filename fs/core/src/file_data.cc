// The write and read pipelines of one inode (docs/ARCHITECTURE.md, "The filesystem",
// "Write pipeline", "Read pipeline"). Every function here runs with the
// inode's mutex held.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fs_impl.h"
#include "lmc/codec.h"
#include "lmc/store/extent.h"
#include "lmc/thread_pool.h"

namespace lmc::fs {

namespace {

// Per-thread codec scratch and frame buffer: encode never allocates in the
// steady state.
struct EncodeScratch {
  Workspace ws;
  std::vector<uint8_t> frame;
};
EncodeScratch& Scratch() {
  thread_local EncodeScratch s;
  return s;
}

std::vector<CutSpec> ToCuts(const std::vector<ChunkSpec>& specs) {
  std::vector<CutSpec> q;
  q.reserve(specs.size());
  for (const ChunkSpec& c : specs) {
    CutSpec x;
    x.a = c.offset;
    x.b = c.offset + c.length;
    x.dtype = c.dtype;
    x.spec = c;
    q.push_back(std::move(x));
  }
  return q;
}

}  // namespace

int Filesystem::Impl::LoadExtents(Inode& in) {
  if (in.extents_loaded) return 0;
  std::map<uint64_t, ExtentRec> m;
  bool bad = false;
  Status s = store->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(in.ino),
                         [&](std::string_view k, std::string_view v) {
                           auto key = store::ParseExtentKey(k);
                           auto e = DecodeExtentRec(v);
                           if (!key || !e) {
                             bad = true;
                             return false;
                           }
                           m.emplace(key->second, *e);
                           return true;
                         });
  if (!s.ok()) return ToErrno(s, "load extents", in.ino);
  if (bad) return ToErrno(Status::Corruption("undecodable extent"), "load extents", in.ino);
  in.extents = std::move(m);
  in.extents_loaded = true;
  return 0;
}

void Filesystem::Impl::InsertDirty(Inode& in, uint64_t off, const uint8_t* p, size_t n) {
  if (n == 0) return;
  RemoveDirty(in, off, off + n);
  in.dirty_bytes += n;
  // Append to the segment ending exactly here while it is small, so that
  // tiny writes do not make tiny segments.
  auto it = in.dirty.lower_bound(off);
  if (it != in.dirty.begin()) {
    auto prev = std::prev(it);
    DirtySeg& x = prev->second;
    if (prev->first + x.len == off && x.len < (256u << 10) && x.buf.use_count() == 1 &&
        x.start + x.len == x.buf->size()) {
      x.buf->append(reinterpret_cast<const char*>(p), n);
      x.len += n;
      return;
    }
  }
  in.dirty.emplace(off, DirtySeg{std::make_shared<std::string>(reinterpret_cast<const char*>(p), n),
                                 0, n});
}

void Filesystem::Impl::RemoveDirty(Inode& in, uint64_t a, uint64_t b) {
  if (a >= b || in.dirty.empty()) return;
  auto it = in.dirty.lower_bound(a);
  if (it != in.dirty.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size() > a) it = prev;
  }
  while (it != in.dirty.end() && it->first < b) {
    uint64_t s = it->first, e = s + it->second.size();
    DirtySeg seg = std::move(it->second);
    it = in.dirty.erase(it);
    in.dirty_bytes -= seg.size();
    if (s < a) {
      in.dirty.emplace(s, seg.Slice(0, a - s));
      in.dirty_bytes += a - s;
    }
    if (e > b) {
      in.dirty.emplace(b, seg.Slice(b - s, e - b));
      in.dirty_bytes += e - b;
      break;
    }
  }
}

// Replaces whatever extents cover [a, b) by `nw` (placed at a; its chunk
// reference already taken by the caller's AddChunk) or by nothing (zeros).
// Extents crossing a or b keep their outside parts, each one reference.
// Batch order matters: references of the remnants before the releases (a
// release to zero deletes the chunk), and extent deletes before puts of the
// same key.
void Filesystem::Impl::ReplaceRange(Inode& in, uint64_t a, uint64_t b, const ExtentRec* nw) {
  std::vector<std::pair<uint64_t, ExtentRec>> removed, remnants;
  auto it = in.extents.upper_bound(a);
  if (it != in.extents.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.length > a) it = prev;
  }
  while (it != in.extents.end() && it->first < b) {
    uint64_t s = it->first, e = s + it->second.length;
    const ExtentRec& x = it->second;
    if (s < a) {
      ExtentRec l = x;
      l.length = static_cast<uint32_t>(a - s);
      remnants.emplace_back(s, l);
    }
    if (e > b) {
      ExtentRec r = x;
      r.chunk_offset = static_cast<uint32_t>(x.chunk_offset + (b - s));
      r.length = static_cast<uint32_t>(e - b);
      remnants.emplace_back(b, r);
    }
    removed.emplace_back(s, x);
    it = in.extents.erase(it);
  }
  store::Batch& batch = in.pending;
  for (auto& [off, r] : remnants) batch.Ref(r.key);
  for (auto& [off, x] : removed) {
    batch.Unref(x.key);
    batch.Delete(store::Cf::kExtents, store::ExtentKey(in.ino, off));
    in.rec.stored -= std::min(in.rec.stored, x.Stored());
  }
  for (auto& [off, r] : remnants) {
    batch.Put(store::Cf::kExtents, store::ExtentKey(in.ino, off), EncodeExtentRec(r));
    in.extents[off] = r;
    in.rec.stored += r.Stored();
  }
  if (nw) {
    batch.Put(store::Cf::kExtents, store::ExtentKey(in.ino, a), EncodeExtentRec(*nw));
    in.extents[a] = *nw;
    in.rec.stored += nw->Stored();
  }
  if (!removed.empty() || nw) in.rec_dirty = true;
}

int Filesystem::Impl::GetChunk(Inode& in, const ExtentRec& e, ChunkBytes* out) {
  if ((*out = cache.Get(e.key))) {
    fs->counters_.cache_hits++;
    return 0;
  }
  fs->counters_.cache_misses++;
  // The chunk may exist only in this inode's pending batch.
  if (in.pending_chunks) {
    if (int err = CommitLocked(in, false)) return err;
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(e.decoded_len);
  auto r = store->ReadChunk(e.key, buf->data(), buf->size(), Scratch().ws);
  if (!r.ok()) return ToErrno(r.status(), "read chunk " + e.key.ToHex(), in.ino);
  if (*r != e.decoded_len)
    return ToErrno(Status::Corruption("chunk " + e.key.ToHex() + " has an unexpected length"),
                   "read chunk", in.ino);
  cache.Put(e.key, buf);
  *out = std::move(buf);
  return 0;
}

// The file's current bytes [a, b): zeros, then extents, then dirty bytes.
int Filesystem::Impl::View(Inode& in, uint64_t a, uint64_t b, uint8_t* out) {
  std::memset(out, 0, b - a);
  if (int err = LoadExtents(in)) return err;
  auto it = in.extents.upper_bound(a);
  if (it != in.extents.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.length > a) it = prev;
  }
  for (; it != in.extents.end() && it->first < b; ++it) {
    uint64_t s = std::max(a, it->first), e = std::min(b, it->first + it->second.length);
    if (s >= e) continue;
    ExtentRec x = it->second;  // copy: GetChunk may commit, never reshapes the map
    ChunkBytes c;
    if (int err = GetChunk(in, x, &c)) return err;
    std::memcpy(out + (s - a), c->data() + x.chunk_offset + (s - it->first), e - s);
  }
  // Chunks at the encoders, in submission order (a later one is newer).
  for (const auto& j : in.inflight) {
    uint64_t s = std::max(a, j->a), e = std::min(b, j->end);
    if (s < e) std::memcpy(out + (s - a), j->buf->data() + (s - j->a), e - s);
  }
  auto d = in.dirty.upper_bound(a);
  if (d != in.dirty.begin()) {
    auto prev = std::prev(d);
    if (prev->first + prev->second.size() > a) d = prev;
  }
  for (; d != in.dirty.end() && d->first < b; ++d) {
    uint64_t s = std::max(a, d->first), e = std::min(b, d->first + d->second.size());
    if (s < e) std::memcpy(out + (s - a), d->second.data() + (s - d->first), e - s);
  }
  return 0;
}

// When dirty bytes cover all of [a, b) (the usual case for a stream), they
// are the file's bytes there: appends them to *out (no zero fill) and
// returns true. Otherwise leaves *out empty and returns false.
static bool CopyDirty(const Inode& in, uint64_t a, uint64_t b, std::vector<uint8_t>* out) {
  auto it = in.dirty.upper_bound(a);
  if (it == in.dirty.begin()) return false;
  --it;
  out->reserve(b - a);
  uint64_t pos = a;
  for (; pos < b && it != in.dirty.end() && it->first <= pos; ++it) {
    uint64_t e = std::min(b, it->first + it->second.size());
    if (e <= pos) break;
    const auto* p = reinterpret_cast<const uint8_t*>(it->second.data()) + (pos - it->first);
    out->insert(out->end(), p, p + (e - pos));
    pos = e;
  }
  if (pos == b) return true;
  out->clear();
  return false;
}

// Hands each range [a, b) of the file's current bytes to the encoders as
// one chunk that will replace whatever covers it; zeros will store nothing.
// The bytes leave `dirty` now and live in the job (reads see them there)
// until ApplyDone/Drain applies the job, in submission order.
int Filesystem::Impl::MaterializeRanges(Inode& in, const std::vector<CutSpec>& specs) {
  if (int err = LoadExtents(in)) return err;
  for (const CutSpec& s : specs) {
    const uint64_t end = std::min(s.b, in.rec.size);
    if (s.a < end) {
      auto job = std::make_shared<EncodeJob>();
      job->ino = in.ino;
      job->name_hint = in.name_hint;
      job->parent_hint = in.parent_hint;
      job->spec = s.spec;
      job->dtype = s.dtype;
      job->a = s.a;
      job->end = end;
      job->buf = std::make_shared<std::vector<uint8_t>>();
      if (!CopyDirty(in, s.a, end, job->buf.get())) {
        job->buf->resize(end - s.a);
        if (int err = View(in, s.a, end, job->buf->data())) return err;
      }
      job->delta = delta.get();
      // The input, and a frame that is at most about as large.
      job->charge = 2 * (end - s.a);
      inflight_bytes += job->charge;
      in.inflight.push_back(job);
      encoders.Submit(std::move(job));
    }
    RemoveDirty(in, s.a, s.b);
  }
  return 0;
}

// Puts a failed job's bytes back into `dirty` where nothing newer covers
// them (newer dirty bytes, or a later job at the encoders), so that reads
// stay right and the next flush encodes them again.
static void Restore(Filesystem::Impl& m, Inode& in, const EncodeJob& job) {
  std::vector<std::pair<uint64_t, uint64_t>> keep = {{job.a, job.end}};
  auto cut = [&](uint64_t s, uint64_t e) {
    std::vector<std::pair<uint64_t, uint64_t>> next;
    for (auto [x, y] : keep) {
      if (e <= x || s >= y) {
        next.emplace_back(x, y);
        continue;
      }
      if (x < s) next.emplace_back(x, s);
      if (e < y) next.emplace_back(e, y);
    }
    keep = std::move(next);
  };
  for (auto& [off, seg] : in.dirty) cut(off, off + seg.size());
  bool later = false;
  for (const auto& j : in.inflight) {
    if (later) cut(j->a, j->end);
    if (j.get() == &job) later = true;
  }
  for (auto [x, y] : keep) m.InsertDirty(in, x, job.buf->data() + (x - job.a), y - x);
}

int Filesystem::Impl::ApplyJob(Inode& in, EncodeJob& job) {
  if (!job.status.ok()) {
    Restore(*this, in, job);
    return ToErrno(job.status, "encode chunk at offset " + std::to_string(job.a), in.ino);
  }
  if (job.zero) {
    ReplaceRange(in, job.a, job.end, nullptr);
    return 0;
  }
  ExtentRec e;
  e.length = static_cast<uint32_t>(job.end - job.a);
  e.key = job.key;
  e.frame_len = static_cast<uint32_t>(job.frame_len);
  e.decoded_len = e.length;
  if (delta) {
    ChunkOrigin origin{in.ino, in.name_hint, &job.spec, in.parent_hint};
    delta->Record(origin, job.key, job.base_key, &in.pending);
  }
  in.pending.AddChunk(e.key, {job.frame.get(), job.frame_len}, e.decoded_len, job.base_key);
  in.pending_chunks = true;
  ReplaceRange(in, job.a, job.end, &e);
  cache.Put(e.key, std::move(job.buf));
  fs->counters_.chunks_written++;
  fs->counters_.bytes_written += e.length;
  if (in.pending.frame_bytes() >= fs->opts_.batch_limit) return CommitLocked(in, false);
  return 0;
}

// Which jobs ApplyHead applies from the head of in.inflight.
enum class Until {
  kNotDone,     // those already done
  kEmpty,       // all (waits for each)
  kUnderBudget  // while the write budget is exceeded (waits for each)
};

static int ApplyHead(Filesystem::Impl& m, Inode& in, Until until, uint64_t budget) {
  int first = 0;
  while (!in.inflight.empty()) {
    if (until == Until::kUnderBudget && m.inflight_bytes <= budget) break;
    std::shared_ptr<EncodeJob> job = in.inflight.front();
    if (until == Until::kNotDone) {
      std::lock_guard lk(job->mu);
      if (!job->done) break;
    } else {
      job->Wait();
    }
    in.inflight.pop_front();
    int err = m.ApplyJob(in, *job);
    m.inflight_bytes -= job->charge;
    if (err && !first) first = err;
  }
  return first;
}

int Filesystem::Impl::ApplyDone(Inode& in) { return ApplyHead(*this, in, Until::kNotDone, 0); }
int Filesystem::Impl::Drain(Inode& in) { return ApplyHead(*this, in, Until::kEmpty, 0); }
// A writer over the budget waits for its own oldest jobs only: waiting for
// another inode's could wait for a writer that is itself waiting. So the
// budget can be exceeded by what other inodes hold, at most about one
// write's worth per concurrent writer.
int Filesystem::Impl::Backpressure(Inode& in) {
  return ApplyHead(*this, in, Until::kUnderBudget, fs->opts_.write_budget);
}

void Filesystem::Impl::KillStream(Inode& in) {
  in.streaming = false;
  in.parser.reset();
  in.chunker.reset();
}

// Feeds the parser the dirty bytes contiguous from stream_pos, and cuts the
// chunks the chunker completes.
int Filesystem::Impl::AdvanceStream(Inode& in) {
  for (;;) {
    auto it = in.dirty.upper_bound(in.stream_pos);
    if (it == in.dirty.begin()) break;
    --it;
    uint64_t end = it->first + it->second.size();
    if (end <= in.stream_pos) break;
    in.parser->Feed(reinterpret_cast<const uint8_t*>(it->second.data()) + (in.stream_pos - it->first),
                    end - in.stream_pos);
    in.stream_pos = end;
  }
  std::vector<ChunkSpec> specs;
  for (const Region& r : in.parser->TakeRegions()) in.chunker->Add(r, &specs);
  if (specs.empty()) return 0;
  // Each completed chunk goes to the encoders at once.
  return MaterializeRanges(in, ToCuts(specs));
}

int Filesystem::Impl::FinishStream(Inode& in) {
  if (!in.streaming) return 0;
  in.parser->Finish();
  std::vector<ChunkSpec> specs;
  for (const Region& r : in.parser->TakeRegions()) in.chunker->Add(r, &specs);
  in.chunker->Finish(&specs);
  KillStream(in);
  return MaterializeRanges(in, ToCuts(specs));
}

// Cuts every dirty range into chunks aligned to chunk_size in the file.
int Filesystem::Impl::MaterializeDirty(Inode& in) {
  const uint64_t cs = fs->opts_.chunk_size;
  // Ranges: contiguous dirty bytes, cut at multiples of chunk_size.
  std::vector<CutSpec> q;
  uint64_t a = 0, b = 0;
  auto cut = [&] {
    while (a < b) {
      uint64_t limit = std::min(b, (a / cs + 1) * cs);
      CutSpec c;
      c.a = a;
      c.b = limit;
      c.spec.offset = a;
      c.spec.length = static_cast<uint32_t>(limit - a);
      q.push_back(std::move(c));
      a = limit;
    }
  };
  for (auto& [off, seg] : in.dirty) {
    if (off != b) {
      cut();
      a = off;
    }
    b = off + seg.size();
  }
  cut();
  return MaterializeRanges(in, q);
}

int Filesystem::Impl::WriteLocked(Inode& in, uint64_t off, const uint8_t* p, size_t n) {
  if (n == 0) return 0;
  if (off + n < off || off + n > (uint64_t{1} << 62)) return EFBIG;
  if (int err = LoadExtents(in)) return err;
  // An encoder error of an earlier chunk: this write's bytes are buffered
  // (and the failed chunk's are back in dirty); the next flush reports it.
  if (int err = ApplyDone(in)) in.write_error = err;
  if (!in.streaming && off == 0 && in.extents.empty() && in.dirty.empty() &&
      in.inflight.empty()) {
    in.streaming = true;
    in.stream_pos = 0;
    in.parser = LayoutParser::Create();
    ChunkerOptions co;
    co.chunk_size = fs->opts_.chunk_size;
    in.chunker = std::make_unique<Chunker>(co);
  }
  InsertDirty(in, off, p, n);
  in.rec.size = std::max(in.rec.size, off + n);
  in.rec.mtime_ns = in.rec.ctime_ns = NowNs();
  in.rec_dirty = true;
  if (in.streaming) {
    if (int err = AdvanceStream(in)) return err;
  }
  if (in.dirty_bytes > fs->opts_.dirty_limit) {
    // Out-of-order or random writes piling up: give up the stream's typed
    // chunking and cut everything now, so memory stays bounded.
    if (int err = FinishStream(in)) return err;
    if (int err = MaterializeDirty(in)) return err;
  }
  if (int err = Backpressure(in)) in.write_error = err;
  return 0;
}

void Filesystem::Impl::Prefetch(Inode& in, uint64_t a, uint64_t b, uint64_t need_end) {
  if (LoadExtents(in)) return;
  std::vector<ExtentRec> todo;
  bool needed_now = false;  // an uncached chunk under the read itself
  auto it = in.extents.upper_bound(a);
  if (it != in.extents.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.length > a) it = prev;
  }
  for (; it != in.extents.end() && it->first < b; ++it) {
    const ExtentRec& e = it->second;
    if (!todo.empty() && todo.back().key == e.key) continue;
    if (cache.Get(e.key)) continue;
    if (it->first < need_end) needed_now = true;
    todo.push_back(e);
  }
  // Decode once there is a chunk per pool thread to decode (or the read
  // needs one now), so that each round runs in parallel.
  const size_t k = std::max<size_t>(2, ThreadPool::Shared().size());
  if (todo.empty() || (todo.size() < k && !needed_now)) return;
  if (in.pending_chunks && CommitLocked(in, false)) return;
  ThreadPool::Shared().ParallelFor(todo.size(), 0, [&](size_t i, size_t) {
    try {
      auto buf = std::make_shared<std::vector<uint8_t>>(todo[i].decoded_len);
      auto r = store->ReadChunk(todo[i].key, buf->data(), buf->size(), Scratch().ws);
      if (r.ok() && *r == buf->size()) cache.Put(todo[i].key, std::move(buf));
    } catch (...) {
      // best effort: the read decodes (and reports) on its own
    }
  });
}

int Filesystem::Impl::ReadLocked(Inode& in, uint64_t off, size_t n, std::string* out) {
  out->clear();
  if (off >= in.rec.size) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, in.rec.size - off));
  out->resize(n);
  // Sequential reads decode this read's chunks and the next few ahead in
  // parallel (one per pool thread), so cp and torch.load use every core.
  const bool sequential = off == in.last_read_end;
  in.last_read_end = off + n;
  if (sequential) {
    uint64_t ahead =
        uint64_t{fs->opts_.chunk_size} * 2 * std::max<size_t>(2, ThreadPool::Shared().size());
    Prefetch(in, off, std::min(in.rec.size, off + n + ahead), off + n);
  }
  return View(in, off, off + n, reinterpret_cast<uint8_t*>(out->data()));
}

int Filesystem::Impl::TruncateLocked(Inode& in, uint64_t size) {
  if (size > (uint64_t{1} << 62)) return EFBIG;
  if (int err = LoadExtents(in)) return err;
  // Jobs at the encoders replace ranges when applied: apply them first.
  if (int err = Drain(in)) return err;
  if (size < in.rec.size) {
    if (in.streaming && in.stream_pos > size) KillStream(in);
    RemoveDirty(in, size, UINT64_MAX);
    ReplaceRange(in, size, UINT64_MAX, nullptr);
  }
  in.rec.size = size;
  in.rec.mtime_ns = in.rec.ctime_ns = NowNs();
  in.rec_dirty = true;
  return 0;
}

int Filesystem::Impl::CommitLocked(Inode& in, bool sync) {
  if (in.purged) return 0;
  if (in.pending.empty() && !in.rec_dirty && !sync) return 0;
  in.pending.Put(store::Cf::kInodes, InodeKey(in.ino), EncodeInode(in.rec));
  Status s = store->Commit(in.pending, sync);
  if (!s.ok()) return ToErrno(s, "commit", in.ino);
  fs->counters_.commits++;
  in.pending.Clear();
  in.pending_chunks = false;
  in.rec_dirty = false;
  return 0;
}

void Filesystem::Impl::RefreshFrameLen(uint64_t ino, uint64_t off, const store::ChunkKey& key,
                                       uint32_t frame_len) {
  int err = 0;
  InodePtr in = Get(ino, &err);
  if (!in) return;  // deleted since
  std::lock_guard lk(in->mu);
  if (in->purged || !in->IsReg() || LoadExtents(*in) != 0) return;
  auto it = in->extents.find(off);
  if (it == in->extents.end() || it->second.key != key || it->second.frame_len == frame_len) return;
  ExtentRec& x = it->second;
  in->rec.stored -= std::min(in->rec.stored, x.Stored());
  x.frame_len = frame_len;
  in->rec.stored += x.Stored();
  in->rec_dirty = true;
  in->pending.Put(store::Cf::kExtents, store::ExtentKey(ino, off), EncodeExtentRec(x));
  if (CommitLocked(*in, false) != 0)
    spdlog::warn("lmcfs: inode {}: recording the new frame length of {} failed; st_blocks stays as it was",
                 ino, key.ToHex());
}

int Filesystem::Impl::FinalizeLocked(Inode& in, bool sync) {
  if (in.purged) return 0;
  int reported = in.write_error;
  in.write_error = 0;
  if (int err = FinishStream(in)) return err;
  if (int err = MaterializeDirty(in)) return err;
  if (int err = Drain(in)) return err;
  if (int err = CommitLocked(in, sync)) return err;
  return reported;
}

int Filesystem::Impl::CloneRangeLocked(Inode& src, uint64_t soff, Inode& dst, uint64_t doff,
                                       uint64_t len) {
  if (int err = LoadExtents(src)) return err;
  if (int err = LoadExtents(dst)) return err;
  // dst's stream cannot continue past bytes that did not go through it, and
  // its jobs must not land on the cloned range later.
  if (int err = FinishStream(dst)) return err;
  if (int err = Drain(dst)) return err;
  RemoveDirty(dst, doff, doff + len);
  ReplaceRange(dst, doff, doff + len, nullptr);
  const uint64_t send = soff + len;
  auto it = src.extents.upper_bound(soff);
  if (it != src.extents.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.length > soff) it = prev;
  }
  // Each cloned extent is one more reference; the chunks stay referenced by
  // src's committed extents meanwhile, so no count can reach zero here.
  for (; it != src.extents.end() && it->first < send; ++it) {
    uint64_t s = std::max(soff, it->first), e = std::min(send, it->first + it->second.length);
    if (s >= e) continue;
    ExtentRec x = it->second;
    x.chunk_offset = static_cast<uint32_t>(x.chunk_offset + (s - it->first));
    x.length = static_cast<uint32_t>(e - s);
    uint64_t at = doff + (s - soff);
    dst.pending.Ref(x.key);
    dst.pending.Put(store::Cf::kExtents, store::ExtentKey(dst.ino, at), EncodeExtentRec(x));
    dst.extents[at] = x;
    dst.rec.stored += x.Stored();
  }
  dst.rec.size = std::max(dst.rec.size, doff + len);
  dst.rec.mtime_ns = dst.rec.ctime_ns = NowNs();
  dst.rec_dirty = true;
  return CommitLocked(dst, false);
}

int Filesystem::Impl::PurgeLocked(Inode& in, store::Batch* b) {
  if (in.purged) return 0;
  KillStream(in);
  in.dirty.clear();
  in.dirty_bytes = 0;
  // Jobs still at the encoders are dropped (the encoder keeps its
  // reference until it finishes; nothing of them is applied). A delta base
  // the policy gave one is released: here if it is done, else by the
  // encoder when it is.
  for (auto& j : in.inflight) {
    inflight_bytes -= j->charge;
    std::unique_lock jl(j->mu);
    if (!j->done) {
      j->dropped = true;
    } else if (j->base_key) {
      jl.unlock();
      j->delta->Release(*j->base_key);
      j->base_key.reset();
    }
  }
  in.inflight.clear();
  if (int err = CommitLocked(in, false)) return err;
  if (int err = LoadExtents(in)) return err;
  for (auto& [off, e] : in.extents) {
    b->Unref(e.key);
    b->Delete(store::Cf::kExtents, store::ExtentKey(in.ino, off));
  }
  b->Delete(store::Cf::kInodes, InodeKey(in.ino));
  b->Delete(store::Cf::kMeta, OrphanKey(in.ino));
  std::string xp = XattrPrefix(in.ino);
  Status s = store->Scan(store::Cf::kMeta, xp, [&](std::string_view k, std::string_view) {
    b->Delete(store::Cf::kMeta, k);
    return true;
  });
  if (!s.ok()) return ToErrno(s, "purge xattrs", in.ino);
  return 0;
}

}  // namespace lmc::fs
