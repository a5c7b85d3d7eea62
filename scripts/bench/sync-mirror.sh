#!/usr/bin/env bash
# What a synchronous mirror costs a database: pgbench (TPC-B, scale SCALE) on a Strata
# volume of pool `src`, with the volume in a `--sync` mirror and without (the same mirror
# paused: no link, syncs wait for nothing). TARGET=pool (default): the mirror goes to pool
# `dst` of the same daemon; TARGET=peer: to pool `dst` of a second daemon on this machine,
# paired as a peer (mutual TLS over 127.0.0.1). All pools on image files of the same disk. Per round and configuration: one client (-c 1: the
# commit latency) and four clients (-c 4 -j 2: TPS), SECONDS each. Rounds alternate the
# order; the table shows medians and every round.
#   Target (issue 26): sync commit latency <= 1.3x the unmirrored one.
#
#   scripts/bench/sync-mirror.sh                   ROUNDS=5 SECONDS_EACH=20 SCALE=10 TARGET=pool|peer
# Needs root and postgresql-15 (installed if missing). Takes the machine. Work dir:
# STRATA_BENCH_DIR (/var/tmp/strata-bench-sync-mirror). STRATA_BENCH_BIN: a strata binary to
# use instead of building the release one.
set -euo pipefail
unset STRATA_API
cd "$(dirname "$0")/../.."
rounds="${ROUNDS:-5}"; secs="${SECONDS_EACH:-20}"; scale="${SCALE:-10}"; target="${TARGET:-pool}"
case "$target" in pool | peer) ;; *) echo "TARGET is pool or peer, not '$target'" >&2; exit 2 ;; esac
for v in "$rounds" "$secs" "$scale"; do
  case "$v" in '' | *[!0-9]* | 0) echo "ROUNDS, SECONDS_EACH and SCALE are positive integers" >&2; exit 2 ;; esac
done
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-sync-mirror}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$PG_BIN/pgbench" ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; fi
if [ -n "${STRATA_BENCH_BIN:-}" ]; then bin="$STRATA_BENCH_BIN"; else
  cargo build --release -p strata-cli --quiet
  bin="$PWD/target/release/strata"
fi
dpid=""; bpid=""; pgup=""
cleanup() {
  set +e
  [ -n "$pgup" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$work/mnt/pg" -m immediate -w >/dev/null 2>&1
  if [ -n "$dpid" ]; then "$bin" unmount "$work/mnt" >/dev/null 2>&1; kill "$dpid"; wait "$dpid" 2>/dev/null; fi
  if [ -n "$bpid" ]; then kill "$bpid"; wait "$bpid" 2>/dev/null; fi
}
trap cleanup EXIT
mountpoint -q "$work/mnt" 2>/dev/null && umount -l "$work/mnt"
rm -rf "$work"; mkdir -p "$work"/{mnt,sock}
export STRATA_SOCKET="$work/strata.sock"
"$bin" serve --config /dev/null --data-dir "$work/data" --default-pool-size 1G >"$work/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 1 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" pool create src --device "$work/src.img" --size 8G >/dev/null
if [ "$target" = pool ]; then
  "$bin" pool create dst --device "$work/dst.img" --size 8G >/dev/null
  mirror=dst/pg; dest=dst
else
  # The second daemon: its own data dir and socket, a replication port, pool dst granted.
  port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  mkdir -p "$work/b"
  STRATA_SOCKET="$work/b/strata.sock" "$bin" serve --config /dev/null --data-dir "$work/b/data" --default-pool-size 1G \
    --repl-port "$port" >"$work/b/daemon.log" 2>&1 &
  bpid=$!
  sb() { STRATA_SOCKET="$work/b/strata.sock" "$bin" "$@"; }
  for _ in $(seq 1 100); do sb pool list >/dev/null 2>&1 && break; sleep 0.1; done
  sb pool create dst --device "$work/dst.img" --size 8G >/dev/null
  token="$(sb peer invite --name site-a --grant dst 2>/dev/null)"
  "$bin" peer add site-b "127.0.0.1:$port" --invitation "$token" >/dev/null
  mirror=site-b:dst/pg; dest=site-b:dst
fi
"$bin" volume create src/pg --record-size 8K >/dev/null
"$bin" mount src/pg "$work/mnt" >/dev/null
touch "$work/pg.log"
chown postgres: "$work/mnt" "$work/sock" "$work/pg.log"
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/mnt/pg" -A trust -U postgres >/dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$work/mnt/pg" -w -l "$work/pg.log" \
  -o "-k $work/sock -p 55499 -c listen_addresses='' -c fsync=on -c synchronous_commit=on -c shared_buffers=128MB" >/dev/null
pgup=1
pgb() { "$PG_BIN/pgbench" -h "$work/sock" -p 55499 -U postgres "$@"; }
pgb -i -q -s "$scale" postgres >/dev/null 2>&1
"$bin" mirror create src/pg "$dest" --sync >/dev/null
state() { "$bin" --json mirror show "$mirror" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['sync']['state'])"; }
in_sync() {
  for _ in $(seq 1 600); do [ "$(state)" = in-sync ] && return 0; sleep 0.2; done
  echo "the mirror did not get in sync: $(state)" >&2; return 1
}
in_sync
# run CONFIG ROUND: pgbench -c 1, then -c 4; appends "config round c1_tps c1_lat_ms c4_tps c4_lat_ms".
run() {
  local st; st="$("$bin" --json mirror show "$mirror" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")"
  if [ "$1" = sync ]; then
    [ "$st" != paused ] || "$bin" mirror resume "$mirror" >/dev/null
    in_sync
  elif [ "$st" != paused ]; then
    "$bin" mirror pause "$mirror" >/dev/null
  fi
  local o1 o4
  o1="$(pgb -c 1 -T "$secs" -n postgres 2>&1)"
  o4="$(pgb -c 4 -j 2 -T "$secs" -n postgres 2>&1)"
  [ "$1" = none ] || [ "$(state)" = in-sync ] || { echo "the mirror left in-sync during the run: $(state)" >&2; exit 1; }
  local frames=0
  [ "$1" = none ] || frames="$("$bin" --json mirror show "$mirror" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['sync']['frames'])")"
  printf '%s %s %s %s %s %s %s\n' "$1" "$2" \
    "$(grep -oP 'tps = \K[0-9.]+' <<<"$o1" | head -1)" "$(grep -oP 'latency average = \K[0-9.]+' <<<"$o1")" \
    "$(grep -oP 'tps = \K[0-9.]+' <<<"$o4" | head -1)" "$(grep -oP 'latency average = \K[0-9.]+' <<<"$o4")" "$frames" >>"$work/rounds"
}
: >"$work/rounds"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run sync "$r"; run none "$r"; else run none "$r"; run sync "$r"; fi
done
/usr/bin/python3 - "$work/rounds" "$secs" "$scale" "$target" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
secs, scale, target = sys.argv[2], sys.argv[3], sys.argv[4]
def med(cfg, i): return statistics.median(float(r[i]) for r in rows if r[0] == cfg)
where = "pool dst of the same daemon" if target == "pool" else "pool dst of a second daemon (a paired peer over 127.0.0.1)"
print(f"pgbench scale {scale}, {secs} s per run, PostgreSQL on src/pg; sync: `--sync` mirror to {where}")
print()
print("| configuration | 1 client TPS | 1 client latency ms | 4 clients TPS | 4 clients latency ms |")
print("|---|---|---|---|---|")
for cfg, name in (("none", "no mirror (paused)"), ("sync", "sync mirror")):
    print(f"| {name} | {med(cfg,2):.0f} | {med(cfg,3):.3f} | {med(cfg,4):.0f} | {med(cfg,5):.3f} |")
print()
l1 = med("sync", 3) / med("none", 3)
l4 = med("sync", 5) / med("none", 5)
print(f"commit latency sync / none: 1 client {l1:.2f}x ({'met' if l1 <= 1.3 else 'MISSED'}), 4 clients {l4:.2f}x ({'met' if l4 <= 1.3 else 'MISSED'}) (target <= 1.3x)")
print(f"TPS sync / none: 1 client {med('sync',2)/med('none',2):.2f}, 4 clients {med('sync',4)/med('none',4):.2f}")
print()
print("every round (config round c1_tps c1_latency_ms c4_tps c4_latency_ms frames_journaled_by_the_link):")
for r in rows: print("  " + " ".join(r))
PY
