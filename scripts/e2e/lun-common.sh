#!/usr/bin/env bash
# Attach and detach a Strata LUN served over NBD as a mounted file system, for the LUN
# end-to-end tests (this kernel has no NBD client and no device mapper): the NBD export →
# nbdfuse (a file) → a loop device → ext4 or xfs → mount. Source it after strata-env.sh and
# db-common.sh; needs $NBD_PORT and $LUN_WORK (a directory for the fuse mounts and state).

# lun_attach EXPORT I DIR [ext4|xfs]: attach export EXPORT as attachment I, mounted at DIR;
# with a file system type, make it first (its discards reach the LUN as NBD TRIMs). The loop
# device's name is kept in $LUN_WORK/loopI, so another process can detach it.
lun_attach() {
  local name="$1" i="$2" dir="$3" fs="${4:-}" loop
  mkdir -p "$LUN_WORK/fuse$i" "$dir"
  nbdfuse "$LUN_WORK/fuse$i/lun" "nbd://127.0.0.1:$NBD_PORT/$name" >>"$LUN_WORK/nbdfuse$i.log" 2>&1 &
  echo $! >"$LUN_WORK/nbdfuse$i.pid"
  wait_for "nbdfuse $i" 20 test -e "$LUN_WORK/fuse$i/lun"
  loop="$(losetup --find --show "$LUN_WORK/fuse$i/lun")"
  echo "$loop" >"$LUN_WORK/loop$i"
  case "$fs" in
    ext4) mkfs.ext4 -q -F "$loop" ;;
    xfs) mkfs.xfs -q -f "$loop" ;;
    "") ;;
    *) die "lun_attach: unknown file system $fs" ;;
  esac
  mount "$loop" "$dir"
}

# lun_detach I DIR: undo lun_attach, also after the daemon died under it (every I/O fails).
lun_detach() {
  local i="$1" dir="$2"
  umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || true
  if [ -f "$LUN_WORK/loop$i" ]; then
    losetup -d "$(cat "$LUN_WORK/loop$i")" 2>/dev/null || true
    rm -f "$LUN_WORK/loop$i"
  fi
  fusermount3 -u -z "$LUN_WORK/fuse$i" 2>/dev/null || true
  if [ -f "$LUN_WORK/nbdfuse$i.pid" ]; then
    kill "$(cat "$LUN_WORK/nbdfuse$i.pid")" 2>/dev/null || true
    rm -f "$LUN_WORK/nbdfuse$i.pid"
  fi
}
