#!/usr/bin/env python3
"""fio_parse.py TARGET JOB FIO_JSON: print results.tsv rows (target, fio, job, metric, value).

Metrics: {read,write}_iops, {read,write}_bw_mib, {read,write}_clat_{p50,p90,p99,p99.9,mean}_us
(completion latency), {read,write}_lat_* (submission + completion: what the
application waits for; on a target that completes libaio synchronously, clat alone is near 0) and, for fdatasync jobs, sync_lat_{p50,p90,p99,p99.9,mean}_us (the
fdatasync call's latency, fio's "sync" section)."""
import json
import sys

target, job, path = sys.argv[1:4]
text = open(path).read()
# fio may print warnings before the JSON document
doc = json.loads(text[text.index("{"):])
j = doc["jobs"][0]
if j.get("error"):
    sys.exit(f"fio job {job} reported error {j['error']}")
rows = []


def pct(prefix, lat):
    p = lat.get("percentile") or {}
    for key, name in (("50.000000", "p50"), ("90.000000", "p90"), ("99.000000", "p99"), ("99.900000", "p99.9")):
        if key in p:
            rows.append((f"{prefix}_{name}_us", p[key] / 1000.0))
    if lat.get("N", 1) and "mean" in lat:
        rows.append((f"{prefix}_mean_us", lat["mean"] / 1000.0))


for d in ("read", "write"):
    s = j[d]
    if s.get("total_ios", 0) == 0 and s.get("io_bytes", 0) == 0:
        continue
    rows.append((f"{d}_iops", s["iops"]))
    rows.append((f"{d}_bw_mib", s["bw_bytes"] / 1048576.0))
    pct(f"{d}_clat", s["clat_ns"])
    pct(f"{d}_lat", s["lat_ns"])  # submission + completion (percentiles with --lat_percentiles=1)
sync = j.get("sync") or {}
if (sync.get("lat_ns") or {}).get("N", 0):
    pct("sync_lat", sync["lat_ns"])
for m, v in rows:
    print(f"{target}\tfio\t{job}\t{m}\t{v:.3f}")
