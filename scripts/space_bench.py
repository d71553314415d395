#!/usr/bin/env python3
"""Space on the backing disk under checkpoint rotation: the Python part of
scripts/space_bench.sh (which mounts, unmounts and cleans up; run that).

Subcommands:
  train OUT --events FILE   a Hugging Face Trainer run: a small GPT-2 built
                            from its config (random init, CPU) trained on the
                            stdlib's .py sources, saving every --save-steps
                            steps with save_total_limit=2; one JSON line per
                            save (start, end, bytes) goes to FILE; with
                            --gc-bin, lmcfs-gc runs on --gc-mount after each
                            save (scripts/e2e_bench.py)
  run                       one rotation run: starts `train`, samples the
                            backing directory and the live files once a
                            second into a CSV, then keeps sampling for
                            --drain s; with --delete-wait, then deletes every
                            file of the mount and samples for that long
  du STORE                  allocated (st_blocks * 512) and apparent bytes of
                            a store dir, and of its index/ and packs/, as
                            one JSON line
  report                    the Markdown summary and the PNG plot

Sizes: "allocated" (also "stored" for files on lmcfs, whose st_blocks is
the stored size) is the sum of st_blocks * 512 over every file and
directory, each inode once: what `du -s -B1` prints. "Apparent" is the sum
of st_size: `du -sb`.
"""

import argparse
import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

MIB = 1 << 20

# The CSV of a label holds every sample of both rotation runs; `run` and
# `phase` say which. backing_*: the plain output dir, or the store dir for
# lmcfs (index_ and packs_ split out). live_*: the files the Trainer keeps.
CSV_FIELDS = ["run", "phase", "t_s", "saves", "backing_bytes", "backing_apparent", "index_bytes",
              "packs_bytes", "live_apparent", "live_stored", "live_files", "daemon_disk_write_bytes"]


def du(root):
    """(allocated, apparent, files) under root, each inode once.

    Files may vanish while the walk runs (the Trainer rotates checkpoints,
    the store deletes packs): those are skipped, not errors.
    """
    alloc = apparent = files = 0
    seen = set()
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        alloc += st.st_blocks * 512
        apparent += st.st_size
        if stat.S_ISDIR(st.st_mode):
            try:
                stack.extend(os.path.join(path, n) for n in os.listdir(path))
            except (FileNotFoundError, NotADirectoryError):
                pass
        elif stat.S_ISREG(st.st_mode):
            files += 1
    return alloc, apparent, files


def loadavg():
    return Path("/proc/loadavg").read_text().split()[0]


def disk_write_bytes(pid):
    """Bytes process pid has sent to the block layer (/proc/PID/io: written
    minus dirty page-cache bytes dropped by truncate or unlink), or ''."""
    if not pid:
        return ""
    try:
        io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        return int(io["write_bytes"]) - int(io["cancelled_write_bytes"])
    except (OSError, KeyError, ValueError):
        return ""


# ---------------------------------------------------------------- train

def train(argv):
    ap = argparse.ArgumentParser(prog="space_bench.py train")
    ap.add_argument("out")
    ap.add_argument("--events", required=True)
    ap.add_argument("--saves", type=int, default=20)
    ap.add_argument("--save-steps", type=int, default=2)
    ap.add_argument("--limit", type=int, default=2, help="save_total_limit; 0: keep every save")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--gc-bin", help="lmcfs-gc: run on --gc-mount after each save (and its rotation), "
                                     "once the mount's background rebases are done")
    ap.add_argument("--gc-mount", help="the lmcfs mountpoint for --gc-bin")
    a = ap.parse_args(argv)

    # Nothing comes from a model hub: the model is built from its config.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                              TrainingArguments)
    from transformers.utils import logging as hf_logging
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gen_bench_data import load_corpus, tokenize  # same corpus and tokens as the other benchmarks

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    # Small steps, so that 20 saves take minutes on two busy cores; the
    # checkpoint's size is set by the vocabulary and width, not by these.
    seq = 64
    ids = tokenize(load_corpus(1 << 20)[0], a.vocab)

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return (len(ids) - 1) // seq

        def __getitem__(self, i):
            x = ids[i * seq:(i + 1) * seq]
            return {"input_ids": x, "labels": x}

    cfg = GPT2Config(vocab_size=a.vocab, n_positions=seq, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(cfg)
    events = open(a.events, "a", buffering=1)

    class SaveTimes(TrainerCallback):
        """The Trainer saves between on_step_end and on_save (and rotates the
        oldest checkpoint away in between), so their gap is the save."""

        def on_step_end(self, args, state, control, **kw):
            self.t0 = time.time()

        def on_save(self, args, state, control, **kw):
            t1 = time.time()
            ckpt = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            _, apparent, _ = du(ckpt)
            ev = {"event": "save", "step": state.global_step, "t0": self.t0, "t1": t1, "bytes": apparent}
            if a.gc_bin:
                from benchutil import wait_rebases
                wait_rebases(a.gc_mount)
                subprocess.run([a.gc_bin, "-q", a.gc_mount], check=True, stdout=subprocess.DEVNULL)
                ev["gc_s"] = time.time() - t1
            if backing:  # what the disk holds once this save (and any gc) is done
                ev["backing_after"] = du(Path(backing))[0]
            events.write(json.dumps(ev) + "\n")

    # Each save's peak: the new checkpoint written, just before rotation
    # deletes the oldest (the plain dir's largest moment of the save, too
    # brief for a once-a-second sampler to catch): the backing dir's
    # allocated bytes there, in both runs (run passes the backing dir).
    # Read by SaveTimes.on_save too, which runs later.
    backing = os.environ.get("SPACE_BENCH_BACKING")
    if backing:
        import transformers.trainer as trainer_module
        rotate = trainer_module.rotate_checkpoints

        def rotate_after_peak(*args, **kw):
            events.write(json.dumps({"event": "peak", "t": time.time(), "backing": du(Path(backing))[0]}) + "\n")
            return rotate(*args, **kw)

        trainer_module.rotate_checkpoints = rotate_after_peak

    args = TrainingArguments(
        output_dir=a.out, max_steps=a.saves * a.save_steps, save_strategy="steps",
        save_steps=a.save_steps, save_total_limit=a.limit or None, per_device_train_batch_size=8,
        learning_rate=1e-3, warmup_steps=a.save_steps, weight_decay=0.1, logging_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=1234)
    events.write(json.dumps({"event": "start", "t": time.time(), "params": model.num_parameters()}) + "\n")
    Trainer(model=model, args=args, train_dataset=Blocks(), callbacks=[SaveTimes()]).train()
    events.write(json.dumps({"event": "end", "t": time.time()}) + "\n")
    return 0


# ---------------------------------------------------------------- run

def count_saves(events_path):
    try:
        return sum(1 for line in open(events_path) if '"save"' in line)
    except FileNotFoundError:
        return 0


def run(argv):
    ap = argparse.ArgumentParser(prog="space_bench.py run")
    ap.add_argument("--run", required=True, help="plain or lmcfs (the CSV's run column)")
    ap.add_argument("--out", required=True, help="the Trainer's output_dir")
    ap.add_argument("--backing", required=True, help="what is on the disk: the plain dir or the store dir")
    ap.add_argument("--mount", help="the lmcfs mountpoint (live files are sampled there)")
    ap.add_argument("--daemon-pid", type=int)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--drain", type=float, default=30)
    ap.add_argument("--delete-wait", type=float, default=0)
    ap.add_argument("--sample", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--stat-cmd", help="lmcfs-stat binary: its --json document is kept after the drain")
    ap.add_argument("--stat-json")
    ap.add_argument("train_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)

    backing = Path(a.backing)
    live = Path(a.mount or a.out)
    phase = ["train"]
    rows = []
    stop = threading.Event()
    t_start = time.time()

    def sample():
        alloc, apparent, _ = du(backing)
        index = du(backing / "index")[0] if a.mount else ""
        packs = du(backing / "packs")[0] if a.mount else ""
        l_alloc, l_apparent, l_files = du(live)
        row = dict(run=a.run, phase=phase[0], t_s=round(time.time() - t_start, 2),
                   saves=count_saves(a.events), backing_bytes=alloc, backing_apparent=apparent,
                   index_bytes=index, packs_bytes=packs, live_apparent=l_apparent, live_stored=l_alloc,
                   live_files=l_files, daemon_disk_write_bytes=disk_write_bytes(a.daemon_pid))
        rows.append(row)
        writer.writerow(row)
        f.flush()

    def sampler():
        # Every --sample seconds (once a second by default) on a fixed
        # grid, whatever a sample costs.
        nxt = time.time()
        while not stop.is_set():
            sample()
            nxt += a.sample
            stop.wait(max(0.0, nxt - time.time()))

    new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
    with open(a.csv, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        if new:
            writer.writeheader()
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        load0 = loadavg()
        cmd = [sys.executable, __file__, "train", a.out, "--events", a.events] + \
            [x for x in a.train_args if x != "--"]
        child = subprocess.Popen(cmd, env=dict(os.environ, SPACE_BENCH_BACKING=str(backing)))
        try:
            rc = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if rc != 0:
            stop.set()
            th.join()
            print(f"space_bench: training ({a.run}) failed with exit status {rc}", file=sys.stderr)
            return 1
        t_train = time.time() - t_start
        info = {"seconds": t_train, "load": [load0, loadavg()]}
        phase[0] = "drain"
        time.sleep(a.drain)
        if a.stat_cmd and a.mount:
            r = subprocess.run([a.stat_cmd, "--json", a.mount], capture_output=True, text=True)
            if r.returncode == 0:
                Path(a.stat_json).write_text(r.stdout)
            else:
                print(f"space_bench: {a.stat_cmd} --json failed: {r.stderr.strip()}", file=sys.stderr)
        if a.delete_wait > 0:
            # Every file of the mount, as `rm -rf MOUNT/*` would.
            t0 = time.time()
            phase[0] = "delete"
            for e in os.scandir(a.mount):
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path)
                else:
                    os.unlink(e.path)
            info["t_delete"] = time.time() - t_start
            print(f"space_bench: deleted every file of {a.mount} in {time.time() - t0:.3f} s", flush=True)
            time.sleep(a.delete_wait)
        stop.set()
        th.join()
        sample()  # the final figures, in the last phase
    Path(a.events).with_name(f"run-{a.run}.json").write_text(json.dumps(info))
    print(f"space_bench: {a.run}: training {t_train:.1f} s, {len(rows)} samples", flush=True)
    return 0


def du_cmd(argv):
    if len(argv) != 1:
        print("usage: space_bench.py du STORE", file=sys.stderr)
        return 2
    store = Path(argv[0])
    alloc, apparent, files = du(store)
    print(json.dumps({"allocated": alloc, "apparent": apparent, "files": files,
                      "index": du(store / "index")[0], "packs": du(store / "packs")[0]}))
    return 0


# ---------------------------------------------------------------- report

def mib(n):
    return f"{n / MIB:.2f} MiB"


def load_rows(path):
    rows = []
    for r in csv.DictReader(open(path)):
        for k in CSV_FIELDS[2:]:
            r[k] = float(r[k]) if "." in r[k] else (int(r[k]) if r[k] != "" else None)
        rows.append(r)
    return rows


def load_saves(path, event="save"):
    out = []
    for line in open(path):
        e = json.loads(line)
        if e["event"] == event:
            out.append(e)
    return out


def peaks_by_interval(path):
    """{k: backing bytes at the peak of the save that ends interval k}: a
    save's peak comes before its on_save, so it lies in the interval after
    the k-th save."""
    saves = [e["t1"] for e in load_saves(path)]
    out = {}
    for e in load_saves(path, "peak"):
        k = sum(1 for t in saves if t < e["t"])
        out[k] = max(out.get(k, 0), e["backing"])
    return out


def find_key(doc, word):
    """(dotted key, value) of the first key in doc containing word, or None."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if word in k.lower() and isinstance(v, (int, float)):
                return k, v
            hit = find_key(v, word)
            if hit:
                return (f"{k}.{hit[0]}", hit[1])
    return None


def report(argv):
    ap = argparse.ArgumentParser(prog="space_bench.py report")
    ap.add_argument("--work", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--empty-mounted", required=True, help="`du` of a fresh store, mounted and idle")
    ap.add_argument("--empty-unmounted", required=True, help="`du` of that store after unmount")
    ap.add_argument("--after-unmount", required=True, help="`du` of the rotation store after unmount")
    ap.add_argument("--header", default="")
    ap.add_argument("--limit", type=int, default=2)
    a = ap.parse_args(argv)
    w = Path(a.work)
    base = w / f"space-{a.label}"
    rows = load_rows(f"{base}.csv")
    plain = [r for r in rows if r["run"] == "plain"]
    lm = [r for r in rows if r["run"] == "lmcfs"]
    saves = {run: load_saves(w / a.label / f"events-{run}.jsonl") for run in ("plain", "lmcfs")}
    stat_doc = None
    if (w / f"space-{a.label}-stat.json").exists():
        stat_doc = json.loads((w / f"space-{a.label}-stat.json").read_text())

    # Save times, one CSV for both runs.
    with open(f"{base}-saves.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["run", "step", "seconds", "bytes", "mb_per_s"])
        for run, ss in saves.items():
            for s in ss:
                d = s["t1"] - s["t0"]
                wr.writerow([run, s["step"], f"{d:.3f}", s["bytes"], f"{s['bytes'] / d / 1e6:.1f}"])

    # Store / plain at the same progress: a sample of the lmcfs run taken
    # after its k-th save (and before its k+1-th) against the largest the
    # plain dir was in its own interval k (it peaks at three checkpoints,
    # before rotation deletes the oldest); drain samples against the plain
    # dir after its drain. Elapsed time would compare different steps
    # wherever one run is slower.
    # Each run's peak events (the new checkpoint written, before rotation)
    # count as samples of their interval: the plain dir's would otherwise
    # be missed (its saves take a few tens of ms), and the lmcfs run's are
    # compared too.
    peaks = {run: peaks_by_interval(w / a.label / f"events-{run}.jsonl") for run in ("plain", "lmcfs")}
    plain_at = dict(peaks["plain"])
    for r in plain:
        if r["phase"] == "train":
            plain_at[r["saves"]] = max(plain_at.get(r["saves"], 0), r["backing_bytes"])
    plain_final = plain[-1]["backing_bytes"]
    vs_plain = []
    lm_samples = [(r["saves"], r["backing_bytes"]) for r in lm if r["phase"] == "train"]
    lm_samples += list(peaks["lmcfs"].items())
    for saves_k, b in lm_samples:
        if saves_k >= 1 and plain_at:
            k = min(plain_at, key=lambda s: (abs(s - saves_k), -s))
            vs_plain.append(b / plain_at[k])
    vs_plain += [r["backing_bytes"] / plain_final for r in lm if r["phase"] == "drain"]
    # The same moment of the same save in both runs: each save's peak.
    vs_peak = [peaks["lmcfs"][k] / peaks["plain"][k] for k in peaks["lmcfs"] if peaks["plain"].get(k)]
    # Store / stored bytes of the live files, from the first save on (before
    # it the live files are nothing and the ratio means nothing).
    vs_live = [r["backing_bytes"] / r["live_stored"] for r in lm
               if r["phase"] in ("train", "drain") and r["saves"] >= 1 and r["live_stored"] > 0]
    lm_kept = [r for r in lm if r["phase"] in ("train", "drain")]
    lm_end = lm_kept[-1]
    plain_end = plain[-1]

    def save_stats(ss):
        if not ss:
            return "-", "-"
        d = [s["t1"] - s["t0"] for s in ss]
        rate = [s["bytes"] / x / 1e6 for s, x in zip(ss, d)]
        return f"{sum(d) / len(d):.3f} s (min {min(d):.3f}, max {max(d):.3f})", f"{sum(rate) / len(rate):.1f} MB/s"

    ps, pr = save_stats(saves["plain"])
    ls, lr = save_stats(saves["lmcfs"])
    ckpt = saves["lmcfs"][-1]["bytes"] if saves["lmcfs"] else 0
    runs = {run: json.loads(Path(w / a.label / f"run-{run}.json").read_text()) for run in ("plain", "lmcfs")}

    # Write amplification: a field of the daemon's if it has one; else its
    # pack bytes appended over the bytes written into the mount, if it
    # counts both.
    wa = find_key(stat_doc, "amplif") if stat_doc else None
    daemon = (stat_doc or {}).get("daemon", {})
    logical = daemon.get("write_bytes")
    if wa:
        wa_text = f"{wa[1]:.3f} (`{wa[0]}`)"
    elif logical and "store_bytes_appended" in daemon:
        wa_text = (f"no such field; store_bytes_appended / write_bytes = "
                   f"{daemon['store_bytes_appended'] / logical:.3f} "
                   f"({mib(daemon['store_bytes_appended'])} / {mib(logical)})")
    else:
        wa_text = "not exposed by `lmcfs-stat --json`"
    # Our own figure, which also counts the index: what the daemon sent to
    # the disk over what was written into the mount, up to the end of the
    # drain.
    disk = lm_end["daemon_disk_write_bytes"]
    wa_proc = f"{disk / logical:.3f} ({mib(disk)} / {mib(logical)})" if disk and logical else "-"

    out = []
    p = out.append
    if a.header:
        p(a.header)
        p("")
    p(f"Rotation run, label `{a.label}`, MOUNT_OPTS=`{a.mount_opts}`: {len(saves['lmcfs'])} saves "
      f"(save_total_limit={a.limit or 'None: every save kept'}), checkpoint {mib(ckpt)} apparent each")
    p("")
    p("| figure | plain dir | lmcfs |")
    p("|---|---|---|")
    p(f"| training process wall time (Python start to exit) | {runs['plain']['seconds']:.1f} s | "
      f"{runs['lmcfs']['seconds']:.1f} s |")
    p(f"| load average (1 min) at its start / exit | {runs['plain']['load'][0]} / {runs['plain']['load'][1]} | "
      f"{runs['lmcfs']['load'][0]} / {runs['lmcfs']['load'][1]} |")
    p(f"| backing bytes, max (plain dir / store dir) | {mib(max(r['backing_bytes'] for r in plain))} | "
      f"{mib(max(r['backing_bytes'] for r in lm_kept))} |")
    p(f"| backing bytes, final (after the {lm_end['t_s'] - runs['lmcfs']['seconds']:.0f} s drain) | "
      f"{mib(plain_end['backing_bytes'])} | {mib(lm_end['backing_bytes'])} |")
    p(f"| of which index / packs, final | - | {mib(lm_end['index_bytes'])} / {mib(lm_end['packs_bytes'])} |")
    p(f"| live files, apparent, final | {mib(plain_end['live_apparent'])} | {mib(lm_end['live_apparent'])} |")
    p(f"| live files, stored (st_blocks), final | {mib(plain_end['live_stored'])} | {mib(lm_end['live_stored'])} |")
    p(f"| store / stored bytes of the live files: max, final | - | "
      f"{max(vs_live):.2f}, {lm_end['backing_bytes'] / lm_end['live_stored']:.2f} |" if vs_live else
      "| store / stored bytes of the live files | - | - |")
    p(f"| store / plain dir at the same save: max, final | - | "
      f"{max(vs_plain):.2f}, {lm_end['backing_bytes'] / plain_final:.2f} |" if vs_plain else
      "| store / plain dir | - | - |")
    if vs_peak:
        p(f"| store / plain dir at each save's peak (checkpoint written, before rotation): max, mean | - | "
          f"{max(vs_peak):.2f}, {sum(vs_peak) / len(vs_peak):.2f} ({len(vs_peak)} saves) |")
    p(f"| save time, mean | {ps} | {ls} |")
    p(f"| save throughput, mean (apparent bytes / save time) | {pr} | {lr} |")
    p(f"| write amplification (daemon counters, after the drain) | - | {wa_text} |")
    p(f"| daemon's disk writes / bytes written into the mount (/proc/PID/io) | - | {wa_proc} |")
    if "store_punched_bytes" in daemon:
        p(f"| given back: holes punched / compaction freed (copied) | - | "
          f"{mib(daemon['store_punched_bytes'])} in {daemon.get('store_punched_holes', 0)} holes / "
          f"{mib(daemon.get('store_compact_bytes_reclaimed', 0))} "
          f"({mib(daemon.get('store_compact_bytes_copied', 0))}) |")
    p("")

    # Delete-all and the empty store.
    dl = [r for r in lm if r["phase"] == "delete"]
    empty = {k: json.loads(Path(v).read_text()) for k, v in
             (("mounted", a.empty_mounted), ("unmounted", a.empty_unmounted))}
    after = json.loads(Path(a.after_unmount).read_text())
    p("| store directory | allocated | apparent | index (allocated) | rest (allocated) |")
    p("|---|---|---|---|---|")
    for name, d in (("empty store, mounted (idle 3 s)", empty["mounted"]),
                    ("empty store, after unmount", empty["unmounted"])):
        p(f"| {name} | {d['allocated']} B | {d['apparent']} B | {d['index']} B | {d['allocated'] - d['index']} B |")
    if dl:
        t_del = runs["lmcfs"]["t_delete"]  # when the last file was gone
        first = dl[0]
        last = dl[-1]
        under = next((r for r in dl if r["backing_bytes"] - r["index_bytes"] < MIB), None)
        p(f"| rotation store, before delete-all | {lm_end['backing_bytes']} B | {lm_end['backing_apparent']} B | "
          f"{lm_end['index_bytes']} B | {lm_end['backing_bytes'] - lm_end['index_bytes']} B |")
        p(f"| rotation store, {first['t_s'] - t_del:.0f} s after delete-all | {first['backing_bytes']} B | "
          f"{first['backing_apparent']} B | {first['index_bytes']} B | {first['backing_bytes'] - first['index_bytes']} B |")
        p(f"| rotation store, {last['t_s'] - t_del:.0f} s after delete-all (mounted, idle) | {last['backing_bytes']} B | "
          f"{last['backing_apparent']} B | {last['index_bytes']} B | {last['backing_bytes'] - last['index_bytes']} B |")
        u = after
        p(f"| rotation store, after unmount | {u['allocated']} B | {u['apparent']} B | {u['index']} B | "
          f"{u['allocated'] - u['index']} B |")
        p("")
        verdict = (f"met {under['t_s'] - t_del:.0f} s after the delete" if under else
                   f"**not met**: {mib(last['backing_bytes'] - last['index_bytes'])} besides the index "
                   f"after {last['t_s'] - t_del:.0f} s")
        p(f"Delete-all target (store under 1 MiB plus its index within 60 s of idle): {verdict}.")
    text = "\n".join(out) + "\n"
    Path(f"{base}.md").write_text(text)
    print(text, end="")
    plot(plain, lm, saves, f"{base}.png", a.label, a.mount_opts)
    print(f"files: {base}.csv, {base}-saves.csv, {base}.md, {base}.png")
    return 0


def plot(plain, lm, saves, path, label, mount_opts):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    t = lambda rr: [r["t_s"] for r in rr]  # noqa: E731
    m = lambda rr, k: [r[k] / MIB for r in rr]  # noqa: E731
    ax.plot(t(lm), m(lm, "backing_bytes"), label="lmcfs store dir (allocated)", color="C0", lw=2)
    ax.plot(t(lm), m(lm, "packs_bytes"), label="  of which packs/", color="C0", lw=1, ls="--")
    ax.plot(t(lm), m(lm, "index_bytes"), label="  of which index/", color="C0", lw=1, ls=":")
    ax.plot(t(lm), m(lm, "live_stored"), label="lmcfs live files, stored (du)", color="C2", lw=1)
    ax.plot(t(plain), m(plain, "backing_bytes"), label="plain dir (allocated)", color="C1", lw=2)
    for run, color in (("lmcfs", "C0"), ("plain", "C1")):
        rr = lm if run == "lmcfs" else plain
        ends = [r["t_s"] for r in rr if r["phase"] == "train"]
        if ends:
            ax.axvline(max(ends), color=color, lw=0.8, alpha=0.6)
    dl = [r["t_s"] for r in lm if r["phase"] == "delete"]
    if dl:
        ax.axvline(dl[0], color="k", lw=0.8, alpha=0.6)
        ax.text(dl[0], ax.get_ylim()[1] * 0.95, " delete-all", fontsize=8, va="top")
    ax.set_xlabel("seconds since the run started (vertical lines: last save of each run)")
    ax.set_ylabel("MiB")
    ax.set_title(f"Bytes on the backing disk, Trainer save_total_limit=2, {len(saves['lmcfs'])} saves "
                 f"({label}{', ' + mount_opts if mount_opts else ''})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


def main():
    cmds = {"train": train, "run": run, "du": du_cmd, "report": report}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
