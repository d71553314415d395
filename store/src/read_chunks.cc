// Store::ReadChunks: many chunks in few batch decoder calls (the GPU codec
// in the mount), deltas included, with ReadChunk's checks; anything out of
// the ordinary goes through ReadChunk's own path (docs/ARCHITECTURE.md,
// "GPU codec in the mount").
#include <spdlog/spdlog.h>

#include <unordered_map>
#include <utility>

#include "lmc/thread_pool.h"
#include "store_impl.h"

namespace lmc::store {

namespace {

// One chunk to decode in a ReadChunks call: a read, or a delta base that
// reads need and that no read names (decoded into its own buffer, then
// kept in the base cache as ReadChunk keeps the bases it decodes).
struct Node {
  ChunkKey key;
  fmt::ChunkEntry e;
  ChunkRead* read = nullptr;  // null: a base only
  ChunkBytes own;             // a base's buffer
  uint8_t* dst = nullptr;
  size_t cap = 0;
  int base = -1;          // the node that decodes this delta's base, or
  ChunkBytes base_bytes;  // the base, from the base cache
  int dependants = 0;     // nodes of this call on this one
  std::vector<uint8_t> record;
  int level = -1;     // batch round: 0 without a base node, else its base's + 1
  bool out = false;   // not decoded here: a read goes through ReadChunk's path
  bool done = false;  // decoded and checked
};

// fn(i) for i in [0, count): on the shared pool when there is more than
// one (the caller takes part; ReadChunks is not called from that pool's
// tasks), else here.
template <typename Fn>
void ParallelOver(size_t count, Fn&& fn) {
  if (count <= 1) {
    if (count) fn(0);
    return;
  }
  ThreadPool::Shared().ParallelFor(count, 0, [&](size_t i, size_t) { fn(i); });
}

}  // namespace

void Store::ReadChunks(std::span<ChunkRead> reads, Workspace& ws, const FrameBatchDecoder& decode_batch,
                       bool batch_only) {
  Impl& m = *impl_;
  const bool verify = m.opts.verify_content_hash;
  auto one = [&](ChunkRead& r) {
    if (batch_only)
      r.deferred = true;
    else
      r.result = m.Read(r.key, r.dst, r.cap, ws, verify, 0);
  };
  if (!decode_batch || m.codec != LmcFrameCodec()) {
    for (ChunkRead& r : reads) one(r);
    return;
  }
  std::vector<Node> nodes;
  nodes.reserve(reads.size());
  std::unordered_map<ChunkKey, int, ChunkKeyHash> by_key;
  for (ChunkRead& r : reads) {
    auto e = m.LoadEntry(r.key);
    if (!e.ok()) {
      r.result = e.status();
      continue;
    }
    // A chunk the base cache holds, a short buffer, a key asked for twice:
    // ReadChunk's own path serves them (and says why).
    ChunkBytes hit = m.base_cache ? m.base_cache->Get(r.key) : nullptr;
    if (hit || r.cap < e->decoded_len || by_key.contains(r.key)) {
      one(r);
      continue;
    }
    by_key.emplace(r.key, static_cast<int>(nodes.size()));
    Node& n = nodes.emplace_back();
    n.key = r.key;
    n.e = *e;
    n.read = &r;
    n.dst = r.dst;
    n.cap = r.cap;
  }
  // Each delta's base: a read of this call, the base cache, or a node of its
  // own (whose base is resolved in turn, as the loop reaches it).
  for (size_t i = 0; i < nodes.size(); i++) {
    if (!nodes[i].e.base) continue;
    const ChunkKey b = *nodes[i].e.base;
    if (auto it = by_key.find(b); it != by_key.end()) {
      nodes[i].base = it->second;
      nodes[it->second].dependants++;
      m.n_base_misses++;
      continue;
    }
    if (m.base_cache) {
      if (ChunkBytes hit = m.base_cache->Get(b)) {
        nodes[i].base_bytes = std::move(hit);
        m.n_base_hits++;
        continue;
      }
    }
    auto be = m.LoadEntry(b);
    if (!be.ok()) {  // ReadChunk's path retries a chunk rebased meanwhile, or reports it
      nodes[i].out = true;
      continue;
    }
    m.n_base_misses++;
    const int bi = static_cast<int>(nodes.size());
    by_key.emplace(b, bi);
    nodes[i].base = bi;
    Node& n = nodes.emplace_back();  // invalidates references into nodes
    n.key = b;
    n.e = *be;
    n.own = NewChunkBytes(be->decoded_len, &n.dst);
    n.cap = be->decoded_len;
    n.dependants = 1;
  }
  // The verified records, read in parallel on the shared pool: each read
  // waits for the disk (O_DIRECT), and its checksum is computed where the
  // record is in cache.
  ParallelOver(nodes.size(), [&](size_t i) {
    Node& n = nodes[i];
    if (n.out) return;
    auto f = m.PackFile(n.e.pack_id);
    // A pack retired by compaction meanwhile, a record that died: ReadChunk's
    // path reads the chunk's new entry, or reports it.
    if (!f.ok() || !m.ReadRecord(n.key, n.e, **f, n.record).ok()) n.out = true;
  });
  // Rounds: a node decodes in the round after its base's. A chain longer
  // than fmt::kMaxDeltaDepth (or a loop, in a damaged index) or one with a
  // node left out is left to ReadChunk's path, which reports it.
  int rounds = 0;
  for (Node& n : nodes) {
    int level = 0;
    bool out = n.out;
    for (const Node* p = &n; !out && p->base >= 0; p = &nodes[p->base]) {
      out = ++level > fmt::kMaxDeltaDepth || nodes[p->base].out;
    }
    n.level = out ? -1 : level;
    rounds = std::max(rounds, n.level + 1);
  }
  for (Node& n : nodes) {
    n.out = n.level < 0;
    if (n.out && n.read) one(*n.read);
  }
  std::vector<GpuDecodeItem> items;
  std::vector<Node*> in_round;
  for (int round = 0; round < rounds; round++) {
    items.clear();
    in_round.clear();
    for (Node& n : nodes) {
      if (n.level != round) continue;
      const uint8_t* base = nullptr;
      size_t base_len = 0;
      if (n.base >= 0) {
        const Node& b = nodes[n.base];
        if (!b.done) {  // the base did not decode: ReadChunk's path reports it
          n.out = true;
          if (n.read) one(*n.read);
          continue;
        }
        base = b.dst;
        base_len = b.e.decoded_len;
      } else if (n.base_bytes) {
        base = n.base_bytes->data();
        base_len = n.base_bytes->size();
      }
      GpuDecodeItem& it = items.emplace_back();
      it.frame = n.record.data() + fmt::kRecordHeaderSize;
      it.len = n.e.frame_len;
      it.base = base;
      it.base_len = base_len;
      it.dst = n.dst;
      it.cap = n.cap;
      in_round.push_back(&n);
    }
    if (items.empty()) continue;
    // Not OK: the device failed and no item is valid; each is decoded on the CPU.
    const bool batched = decode_batch(items.data(), items.size()).ok();
    // Bases are not hashed, as ReadChunk's path does not: a wrong base
    // makes its dependants fail their frame checksums.
    auto good = [&](const Node& n, size_t len) {
      return len == n.e.decoded_len && (!(verify && n.read) || m.keys.Of(n.dst, len, n.e.owner) == n.key);
    };
    // The batch's results checked (hashed) in parallel, the rest in order.
    std::vector<uint8_t> batch_good(items.size(), 0);
    if (batched) {
      ParallelOver(items.size(), [&](size_t i) {
        batch_good[i] = items[i].status.ok() && good(*in_round[i], items[i].out_len);
      });
    }
    for (size_t i = 0; i < items.size(); i++) {
      Node& n = *in_round[i];
      const GpuDecodeItem& it = items[i];
      if (batch_good[i]) {
        n.done = true;
      } else {
        // The CPU decoder is the reference: a frame the batch decoder
        // refused (or decoded to other bytes) is decoded again here.
        auto r = m.codec->Decode(it.frame, it.len, it.base, it.base_len, n.dst, n.cap, ws);
        if (n.read && !n.e.base) {
          // A standalone read: only what the CPU refuses too is corruption
          // (logged and counted once).
          n.read->result = m.CheckDecoded(n.key, n.e, r, n.dst, verify);
          n.done = n.read->result.ok();
        } else {
          // A delta, or a base: ReadChunk's path (which retries a chunk
          // rebased meanwhile) decides and reports.
          n.done = r.ok() && good(n, *r);
          if (!n.done && n.read) one(*n.read);
        }
        if (n.read) n.read->redone = batched;
        if (batched && n.done)
          spdlog::warn("store {}: chunk {}: the batch decoder failed ({}) where the CPU decoded it", m.dir,
                       n.key.ToHex(), it.status.ok() ? "a wrong size or wrong bytes" : it.status.ToString());
      }
      if (!n.done) continue;
      if (n.read) {
        n.read->result = n.e.decoded_len;
        n.read->batched = batched && !n.read->redone;
      }
      // The base cache, as ReadChunk's path fills it: bases it decodes, a
      // delta read directly (the base of the next save in a series read in
      // order, not an fp32 master on its twin), a bf16 twin with masters.
      if (!m.base_cache) continue;
      if (!n.read || n.dependants > 0)
        m.base_cache->Put(n.key, n.read ? CopyChunkBytes(n.dst, n.e.decoded_len) : n.own);
      else if (n.e.base && !m.WidenedFrame(it.frame))
        m.base_cache->Put(n.key, CopyChunkBytes(n.dst, n.e.decoded_len));
      else if (!n.e.base)
        m.KeepIfPairedBase(n.key, it.frame, n.dst, n.e.decoded_len);
    }
  }
}

}  // namespace lmc::store
