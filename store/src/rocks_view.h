// The bytes of an index entry RocksDB's iterator stands on, as a view our
// code may read.
//
// Debian's librocksdb is not built with ThreadSanitizer, so the atomics with
// which its memtable publishes an entry are invisible to TSan: when our code
// reads the bytes of an entry another thread has just written through
// RocksDB, TSan sees a read racing RocksDB's memcpy. tests/tsan.supp silences
// such reports by the RocksDB frame on the writer's stack, but TSan keeps a
// bounded history per thread and sometimes cannot restore that stack ("failed
// to restore the stack"), and the report then names only our reader. Under
// ThreadSanitizer, View therefore copies the bytes with reads unseen, and
// the caller reads the copy; otherwise it is the slice's own view, at no
// cost.

#pragma once

#include <rocksdb/slice.h>

#include <string>
#include <string_view>

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace lmc::store {

// `s` as a view. Under ThreadSanitizer the view is of `*keep`, which must
// outlive its use.
inline std::string_view View(const rocksdb::Slice& s, [[maybe_unused]] std::string* keep) {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  keep->assign(s.data(), s.size());
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  return *keep;
#else
  return s.ToStringView();
#endif
}

}  // namespace lmc::store
