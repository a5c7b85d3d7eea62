#!/usr/bin/env bash
# Strata's main job on the embedded default: install what is needed, build, start the
# daemon (which creates the default pool in an image file), create a volume and mount it,
# then say where everything is and what to try.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
data_dir="${STRATA_DATA_DIR:-/var/lib/strata}"
mnt="${STRATA_DEMO_MOUNT:-/mnt/strata/demo}"
# The daemon's control socket (root and the `strata` group may use it).
export STRATA_SOCKET="${STRATA_SOCKET:-/run/strata/strata.sock}"
unset STRATA_API

need=()
command -v cc >/dev/null || need+=(build-essential)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v protoc >/dev/null || need+=(protobuf-compiler)  # the etcd client's build
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
getent group strata >/dev/null || groupadd --system strata
cargo build --release -p strata-cli --quiet
strata="$PWD/target/release/strata"
mkdir -p "$data_dir"

if ! "$strata" pool list >/dev/null 2>&1; then
  echo "starting the daemon (log: $data_dir/strata.log)"
  nohup "$strata" serve --data-dir "$data_dir" >>"$data_dir/strata.log" 2>&1 &
  echo $! >"$data_dir/strata.pid"
  for _ in $(seq 1 100); do "$strata" pool list >/dev/null 2>&1 && break; sleep 0.1; done
  "$strata" pool list >/dev/null || { tail -20 "$data_dir/strata.log"; exit 1; }
fi
"$strata" volume show default/demo >/dev/null 2>&1 || "$strata" volume create default/demo --size 10G
mounts="$("$strata" mount)"
grep -q "^default/demo " <<<"$mounts" || "$strata" mount default/demo "$mnt"

echo
"$strata" pool status default
echo
"$strata" volume list
cat <<MSG

Strata is running: daemon API on the socket $STRATA_SOCKET (pid $(cat "$data_dir/strata.pid" 2>/dev/null || echo '?')),
pool 'default' in $data_dir/default.img, volume default/demo mounted at $mnt.

Look next:
  ls -la $mnt                                  the volume, a POSIX file system
  $strata volume create default/pgdata --size 50G && $strata mount default/pgdata /mnt/strata/pgdata
  $strata check default                        verify every checksum and invariant
  $strata pool status default --json
  $strata history                              every change, who made it, what came of it
  usermod -aG strata USER                      let USER administer Strata (root-equivalent)
  scripts/install.sh                           install as a systemd service (/etc/strata/strata.toml)
  tail -f $data_dir/strata.log                 the daemon's log
  kill \$(cat $data_dir/strata.pid)              clean stop (commits and unmounts; mounts return at next start)
Docs: README.md, docs/api.md (control API), docs/engine-format.md (on-disk format).
MSG
