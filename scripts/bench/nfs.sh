#!/usr/bin/env bash
# Strata's NFS server against nfs-ganesha (VFS backend on ext4 in a loop image), through the
# same user-space client: scripts/bench/nfs/nfsload.c on libnfs's asynchronous API.
# Rows: 4 KiB and 16 KiB random 70/30 read/write at queue depth 1 and 16, sequential 1 MiB
# write and read (QD 4). Prints a Markdown table (IOPS, p50/p99 latency, ratio to ganesha).
#
#   scripts/bench/nfs.sh [SECONDS_PER_ROW=20] [FILE_MIB=1024]
#   ROUNDS=3 scripts/bench/nfs.sh 20 1024   # each row 3 times per server, alternating which
#                                           # goes first; the table shows medians
#   ROWS="16k-rand-qd1 1m-seq-write-qd4" scripts/bench/nfs.sh   # only these rows (the fill
#                                           # and the settling still run)
# Needs root, Debian packages nfs-ganesha nfs-ganesha-vfs libnfs-dev (installed if missing).
# Takes the machine: ~ROUNDS × 2 × 6 rows × (SECONDS + 8 s to settle) plus the fills.
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-nfs); Strata's control socket is
# strata.sock in it (STRATA_SOCKET; STRATA_API, TCP, is ignored).
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of the daemon's socket
cd "$(dirname "$0")/../.."
secs="${1:-20}"; mib="${2:-1024}"; rounds="${ROUNDS:-1}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
rows=("4k-rand-qd1 4096 70 1 rand" "4k-rand-qd16 4096 70 16 rand" "16k-rand-qd1 16384 70 1 rand"
      "16k-rand-qd16 16384 70 16 rand" "1m-seq-write-qd4 1048576 0 4 seq" "1m-seq-read-qd4 1048576 100 4 seq")
if [ -n "${ROWS:-}" ]; then
  chosen=()
  for want in $ROWS; do
    hit=""
    for r in "${rows[@]}"; do [ "${r%% *}" = "$want" ] && { chosen+=("$r"); hit=1; }; done
    [ -n "$hit" ] || { echo "ROWS: unknown row '$want'; rows are: ${rows[*]%% *}" >&2; exit 2; }
  done
  rows=("${chosen[@]}")
fi
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-nfs}"
need=()
command -v ganesha.nfsd >/dev/null || need+=(nfs-ganesha nfs-ganesha-vfs)
command -v rpcbind >/dev/null || need+=(rpcbind)
[ -f /usr/include/nfsc/libnfs.h ] || need+=(libnfs-dev)
if [ ${#need[@]} -gt 0 ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
cargo build --release -p strata-cli --quiet
bin="$PWD/target/release/strata"
rm -rf "$work"; mkdir -p "$work"
export STRATA_SOCKET="$work/strata.sock" # serve listens on it, the CLI calls go to it
gcc -O2 -Wall -o "$work/nfsload" scripts/bench/nfs/nfsload.c -lnfs
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=(); loopdev=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  mountpoint -q "$work/ext4" && umount "$work/ext4"
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
}
trap cleanup EXIT

# --- Strata: its own pool image (same size as ganesha's ext4 image), release build.
sport="$(free_port)"
"$bin" serve --config /dev/null --data-dir "$work/strata" --default-pool-size 8G --nfs-port "$sport" \
  >"$work/strata.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" volume create default/bench >/dev/null
"$bin" export nfs default/bench --no-root-squash >/dev/null
strata_url="nfs://127.0.0.1/default/bench?nfsport=$sport&mountport=$sport"

# --- nfs-ganesha: VFS FSAL over ext4 in a loop image; NFSv3 only, no NLM/RQUOTA.
# Ganesha refuses to serve unless it can register with a portmapper: start rpcbind if none runs.
pgrep -x rpcbind >/dev/null || rpcbind -w
truncate -s 8G "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
loopdev="$(losetup -f --show "$work/ext4.img")"
mkdir -p "$work/ext4"; mount "$loopdev" "$work/ext4"
gport="$(free_port)"; gmnt="$(free_port)"
cat >"$work/ganesha.conf" <<CONF
NFS_CORE_PARAM { Protocols = 3; NFS_Port = $gport; MNT_Port = $gmnt; Bind_addr = 127.0.0.1;
                 Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false; }
EXPORT { Export_Id = 1; Path = $work/ext4; Pseudo = /bench; Access_Type = RW; Squash = No_Root_Squash;
         Protocols = 3; Transports = TCP; SecType = sys; FSAL { Name = VFS; } }
NFS_KRB5 { Active_krb5 = false; }
LOG { Default_Log_Level = WARN; }
CONF
ganesha.nfsd -F -f "$work/ganesha.conf" -L "$work/ganesha.log" -p "$work/ganesha.pid" &
pids+=($!)
ganesha_url="nfs://127.0.0.1$work/ext4?nfsport=$gport&mountport=$gmnt"
for _ in $(seq 100); do "$work/nfsload" "$ganesha_url" /probe 1 4096 100 1 0.1 seq >/dev/null 2>&1 && break; sleep 0.3; done

# Fill both files first (not measured) and let both servers settle: the fill's writeback
# (ext4's, Strata's commit) would otherwise land in the first row of one and not the other.
"$work/nfsload" "$strata_url" /bench.dat "$mib" 1048576 0 4 0.1 seq >/dev/null
"$work/nfsload" "$ganesha_url" /bench.dat "$mib" 1048576 0 4 0.1 seq >/dev/null
sync; sleep 10
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# Median of the numbers given (the lower middle one for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# One measurement of row $2.. on server $1 (strata|ganesha), then let the machine settle:
# the previous row's writeback (ext4's, flushed by sync; Strata's next commit, at most 5 s
# away) must not land in the next measurement.
# CPU time the hypervisor took from this VM (steal) and all CPU time, in ticks, so far.
cpu_ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
measure() {
  local url out t0 t1; [ "$1" = strata ] && url="$strata_url" || url="$ganesha_url"
  t0="$(cpu_ticks)"
  out="$("$work/nfsload" "$url" /bench.dat "$mib" "$3" "$4" "$5" "$secs" "$6")" ||
    { echo "nfsload failed: $1, row $2" >&2; return 1; }
  t1="$(cpu_ticks)"
  sync; sleep 8
  # Steal during the measurement, in percent: on a shared host it moves rows by 2x.
  printf '%s steal=%s\n' "$out" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { split(a, x); split(b, y);
    d = y[2] - x[2]; printf "%.1f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }')"
}
echo "| row | Strata IOPS | ganesha IOPS | ratio | Strata p50/p99 µs | ganesha p50/p99 µs | Strata read/write p50 µs | ganesha read/write p50 µs |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
rounds_log=()
for r in "${rows[@]}"; do
  read -r name bs rd qd mode <<<"$r"
  declare -A got=()
  for ((i = 1; i <= rounds; i++)); do
    order=(strata ganesha); ((i % 2 == 0)) && order=(ganesha strata)
    for srv in "${order[@]}"; do
      out="$(measure "$srv" "$name" "$bs" "$rd" "$qd" "$mode")" || exit 1
      for f in iops p50_us p99_us rd50 wr50 steal; do got[$srv.$f]+="$(field "$f" "$out") "; done
    done
  done
  # shellcheck disable=SC2086 # word splitting of the collected values is the point
  { si="$(median ${got[strata.iops]})"; gi="$(median ${got[ganesha.iops]})"; }
  ratio="$(python3 -c "print(f'{$si/$gi:.2f}' if $gi else '-')")"
  m() { median ${got[$1]}; }
  echo "| $name | $si | $gi | $ratio | $(m strata.p50_us)/$(m strata.p99_us) | $(m ganesha.p50_us)/$(m ganesha.p99_us) |" \
    "$(m strata.rd50)/$(m strata.wr50) | $(m ganesha.rd50)/$(m ganesha.wr50) |"
  rounds_log+=("$name: Strata ${got[strata.iops]}/ ganesha ${got[ganesha.iops]}(vCPU steal %: Strata ${got[strata.steal]}/ ganesha ${got[ganesha.steal]})")
  unset got
done
echo
[ "$rounds" -gt 1 ] && echo "Medians of $rounds rounds per server (order alternating, Strata first in odd rounds)."
echo "IOPS per round, and the hypervisor's steal of this VM's CPU during each (a row measured under"
echo "heavy steal is not comparable with one measured without):"
printf -- '- %s\n' "${rounds_log[@]}"
