//! LUN volumes through the daemon and the CLI: create (and every refusal), show and list,
//! grow (never shrink), a clone of a LUN's snapshot is a LUN of the same size. Real daemon,
//! real image file. Needs root and /dev/fuse (the daemon's start).

mod common;
use common::*;

#[test]
fn lun_volumes_through_the_cli() {
    let dir = temp_dir("luns-cli");
    let mut d = Daemon::start(&dir);

    // Refusals, each saying what to do.
    d.fails(&["volume", "create", "default/l0", "--block-size", "8K"], "give --lun SIZE too");
    d.fails(&["volume", "create", "default/l0", "--lun", "1000"], "multiple of the block size 512");
    d.fails(&["volume", "create", "default/l0", "--lun", "64M", "--sector", "1024"], "use 512 or 4096");
    d.fails(&["volume", "create", "default/l0", "--lun", "0"], "positive multiple");
    // A refused LUN leaves no volume behind.
    let vols = d.json(&["volume", "list", "default"]);
    assert!(vols.as_array().unwrap().iter().all(|v| v["name"] != "l0"), "{vols}");

    let v = d.json(&["volume", "create", "default/l0", "--lun", "64M", "--block-size", "8K", "--sector", "4096"]);
    assert_eq!(v["lun"]["size_bytes"], 64 << 20, "{v}");
    assert_eq!(v["lun"]["sector_bytes"], 4096, "{v}");
    assert_eq!(v["record_size"], 8192, "{v}");
    let shown = d.ok(&["volume", "show", "default/l0"]);
    assert!(shown.contains("LUN          64.0M (4096-byte sectors)"), "{shown}");
    let listed = d.ok(&["volume", "list", "default"]);
    assert!(listed.contains("(LUN 64.0M)"), "{listed}");

    // Grow; shrinking and a LUN size for a plain volume are refused.
    let v = d.json(&["volume", "set", "default/l0", "--lun-size", "128M"]);
    assert_eq!(v["lun"]["size_bytes"], 128 << 20, "{v}");
    d.fails(&["volume", "set", "default/l0", "--lun-size", "32M"], "at least the current");
    d.ok(&["volume", "create", "default/files"]);
    d.fails(&["volume", "set", "default/files", "--lun-size", "1G"], "is not a LUN");
    let v = d.json(&["volume", "show", "default/files"]);
    assert!(v.get("lun").is_none(), "a plain volume has no LUN: {v}");

    // A clone of a LUN's snapshot is a LUN of the size it had.
    d.ok(&["snapshot", "create", "default/l0@s1"]);
    d.ok(&["volume", "set", "default/l0", "--lun-size", "256M"]);
    d.ok(&["clone", "create", "default/l0@s1", "default/l0c"]);
    let c = d.json(&["volume", "show", "default/l0c"]);
    assert_eq!(c["lun"]["size_bytes"], 128 << 20, "{c}");

    // The LUN survives a restart with its size.
    d.stop();
    d.spawn();
    let v = d.json(&["volume", "show", "default/l0"]);
    assert_eq!(v["lun"]["size_bytes"], 256 << 20, "{v}");
    d.stop();
}
