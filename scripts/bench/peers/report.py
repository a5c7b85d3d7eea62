#!/usr/bin/env python3
"""Report for scripts/bench/peers.sh: results.json, results.md and PNG charts in OUT_DIR.

Input (environment): RESULTS (tsv: target, workload, key, metric, value; one line per round
when ROUNDS > 1), META (tsv: target, key, value), the run's parameters, WORK (per-target fio
command lines). Every figure reported is the median of its rounds."""
import datetime
import json
import os
import platform
import statistics
import subprocess

env = os.environ
OUT = env["OUT_DIR"]
TARGETS = env["TARGETS"].split()
NAMES = {"ext4": "ext4", "xfs": "xfs", "btrfs": "btrfs", "btrfs-zstd": "btrfs zstd",
         "fuse-passthrough": "FUSE passthrough", "strata": "Strata"}
RATIO_REFS = [r for r in ("ext4", "fuse-passthrough", "btrfs") if r in TARGETS and "strata" in TARGETS]


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


res, meta, rounds = {}, {}, {}
for line in open(env["RESULTS"]):
    t, w, k, m, v = line.rstrip("\n").split("\t")
    rounds.setdefault(t, {}).setdefault(w, {}).setdefault(k, {}).setdefault(m, []).append(float(v))
# The median of the rounds (the value itself with one round); every value stays in
# results.json under "rounds".
for t, ws in rounds.items():
    for w, ks in ws.items():
        for k, ms in ks.items():
            for m, vs in ms.items():
                res.setdefault(t, {}).setdefault(w, {}).setdefault(k, {})[m] = statistics.median(vs)
for line in open(env["META"]):
    t, k, v = (line.rstrip("\n").split("\t", 2) + [""])[:3]
    meta.setdefault(t, {})[k] = v
fio_cmds = {}
for t in TARGETS:
    p = os.path.join(env["WORK"], t, "fio-commands.tsv")
    if os.path.exists(p):
        for line in open(p):
            name, cmd = line.rstrip("\n").split("\t", 1)
            fio_cmds[name] = cmd.replace(env.get("PEERS_DIR", "/var/tmp/strata-peers"), "$PEERS_DIR")


def get(t, w, k, m):
    return res.get(t, {}).get(w, {}).get(str(k), {}).get(m)


# ------------------------------------------------------------------ machine and results.json
mem_kib = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:")), 0)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
peers_dir = env.get("PEERS_DIR", "/var/tmp/strata-peers")
src = sh(f"findmnt -no SOURCE -T {peers_dir}")
disk = sh(f"lsblk -ndo PKNAME {src} 2>/dev/null") or os.path.basename(src)
machine = {
    "nproc": os.cpu_count(),
    "cpu": cpu,
    "mem_gib": round(mem_kib / 1024 / 1024, 1),
    "kernel": platform.release(),
    "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
    "backing_dir": peers_dir,
    "backing_fs": sh(f"findmnt -no FSTYPE,SOURCE,OPTIONS -T {peers_dir}"),
    "backing_disk": disk,
    "backing_disk_model": sh(f"cat /sys/block/{disk}/device/model 2>/dev/null") or sh(f"lsblk -ndo MODEL /dev/{disk} 2>/dev/null") or "(no model: virtual disk)",
    "backing_disk_rotational": sh(f"cat /sys/block/{disk}/queue/rotational 2>/dev/null"),
    "backing_disk_scheduler": sh(f"cat /sys/block/{disk}/queue/scheduler 2>/dev/null"),
    "other_load_at_end": env.get("OTHER_LOAD", ""),
}
versions = {
    "fio": sh("fio --version"),
    "postgres": sh("/usr/lib/postgresql/15/bin/postgres --version"),
    "mariadb": sh("/usr/sbin/mariadbd --version"),
    "sysbench": sh("sysbench --version"),
    "e2fsprogs": sh("dpkg-query -W -f='${Version}' e2fsprogs"),
    "xfsprogs": sh("dpkg-query -W -f='${Version}' xfsprogs"),
    "btrfs-progs": sh("dpkg-query -W -f='${Version}' btrfs-progs"),
    "libfuse3": sh("pkg-config --modversion fuse3"),
    "strata_git": sh(f"cd {env['ROOT']} && git rev-parse --short HEAD") +
    (" (dirty)" if sh(f"cd {env['ROOT']} && git status --porcelain --untracked-files=no") else ""),
    "strata_binary": env.get("STRATA_BIN", ""),
}
P = lambda k: env.get(k, "")
params = {k: P(k) for k in ("QUICK", "FS_SIZE", "LOOP_DIRECT_IO", "FIO_SECONDS", "FIO_RAMP", "FIO_SIZE",
                            "FIO_SYNC_SIZE", "SCALE", "PG_SECONDS", "PG_CLIENTS", "MY_SECONDS", "MY_THREADS",
                            "MY_LARGE_TABLES", "MY_LARGE_TABLE_SIZE", "MY_LARGE_THREADS", "MY_LARGE_SECONDS",
                            "ROUNDS")}
params.update({"sysbench_tables": 2, "sysbench_table_size": 10000, "sysbench_range_size": 100,
               "sysbench_rand_type": "uniform"})
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
doc = {
    "benchmark": "peers",
    "label": P("LABEL"),
    "date_utc": date,
    "command": (P("ENV_CMDLINE") + P("CMDLINE")).strip(),
    "params": params,
    "machine": machine,
    "versions": versions,
    "total_seconds": float(P("TOTAL_SECONDS") or 0),
    "targets": TARGETS,
    "workloads": P("WORKLOADS").split(),
    "fio_commands": fio_cmds,
    "meta": meta,
    "results": res,
    "rounds": rounds,
}
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")

# ------------------------------------------------------------------ Markdown


def fmt(v, d=0):
    if v is None:
        return "–"
    if d == 0 and abs(v) < 100:
        d = 1 if abs(v) >= 10 else 2
    return f"{v:,.{d}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def rfmt(r):
    return "–" if r is None else f"{r:.2f}"


md = []
title = "# Strata next to its peers: ext4, xfs, btrfs, btrfs+zstd, FUSE passthrough"
md.append(title)
md.append("")
if P("LABEL"):
    md.append(f"> **{P('LABEL')}**")
    md.append("")
md.append(f"Generated by `scripts/bench/peers.sh` on {date} in {doc['total_seconds'] / 60:.0f} min. "
          f"Command: `{doc['command']}`.")
md.append("")
md.append(f"Machine: {machine['nproc']} CPUs ({cpu}), {machine['mem_gib']} GiB, kernel {machine['kernel']}, "
          f"{machine['os']}; every file system on an image file in `{peers_dir}` on {machine['backing_fs'].split()[0] if machine['backing_fs'] else '?'} "
          f"({machine['backing_fs'].split()[1] if len(machine['backing_fs'].split()) > 1 else '?'}, disk {machine['backing_disk']}: "
          f"{machine['backing_disk_model']}, rotational={machine['backing_disk_rotational']}). "
          f"Other load seen at the end: {machine['other_load_at_end'] or 'none'}.")
md.append("")
md.append(f"Parameters: FS_SIZE={P('FS_SIZE')} (each file system and the Strata pool/volume), loop devices "
          f"--direct-io={P('LOOP_DIRECT_IO')}; fio {P('FIO_SECONDS')} s per job (+{P('FIO_RAMP')} s ramp), "
          f"random file {P('FIO_SIZE')}, fdatasync file {P('FIO_SYNC_SIZE')}; pgbench scale {P('SCALE')}, "
          f"{P('PG_SECONDS')} s per run, clients {P('PG_CLIENTS')}; sysbench {P('MY_SECONDS')} s per run, "
          f"threads {P('MY_THREADS')}; large data set {P('MY_LARGE_TABLES')} x {P('MY_LARGE_TABLE_SIZE')} rows, "
          f"{P('MY_LARGE_THREADS')} threads, {P('MY_LARGE_SECONDS')} s.")
md.append("")
n_rounds = int(P("ROUNDS") or 1)
if n_rounds > 1:
    md.append(f"Rounds: every target was set up and measured {n_rounds} times, the order of the targets "
              "alternating (forward, backward, ...); every figure below is the median of its rounds "
              "(all values in results.json, `rounds`).")
    md.append("")
md.append("Ratios are Strata ÷ peer: above 1 is better for Strata on throughput (IOPS, TPS, QPS), "
          "below 1 is better on latency.")
md.append("")

# ---- target summary
summary = []  # (criterion, strata, ref, ratio, goal_text, met)


def crit(label, s, r, goal, higher):
    q = ratio(s, r)
    met = None if q is None else (q >= goal if higher else q <= goal)
    summary.append((label, s, r, q, (">= " if higher else "<= ") + f"{goal:g}", met))


if "strata" in TARGETS and "ext4" in TARGETS:
    for bs in ("4k", "16k"):
        for p in ("p50", "p99"):
            crit(f"fio {bs} write+fdatasync: fdatasync latency {p} (µs), Strata/ext4",
                 get("strata", "fio", f"seqwrite-{bs}-fdatasync", f"sync_lat_{p}_us"),
                 get("ext4", "fio", f"seqwrite-{bs}-fdatasync", f"sync_lat_{p}_us"), 1.5, False)
for ref, goal in (("fuse-passthrough", 0.9), ("btrfs", 1.0)):
    if "strata" not in TARGETS or ref not in TARGETS:
        continue
    for c in P("PG_CLIENTS").split():
        crit(f"pgbench TPS, {c} clients, Strata/{NAMES[ref]}", get("strata", "pgbench", c, "tps"),
             get(ref, "pgbench", c, "tps"), goal, True)
    for th in P("MY_THREADS").split():
        crit(f"sysbench oltp_read_write TPS, {th} threads, Strata/{NAMES[ref]}",
             get("strata", "sysbench", th, "tps"), get(ref, "sysbench", th, "tps"), goal, True)
    th = P("MY_LARGE_THREADS")
    crit(f"sysbench large data set TPS, {th} threads, Strata/{NAMES[ref]}",
         get("strata", "sysbench-large", th, "tps"), get(ref, "sysbench-large", th, "tps"), goal, True)
summary = [s for s in summary if s[1] is not None or s[2] is not None]
if summary:
    n_met = sum(1 for s in summary if s[5])
    md.append("## Target summary")
    md.append("")
    md.append(f"{n_met} of {len(summary)} targets met.")
    md.append("")
    md.append("| criterion | Strata | peer | ratio | target | met |")
    md.append("|---|---:|---:|---:|---:|---|")
    for label, s, r, q, goal, met in summary:
        mark = "–" if met is None else ("met" if met else "**not met**")
        md.append(f"| {label} | {fmt(s)} | {fmt(r)} | {rfmt(q)} | {goal} | {mark} |")
    md.append("")


def table(title, rows, note=None):
    """rows: (label, workload, key, metric)"""
    rows = [r for r in rows if any(get(t, r[1], r[2], r[3]) is not None for t in TARGETS)]
    if not rows:
        return
    md.append(f"## {title}")
    md.append("")
    if note:
        md.append(note)
        md.append("")
    cols = [NAMES[t] for t in TARGETS] + [f"Strata/{NAMES[r]}" for r in RATIO_REFS]
    md.append("| | " + " | ".join(cols) + " |")
    md.append("|---|" + "---:|" * len(cols))
    for label, w, k, m in rows:
        cells = [fmt(get(t, w, k, m)) for t in TARGETS]
        cells += [rfmt(ratio(get("strata", w, k, m), get(r, w, k, m))) for r in RATIO_REFS]
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    md.append("")


# ---- fio
fio_rows = []
for job, desc in (("randrw75-4k-qd1", "4 KiB random 75/25 r/w, QD1"),
                  ("randrw75-4k-qd16", "4 KiB random 75/25 r/w, QD16"),
                  ("randread-16k-qd1", "16 KiB random read, QD1")):
    for m, ml in (("read_iops", "read IOPS"), ("write_iops", "write IOPS"),
                  ("read_lat_p50_us", "read lat p50 µs"), ("read_lat_p99_us", "read lat p99 µs"),
                  ("write_lat_p50_us", "write lat p50 µs"), ("write_lat_p99_us", "write lat p99 µs")):
        fio_rows.append((f"{desc}: {ml}", "fio", job, m))
for bs in ("4k", "16k"):
    job = f"seqwrite-{bs}-fdatasync"
    for m, ml in (("write_iops", "writes/s (each followed by fdatasync)"),
                  ("sync_lat_p50_us", "fdatasync p50 µs"), ("sync_lat_p99_us", "fdatasync p99 µs"),
                  ("sync_lat_p99.9_us", "fdatasync p99.9 µs"),
                  ("write_clat_p50_us", "write() p50 µs"), ("write_clat_p99_us", "write() p99 µs")):
        fio_rows.append((f"{bs.replace('k', ' KiB')} seq write + fdatasync: {ml}", "fio", job, m))
direct = ", ".join(f"{NAMES[t]} direct={meta.get(t, {}).get('o_direct', '?')}" for t in TARGETS)
table("fio", fio_rows,
      "Random jobs: libaio, one file of FIO_SIZE, direct=1 where the target accepts O_DIRECT (" + direct +
      "); 'lat' is fio's total latency (submission + completion, --lat_percentiles=1): a target that "
      "completes libaio requests synchronously inside io_submit (Strata does) shows a near-zero clat, "
      "so clat alone would flatter it (clat is in results.json too). fdatasync jobs: psync, buffered writes overwriting a laid-out file of FIO_SYNC_SIZE, "
      "fdatasync after every write (the WAL/redo-log pattern); 'fdatasync' rows are the latency "
      "of the fdatasync call (fio's sync section), 'write()' rows that of the write before it. "
      "Exact fio command lines are in results.json (fio_commands).")

# ---- pgbench
pg_rows = []
for c in P("PG_CLIENTS").split():
    pg_rows.append((f"{c} clients: TPS", "pgbench", c, "tps"))
    pg_rows.append((f"{c} clients: avg latency ms", "pgbench", c, "lat_avg_ms"))
pg_rows.append(("pgbench -i load, seconds", "pgbench-init", P("SCALE"), "seconds"))
table("PostgreSQL 15 pgbench (TPC-B-like)", pg_rows,
      f"Scale {P('SCALE')}, synchronous_commit=on, fsync=on, full_page_writes=on, shared_buffers=128MB, "
      f"wal_sync_method={next((meta[t]['pg_wal_sync_method'] for t in TARGETS if meta.get(t, {}).get('pg_wal_sync_method')), '?')}; "
      f"-j min(clients, 2), {P('PG_SECONDS')} s per run after VACUUM ANALYZE + CHECKPOINT.")

# ---- sysbench (TR-4722 Table 3 shape)
sb_rows = []
for th in P("MY_THREADS").split():
    for m, ml in (("qps", "QPS"), ("tps", "TPS"), ("lat_min_ms", "min ms"), ("lat_avg_ms", "avg ms"),
                  ("lat_max_ms", "max ms"), ("lat_p95_ms", "p95 ms")):
        sb_rows.append((f"{th} threads: {ml}", "sysbench", th, m))
sb_rows.append(("prepare (2 x 10000 rows), seconds", "sysbench-prepare", "2", "seconds"))
table("MariaDB sysbench oltp_read_write (NetApp TR-4722 parameters)", sb_rows,
      "--tables=2 --table-size=10000 --range_size=100 --rand-type=uniform; innodb_flush_log_at_trx_commit=1, "
      "innodb_flush_method=O_DIRECT, innodb_log_file_buffering=OFF, doublewrite on, buffer pool 128M, "
      f"redo log 96M, no binlog; {P('MY_SECONDS')} s per run.")
th = P("MY_LARGE_THREADS")
lg_rows = [(f"{th} threads: {ml}", "sysbench-large", th, m) for m, ml in
           (("qps", "QPS"), ("tps", "TPS"), ("lat_min_ms", "min ms"), ("lat_avg_ms", "avg ms"),
            ("lat_max_ms", "max ms"), ("lat_p95_ms", "p95 ms"))]
lg_rows.append(("prepare, seconds", "sysbench-prepare-large", P("MY_LARGE_TABLES"), "seconds"))
sizes = ", ".join(f"{NAMES[t]} {meta.get(t, {}).get('sysbench_large_data_mb', '?')} MB" for t in TARGETS)
table("MariaDB sysbench oltp_read_write, data set larger than the buffer pool", lg_rows,
      f"--tables={P('MY_LARGE_TABLES')} --table-size={P('MY_LARGE_TABLE_SIZE')}, buffer pool 128M "
      f"(data directory size after prepare: {sizes}); {P('MY_LARGE_SECONDS')} s.")

# ---- charts
charts = []
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def line_chart(fname, w, keys, xlabel, title):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        any_data = False
        for t in TARGETS:
            xs = [int(k) for k in keys if get(t, w, k, "tps") is not None]
            ys = [get(t, w, str(x), "tps") for x in xs]
            if xs:
                any_data = True
                ax.plot(xs, ys, marker="o", label=NAMES[t], linewidth=2.5 if t == "strata" else 1.3)
        if not any_data:
            plt.close(fig)
            return
        ax.set_xscale("log", base=2)
        ax.set_xticks([int(k) for k in keys])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TPS")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, fname), dpi=110)
        plt.close(fig)
        charts.append((fname, title))

    line_chart("sysbench-tps.png", "sysbench", P("MY_THREADS").split(), "threads",
               "MariaDB sysbench oltp_read_write TPS (TR-4722 parameters)")
    line_chart("pgbench-tps.png", "pgbench", P("PG_CLIENTS").split(), "clients",
               f"PostgreSQL pgbench TPS (scale {P('SCALE')})")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    any_data = False
    pcts = ["p50", "p90", "p99", "p99.9"]
    for ax, bs in zip(axes, ("4k", "16k")):
        n = len(TARGETS)
        width = 0.8 / max(n, 1)
        for i, t in enumerate(TARGETS):
            ys = [get(t, "fio", f"seqwrite-{bs}-fdatasync", f"sync_lat_{p}_us") for p in pcts]
            if all(y is None for y in ys):
                continue
            any_data = True
            ax.bar([j + i * width for j in range(len(pcts))], [y or 0 for y in ys], width, label=NAMES[t])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(pcts))])
        ax.set_xticklabels(pcts)
        ax.set_yscale("log")
        ax.set_ylabel("fdatasync latency, µs (log)")
        ax.set_title(f"{bs.replace('k', ' KiB')} sequential write + fdatasync")
        ax.grid(True, axis="y", alpha=0.3)
    if any_data:
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "fio-fdatasync-latency.png"), dpi=110)
        charts.append(("fio-fdatasync-latency.png", "fio fdatasync latency percentiles"))
    plt.close(fig)
except ImportError:
    md.append("(matplotlib is not installed: no charts)")
    md.append("")

if charts:
    md.append("## Charts")
    md.append("")
    for fname, t in charts:
        md.append(f"![{t}]({fname})")
        md.append("")

# ---- setup notes
md.append("## Setup per target")
md.append("")
md.append("| target | mount | notes |")
md.append("|---|---|---|")
for t in TARGETS:
    m = meta.get(t, {})
    notes = []
    for k in ("loop", "lower", "passthrough_options", "serve_args", "pg_wal_sync_method", "innodb_o_direct",
              "innodb_aio", "innodb_redo", "daemon_log_reply_enoent", "daemon_log_other_errors", "seconds"):
        if m.get(k):
            notes.append(f"{k}: {m[k]}")
    md.append(f"| {NAMES[t]} | `{m.get('mount', '?')}` | " + "; ".join(notes).replace("|", "/") + " |")
md.append("")
md.append("Versions: " + "; ".join(f"{k} {v}" for k, v in versions.items() if v) + ".")
md.append("")
with open(os.path.join(OUT, "results.md"), "w") as f:
    f.write("\n".join(md))
print("\n".join(md))
