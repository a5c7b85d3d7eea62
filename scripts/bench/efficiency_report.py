"""Markdown report of scripts/bench/efficiency.sh: physical space and TPS per target.

Reads RESULTS (target, key, value lines) and writes OUT_MD. Ratios of space are apparent /
physical (higher saves more); TPS of each Strata policy is divided by Strata off's, and
space saving is compared with btrfs compress=zstd's, all from the same run.
"""
import os
import platform
import subprocess
from collections import defaultdict

env = os.environ
r = defaultdict(dict)  # target -> key -> last value (text)
every = defaultdict(lambda: defaultdict(list))  # target -> key -> values of every round
with open(env["RESULTS"]) as f:
    for line in f:
        t, k, v = line.rstrip("\n").split("\t")
        r[t][k] = v
        every[t][k].append(v)
targets = list(r)
rounds = int(env.get("ROUNDS", "1"))


def num(t, k):
    """The median over the rounds (None when missing or not a number)."""
    try:
        vals = sorted(float(v) for v in every[t][k])
    except ValueError:
        return None
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def mib(b):
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


lines = []
w = lines.append
w("# Storage efficiency: PostgreSQL and MariaDB data on ext4, btrfs (zstd) and Strata")
w("")
w(f"Measured by `scripts/bench/efficiency.sh` (Strata {env['STRATA_REV']}), {env['SECONDS_TOTAL']} s in all.")
w("")
w("```")
w(env["CMDLINE"])
w("```")
w("")
w(f"Machine: {os.cpu_count()} cores ({cpu()}), kernel {platform.release()}. Load average "
  f"(1/5/15 min) at the start {env['LOAD_START']}, at the end {env['LOAD_END']} "
  "(other engineers' builds share this machine; TPS rows are noisy at this load).")
w("")
w(f"Each target is a fresh {env['FS_SIZE']} file system or Strata pool on an image file on the same disk. "
  f"PostgreSQL 15: `pgbench -i -s {env['SCALE']}`, `vacuum analyze`, `checkpoint`, then "
  f"`pgbench -c {env['PG_CLIENTS']} -j 2 -T {env['PG_SECONDS']}` (synchronous_commit on). MariaDB: "
  f"`sysbench oltp_read_write --tables={env['MY_TABLES']} --table-size={env['MY_TABLE_SIZE']} prepare`, "
  f"then `run --threads={env['MY_THREADS']} --time={env['MY_SECONDS']}` (innodb_flush_log_at_trx_commit=1, O_DIRECT). "
  "**Physical** = what the target holds for the data after the load (df used, or the pool's allocated "
  "units for Strata, after two commits), minus the empty target; **apparent** = `du --apparent-size` "
  "of the data directory; **ratio** = apparent / physical. Strata zstd is "
  f"zstd-{env['ZSTD_LEVEL']}, Strata volumes use {env['STRATA_RECORD_SIZE']} records; btrfs `compress=zstd` "
  "is level 3 (and btrfs does not compress O_DIRECT writes, which is how InnoDB writes its pages here).")
w("")
for db, name, tps_name in (("pg", "PostgreSQL (pgbench data + WAL)", "pgbench TPS"),
                           ("my", "MariaDB (sysbench tables, InnoDB)", "sysbench TPS")):
    w(f"## {name}")
    w("")
    w(f"| target | apparent | physical | ratio | physical / btrfs-zstd's | load s | {tps_name} | TPS / strata-off |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    off_tps = num("strata-off", f"{db}-tps")
    bz = None
    if "btrfs-zstd" in r:
        bz = num("btrfs-zstd", f"{db}-physical")
    for t in targets:
        app, phys, tps = num(t, f"{db}-apparent"), num(t, f"{db}-physical"), num(t, f"{db}-tps")
        # Below 1.00: this target stores the same database in less space than btrfs-zstd.
        vs_btrfs = ratio(phys, bz) if t != "btrfs-zstd" else "-"
        rel = ratio(tps, off_tps) if t.startswith("strata-") else "-"
        w(f"| {t} | {mib(app)} | {mib(phys)} | {ratio(app, phys)} | {vs_btrfs} | {r[t].get(db + '-load-seconds', '-')} "
          f"| {tps if tps is None else f'{tps:,.0f}'} | {rel} |")
    w("")
    extra = [(t, r[t].get(f"{db}-compsize") or r[t].get(f"{db}-volume")) for t in targets]
    extra = [(t, x) for t, x in extra if x]
    if rounds > 1:
        w(f"Medians of {rounds} rounds (order alternating). TPS per round: " + "; ".join(
            f"{t} " + " / ".join(f"{float(v):,.0f}" for v in every[t].get(f"{db}-tps", []))
            for t in targets) + ".")
        w("")
    if extra:
        w("Cross-checks: " + "; ".join(
            f"{t}: {'compsize disk/uncompressed' if t == 'btrfs-zstd' else 'volume used/logical'} {x}"
            for t, x in extra) + ".")
        w("")
w("Strata packs small compressed records into shared units (compaction, docs/efficiency.md): a record "
  "is charged its 512-byte sectors, not whole 4 KiB units. Deduplication is off in every target "
  "(database files hold few identical records; docs/efficiency.md).")
with open(env["OUT_MD"], "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
