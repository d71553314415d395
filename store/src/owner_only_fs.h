// The RocksDB index's files with the store's modes: RocksDB does its own
// I/O (not through lmc::store::Env) and creates files 0644 and directories
// 0755, less the umask. This wrapper of its default file system gives each
// file and directory RocksDB creates kStoreFileMode or kStoreDirMode right
// after it is created (docs/ARCHITECTURE.md, "Store permissions").
#pragma once

#include <rocksdb/env.h>

namespace lmc::store {

// An Env over RocksDB's default one whose file system creates owner-only
// files and directories. Lives for the whole process; share it freely.
rocksdb::Env* OwnerOnlyRocksEnv();

}  // namespace lmc::store
