// InstallSnapshotPolicy (lmc/fs/snapshots.h): here, where DeltaPolicy is a
// complete type, so that callers need not include the private seam.
#include "delta.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/snapshots.h"

namespace lmc::fs {

void InstallSnapshotPolicy(Filesystem* fs, const DeltaOptions& options) {
  DeltaOptions o = options;
  o.chunk_size = fs->options().chunk_size;
  fs->SetDeltaPolicy(MakeSnapshotDeltaPolicy(fs->store(), o));
}

}  // namespace lmc::fs
