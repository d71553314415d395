// Integration tests: a real lmcfs mount (mount.lmcfs -f as a child
// process) used by real programs: coreutils, Python's standard library,
// PyTorch, safetensors, numpy. Each result is compared byte for byte
// (sha256) with the same program's output in a plain directory, before and
// after an unmount/remount. Suites named Mount* carry the ctest label
// "integration". The fixture (lmc::testing::MountTest, mount_util.h)
// always unmounts (fusermount3 -u -z) and skips when /dev/fuse is missing.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "mount_util.h"

namespace {

namespace fsys = std::filesystem;

class MountFixture : public lmc::testing::MountTest {
 protected:
  // Runs a Python script with DIR as argv[1], once on the mount and once
  // on the plain directory, and checks the two trees are identical, also
  // after a remount.
  // The script gets the directory to write in, then a scratch path outside
  // both trees (the same for both runs).
  void RunPythonBoth(const std::string& script, const std::string& sub) {
    const std::string path = WriteScript("script.py", script);
    fsys::create_directories(P(sub));
    fsys::create_directories(plain_ + "/" + sub);
    const std::string scratch = root_ + "/scratch-" + sub;
    ASSERT_EQ(Python(path, plain_ + "/" + sub + " " + scratch), 0);
    ASSERT_EQ(Python(path, P(sub) + " " + scratch), 0);
    ExpectSame(sub);
    Remount();
    ExpectSame(sub);
  }
};

// Python prelude: zip members carry the time of writing; pin it, so that
// the runs on the mount and on the plain directory write the same bytes.
constexpr const char* kPinZipTime = R"PY(
import types, time as _time, zipfile
_ft = types.ModuleType('fixed_time'); _ft.__dict__.update(_time.__dict__)
_ft.time = lambda: 1577836800.0
zipfile.time = _ft
)PY";

using MountCoreutils = MountFixture;
using MountPython = MountFixture;
using MountTorch = MountFixture;
using MountRandom = MountFixture;

TEST_F(MountCoreutils, CpMvLsDuStatTruncateLn) {
  const std::string& m = mnt_;
  ASSERT_EQ(Sh("head -c 3000000 /dev/urandom > " + plain_ + "/rand.bin"), 0);
  ASSERT_EQ(Sh("python3 -c \"import sys; sys.stdout.buffer.write(bytes(range(8))*640000)\" > " + plain_ +
               "/pattern.bin"),
            0);
  ASSERT_EQ(Sh("cp " + plain_ + "/rand.bin " + plain_ + "/pattern.bin " + m + "/"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/rand.bin " + m + "/rand.bin"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/pattern.bin " + m + "/pattern.bin"), 0);
  ASSERT_EQ(Sh("mkdir -p " + m + "/d/e && mv " + m + "/pattern.bin " + m + "/d/e/p.bin"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/pattern.bin " + m + "/d/e/p.bin"), 0);
  ASSERT_EQ(Sh("ls -l " + m + "/d/e | grep -q 'p.bin'"), 0);
  ASSERT_EQ(Sh("test \"$(stat -c %s " + m + "/d/e/p.bin)\" = 5120000"), 0);
  // du shows the stored (compressed) size; --apparent-size the logical one.
  ASSERT_EQ(Sh("test \"$(du -k " + m + "/d/e/p.bin | cut -f1)\" -lt 2500"), 0);
  ASSERT_EQ(Sh("test \"$(du -k --apparent-size " + m + "/d/e/p.bin | cut -f1)\" = 5000"), 0);
  ASSERT_EQ(Sh("truncate -s 1234567 " + m + "/d/e/p.bin && truncate -s 1234567 " + plain_ + "/pattern.bin"),
            0);
  ASSERT_EQ(Sh("truncate -s 2M " + m + "/d/e/p.bin && truncate -s 2M " + plain_ + "/pattern.bin"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/pattern.bin " + m + "/d/e/p.bin"), 0);
  ASSERT_EQ(Sh("ln " + m + "/rand.bin " + m + "/hard.bin && ln -s rand.bin " + m + "/sym.bin"), 0);
  ASSERT_EQ(Sh("test \"$(stat -c %h " + m + "/rand.bin)\" = 2"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/rand.bin " + m + "/sym.bin"), 0);
  ASSERT_EQ(Sh("test \"$(readlink " + m + "/sym.bin)\" = rand.bin"), 0);
  ASSERT_EQ(Sh("chmod 600 " + m + "/rand.bin && test \"$(stat -c %a " + m + "/hard.bin)\" = 600"), 0);
  ASSERT_EQ(Sh("touch -d '2020-01-02 03:04:05' " + m + "/rand.bin && test \"$(stat -c %Y " + m +
               "/rand.bin)\" = \"$(date -d '2020-01-02 03:04:05' +%s)\""),
            0);
  ASSERT_EQ(
      Sh("chown 1234:5678 " + m + "/rand.bin && test \"$(stat -c %u:%g " + m + "/hard.bin)\" = 1234:5678"),
      0);
  EXPECT_NE(Sh("rmdir " + m + "/d 2>/dev/null"), 0);  // not empty
  ASSERT_EQ(Sh("cp -r " + m + "/d " + m + "/d2 && rm -r " + m + "/d"), 0);
  ASSERT_EQ(Sh("df " + m + " > /dev/null"), 0);
  Remount();
  ASSERT_EQ(Sh("cmp " + plain_ + "/rand.bin " + m + "/hard.bin"), 0);
  ASSERT_EQ(Sh("cmp " + plain_ + "/pattern.bin " + m + "/d2/e/p.bin"), 0);
  ASSERT_EQ(Sh("test \"$(stat -c %a:%u:%g:%h " + m + "/rand.bin)\" = 600:1234:5678:2"), 0);
  ASSERT_EQ(Sh("test ! -e " + m + "/d"), 0);
}

// A directory still open when the daemon is told to stop (SIGTERM): the
// kernel never sends its RELEASEDIR, and the daemon exits cleanly all the
// same, its handle freed with the session (the ASan stage's LeakSanitizer
// checks that), the store whole for the next mount.
TEST_F(MountCoreutils, ADirectoryOpenWhenTheDaemonStopsIsFreed) {
  WriteFile(P("kept.bin"), "kept");
  ASSERT_EQ(Sh("mkdir " + P("d") + " && touch " + P("d/x")), 0);
  DIR* dir = opendir(P("d").c_str());
  ASSERT_NE(dir, nullptr);
  ASSERT_NE(readdir(dir), nullptr);
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  int status = 0;
  const bool exited = lmc::testing::WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                                              std::chrono::seconds(60), std::chrono::milliseconds(50));
  closedir(dir);
  ASSERT_TRUE(exited) << "the daemon did not exit on SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "daemon status " << status;
  pid_ = -1;
  mounted_ = false;
  Sh("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
  Mount();
  EXPECT_EQ(ReadFile(P("kept.bin")), "kept");
  EXPECT_TRUE(fsys::exists(P("d/x")));
}

// fallocate(1) and posix_fallocate through the kernel, the same on the
// mount as on the plain directory (ext4 or tmpfs): holes punched across
// chunks, ranges zeroed, files extended or not; df -i counts the files.
TEST_F(MountCoreutils, FallocatePunchZeroExtendAndDfInodes) {
  ASSERT_EQ(Sh("head -c 3000000 /dev/urandom > " + root_ + "/src.bin"), 0);
  for (const std::string& d : {plain_, mnt_}) {
    const std::string f = d + "/f.bin";
    ASSERT_EQ(Sh("cp " + root_ + "/src.bin " + f), 0) << d;
    ASSERT_EQ(Sh("fallocate -p -o 500000 -l 1500000 " + f), 0) << d;  // a hole across chunks
    ASSERT_EQ(Sh("fallocate -z -o 10 -l 4096 " + f), 0) << d;
    ASSERT_EQ(Sh("fallocate -n -o 0 -l 9000000 " + f), 0) << d;  // KEEP_SIZE: no change
    ASSERT_EQ(Sh("fallocate -o 2999990 -l 100 " + f), 0) << d;   // extends to 3000090 bytes
    ASSERT_EQ(Sh("python3 -c \"import os; fd = os.open('" + d +
                 "/g.bin', os.O_CREAT | os.O_WRONLY, 0o644); os.posix_fallocate(fd, 0, 1234567); "
                 "os.close(fd)\""),
              0)
        << d;
  }
  ExpectSame("");
  ASSERT_EQ(Sh("test \"$(stat -c %s " + P("f.bin") + ")\" = 3000090"), 0);
  // A preallocated file is all zeros: stored as nothing.
  ASSERT_EQ(Sh("test \"$(du -k " + P("g.bin") + " | cut -f1)\" = 0"), 0);
  Remount();
  ExpectSame("");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // statfs recounts once a second
  ASSERT_EQ(Sh("test \"$(df --output=iused " + mnt_ + " | tail -1 | tr -d ' ')\" = 3"), 0);  // root, f, g
}

// SEEK_DATA and SEEK_HOLE give the same map as the disk's for a file with
// holes never written, punched and past its last byte (4 KiB-aligned, so
// that the disk's block granularity does not show), also after a remount;
// bytes written through a shared mapping count as data before they are
// written back; cp out of the mount keeps the holes.
TEST_F(MountCoreutils, SeekDataAndHoleMapSparseFilesAsTheDiskDoes) {
  RunPythonBoth(R"PY(
import hashlib, mmap, os, random, subprocess, sys
d, scratch = sys.argv[1], sys.argv[2]
M = 1 << 20
r = random.Random(7)
p = os.path.join(d, 'sparse.bin')
def check(cond, what):
    if not cond:
        print('FAILED:', what); sys.exit(1)
def seek_map():
    out, pos, size = [], 0, os.path.getsize(p)
    fd = os.open(p, os.O_RDONLY)
    try:
        while pos < size:
            try:
                a = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                check(e.errno == 6, f'SEEK_DATA {pos}: {e}')  # ENXIO: no data past pos
                break
            b = os.lseek(fd, a, os.SEEK_HOLE)
            check(pos <= a < b <= size, f'{pos}: data {a}, hole {b}')
            out.append((a, b))
            pos = b
    finally:
        os.close(fd)
    return out
with open(p, 'wb') as f:
    f.write(r.randbytes(M))
    f.seek(64 * M); f.write(r.randbytes(3 * M // 2))
    f.seek(200 * M); f.write(r.randbytes(4096))
subprocess.run(['fallocate', '-p', '-o', str(256 << 10), '-l', str(256 << 10), p], check=True)
os.truncate(p, 300 * M)
first = seek_map()
check(first == [(0, 256 << 10), (512 << 10, M), (64 * M, 64 * M + 3 * M // 2), (200 * M, 200 * M + 4096)],
      f'map {first}')
# A page written into a hole through a shared mapping, not yet written
# back: data for SEEK_DATA on the same descriptor.
fd = os.open(p, os.O_RDWR)
m = mmap.mmap(fd, 0)
m[100 * M:100 * M + 4096] = r.randbytes(4096)
check(os.lseek(fd, 100 * M, os.SEEK_DATA) == 100 * M, 'a mapped page written into a hole')
m.close(); os.close(fd)
with open(os.path.join(d, 'map.txt'), 'w') as f:
    f.write(repr(seek_map()) + '\n')
check(seek_map() == sorted(first + [(100 * M, 100 * M + 4096)]), f'map after the mapped write {seek_map()}')
# cp out of the tree keeps the holes, and the bytes.
os.makedirs(scratch, exist_ok=True)
copy = os.path.join(scratch, 'copy.bin')
subprocess.run(['cp', p, copy], check=True)
h = lambda q: hashlib.sha256(open(q, 'rb').read()).hexdigest()
check(h(copy) == h(p), 'the copy differs')
check(os.stat(copy).st_blocks * 512 < 16 * M, f'the copy is not sparse: {os.stat(copy).st_blocks} blocks')
os.unlink(copy)
)PY",
                "seek");
  // The same map from the store alone (RunPythonBoth remounted).
  ASSERT_EQ(Sh("python3 -c \"import os; fd = os.open('" + P("seek/sparse.bin") +
               "', os.O_RDONLY); assert os.lseek(fd, 300000, os.SEEK_DATA) == 512 << 10; "
               "assert os.lseek(fd, 70 << 20, os.SEEK_HOLE) == 70 << 20; "
               "assert os.lseek(fd, 64 << 20, os.SEEK_HOLE) == (64 << 20) + (3 << 19)\""),
            0);
}

// The limits users run into, in a form short enough for CI: 255-byte names (256 refused), a 4095-byte path, a
// tree 1,000 directories deep, a sparse file past 4 GiB, 10,000 open handles on one file and 20,000 files in
// one directory. Written, checked, remounted and checked again, then removed.
constexpr char kLimitsScript[] = R"PY(
import os, resource, subprocess, sys
m, phase = sys.argv[1], sys.argv[2]
def check(cond, what):
    if not cond:
        print('FAILED:', what); sys.exit(1)
if phase == 'write':
    open(f'{m}/' + 'a' * 255, 'w').write('name')
    try:
        open(f'{m}/' + 'b' * 256, 'w')
        check(False, '256-byte name accepted')
    except OSError as e:
        check(e.errno == 36, f'256-byte name: {e}')
    cur = f'{m}/p'
    os.mkdir(cur)
    while 4095 - len(cur) - 1 > 255:
        cur = os.path.join(cur, 'c' * max(1, min(200, 4095 - len(cur) - 1 - 256)))
        os.mkdir(cur)
    open(os.path.join(cur, 'f' * (4095 - len(cur) - 1)), 'w').write('path')
    os.chdir(m)
    for _ in range(1000):
        os.mkdir('d'); os.chdir('d')
    open('leaf', 'w').write('deep')
    os.chdir('/')
    with open(f'{m}/sparse', 'wb') as f:
        f.seek((1 << 32) - 2); f.write(b'ab')
        f.seek(5 << 30); f.write(b'end')
    os.mkdir(f'{m}/many')
    for i in range(20000):
        open(f'{m}/many/f{i}', 'w').close()
else:
    check(open(f'{m}/' + 'a' * 255).read() == 'name', '255-byte name')
    cur = f'{m}/p'
    while True:
        names = os.listdir(cur)
        check(len(names) == 1, f'{cur}: {names}')
        cur = os.path.join(cur, names[0])
        if not os.path.isdir(cur): break
    check(len(cur) == 4095 and open(cur).read() == 'path', f'path of {len(cur)} bytes')
    check(open(f'{m}' + '/d' * 1000 + '/leaf').read() == 'deep', 'deep leaf')
    check(os.path.getsize(f'{m}/sparse') == (5 << 30) + 3, 'sparse size')
    with open(f'{m}/sparse', 'rb') as f:
        f.seek((1 << 32) - 4); check(f.read(8) == b'\0\0ab\0\0\0\0', 'bytes around 4 GiB')
        f.seek((5 << 30) - 2); check(f.read(8) == b'\0\0end', 'the end of the sparse file')
    resource.setrlimit(resource.RLIMIT_NOFILE, (12000, 12000))
    fds = [os.open(f'{m}/sparse', os.O_RDONLY) for _ in range(10000)]
    check(all(os.pread(fd, 2, (1 << 32) - 2) == b'ab' for fd in fds[::500]), 'reads through many handles')
    for fd in fds: os.close(fd)
    check(len(os.listdir(f'{m}/many')) == 20000, 'files in one directory')
    if phase == 'remove':
        # rm -r, as users do (Python's rmtree recurses past its own limit at this depth).
        check(subprocess.run(['rm', '-r', f'{m}/d', f'{m}/many', f'{m}/p']).returncode == 0, 'rm -r')
        os.unlink(f'{m}/sparse'); os.unlink(f'{m}/' + 'a' * 255)
        check(os.listdir(m) == [], f'left: {os.listdir(m)}')
print('ok', phase)
)PY";

TEST_F(MountCoreutils, LimitsNamesPathsDepthSizeHandlesAndEntries) {
  const std::string script = WriteScript("limits.py", kLimitsScript);
  ASSERT_EQ(Python(script, mnt_ + " write"), 0);
  ASSERT_EQ(Python(script, mnt_ + " check"), 0);
  Remount();
  ASSERT_EQ(Python(script, mnt_ + " remove"), 0);
  Unmount();
  auto s = OpenStore();
  ASSERT_TRUE(s);
  ExpectFsckClean(*s);
}

TEST_F(MountPython, StdlibZipShutilReplace) {
  RunPythonBoth(std::string(kPinZipTime) + R"PY(
import os, sys, shutil, json, random
d = sys.argv[1]
rnd = random.Random(7)
data = bytes(rnd.getrandbits(8) for _ in range(200000))
with zipfile.ZipFile(os.path.join(d, 'a.zip'), 'w') as z:   # seeks back to patch headers
    z.writestr('x.bin', data)
    with z.open('y.bin', 'w') as f:
        for i in range(50):
            f.write(data[i * 1000:(i + 1) * 1000] * 3)
with zipfile.ZipFile(os.path.join(d, 'a.zip')) as z:
    assert z.read('x.bin') == data
# write-then-rename commit, as checkpoint writers do
p = os.path.join(d, 'meta.json')
for step in range(5):
    tmp = p + '.tmp'
    with open(tmp, 'w') as f:
        json.dump({'step': step, 'pad': 'x' * step * 1000}, f)
        f.flush(); os.fsync(f.fileno())
    os.replace(tmp, p)
os.makedirs(os.path.join(d, 'tree', 'sub'))
with open(os.path.join(d, 'tree', 'sub', 'f'), 'wb') as f:
    f.write(data[:12345])
shutil.copytree(os.path.join(d, 'tree'), os.path.join(d, 'tree2'))
shutil.rmtree(os.path.join(d, 'tree'))
with open(os.path.join(d, 'app.log'), 'ab') as f:
    f.write(b'one\n')
with open(os.path.join(d, 'app.log'), 'ab') as f:
    f.write(b'two\n')
# copy_file_range shares chunks; virtual xattrs report the stored size
src = os.path.join(d, 'tree2', 'sub', 'f')
fi, fo = os.open(src, os.O_RDONLY), os.open(os.path.join(d, 'cfr.bin'), os.O_WRONLY | os.O_CREAT, 0o644)
n = 0
while n < 12000:
    n += os.copy_file_range(fi, fo, 12000 - n, offset_src=n + 300, offset_dst=n + 11)
os.close(fi); os.close(fo)
os.setxattr(src, 'user.note', b'kept')
assert os.getxattr(src, 'user.note') == b'kept'
if '/mnt/' in d:
    assert int(os.getxattr(src, 'user.lmcfs.stored_bytes')) > 0
    assert 0 < float(os.getxattr(src, 'user.lmcfs.ratio')) < 2
with open(os.path.join(d, 'rw.bin'), 'w+b') as f:  # overwrite in place, read back
    f.write(data)
    f.seek(1000); f.write(b'Z' * 5000)
    f.seek(0); got = f.read()
    assert got[1000:6000] == b'Z' * 5000 and len(got) == len(data)
)PY",
                "py");
}

// Files are opened with FOPEN_KEEP_CACHE: pages cached by one open serve
// the next. Every way a file's bytes change must still show on the next
// read: a write through another descriptor while a reader holds it open
// (read-write, and write-only, which the mount serves with direct I/O),
// truncate, O_TRUNC, copy_file_range into it, rename over it, a shared
// mapping's store, and a remount (RunPythonBoth).
// Files that look like checkpoints but lie, and bytes written in odd
// orders (issue 16, "Hostile input"): every one is stored and read back
// byte-identical (also after a remount), and the daemon's peak memory stays
// within its configured budgets (no allocation sized by an unchecked
// header). Seeded: the same bytes on every run.
TEST_F(MountPython, HostileFilesReadBackByteIdenticalInBoundedMemory) {
  const std::string script = R"PY(
import io, mmap, os, random, struct, sys, zipfile
d = sys.argv[1]
rng = random.Random(1616)
def rb(n): return bytes(rng.getrandbits(8) for _ in range(n)) if n < 4096 else rng.randbytes(n)
def put(name, data):
    with open(os.path.join(d, name), 'wb') as f: f.write(data)
def st(header_obj, body, length=None):
    import json
    h = json.dumps(header_obj).encode()
    return struct.pack('<Q', len(h) if length is None else length) + h + body
f32 = struct.pack('<256f', *[rng.uniform(-1, 1) for _ in range(256)])
# safetensors that lie.
put('st_offsets_past_end.safetensors', st({'w': {'dtype': 'F32', 'shape': [1 << 20], 'data_offsets': [0, 1 << 22]}}, f32))
put('st_overlapping.safetensors', st({'a': {'dtype': 'F32', 'shape': [200], 'data_offsets': [0, 800]},
                                      'b': {'dtype': 'F32', 'shape': [200], 'data_offsets': [100, 900]}}, f32))
put('st_reversed.safetensors', st({'a': {'dtype': 'BF16', 'shape': [4], 'data_offsets': [900, 8]}}, f32))
put('st_huge_shape.safetensors', st({'a': {'dtype': 'F64', 'shape': [1 << 40, 1 << 40], 'data_offsets': [0, 1024]}}, f32))
put('st_header_len_lies.safetensors', st({'a': {'dtype': 'F32', 'shape': [256], 'data_offsets': [0, 1024]}}, f32, length=(1 << 62)))
put('st_100mb_header.safetensors', struct.pack('<Q', 100 << 20) + b'{"a":' + b' ' * ((100 << 20) - 6) + b'}' + f32)
put('st_garbage_json.safetensors', struct.pack('<Q', 4096) + rb(4096) + f32)
# Zips (torch.save) that lie.
buf = io.BytesIO()
with zipfile.ZipFile(buf, 'w', zipfile.ZIP_STORED) as z:
    z.writestr('archive/data.pkl', rb(3000))
    z.writestr('archive/data/0', f32 * 64)
    z.writestr('archive/version', b'3\n')
good = buf.getvalue()
put('zip_garbage_pickle.pt', good)
put('zip_truncated.pt', good[: len(good) // 2])
lying = bytearray(good)
for i in range(len(lying) - 30):
    if lying[i:i + 4] == b'PK\x03\x04':
        lying[i + 18:i + 26] = struct.pack('<II', 0x7fffffff, 0x7fffffff)  # sizes that lie
put('zip_lying_sizes.pt', bytes(lying))
cd = bytearray(good)
j = cd.rfind(b'PK\x05\x06')
cd[j + 16:j + 20] = struct.pack('<I', 0xfffffff0)  # central directory offset past the end
put('zip_lying_directory.pt', bytes(cd))
# GGUF with huge counts, npy that lies.
put('huge_counts.gguf', b'GGUF' + struct.pack('<IQQ', 3, 1 << 63, 1 << 63) + rb(5000))
put('huge_string.gguf', b'GGUF' + struct.pack('<IQQ', 3, 1, 1) + struct.pack('<Q', 1 << 60) + rb(2000))
put('lying.npy', b'\x93NUMPY\x01\x00' + struct.pack('<H', 118) + b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }".ljust(117) + b'\n' + f32)
# Random bytes behind every magic; empty and one-byte files.
for i, magic in enumerate([b'GGUF', b'PK\x03\x04', b'\x93NUMPY', struct.pack('<Q', 64) + b'{', b'\x80\x02', b'']):
    put(f'magic_{i}.bin', magic + rb(70000 + i * 4099))
put('empty.bin', b'')
put('one.bin', b'\x01')
# Bytes written backwards, in random order, with holes, and through mmap.
data = rb(3 << 20)
with open(os.path.join(d, 'backwards.bin'), 'wb') as f:
    for off in range((len(data) // 65536) * 65536, -1, -65536):
        f.seek(off); f.write(data[off:off + 65536])
order = list(range(0, len(data), 40000)); rng.shuffle(order)
with open(os.path.join(d, 'random_order.bin'), 'wb') as f:
    for off in order:
        f.seek(off); f.write(data[off:off + 40000])
with open(os.path.join(d, 'holes.bin'), 'wb') as f:
    for k in range(8):
        f.seek(k * (5 << 20) + 777); f.write(data[k * 1000:k * 1000 + 300000])
    f.truncate(50 << 20)
with open(os.path.join(d, 'mmapped.bin'), 'wb+') as f:
    f.truncate(len(data))
    m = mmap.mmap(f.fileno(), len(data))
    for off in range(0, len(data), 1 << 20):
        m[off:off + (1 << 20)] = data[off:off + (1 << 20)]
    m.flush(); m.close()
)PY";
  const std::string path = WriteScript("hostile.py", std::string(kPinZipTime) + script);
  fsys::create_directories(P("hostile"));
  fsys::create_directories(plain_ + "/hostile");
  ASSERT_EQ(Python(path, plain_ + "/hostile"), 0);
  ASSERT_EQ(Python(path, P("hostile")), 0);
  // The daemon's peak resident memory: within its budgets (cache 64M, base
  // cache 256M, write buffer 256M by default) plus code and RocksDB.
  auto peak_kb = [&] {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    uint64_t kb = 0;
    while (std::getline(status, line))
      if (line.rfind("VmHWM:", 0) == 0) kb = std::stoull(line.substr(6));
    return kb;
  };
  const uint64_t written = peak_kb();
  ExpectSame("hostile");
  Remount();
  ExpectSame("hostile");
  const uint64_t read = peak_kb();
  ASSERT_GT(written, 0u);
  std::printf("daemon peak RSS: %.0f MiB writing the hostile files, %.0f MiB reading them after a remount\n",
              written / 1024.0, read / 1024.0);
  EXPECT_LT(written, uint64_t{1200} << 10) << "the daemon's peak memory is out of bounds";
  EXPECT_LT(read, uint64_t{1200} << 10) << "the daemon's peak memory is out of bounds";
}

TEST_F(MountPython, CachedPagesFollowEveryChange) {
  RunPythonBoth(R"PY(
import mmap, os, random, sys
d = sys.argv[1]
rnd = random.Random(11)
def blob(n): return bytes(rnd.getrandbits(8) for _ in range(n))
def read(p):
    with open(p, 'rb') as f: return f.read()
p = os.path.join(d, 'f.bin')
model = bytearray(blob(300000) * 10)  # 3 MB: several chunks, compressible
with open(p, 'wb') as f: f.write(model)
assert read(p) == model and read(p) == model  # cached by the first read
r = open(p, 'rb'); r.read()                    # a reader keeps it open
with open(p, 'r+b') as w:
    w.seek(123457); w.write(b'W' * 70000); model[123457:193457] = b'W' * 70000
assert read(p) == model
r.seek(0); assert r.read() == model
# A write-only descriptor (the mount gives it direct I/O) over pages that
# the open reader and earlier opens cached.
fd = os.open(p, os.O_WRONLY); os.pwrite(fd, b'D' * 9000, 4000); os.close(fd)
model[4000:13000] = b'D' * 9000
r.seek(0); assert r.read() == model
assert read(p) == model
r.close()
os.truncate(p, 1000001); del model[1000001:]
assert read(p) == model
os.truncate(p, 1500000); model += bytes(499999)
assert read(p) == model
src = os.path.join(d, 'src.bin'); other = blob(200000)
with open(src, 'wb') as f: f.write(other)
fi, fo = os.open(src, os.O_RDONLY), os.open(p, os.O_WRONLY)
n = 0
while n < 150000:
    n += os.copy_file_range(fi, fo, 150000 - n, offset_src=n + 7, offset_dst=n + 900000)
os.close(fi); os.close(fo); model[900000:1050000] = other[7:150007]
assert read(p) == model
with open(p, 'r+b') as f:
    m = mmap.mmap(f.fileno(), 0); m[5:9] = b'MMAP'; m.flush(); m.close()
model[5:9] = b'MMAP'
assert read(p) == model
with open(src, 'wb') as f: f.write(other)
os.replace(src, p); model = bytearray(other)
assert read(p) == model
with open(p, 'wb') as f: f.write(b'short')
assert read(p) == b'short'
with open(p, 'ab') as f: f.write(other[:1000])
assert read(p) == b'short' + other[:1000]
# A patchwork: 1500 one-byte patches of a committed file, each its own
# extent after the close, so that one read reply spans thousands of pieces.
q = os.path.join(d, 'patched.bin'); base = bytearray(blob(1 << 20))
with open(q, 'wb') as f: f.write(base)
with open(q, 'r+b') as f:
    for i in range(1500):
        f.seek(i * 699 + 3); f.write(b'P'); base[i * 699 + 3] = ord('P')
assert read(q) == base
with open(q, 'rb') as f:  # unaligned reads across the patches
    f.seek(12345); assert f.read(300001) == base[12345:312346]
)PY",
                "cache");
}

// The kernel keeps a directory's attributes for a second (a path's walk
// then checks each component's permissions without asking the daemon;
// fuse_ops.h): every change made through the mount shows at once all the
// same, in stat and in the permission checks of other users (allow_other).
TEST_F(MountPython, DirectoryAttributesFollowEveryChange) {
  Remount("allow_other");  // other users reach the mount at all
  RunPythonBoth(R"PY(
import os, sys, time
d = sys.argv[1]
def stat(p): return os.stat(os.path.join(d, p))
def tick(): time.sleep(0.02)
os.mkdir(os.path.join(d, 'a')); st = stat('a')
assert st.st_nlink == 2 and st.st_mode & 0o777 == 0o755 & ~os.umask(0o022)
for step in ('mkdir', 'create', 'rename in', 'rename out', 'unlink', 'rmdir', 'link', 'symlink'):
    tick()
    if step == 'mkdir': os.mkdir(os.path.join(d, 'a/sub'))
    if step == 'create': open(os.path.join(d, 'a/f'), 'w').close()
    if step == 'rename in': open(os.path.join(d, 'g'), 'w').close(); os.rename(os.path.join(d, 'g'), os.path.join(d, 'a/g'))
    if step == 'rename out': os.rename(os.path.join(d, 'a/g'), os.path.join(d, 'g'))
    if step == 'unlink': os.unlink(os.path.join(d, 'a/f'))
    if step == 'rmdir': os.rmdir(os.path.join(d, 'a/sub'))
    if step == 'link': os.link(os.path.join(d, 'g'), os.path.join(d, 'a/h'))
    if step == 'symlink': os.symlink('h', os.path.join(d, 'a/s'))
    now = stat('a')
    assert now.st_mtime_ns > st.st_mtime_ns, (step, now, st)
    assert now.st_nlink == (3 if step in ('mkdir', 'create', 'rename in', 'rename out', 'unlink') else 2), (step, now)
    st = now
os.chmod(os.path.join(d, 'a'), 0o700); assert stat('a').st_mode & 0o777 == 0o700
os.utime(os.path.join(d, 'a'), ns=(1_000_000_000, 2_000_000_000))
assert stat('a').st_atime_ns == 1_000_000_000 and stat('a').st_mtime_ns == 2_000_000_000
os.rename(os.path.join(d, 'a'), os.path.join(d, 'b'))
assert not os.path.exists(os.path.join(d, 'a')) and stat('b').st_mtime_ns == 2_000_000_000
if os.geteuid() == 0:
    # Another user's checks follow chmod and chown of a directory at once.
    os.chmod(os.path.dirname(os.path.dirname(d)), 0o711)  # the test's root
    def nobody_can(fn):
        pid = os.fork()
        if pid == 0:
            os.setgid(65534); os.setuid(65534)
            try:
                fn(); os._exit(0)
            except PermissionError:
                os._exit(1)
        return os.waitpid(pid, 0)[1] == 0
    b = os.path.join(d, 'b')
    list_b = lambda: os.listdir(b)
    stat_h = lambda: os.stat(os.path.join(b, 'h'))
    assert not nobody_can(list_b) and not nobody_can(stat_h)
    os.chmod(b, 0o755); assert nobody_can(list_b) and nobody_can(stat_h)
    os.chmod(b, 0o700); assert not nobody_can(list_b) and not nobody_can(stat_h)
    os.chown(b, 65534, 65534); assert stat('b').st_uid == 65534 and nobody_can(list_b)
    os.chown(b, 0, 0); assert not nobody_can(list_b)
    os.chmod(b, 0o755)
)PY",
                "dirattrs");
}

// The kernel keeps a file's attributes for a second too, and the daemon
// tells it of every change it makes on its own (the stored size after the
// encoders, a flush, an fsync, a copy's source committed: fuse_ops.h).
// Each step below stats the file while the kernel holds its attributes from
// a stat just before: what it shows must be the change, at once. On the
// mount, st_blocks must be the stored bytes (user.lmcfs.stored_bytes) each
// time; elsewhere the same script checks size, times and links as the disk
// keeps them.
TEST_F(MountPython, FileAttributesFollowEveryChange) {
  RunPythonBoth(R"PY(
import mmap, os, random, sys, time
d = sys.argv[1]
rnd = random.Random(17)
M = 1 << 20
piece = rnd.randbytes(4096)
def data(n, tag): return (piece + bytes([tag]) * 4096) * (n // 8192)  # compressible
def stored(p):
    try: return int(os.getxattr(p, 'user.lmcfs.stored_bytes'))
    except OSError: return None  # not the mount
def check(p, what, fd=None):
    st = os.fstat(fd) if fd is not None else os.stat(p)
    s = stored(p)
    if s is not None:
        assert st.st_blocks == (s + 511) // 512, (what, st.st_blocks, s)
    return st
def tick(): time.sleep(0.02)
p, q = os.path.join(d, 'f.bin'), os.path.join(d, 'g.bin')
# Written in 1 MiB pieces, fstat'ed after each (the kernel keeps what it
# got), then closed: the flush stores the rest.
fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(8):
    os.write(fd, data(M, i)); os.fstat(fd)
os.close(fd)
st = check(p, 'close')
assert st.st_size == 8 * M
if stored(p) is not None: assert 0 < stored(p) < 8 * M, stored(p)
with open(p, 'rb') as f: assert f.read() == b''.join(data(M, i) for i in range(8))
assert check(p, 'read').st_mtime_ns == st.st_mtime_ns
tick(); os.truncate(p, 3 * M); now = check(p, 'truncate')
assert now.st_size == 3 * M and now.st_mtime_ns > st.st_mtime_ns; st = now
# Written and fsync'ed with the handle open: fstat and stat show the
# stored size the fsync made.
fd = os.open(p, os.O_WRONLY)
tick(); os.pwrite(fd, data(2 * M, 9), 5 * M); os.fstat(fd); check(p, 'write')
os.fsync(fd); now = check(p, 'fsync', fd); check(p, 'fsync')
assert now.st_size == 7 * M and now.st_mtime_ns > st.st_mtime_ns; st = now
# A copy's source with bytes not yet stored: the copy commits them.
os.pwrite(fd, data(M, 10), 7 * M); os.fstat(fd)
fi = os.open(p, os.O_RDONLY); fo = os.open(q, os.O_WRONLY | os.O_CREAT, 0o644)
n = 0
while n < 8 * M: n += os.copy_file_range(fi, fo, 8 * M - n)
os.close(fi); os.close(fo)
check(p, 'copy source'); check(q, 'copy')
assert os.stat(q).st_size == 8 * M
os.close(fd); check(p, 'close')
# A page written through a shared mapping, written back by msync.
with open(p, 'r+b') as f:
    m = mmap.mmap(f.fileno(), 0); m[100:200] = b'M' * 100; m.flush(); m.close()
    check(p, 'msync', f.fileno())
check(p, 'mmap close')
# Links, mode, times.
os.link(p, os.path.join(d, 'h.bin')); assert check(p, 'link').st_nlink == 2
os.unlink(os.path.join(d, 'h.bin')); assert check(p, 'unlink').st_nlink == 1
os.chmod(p, 0o600); assert check(p, 'chmod').st_mode & 0o777 == 0o600
os.utime(p, ns=(1_000_000_000, 2_000_000_000)); assert check(p, 'utime').st_mtime_ns == 2_000_000_000
with open(p, 'ab') as f: f.write(b'tail')
assert check(p, 'append').st_size == 8 * M + 4
)PY",
                "fileattrs");
}

// Memory-mapped writes and reads (numpy memmaps, torch.load(mmap=True)) and
// O_DIRECT writes and reads.
TEST_F(MountPython, MmapAndDirectIo) {
  RunPythonBoth(R"PY(
import mmap, os, sys, random
d = sys.argv[1]
p = os.path.join(d, 'mm.bin')
with open(p, 'wb') as f:
    f.truncate(3 << 20)
with open(p, 'r+b') as f:
    m = mmap.mmap(f.fileno(), 0)
    r = random.Random(3)
    for _ in range(200):
        off = r.randrange((3 << 20) - 100)
        m[off:off + 100] = bytes([r.randrange(256)]) * 100
    m.flush(); m.close()
with open(p, 'rb') as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert m[:] == open(p, 'rb').read()
    m.close()
buf = mmap.mmap(-1, 1 << 20)  # page-aligned buffer for O_DIRECT
buf[:] = bytes(range(256)) * 4096
fd = os.open(os.path.join(d, 'direct.bin'), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
for i in range(4):
    os.pwrite(fd, buf, i << 20)
os.close(fd)
fd = os.open(os.path.join(d, 'direct.bin'), os.O_RDONLY | os.O_DIRECT)
rb = mmap.mmap(-1, 1 << 20)
assert os.preadv(fd, [rb], 2 << 20) == 1 << 20 and rb[:] == buf[:]
os.close(fd)
)PY",
                "mmap");
}

TEST_F(MountTorch, TorchSafetensorsNumpy) {
  if (!PythonHas("torch, safetensors, numpy")) GTEST_SKIP() << "torch, safetensors or numpy not installed";
  RunPythonBoth(std::string(kPinZipTime) + R"PY(
import os, sys
import numpy as np, torch
from safetensors.torch import save_file, load_file
d = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
# CPU matrix products are not always bit-reproducible across processes, so
# the first run trains, and both runs take that trained state the same way:
# both then save the same bytes.
trained = sys.argv[2] + '.trained'
if not os.path.exists(trained):
    for _ in range(3):
        loss = model(torch.randn(8, 256)).pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
    torch.save({'model': model.state_dict(), 'optim': opt.state_dict()}, trained)
s = torch.load(trained, weights_only=True)
model.load_state_dict(s['model']); opt.load_state_dict(s['optim'])
ckpt = os.path.join(d, 'ckpt.pt')
tmp = ckpt + '.tmp'
torch.save({'model': model.state_dict(), 'optim': opt.state_dict(), 'step': 3}, tmp)
with open(tmp, 'rb+') as f:
    os.fsync(f.fileno())
os.replace(tmp, ckpt)
back = torch.load(ckpt, weights_only=True, mmap=True)
for k, v in model.state_dict().items():
    assert torch.equal(back['model'][k], v), k
bf = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
save_file(bf, os.path.join(d, 'model.safetensors'))
lb = load_file(os.path.join(d, 'model.safetensors'))
for k in bf:
    assert torch.equal(lb[k], bf[k]), k
rng = np.random.default_rng(0)
np.savez(os.path.join(d, 'arrays.npz'), a=rng.standard_normal((300, 300)).astype(np.float32),
         b=np.arange(100000, dtype=np.int64))
z = np.load(os.path.join(d, 'arrays.npz'))
assert z['b'][-1] == 99999
)PY",
                "torch");
  // And the files load from the remounted filesystem.
  ASSERT_EQ(Sh("python3 -c \"import torch,sys; torch.load(sys.argv[1] + '/ckpt.pt', "
               "weights_only=True)\" " +
               mnt_ + "/torch"),
            0);
}

// Hugging Face transformers' save_pretrained of a small randomly initialised
// model, sharded into several safetensors files plus their JSON index, and
// from_pretrained back from the mount (no hub access: nothing is fetched).
TEST_F(MountTorch, TransformersSavePretrainedSharded) {
  if (!PythonHas("transformers, torch")) GTEST_SKIP() << "transformers or torch not installed";
  RunPythonBoth(R"PY(
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from transformers import GPT2Config, GPT2LMHeadModel
d = sys.argv[1]
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=128)
model = GPT2LMHeadModel(cfg).to(torch.bfloat16)
model.save_pretrained(d, max_shard_size="200KB", safe_serialization=True)
shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
assert len(shards) > 1, shards
assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
back = GPT2LMHeadModel.from_pretrained(d, torch_dtype=torch.bfloat16)
sd = model.state_dict()
for k, v in back.state_dict().items():
    assert torch.equal(v, sd[k]), k
)PY",
                "hf");
}

// A few thousand mixed operations on the mount and on a plain directory:
// writes at random offsets, truncate, rename, unlink while open, hard links.
TEST_F(MountRandom, MatchesPlainDirectory) {
  const char* script = R"PY(
import os, sys, random
seed, d = int(sys.argv[1]), sys.argv[2]
rnd = random.Random(seed)
blob = bytes(rnd.getrandbits(8) for _ in range(1 << 16)) * 8
names = ['f%d' % i for i in range(8)]
held = []  # fds of unlinked files, with the content they must keep
def content(fd):
    os.lseek(fd, 0, 0)
    out = b''
    while True:
        b = os.read(fd, 1 << 20)
        if not b: return out
        out += b
for op in range(3000):
    n = rnd.choice(names); p = os.path.join(d, n)
    k = rnd.random()
    if k < 0.5:
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        off = rnd.choice([size, rnd.randrange(size + 70000)])
        ln = rnd.choice([rnd.randrange(1, 300), rnd.randrange(1, 200000)])
        s = rnd.randrange(len(blob) - ln)
        os.pwrite(fd, blob[s:s + ln], off)
        os.close(fd)
    elif k < 0.6:
        if os.path.exists(p): os.truncate(p, rnd.randrange(300000))
    elif k < 0.7:
        q = os.path.join(d, rnd.choice(names))
        if os.path.exists(p): os.rename(p, q)
    elif k < 0.75:
        if os.path.exists(p):
            fd = os.open(p, os.O_RDWR)
            os.unlink(p)
            os.pwrite(fd, b'after-unlink', rnd.randrange(1000))
            held.append(fd)
    elif k < 0.8:
        q = os.path.join(d, rnd.choice(names))
        if os.path.exists(p) and not os.path.exists(q): os.link(p, q)
    elif k < 0.83:
        if os.path.exists(p): os.unlink(p)
    else:
        if os.path.exists(p):
            with open(p, 'rb') as f: f.read()
    if held and rnd.random() < 0.05:
        fd = held.pop(rnd.randrange(len(held)))
        with open(os.path.join(d, 'held.%d' % op), 'wb') as f:
            f.write(content(fd))
        os.close(fd)
for fd in held:
    with open(os.path.join(d, 'held.end.%d' % fd), 'wb') as f:
        f.write(content(fd))
    os.close(fd)
)PY";
  const int seed = 4242;
  std::printf("MountRandom seed=%d\n", seed);
  const std::string path = WriteScript("random.py", script);
  ASSERT_EQ(Python(path, std::to_string(seed) + " " + plain_), 0);
  ASSERT_EQ(Python(path, std::to_string(seed) + " " + mnt_), 0);
  // held.end.<fd> names depend on fd numbers, equal in both runs.
  std::string want = Digest(plain_);
  EXPECT_EQ(Digest(mnt_), want);
  EXPECT_EQ(Sh("cd " + plain_ + " && ls -l | grep -v '^total' | awk '{print $1, $2, $5, $9}' > " + root_ +
               "/ls1 && cd " + mnt_ + " && ls -l | grep -v '^total' | awk '{print $1, $2, $5, $9}' > " +
               root_ + "/ls2 && diff " + root_ + "/ls1 " + root_ + "/ls2"),
            0);
  Remount();
  EXPECT_EQ(Digest(mnt_), want);
}

using MountConcurrent = MountFixture;

// Several writers (one file each, as ranks do) and readers at once, then a
// byte comparison with the same files written to the plain directory.
TEST_F(MountConcurrent, WritersAndReaders) {
  const char* script = R"PY(
import os, sys, random, threading
d, mode = sys.argv[1], sys.argv[2]
def data(i):
    r = random.Random(i)
    return bytes(r.getrandbits(8) & 0x3f for _ in range(1 << 20)) * 3
def writer(i):
    b = data(i)
    with open(os.path.join(d, 'rank%d.bin' % i), 'wb') as f:
        for off in range(0, len(b), 100000):
            f.write(b[off:off + 100000])
        f.flush(); os.fsync(f.fileno())
errors = []
def reader(i):
    p = os.path.join(d, 'rank%d.bin' % i)
    for _ in range(20):
        try:
            with open(p, 'rb') as f:
                got = f.read()
            want = data(i)
            if got != want[:len(got)]:
                errors.append('reader %d saw wrong bytes at size %d' % (i, len(got)))
        except FileNotFoundError:
            pass
ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
if mode == 'mnt':
    ts += [threading.Thread(target=reader, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
assert not errors, errors
)PY";
  const std::string path = WriteScript("conc.py", script);
  ASSERT_EQ(Python(path, plain_ + " plain"), 0);
  ASSERT_EQ(Python(path, mnt_ + " mnt"), 0);
  std::string want = Digest(plain_);
  EXPECT_EQ(Digest(mnt_), want);
  Remount();
  EXPECT_EQ(Digest(mnt_), want);
}

using MountCrash = MountFixture;

// kill -9 of the daemon in the middle of writes: fsynced files survive
// byte for byte, the store is consistent (fsck: no error), and it mounts
// again.
TEST_F(MountCrash, KillDuringWritesKeepsSyncedData) {
  ASSERT_EQ(Sh("python3 -c \"import os,random; r=random.Random(1); "
               "open('" +
               plain_ + "/a.bin','wb').write(bytes(r.getrandbits(6) for _ in range(3000000)))\""),
            0);
  ASSERT_EQ(
      Sh("python3 -c \"import os,shutil; "
         "f=open('" +
         mnt_ + "/a.bin','wb'); f.write(open('" + plain_ +
         "/a.bin','rb').read()); "
         "f.flush(); os.fsync(f.fileno()); f.close(); os.rename('" +
         mnt_ + "/a.bin', '" + mnt_ + "/b.bin'); fd=os.open('" + mnt_ + "', os.O_RDONLY); os.fsync(fd)\""),
      0);
  // A writer that never finishes.
  pid_t w = fork();
  ASSERT_GE(w, 0);
  if (w == 0) {
    execlp("python3", "python3", "-c",
           ("import os\nf=open('" + mnt_ +
            "/c.bin','wb')\n"
            "while True: f.write(os.urandom(1<<20)); f.flush()")
               .c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  mounted_ = false;
  Sh("fusermount3 -u -z " + mnt_);
  kill(w, SIGKILL);
  waitpid(w, nullptr, 0);
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    ASSERT_NO_FATAL_FAILURE(ExpectFsckClean(*s));
  }
  Mount();
  EXPECT_EQ(Sh("cmp " + plain_ + "/a.bin " + mnt_ + "/b.bin"), 0);
  EXPECT_NE(Sh("test -e " + mnt_ + "/a.bin"), 0);
}

// The suites that run mount.lmcfs themselves (daemon mode, mount(8)): the
// fixture gives the directories, a second mountpoint mnt2_, and the cleanup
// (both unmounted, the daemons gone) however the test ends.
class MountByHand : public lmc::testing::MountTest {
 protected:
  MountByHand() { options_.mount_in_setup = false; }
  void SetUp() override {
    MountTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    mnt2_ = root_ + "/m2";
    fsys::create_directories(mnt2_);
  }
  void TearDown() override {
    if (!mnt2_.empty()) {
      Sh("fusermount3 -u -z " + mnt_ + " 2>/dev/null; fusermount3 -u -z " + mnt2_ + " 2>/dev/null");
      WaitStoreFree();
    }
    MountTest::TearDown();
  }
  std::string mnt2_;
};

using MountTool = MountByHand;
using MountHelper = MountByHand;

// read_ahead=KIB reaches the kernel (the mount's backing device) once the
// first file is created, after INIT; the default is 4096 KiB. Needs root
// (writing /sys); a non-root run checks only that the mount works.
TEST_F(MountTool, ReadAheadReachesTheKernel) {
  // The mount's device (a stat from here is served by the daemon).
  auto window = [&]() -> std::string {
    struct stat st;
    if (::stat(mnt_.c_str(), &st) != 0) return "no stat";
    std::ifstream f("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                    std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
    std::string kb;
    f >> kb;
    return kb;
  };
  for (const char* opt : {"read_ahead=2048", ""}) {
    options_.mount_options = opt;
    Mount();
    ASSERT_EQ(Sh("echo data > " + mnt_ + "/f && cat " + mnt_ + "/f >/dev/null"), 0);
    if (geteuid() == 0) {
      EXPECT_EQ(window(), *opt ? "2048" : "4096") << opt;
    }
    Unmount();
  }
}

TEST_F(MountTool, ErrorsAndDaemonMode) {
  const std::string bin = LMC_MOUNT_BIN;
  EXPECT_EQ(Sh(bin + " --help | grep -q chunk_size"), 0);
  // Non-empty mountpoint.
  std::ofstream(mnt2_ + "/x") << "x";
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " 2>&1 | grep -q 'not empty'"), 0);
  fsys::remove(mnt2_ + "/x");
  // Daemon mode: returns once mounted.
  ASSERT_EQ(Sh(bin + " " + store_ + " " + mnt_), 0);
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(Sh("echo hi > " + P("f") + " && test \"$(cat " + P("f") + ")\" = hi"), 0);
  // Same store again: locked.
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " 2>&1 | grep -q 'in use'"), 0);
  EXPECT_FALSE(IsMounted(mnt2_));
  Sh("fusermount3 -u -z " + mnt_);
  // The daemon releases the store once it has flushed: a remount succeeds.
  const bool ok =
      lmc::testing::WaitUntil([&] { return Sh(bin + " " + store_ + " " + mnt2_ + " 2>/dev/null") == 0; },
                              std::chrono::seconds(10), std::chrono::milliseconds(100));
  EXPECT_TRUE(ok);
  EXPECT_EQ(Sh("test \"$(cat " + mnt2_ + "/f)\" = hi"), 0);
  // A store path that does not exist is made, and the user is told so: a
  // mistyped path would otherwise mount an empty store without a word.
  const std::string fresh = root_ + "/made/for/it";
  ASSERT_EQ(Sh(bin + " " + fresh + " " + mnt_ + " 2>" + root_ + "/new.err"), 0);
  EXPECT_EQ(ReadFile(root_ + "/new.err"),
            "mount.lmcfs: " + fresh + " did not exist: made it for a new store\n");
  EXPECT_TRUE(IsMounted(mnt_));
  Sh("fusermount3 -u -z " + mnt_);
  // The existing store mounted again: nothing said.
  Sh("fusermount3 -u -z " + mnt2_);
  EXPECT_TRUE(lmc::testing::WaitUntil(
      [&] { return Sh(bin + " " + store_ + " " + mnt2_ + " 2>" + root_ + "/again.err") == 0; },
      std::chrono::seconds(10), std::chrono::milliseconds(100)));
  EXPECT_EQ(ReadFile(root_ + "/again.err"), "");
}

// A caller that reads the helper's output (out=$(mount.lmcfs ...), a pipe)
// gets EOF once it returns: the daemon keeps none of the caller's
// descriptors, with a log file (stderr then goes there) and without.
TEST_F(MountTool, DaemonKeepsNoneOfTheCallersDescriptors) {
  const std::string bin = LMC_MOUNT_BIN;
  const std::string log = root_ + "/mount.log";
  // The store made beforehand: a helper that makes it says so on stderr,
  // and this test wants the output of a mount that says nothing.
  ASSERT_EQ(Sh("mkdir -p " + store_), 0);
  // `timeout` exits 124 if the command substitution waits for the daemon.
  ASSERT_EQ(Sh("timeout 30 sh -c 'out=$(" + bin + " " + store_ + " " + mnt_ + " -o log_file=" + log +
               ",log_level=info 2>&1); test -z \"$out\"'"),
            0);
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(Sh("grep -q mounted " + log), 0);
  Sh("fusermount3 -u -z " + mnt_);
  WaitStoreFree();
  ASSERT_EQ(Sh("timeout 30 sh -c '" + bin + " " + store_ + " " + mnt2_ + " | cat >/dev/null'"), 0);
  EXPECT_TRUE(IsMounted(mnt2_));
}

// A daemon that crashes (here: SIGSEGV sent to it) leaves the crashing
// thread's stack and what to do in its log file (its stderr goes there),
// and the store mounts again with what was fsynced. Not in the sanitizer
// builds: their own handlers take the signal there (and report it).
TEST_F(MountTool, ACrashLeavesItsStackAndWhatToDoInTheLog) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's handler reports a crash in this build";
#endif
  const std::string bin = LMC_MOUNT_BIN;
  const std::string log = root_ + "/mount.log";
  ASSERT_EQ(Sh(bin + " " + store_ + " " + mnt_ + " -o log_file=" + log + ",log_level=info"), 0);
  ASSERT_TRUE(IsMounted(mnt_));
  ASSERT_EQ(Sh("python3 -c \"import os; f=open('" + P("kept.bin") +
               "','wb'); f.write(bytes(range(256))*4096); f.flush(); os.fsync(f.fileno())\""),
            0);
  // The daemon: the process whose command line is this mount's.
  ASSERT_EQ(Sh("pkill -SEGV -f '^" + bin + " " + store_ + " " + mnt_ + "'"), 0);
  const bool gone = lmc::testing::WaitUntil(
      [&] { return Sh("pgrep -f '^" + bin + " " + store_ + " " + mnt_ + "' >/dev/null") != 0; },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  ASSERT_TRUE(gone) << "the daemon outlived its SIGSEGV";
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("*** mount.lmcfs: fatal signal SIGSEGV"), std::string::npos) << text;
  EXPECT_NE(text.find("mount.lmcfs("), std::string::npos) << "no frame of the daemon in the stack:\n" << text;
  EXPECT_NE(text.find("fusermount3 -u MOUNTPOINT"), std::string::npos) << text;
  Sh("fusermount3 -u -z " + mnt_);
  WaitStoreFree();
  ASSERT_EQ(Sh(bin + " " + store_ + " " + mnt_), 0);
  EXPECT_EQ(Sh("python3 -c \"import sys; sys.exit(open('" + P("kept.bin") +
               "','rb').read() != bytes(range(256))*4096)\""),
            0);
}

// The mount(8) helper convention: mount(8) runs /sbin/mount.lmcfs SPEC DIR
// [-sfnv] [-o OPTIONS] for `mount -t lmcfs` and for fstab lines. First the
// binary is invoked exactly that way; then, when /sbin/mount.lmcfs is free,
// a symlink to this build is installed for the test (and removed after) and
// the real mount(8) is used, with -t and with an fstab file (-T).
TEST_F(MountHelper, Mount8ConventionAndFstab) {
  const std::string bin = LMC_MOUNT_BIN;
  const std::string opts =
      "rw,nosuid,nodev,noatime,cache_size=32M,write_buffer=32M,commit_queue=64M,"
      "encode_threads=2,read_threads=3,gpu=auto,log_level=info,log_file=" +
      root_ + "/log";
  // As mount(8) calls a helper: SPEC DIR -n -o OPTIONS (with generic options).
  ASSERT_EQ(Sh(bin + " " + store_ + " " + mnt_ + " -n -o " + opts), 0);
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(Sh("echo helper > " + P("f")), 0);
  EXPECT_EQ(Sh("grep -q 'codec path: CPU' " + root_ + "/log"), 0);  // which path runs
  // Busy mountpoint: a clear message, nothing mounted twice.
  EXPECT_EQ(Sh(bin + " " + root_ + "/other " + mnt_ + " 2>&1 | grep -q 'is busy'"), 0);
  // Bad options fail before mounting, with exit code 16 (mount(8)'s usage error).
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " -o gpu=maybe 2>/dev/null"), 16);
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " -o write_buffer=12Q 2>/dev/null"), 16);
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " -o commit_queue=lots 2>/dev/null"), 16);
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " -o read_threads=0 2>/dev/null"), 16);
  EXPECT_EQ(Sh(bin + " " + store_ + " " + mnt2_ + " -o journal_snapshot=100 2>" + root_ + "/js.err"), 16);
  EXPECT_EQ(Sh("grep -q \"bad journal_snapshot '100' (a size of at least 1K\" " + root_ + "/js.err"), 0)
      << ReadFile(root_ + "/js.err");
  // gpu=on without a usable GPU codec refuses to mount (exit code 32, in
  // the daemon's child and in the foreground) and says what to do.
  if (Sh("nvidia-smi >/dev/null 2>&1") != 0) {
    const std::string other = root_ + "/gpu-store";
    EXPECT_EQ(Sh(bin + " " + other + " " + mnt2_ + " -o gpu=on 2>" + root_ + "/gpu.err"), 32);
    EXPECT_EQ(Sh("grep -q 'gpu=on but the GPU codec cannot be used (.*); mount with gpu=auto or gpu=off' " +
                 root_ + "/gpu.err"),
              0)
        << ReadFile(root_ + "/gpu.err");
    EXPECT_EQ(Sh(bin + " " + other + " " + mnt2_ + " -f -o gpu=on 2>&1 | grep -q 'mount with gpu=auto'"), 0);
    EXPECT_FALSE(IsMounted(mnt2_));
    EXPECT_FALSE(std::filesystem::exists(other + "/CONFIG"));  // refused before the store was opened
  }
  EXPECT_EQ(Sh("umount " + mnt_), 0);
  WaitStoreFree();

  const std::string helper = "/sbin/mount.lmcfs";
  bool ours = symlink(bin.c_str(), helper.c_str()) == 0;
  if (ours) {
    EXPECT_EQ(Sh("mount -t lmcfs " + store_ + " " + mnt_ + " -o " + opts), 0);
    EXPECT_TRUE(IsMounted(mnt_));
    EXPECT_EQ(Sh("test \"$(cat " + P("f") + ")\" = helper"), 0);
    EXPECT_EQ(Sh("umount " + mnt_), 0);
    WaitStoreFree();
    std::ofstream(root_ + "/fstab") << store_ << " " << mnt2_ << " lmcfs noauto," << opts << " 0 0\n";
    EXPECT_EQ(Sh("mount -T " + root_ + "/fstab " + mnt2_), 0);
    EXPECT_TRUE(IsMounted(mnt2_));
    EXPECT_EQ(Sh("test \"$(cat " + mnt2_ + "/f)\" = helper"), 0);
    EXPECT_EQ(Sh("umount " + mnt2_), 0);
    WaitStoreFree();
    char target[4096];
    ssize_t n = readlink(helper.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == bin) unlink(helper.c_str());
  }
  if (!ours) GTEST_SKIP() << helper << " exists; the real mount(8) part was not run";
}

}  // namespace
