// The encode stage of the write pipeline (encoder.h).
#include "encoder.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/store/frame_pool.h"
#include "ns_timer.h"

namespace lmc::fs {

namespace {

bool AllZero(const uint8_t* p, size_t n) {
  // Word at a time: most chunks are not zero and fail in the first word.
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (LoadLE64(p + i)) return false;
  }
  for (; i < n; i++)
    if (p[i]) return false;
  return true;
}

// Per-thread codec scratch: encode never allocates it in the steady state.
Workspace& EncoderWorkspace() {
  thread_local Workspace ws;
  return ws;
}

// Runs fn; an exception becomes the job's status.
template <typename Fn>
void Guarded(EncodeJob* job, Fn&& fn) {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    job->status = Status::IOError("out of memory encoding a chunk");
  } catch (const std::exception& e) {
    job->status = Status::IOError(std::string("encoding a chunk failed: ") + e.what());
  }
}

// A job between its preparation and its encode: the codec parameters and
// the delta base whose bytes params.base points into.
struct Prepared {
  EncodeParams params;
  std::optional<BaseChoice> base;
};

// What comes before EncodeChunk, on either path: the zero check, the dtype,
// the delta base (lmc/fs/delta_policy.h). Returns true when the job is to
// be encoded; false for a zero chunk or an error (in job->status; a base
// already chosen is in job->base_key, for ReleaseIfFailed).
bool PrepareJob(EncodeJob* job, Prepared* out) {
  const uint8_t* p = job->buf->data();
  const size_t n = job->buf->size();
  if (AllZero(p, n)) {
    job->zero = true;
    return false;
  }
  out->params.dtype = job->dtype ? *job->dtype : DetectDType(p, n);
  // The delta seam: the policy may offer an XOR base of the same length;
  // `out->base` keeps its bytes alive while encoding.
  if (job->delta) {
    out->base = job->delta->ChooseBase(job->Origin(), p, n);
    if (out->base) {
      const BaseChoice& b = *out->base;
      job->base_key = b.key;  // released by ReleaseIfFailed if the encode fails
      job->base_pending = b.pending;
      // A widened (bf16 twin) base is checked by EncodeChunk against the range it needs.
      if (!b.bytes || (!b.widened_offset && b.bytes->size() != n)) {
        job->status = Status::InvalidArgument("delta policy offered base " + b.key.ToHex() + " of " +
                                              std::to_string(b.bytes ? b.bytes->size() : 0) +
                                              " bytes for a chunk of " + std::to_string(n));
        return false;
      }
      out->params.base = b.bytes->data();
      out->params.widened_base_offset = b.widened_offset;
      out->params.base_len = b.bytes->size();
    }
  }
  return true;
}

// A worst-case frame buffer of this thread (grown, never shrunk): frames
// are encoded here, and only their bytes copied out, to the job.
uint8_t* FrameScratch(size_t n) {
  thread_local std::unique_ptr<uint8_t[]> buf;
  thread_local size_t cap = 0;
  const size_t need = MaxEncodedSize(n);
  if (cap < need) {
    buf = std::make_unique_for_overwrite<uint8_t[]>(need);
    cap = need;
  }
  return buf.get();
}

// The frame's bytes into a pooled buffer (frame_pool.h: pages mapped
// already), which the batch gives back once the commit wrote them.
void SetFrame(EncodeJob* job, const uint8_t* frame, size_t len) {
  if (job->frame.capacity() < len) job->frame = store::TakeFrameBuffer(len);
  job->frame.assign(reinterpret_cast<const char*>(frame), len);
  job->seal.reset();
}

// The chunk's key as its store names it.
store::ChunkKey KeyOf(const EncodeJob& job) {
  const uint8_t* p = job.buf->data();
  const size_t n = job.buf->size();
  return job.store ? job.store->keys().Of(p, n, job.key_owner) : store::ChunkKey::Of(p, n, job.key_owner);
}

// A store whose keys are cheap to compute (XXH3) is asked before anything
// is encoded whether it holds these bytes already: a copy, a frozen tensor,
// a checkpoint saved again. Then the job ends with the key and the match
// (compared byte for byte by the store), without a frame. Returns whether
// it matched; the key is set either way when it was computed.
bool MatchStored(EncodeJob* job) {
  if (!job->store || !job->store->keys().verify_hits()) return false;
  const uint8_t* p = job->buf->data();
  const size_t n = job->buf->size();
  if (AllZero(p, n)) return false;  // a hole (PrepareJob)
  job->key = KeyOf(*job);
  job->key_ready = true;
  auto m = job->store->MatchChunk(job->key, p, n, EncoderWorkspace());
  // An error reading the stored chunk is not this write's: encode it, and
  // the commit compares again.
  if (!m.ok() || m->kind != store::ChunkMatch::Kind::kEqual) return false;
  job->match = *m;
  return true;
}

// EncodeChunk on this thread, then the chunk key.
void EncodeOnCpu(EncodeJob* job, const Prepared& prep) {
  const uint8_t* p = job->buf->data();
  const size_t n = job->buf->size();
  uint8_t* scratch = FrameScratch(n);
  auto r = EncodeChunk(p, n, prep.params, scratch, MaxEncodedSize(n), EncoderWorkspace());
  if (!r.ok()) {
    job->status = r.status();
    return;
  }
  SetFrame(job, scratch, *r);
  if (!job->key_ready) job->key = KeyOf(*job);  // else MatchStored computed it
  job->seal = store::SealRecord(job->key, {scratch, *r}, static_cast<uint32_t>(n), job->key_owner);
}

// A base chosen for a chunk whose encode failed is never recorded: hand it back.
void ReleaseIfFailed(EncodeJob* job) {
  if (!job->status.ok() && job->base_key) {
    job->delta->Release(*job->base_key);
    job->base_key.reset();
  }
}

// Marks the job done and wakes its waiters; a job the inode dropped
// meanwhile releases its base here (FileData::Purge).
void CompleteJob(EncodeJob* job) {
  bool release = false;
  {
    std::lock_guard lk(job->mu);
    job->done = true;
    release = job->dropped && job->base_key;
  }
  if (release) {
    job->delta->Release(*job->base_key);
    job->base_key.reset();
  }
  job->cv.notify_all();
}

void CountEncoded(const EncodeJob& job, bool gpu, FsCounters& c) {
  if (!job.status.ok() || job.zero) return;
  if (job.match) {
    c.matched_chunks++;
    c.matched_bytes += job.buf->size();
    return;
  }
  (gpu ? c.gpu_encode_chunks : c.cpu_encode_chunks)++;
  (gpu ? c.gpu_encode_bytes : c.cpu_encode_bytes) += job.buf->size();
}

}  // namespace

void EncodeJob::Wait() {
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
}

void RunEncodeJob(EncodeJob* job) {
  Prepared prep;
  Guarded(job, [&] {
    if (MatchStored(job)) return;
    if (PrepareJob(job, &prep)) EncodeOnCpu(job, prep);
  });
  ReleaseIfFailed(job);
}

EncoderPool::EncoderPool(unsigned threads, GpuPath* gpu, FsCounters* counters)
    : gpu_(gpu && gpu->active() ? gpu : nullptr),
      counters_(*counters),
      want_(threads ? threads : std::max(1u, std::thread::hardware_concurrency())) {}

void EncoderPool::StartLocked() {
  if (started_) return;
  started_ = true;
  for (unsigned i = 0; i < want_; i++) threads_.emplace_back([this] { Run(); });
  if (gpu_) feeder_ = std::thread([this] { RunGpu(); });
}

EncoderPool::~EncoderPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cpu_cv_.notify_all();
  gpu_cv_.notify_all();
  if (feeder_.joinable()) feeder_.join();
  for (auto& t : threads_) t.join();
}

void EncoderPool::Submit(std::shared_ptr<EncodeJob> job) {
  bool feed = false;
  {
    std::lock_guard lk(mu_);
    StartLocked();
    queued_bytes_ += job->buf->size();
    queue_.push_back(std::move(job));
    feed = gpu_ && FeederMayTake();
  }
  cpu_cv_.notify_one();
  if (feed) gpu_cv_.notify_one();
}

void EncoderPool::Run() {
  for (;;) {
    std::shared_ptr<EncodeJob> job;
    {
      std::unique_lock lk(mu_);
      cpu_cv_.wait(lk, [&] { return stop_ || CpuMayTake(); });
      if (queue_.empty()) break;  // stop_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job->buf->size();
    }
    RunEncodeJob(job.get());
    CountEncoded(*job, false, counters_);
    CompleteJob(job.get());
  }
  // SHA-256 through OpenSSL keeps per-thread state; free it before the
  // thread ends rather than leave it to process exit.
  OPENSSL_thread_stop();
}

bool EncoderPool::CpuMayTake() const {
  if (queue_.empty()) return false;
  if (!gpu_ || !gpu_->first() || !gpu_->active()) return true;
  // GPU first: help only while the feeder is busy and a batch more waits.
  return feeder_busy_ && queued_bytes_ >= gpu_->batch_bytes();
}

bool EncoderPool::FeederMayTake() const {
  return gpu_->first() ? !queue_.empty() : queued_bytes_ >= gpu_->min_batch_bytes();
}

void EncoderPool::RunGpu() {
  pthread_setname_np(pthread_self(), "lmcfs-gpu");
  std::vector<std::shared_ptr<EncodeJob>> batch;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      {
        NsTimer idle(counters_.gpu_feeder_idle_ns);
        gpu_cv_.wait(lk, [&] { return stop_ || FeederMayTake(); });
      }
      // At stop the CPU threads finish the queue; once the GPU is off
      // (a failed batch, here or on the read path) they take everything.
      if (stop_ || !gpu_->active()) break;
      feeder_busy_ = true;
      size_t bytes = 0;
      while (!queue_.empty()) {
        const size_t n = queue_.front()->buf->size();
        if (!batch.empty() && bytes + n > gpu_->batch_bytes()) break;
        bytes += n;
        queued_bytes_ -= n;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    EncodeBatchOnGpu(batch);
    batch.clear();
    std::lock_guard lk(mu_);
    feeder_busy_ = false;
  }
  {
    // GPU first: the CPU threads may be waiting for a feeder that is gone.
    std::lock_guard lk(mu_);
    feeder_busy_ = false;
  }
  cpu_cv_.notify_all();
  OPENSSL_thread_stop();
}

void EncoderPool::EncodeBatchOnGpu(const std::vector<std::shared_ptr<EncodeJob>>& batch) {
  std::vector<Prepared> prep(batch.size());
  std::vector<std::unique_ptr<uint8_t[]>> frames(batch.size());  // worst-case, not zero-filled
  std::vector<GpuEncodeItem> items;
  std::vector<size_t> of_item;  // items[j] encodes batch[of_item[j]]
  items.reserve(batch.size());
  of_item.reserve(batch.size());
  uint64_t bytes = 0;
  const auto t_prepare = std::chrono::steady_clock::now();
  for (size_t i = 0; i < batch.size(); i++) {
    EncodeJob* job = batch[i].get();
    Guarded(job, [&] {
      if (!PrepareJob(job, &prep[i])) return;
      frames[i] = std::make_unique_for_overwrite<uint8_t[]>(MaxEncodedSize(job->buf->size()));
      GpuEncodeItem it;
      it.src = job->buf->data();
      it.n = job->buf->size();
      it.dtype = prep[i].params.dtype;
      it.base = prep[i].params.base;
      it.widened_base_offset = prep[i].params.widened_base_offset;  // a paired fp32 master
      it.base_len = prep[i].params.base_len;
      it.dst = frames[i].get();
      it.cap = MaxEncodedSize(it.n);
      items.push_back(it);
      of_item.push_back(i);
      bytes += it.n;
    });
  }
  const auto t_call = std::chrono::steady_clock::now();
  counters_.gpu_feeder_prepare_ns += ElapsedNs(t_prepare, t_call);
  Status s = Status::Ok();
  if (!items.empty()) {
    const EncodeJob& first = *batch[of_item[0]];
    s = gpu_->EncodeBatch(items.data(), items.size(),
                          std::to_string(items.size()) + " chunks (" + std::to_string(bytes) +
                              " bytes) from inode " + std::to_string(first.ino) + " offset " +
                              std::to_string(first.begin));
  }
  const auto t_finish = std::chrono::steady_clock::now();
  size_t refused = 0;  // items the GPU refused although the batch ran
  Status first_refusal;
  for (size_t j = 0; j < items.size(); j++) {
    EncodeJob* job = batch[of_item[j]].get();
    if (!s.ok() || !items[j].status.ok()) {
      // The device failed (no item is valid), or refused this chunk of ours:
      // encode it on the CPU, with the parameters (and base) already chosen.
      if (s.ok() && refused++ == 0) first_refusal = items[j].status;
      Guarded(job, [&] { EncodeOnCpu(job, prep[of_item[j]]); });
      CountEncoded(*job, false, counters_);
      continue;
    }
    Guarded(job, [&] {
      const uint8_t* frame = frames[of_item[j]].get();
      SetFrame(job, frame, items[j].len);
      job->key = KeyOf(*job);
      // Sealed here, as the CPU threads seal theirs, so that the commit
      // (one thread for every writer) does not read the frame again.
      job->seal = store::SealRecord(job->key, {frame, items[j].len}, static_cast<uint32_t>(job->buf->size()),
                                    job->key_owner);
    });
    CountEncoded(*job, true, counters_);
  }
  if (refused) {
    counters_.gpu_fallback_chunks += refused;
    spdlog::warn(
        "lmcfs: the GPU codec refused {} of {} chunks of a batch (first: {}); they were encoded on the CPU",
        refused, items.size(), first_refusal.ToString());
  }
  for (const auto& job : batch) {
    ReleaseIfFailed(job.get());
    CompleteJob(job.get());
  }
  counters_.gpu_feeder_finish_ns += ElapsedNs(t_finish, std::chrono::steady_clock::now());
}

}  // namespace lmc::fs
