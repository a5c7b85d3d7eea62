#!/usr/bin/env bash
# Install Strata as a system service (Debian 12, run as root from a checkout):
#   - build `strata` and install it as $PREFIX/bin/strata (PREFIX=/usr/local),
#   - create the `strata` group (members may use the daemon's API socket),
#   - install the default configuration as /etc/strata/strata.toml if there is none
#     (an existing one is never touched; the shipped default is also left beside it as
#     strata.toml.default, to compare after an upgrade),
#   - install the systemd unit and, where systemd runs, enable and start it.
# On a machine without systemd (a container) it says how to start the daemon by hand;
# scripts/run.sh keeps working there as before.
#
# Overrides, for packaging: DESTDIR=/staging installs under that root and skips the group,
# systemctl and the root check; PREFIX changes /usr/local (the unit's ExecStart follows);
# CARGO names the cargo binary (when root's PATH lacks it, e.g. under sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

destdir="${DESTDIR:-}"
prefix="${PREFIX:-/usr/local}"
cargo="${CARGO:-cargo}"
bin="$prefix/bin/strata"
etc="/etc/strata"
unit="/etc/systemd/system/strata.service"

if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (it installs to $prefix, /etc and creates a group), or set DESTDIR" >&2
  exit 1
fi
case "$prefix" in
  /*) ;;
  *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 1 ;;
esac

# Build tools and fusermount3; apt only when something is missing.
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v protoc >/dev/null || need+=(protobuf-compiler)  # the etcd client's build
if [ ${#need[@]} -gt 0 ]; then
  if [ -n "$destdir" ] || [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: missing ${need[*]}; install them first (apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v "$cargo" >/dev/null; then
  echo "install.sh: '$cargo' not found: install Rust (https://rustup.rs), or set CARGO=/path/to/cargo" >&2
  echo "            (under sudo, root's PATH may lack ~/.cargo/bin: try CARGO=\$(command -v cargo))" >&2
  exit 1
fi

echo "building strata (cargo build --release -p strata-cli)"
"$cargo" build --release -p strata-cli --quiet
built="${CARGO_TARGET_DIR:-target}/release/strata"
[ -x "$built" ] || { echo "install.sh: the build left no $built" >&2; exit 1; }

# The binary. `install` writes a new file and renames it over the old one, so a running
# daemon keeps its (deleted) old binary until it is restarted.
install -D -m 0755 "$built" "$destdir$bin"
echo "installed $destdir$bin"

# The configuration: never overwrite an admin's.
install -d -m 0755 "$destdir$etc"
install -m 0644 packaging/strata.toml "$destdir$etc/strata.toml.default"
if [ -e "$destdir$etc/strata.toml" ]; then
  echo "kept $destdir$etc/strata.toml (the shipped default is $destdir$etc/strata.toml.default)"
else
  install -m 0644 packaging/strata.toml "$destdir$etc/strata.toml"
  echo "installed $destdir$etc/strata.toml (every key commented out: the defaults)"
fi

# The unit, with ExecStart (and Documentation) under PREFIX.
install -d -m 0755 "$destdir$(dirname "$unit")"
sed "s|/usr/local/|$prefix/|g" packaging/strata.service >"$destdir$unit.tmp"
chmod 0644 "$destdir$unit.tmp"
mv "$destdir$unit.tmp" "$destdir$unit"
echo "installed $destdir$unit"

# The documentation the unit's Documentation= line names.
install -D -m 0644 README.md "$destdir$prefix/share/doc/strata/README.md"

if [ -n "$destdir" ]; then
  echo "DESTDIR install done: on the target, create the group (groupadd --system strata) and enable strata.service"
  exit 0
fi

# Members of this group may use the API socket (/run/strata/strata.sock, 0660 root:strata).
if getent group strata >/dev/null; then
  echo "group strata exists"
else
  groupadd --system strata
  echo "created group strata (add admins with: usermod -aG strata NAME)"
fi

[ -e /dev/fuse ] || echo "warning: /dev/fuse is missing: mounts will fail until the fuse module is loaded (modprobe fuse)" >&2

if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  if systemctl is-active --quiet strata; then
    systemctl enable strata
    echo
    echo "strata is running the previous binary; restart it to switch (volumes are unmounted"
    echo "and mounted again, so stop the databases using them first):  systemctl restart strata"
  else
    systemctl enable --now strata
    echo
    systemctl --no-pager status strata | head -5 || true
  fi
  cat <<MSG

Strata runs as a systemd service:
  systemctl status strata            state and the daemon's status line
  journalctl -u strata -f            the daemon's log
  $etc/strata.toml       configuration (restart to apply: systemctl restart strata)
MSG
else
  cat <<MSG

systemd is not running on this machine (a container?), so nothing was started.
Start the daemon by hand, as root:
  $bin serve --config $etc/strata.toml
or in the background:
  nohup $bin serve --config $etc/strata.toml >>/var/log/strata.log 2>&1 &
A clean stop is SIGTERM (kill PID): it unmounts, commits, and the mounts come back at the
next start. scripts/run.sh also still works here (it starts its own daemon).
MSG
fi
