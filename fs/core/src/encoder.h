// The encode stage of the write pipeline (docs/ARCHITECTURE.md, "The
// filesystem", "Write pipeline"): one job per chunk, run on the
// filesystem's own encoder threads (or, in batches, on the GPU: "GPU codec
// in the mount"), applied back to its inode in file order by the inode's
// writer (file_data.cc).
//
// A job is built under its inode's mutex, then owned by the encoder until
// `done`; after that only the inode side touches it. Encoder threads (and
// the GPU feeder) never take an inode's mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_path.h"
#include "lmc/chunker.h"
#include "lmc/fs/delta_policy.h"
#include "lmc/fs/filesystem.h"
#include "lmc/status.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/store.h"

namespace lmc::fs {

struct EncodeJob {
  // --- input: set before submission, read-only afterwards ---
  uint64_t ino = 0;
  std::string name_hint;         // the inode's name_hint at submission
  uint64_t parent_hint = 0;      // and its parent_hint
  std::string dir_name_hint;     // and its dir_name_hint
  ChunkSpec spec;                // the chunker's fields (offset, length, dtype, lineage)
  std::optional<DType> dtype;    // nullopt: detect from the bytes
  uint64_t begin = 0, end = 0;   // file range [begin, end), end - begin == buf->size()
  store::ChunkBytes buf;         // the chunk's bytes (later the caches')
  DeltaPolicy* delta = nullptr;  // Impl::delta at submission, or nullptr
  store::KeyOwner key_owner;     // dedup=uid: the inode's owner at submission
  // The store, whose KeyScheme names the chunk (nullptr: SHA-256,
  // ChunkKey::Of). With a fast hash it is asked first whether it holds the
  // chunk already (Store::MatchChunk), in which case nothing is encoded.
  store::Store* store = nullptr;
  uint64_t charge = 0;  // bytes counted against the write budget

  // --- output: written by the encoder before `done` ---
  bool zero = false;  // all zeros: stores nothing (a hole)
  std::string frame;  // the encoded frame (moved into the batch when applied)
  store::ChunkKey key;
  // The frame's pack-record checksum (store::SealRecord), computed on the
  // encoder thread while the frame is in its cache; reset with the frame.
  std::optional<store::RecordSeal> seal;
  // The store holds this chunk's bytes already (key, record): no frame, no
  // base; applied as Batch::AddMatchedChunk.
  std::optional<store::ChunkMatch> match;
  bool key_ready = false;                   // `key` computed (MatchStored) before the encode
  std::optional<store::ChunkKey> base_key;  // the XOR base, when the policy chose one
  bool base_pending = false;                // BaseChoice::pending
  Status status;

  // --- completion ---
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  // The inode no longer wants the result (FileData::Purge); guarded by mu. The
  // encoder then releases the base it was given (DeltaPolicy::Release).
  bool dropped = false;

  ChunkOrigin Origin() const { return {ino, name_hint, &spec, parent_hint, key_owner, dir_name_hint}; }
  void Wait();
};

// Encodes and hashes one chunk (the encode task): zero check; with a
// fast-hash store, the key first and the store asked whether it holds these
// bytes (then nothing is encoded: job->match); else optional XOR base from
// the delta policy, EncodeChunk, the store's chunk key. Never throws;
// errors land in job->status (a base chosen for a failed encode is released
// and base_key reset). Does not set `done`.
void RunEncodeJob(EncodeJob* job);

// A fixed set of encoder threads with a FIFO queue, and with a GpuPath one
// GPU feeder thread beside them. The CPU threads take one job at a time as
// soon as there is one. The feeder waits until the queue holds at least
// GpuPath::min_batch_bytes() of chunk bytes, takes jobs from the front up
// to batch_bytes(), prepares each as RunEncodeJob does (zero check, dtype,
// delta base), encodes them with one GpuPath::EncodeBatch call, hashes them
// and completes them as the CPU threads do. A failed batch (the device) is
// encoded on the CPU by the feeder, which then stops; the GPU stays off. A
// chunk the GPU refuses in a batch that ran is encoded on the CPU too.
// Each thread releases OpenSSL's per-thread state when it exits
// (OPENSSL_thread_stop), so the chunk hashing can run here without
// LeakSanitizer reports.
class EncoderPool {
 public:
  // threads 0: one per hardware thread. gpu may be nullptr (CPU only);
  // gpu and counters must outlive the pool. The threads start with the
  // first Submit: a filesystem that never writes (a union's followers, a
  // read-only mount) runs none.
  EncoderPool(unsigned threads, GpuPath* gpu, FsCounters* counters);
  ~EncoderPool();  // runs what is queued (on the CPU threads), then joins
  EncoderPool(const EncoderPool&) = delete;
  EncoderPool& operator=(const EncoderPool&) = delete;

  // Queues the job; an encoder thread runs RunEncodeJob (or the feeder
  // encodes it in a batch), then marks it done and wakes its waiters.
  void Submit(std::shared_ptr<EncodeJob> job);
  size_t size() const { return want_; }  // CPU encoder threads (once started)

 private:
  void Run();     // a CPU encoder thread
  void RunGpu();  // the GPU feeder
  void EncodeBatchOnGpu(const std::vector<std::shared_ptr<EncodeJob>>& batch);
  // Under mu_: whether a CPU thread may take the front job, and whether
  // the feeder should take a batch (GpuPath::first decides who comes first).
  bool CpuMayTake() const;
  bool FeederMayTake() const;
  void StartLocked();  // under mu_: starts the threads, once

  GpuPath* const gpu_;  // nullptr: no feeder
  FsCounters& counters_;
  std::mutex mu_;                   // guards queue_, queued_bytes_ and stop_
  std::condition_variable cpu_cv_;  // CPU threads: a job, or stop
  std::condition_variable gpu_cv_;  // the feeder: min_batch_bytes queued (GPU first: any), or stop
  bool feeder_busy_ = false;        // the feeder is encoding a batch (guarded by mu_)
  std::deque<std::shared_ptr<EncodeJob>> queue_;
  size_t queued_bytes_ = 0;  // chunk bytes of the jobs in queue_
  bool stop_ = false;
  const unsigned want_;   // CPU encoder threads to start
  bool started_ = false;  // guarded by mu_
  std::vector<std::thread> threads_;
  std::thread feeder_;
};

}  // namespace lmc::fs
