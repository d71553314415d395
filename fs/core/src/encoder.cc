// The encode stage of the write pipeline (encoder.h).
#include "encoder.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "lmc/bytes.h"
#include "lmc/codec.h"

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

}  // namespace

void EncodeJob::Wait() {
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
}

namespace {
void EncodeJobBody(EncodeJob* job);
}  // namespace

void RunEncodeJob(EncodeJob* job) {
  EncodeJobBody(job);
  if (!job->status.ok() && job->base_key) {
    job->delta->Release(*job->base_key);
    job->base_key.reset();
  }
}

namespace {
void EncodeJobBody(EncodeJob* job) {
  try {
    const uint8_t* p = job->buf->data();
    const size_t n = job->buf->size();
    if (AllZero(p, n)) {
      job->zero = true;
      return;
    }
    EncodeParams params;
    params.dtype = job->dtype ? *job->dtype : DetectDType(p, n);
    // The delta seam: the policy may offer an XOR base of the same length
    // (lmc/fs/delta_policy.h); `base` keeps its bytes alive while encoding.
    std::optional<BaseChoice> base;
    if (job->delta) {
      base = job->delta->ChooseBase(job->Origin(), p, n);
      if (base) {
        job->base_key = base->key;  // released by RunEncodeJob if the encode fails
        if (!base->bytes || base->bytes->size() != n) {
          job->status = Status::InvalidArgument("delta policy offered base " + base->key.ToHex() + " of " +
                                                std::to_string(base->bytes ? base->bytes->size() : 0) +
                                                " bytes for a chunk of " + std::to_string(n));
          return;
        }
        params.base = base->bytes->data();
      }
    }
    // Encoded in place into the job's own buffer (no zero fill, no copy
    // afterwards); the batch copies the frame_len bytes when applied.
    const size_t cap = MaxEncodedSize(n);
    job->frame = std::make_unique_for_overwrite<uint8_t[]>(cap);
    auto r = EncodeChunk(p, n, params, job->frame.get(), cap, EncoderWorkspace());
    if (!r.ok()) {
      job->status = r.status();
      return;
    }
    job->frame_len = *r;
    job->key = store::ChunkKey::Of(p, n);
  } catch (const std::bad_alloc&) {
    job->status = Status::IOError("out of memory encoding a chunk");
  } catch (const std::exception& e) {
    job->status = Status::IOError(std::string("encoding a chunk failed: ") + e.what());
  }
}
}  // namespace

EncoderPool::EncoderPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; i++) threads_.emplace_back([this] { Run(); });
}

EncoderPool::~EncoderPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void EncoderPool::Submit(std::shared_ptr<EncodeJob> job) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void EncoderPool::Run() {
  for (;;) {
    std::shared_ptr<EncodeJob> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stop_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    RunEncodeJob(job.get());
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
  // SHA-256 through OpenSSL keeps per-thread state; free it before the
  // thread ends rather than leave it to process exit.
  OPENSSL_thread_stop();
}

}  // namespace lmc::fs
