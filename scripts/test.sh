#!/usr/bin/env bash
# The whole test suite: what the README's second command and CI run. Installs what the
# tests need on a fresh Debian machine (as root), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

# Debian packages: a C toolchain for -sys crates, FUSE, loop devices (util-linux), the
# databases and load generators of the end-to-end tests, and pytest for the POSIX suite.
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v losetup >/dev/null || need+=(util-linux)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15 postgresql-contrib)
command -v mariadbd >/dev/null || need+=(mariadb-server mariadb-client)
command -v sysbench >/dev/null || need+=(sysbench)
python3 -m pytest --version >/dev/null 2>&1 || need+=(python3-pytest)
command -v nfs-ls >/dev/null || need+=(libnfs-utils libnfs-dev python3-venv python3-dev)
command -v openssl >/dev/null || need+=(openssl)
# The daemon's etcd client (failover of sync mirrors) is generated from etcd's protobuf
# files at build time; the failover tests run a real etcd and use etcdctl.
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
# strata-nbd: its tests drive real NBD clients (crates/nbd/tests: nbdinfo, nbdcopy, nbdsh, qemu-io/qemu-img).
command -v nbdinfo >/dev/null || need+=(libnbd-bin)
command -v nbdsh >/dev/null || need+=(python3-libnbd)
command -v qemu-io >/dev/null || need+=(qemu-utils)
# iSCSI target tests (crates/iscsi/tests): libiscsi's conformance suite and tools, and its
# headers for the round-trip client the tests build.
command -v iscsi-test-cu >/dev/null || need+=(libiscsi-bin)
[ -f /usr/include/iscsi/iscsi.h ] || need+=(libiscsi-dev)
# What `pool create` must recognise on a device before formatting it: the probe's tests
# make real file systems, partition tables and labels with these (device_probe.rs).
for t in mkfs.ext4:e2fsprogs mkfs.xfs:xfsprogs mkfs.btrfs:btrfs-progs mkfs.f2fs:f2fs-tools \
         mkfs.vfat:dosfstools mkfs.exfat:exfatprogs mkntfs:ntfs-3g sfdisk:fdisk sgdisk:gdisk \
         mksquashfs:squashfs-tools xorriso:xorriso cryptsetup:cryptsetup-bin make-bcache:bcache-tools \
         shellcheck:shellcheck; do
  command -v "${t%%:*}" >/dev/null || need+=("${t##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The end-to-end tests start databases on fixed ports inside the kernel's ephemeral range
# (32768-60999): an outgoing connection of an earlier test that happened to get one of them
# made a later mariadbd fail with "Address already in use" (2026-11-29). Keep the kernel
# from handing them out; the ports stay usable for the listeners that ask for them.
if [ -w /proc/sys/net/ipv4/ip_local_reserved_ports ]; then
  echo "33300-33330,53306,55430-55480" >/proc/sys/net/ipv4/ip_local_reserved_ports 2>/dev/null || true
fi

echo "== format"
cargo fmt --all -- --check

echo "== build"
cargo build --workspace --all-targets --quiet

echo "== clippy (warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== fuzz (short run of every on-disk decoder and of damaged pool images)"
scripts/fuzz.sh "${STRATA_FUZZ_SECONDS:-20}"

echo "== raw block device (loop) end to end"
scripts/loop-smoke.sh

echo "== POSIX behaviour through a FUSE mount"
scripts/e2e/posix.sh

echo "== PostgreSQL 15 on a Strata volume: the daemon killed under load, intent-log replay asserted"
scripts/e2e/postgres.sh

echo "== PostgreSQL snapshots: group snapshot under load, clone beside the source, restore"
scripts/e2e/postgres-snapshots.sh

echo "== MariaDB on a Strata volume (TR-4722 sysbench): the daemon killed under load, intent-log replay asserted"
scripts/e2e/mariadb.sh

echo "== NFSv3 through libnfs clients (every procedure, errors, restart)"
scripts/e2e/nfs.sh

echo "== MariaDB snapshots: quiesced snapshot under sysbench, clone beside the source, restore"
scripts/e2e/mariadb-snapshots.sh

echo "== PostgreSQL on a 3-way mirror of nbdkit devices: bit rot scrubbed, an EIO device, a vanished device, a rebuild, under pgbench"
scripts/e2e/mirror-postgres.sh

echo "== PostgreSQL on a parity2 pool of four nbdkit devices: the same faults (two devices lost), a rebuild by reconstruction"
LAYOUT=parity2 scripts/e2e/mirror-postgres.sh

echo "== A mirror device that fails and works again: resynced from the missed map (not rebuilt whole), scrub clean, the device alone holds the data"
scripts/e2e/fault-resync.sh

echo "== PostgreSQL on a mirror pool that grows by a second mirror under pgbench (pool add), then a power failure: replay, every acknowledged commit, scrub clean"
scripts/e2e/groups-postgres.sh

echo "== MariaDB (TR-4722 sysbench) on a 3-way mirror of nbdkit devices: the same faults and a rebuild under load"
scripts/e2e/mirror-mariadb.sh

echo "== MariaDB (TR-4722 sysbench) on a parity2 pool of four nbdkit devices: the same"
LAYOUT=parity2 scripts/e2e/mirror-mariadb.sh

echo "== PostgreSQL on ext4 on an NBD LUN (nbdfuse, loop): the daemon killed under load; snapshot, clone, grow, restore"
scripts/e2e/lun-postgres.sh

echo "== MariaDB on xfs on an NBD LUN (TR-4722 sysbench): the daemon killed under load"
scripts/e2e/lun-mariadb.sh

echo "== fsx-style random I/O on LUNs over NBD and through nbdfuse, checked against a model across a restart"
scripts/e2e/lun-fsx.sh

echo "== PostgreSQL data + WAL mirrored to a second daemon (paired peers, mutual TLS) every 2 s under pgbench; break there, recover on the target (= the source's snapshot), resync"
scripts/e2e/replication-postgres.sh

echo "== the same, mirrored to a second pool of the same daemon"
REPL_TARGET=pool scripts/e2e/replication-postgres.sh

echo "== PostgreSQL data + WAL in a synchronous mirror (--sync) under pgbench; kill -9, the source pool's image lost; break: every acknowledged commit on the target"
scripts/e2e/sync-mirror-postgres.sh

echo "== MariaDB under sysbench in a synchronous mirror to a second daemon (paired peer); kill -9 of the source daemon; break there: every acknowledged commit, CHECK TABLE clean"
scripts/e2e/sync-mirror-mariadb.sh

echo "== failover through etcd: PostgreSQL data + WAL in a sync mirror to a second daemon; kill -9 of the source daemon under pgbench; the target takes over by itself (lease expiry), every acknowledged commit there; the old source comes back fenced"
scripts/e2e/failover-postgres.sh

echo "== the same with MariaDB under sysbench (FAILOVER=1)"
FAILOVER=1 scripts/e2e/sync-mirror-mariadb.sh

echo "== MariaDB mirrored to a second daemon every 2 s under sysbench; break, mariadbd recovers on the target = the source's snapshot"
scripts/e2e/replication-mariadb.sh

echo "== the web console in headless Chromium: sign-in, a volume's live chart under load, snapshot, clone, restore, a scrub's progress, events (screenshots: ${STRATA_ARTIFACTS:-target/ci-artifacts}/console/)"
scripts/e2e/console.sh

echo "== install script and shipped configuration"
bash -n scripts/install.sh
shellcheck -S warning scripts/install.sh scripts/run.sh scripts/test.sh scripts/sim.sh
shellcheck -x -S warning scripts/e2e/*.sh scripts/bench/lun.sh

echo "== unit, property, crash, fault and daemon tests"
STRATA_REQUIRE_PROBE_TOOLS=1 cargo nextest run --workspace --no-fail-fast --failure-output final

echo "== deterministic simulator: a short seeded run (docs/simulator.md)"
scripts/sim.sh
