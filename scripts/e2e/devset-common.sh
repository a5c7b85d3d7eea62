# shellcheck shell=bash
# Device-set helpers shared by the redundancy end-to-end tests (mirror-postgres.sh,
# mirror-mariadb.sh), sourced after db-common.sh and strata-env.sh. The sourcing script
# sets LAYOUT (mirror: a 3-way mirror; parity2: four devices) before sourcing, and DEV (the
# devices' directory) before calling start_device. Its devices are real user-space block
# devices: nbdkit's file plugin behind its error filter, each exposed as a file by nbdfuse
# (this kernel has no NBD client and no device mapper).
#
#   devset_layout            MEMBERS and SPARE for LAYOUT
#   start_device I           device I: $DEV/fuse$I/dev over a 3 GiB image $DEV/m$I.img,
#                            failing every I/O while $DEV/m$I.fail exists
#   stop_devices             unmount and stop every device (cleanup)
#   create_devset POOL       the pool over devices 1..MEMBERS
#   rot_member I             3000 random 4 KiB spots of member I's image overwritten
#   scrub_repairs POOL I     after two commits, a scrub finds damaged copies (member I counts
#                            them), a second none
#   scrub_clean POOL         a scrub finds nothing to repair
#   fail_members POOL CHECK  member 1 fails every I/O, then member 2's device is gone (CHECK,
#                            a command, runs before each: the load must still be running)
#   assert_degraded POOL     DEGRADED, member 1 FAULTED, member 2 REMOVED, the others in use
#   replace_member1 POOL     member 1 replaced by the spare and rebuilt (waits, 120 s at most)
#   assert_degraded_after_restart POOL   the pool opens DEGRADED, the spare ONLINE
# shellcheck disable=SC2034 # MEMBERS and SPARE are read by the sourcing scripts

devset_layout() {
  case "$LAYOUT" in
    mirror) MEMBERS=3 ;;
    parity2) MEMBERS=4 ;;
    *) echo "LAYOUT is mirror or parity2, not $LAYOUT" >&2; exit 2 ;;
  esac
  SPARE=$((MEMBERS + 1))
}

start_device() {
  local i="$1"
  truncate -s 3G "$DEV/m$i.img"
  mkdir -p "$DEV/fuse$i"
  nbdkit -P "$DEV/nbdkit$i.pid" -U "$DEV/nbd$i.sock" --filter=error file "$DEV/m$i.img" \
    error-rate=100% error-file="$DEV/m$i.fail"
  nbdfuse "$DEV/fuse$i/dev" --unix "$DEV/nbd$i.sock" &
  wait_for "nbdfuse device $i" 20 test -e "$DEV/fuse$i/dev"
}

stop_devices() {
  local i
  for i in $(seq 1 "$SPARE"); do
    fusermount3 -u -z "$DEV/fuse$i" 2>/dev/null
    [ -f "$DEV/nbdkit$i.pid" ] && kill "$(cat "$DEV/nbdkit$i.pid")" 2>/dev/null
  done
  return 0
}

create_devset() {
  local devices=() i
  for i in $(seq 1 "$MEMBERS"); do
    start_device "$i"
    devices+=(--device "$DEV/fuse$i/dev")
  done
  "$STRATA_BIN" pool create "$1" --layout "$LAYOUT" "${devices[@]}"
}

rot_member() {
  python3 - "$DEV/m$1.img" <<'EOF'
import os, random, sys
random.seed(7)
with open(sys.argv[1], "r+b") as f:
    for _ in range(3000):
        f.seek(random.randrange(16 << 20, 512 << 20) // 4096 * 4096)
        f.write(os.urandom(4096))
EOF
}

# The pool's txg (the last one committed).
pool_txg() {
  "$STRATA_BIN" pool status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["txg"])'
}

scrub_repairs() {
  local pool="$1" member="$2" out damaged cksum t0 i
  # A scrub verifies the newest committed state at its start. A commit under way during the
  # rot may have written its blocks already (prewrite: data goes out before the commit lands)
  # and land after the scrub began: such a block, rotted, would wait for the second scrub
  # (seen once, 2026-11-29: "1 damaged copies found" there). Two commits after the rot,
  # every block on the devices at the rot is in the committed state or free.
  t0="$(pool_txg "$pool")"
  for i in $(seq 300); do
    [ "$(pool_txg "$pool")" -ge $((t0 + 2)) ] && break
    [ "$i" -lt 300 ] || die "pool $pool committed nothing for 30 s after the rot (txg $t0)"
    sleep 0.1
  done
  out="$("$STRATA_BIN" pool scrub "$pool")"
  echo "$out"
  damaged="$(grep -oE '[0-9]+ damaged copies found' <<<"$out" | grep -oE '^[0-9]+')"
  [ "$damaged" -gt 0 ] || die "the scrub found none of the rot on member $member: $out"
  cksum="$("$STRATA_BIN" pool status "$pool" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][int(sys.argv[1]) - 1]["checksum_errors"])' "$member")"
  [ "$cksum" -ge "$damaged" ] || die "member $member counts $cksum checksum errors, the scrub found $damaged"
  scrub_clean "$pool"
}

scrub_clean() {
  local out
  out="$("$STRATA_BIN" pool scrub "$1")"
  echo "$out"
  grep -q ' 0 damaged copies found' <<<"$out" || die "a scrub still found damage: $out"
}

fail_members() {
  local pool="$1" check="$2"
  sleep 5
  "$check" "EIO"
  touch "$DEV/m1.fail"
  log "member 1 now fails every I/O with EIO"
  sleep 10
  "$check" "device gone"
  kill -9 "$(cat "$DEV/nbdkit2.pid")"
  log "member 2's device is gone (nbdkit killed)"
  sleep 5
  "$check" "after the device went"
}

assert_degraded() {
  local status i
  status="$("$STRATA_BIN" pool status "$1")"
  echo "$status" | sed -n '/^state/p;/^layout/,/^guid/p'
  grep -q '^state *DEGRADED' <<<"$status" || die "the pool should be DEGRADED: $status"
  grep -E 'fuse1/dev.* FAULTED' <<<"$status" >/dev/null || die "member 1 should be FAULTED: $status"
  grep -E 'fuse2/dev.* (REMOVED|FAULTED)' <<<"$status" >/dev/null || die "member 2 should be REMOVED: $status"
  for i in $(seq 3 "$MEMBERS"); do
    grep -E "fuse$i/dev.* (ONLINE|DEGRADED)" <<<"$status" >/dev/null || die "member $i should be in use: $status"
  done
}

replace_member1() {
  local pool="$1" json i
  "$STRATA_BIN" pool replace "$pool" "$DEV/fuse1/dev" "$DEV/fuse$SPARE/dev"
  for i in $(seq 1 240); do
    json="$("$STRATA_BIN" pool status "$pool" --json)"
    if python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d.get("rebuild") is None and d["devices"][0]["state"]=="ONLINE" else 1)' <<<"$json"; then
      log "member 1 replaced and rebuilt"
      grep -q 'rebuild complete' "$STRATA_E2E_DIR/daemon.log" || die "the daemon did not log the rebuild's end"
      return 0
    fi
    [ $((i % 10)) -eq 1 ] && "$STRATA_BIN" pool status "$pool" | grep '^rebuild' || true
    sleep 0.5
  done
  die "the rebuild did not finish in 120 s: $("$STRATA_BIN" pool status "$pool")"
}

assert_degraded_after_restart() {
  local status
  status="$("$STRATA_BIN" pool status "$1")"
  grep -q '^state *DEGRADED' <<<"$status" || die "after a restart the pool should open DEGRADED: $status"
  grep -E "fuse$SPARE/dev.* ONLINE" <<<"$status" >/dev/null || die "the replacement should be ONLINE after a restart: $status"
}
