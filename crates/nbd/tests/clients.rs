//! The server against real NBD clients (libnbd's nbdinfo, nbdsh and nbdcopy; qemu-io),
//! over a plain file LUN and a LUN on an engine pool.

mod common;
use common::*;
use std::process::Command;

#[test]
fn nbdinfo_reports_size_block_sizes_and_flags() {
    require("nbdinfo", "libnbd-bin");
    for (kind, _b, lun) in luns(8 * MIB) {
        let (server, _exports) = serve(lun.clone());
        let json = stdout(Command::new("nbdinfo").arg("--json").arg(uri(server.local_addr(), "lun")));
        for want in [
            "\"export-size\": 8388608",
            "\"block_size_minimum\": 512",
            "\"block_size_maximum\": 33554432",
            "\"is_read_only\": false",
            "\"can_flush\": true",
            "\"can_fua\": true",
            "\"can_trim\": true",
            "\"can_zero\": true",
            "\"can_fast_zero\": true",
            "\"can_df\": true",
            "\"can_multi_conn\": true",
            "\"can_cache\": true",
            "\"base:allocation\"",
            "\"description\": \"test LUN\"",
        ] {
            assert!(json.contains(want), "{kind}: nbdinfo --json lacks {want}:\n{json}");
        }
        let preferred = lun.preferred_block_size();
        if kind == "volume" {
            // The volume's record size (4 KiB here), not the file system's st_blksize: a
            // write of whole records needs no read-modify-write.
            assert_eq!(preferred, 4096, "a volume LUN prefers its record size");
        }
        assert!(json.contains(&format!("\"block_size_preferred\": {preferred}")), "{kind}: {json}");
        let ro = stdout(Command::new("nbdinfo").arg("--json").arg(uri(server.local_addr(), "ro")));
        assert!(ro.contains("\"is_read_only\": true") && ro.contains("\"can_trim\": false"), "{kind}: {ro}");
        server.shutdown();
    }
}

#[test]
fn nbdinfo_lists_exports_and_refuses_unknown_ones() {
    require("nbdinfo", "libnbd-bin");
    let (_b, lun) = file_lun(4 * MIB);
    let (server, exports) = serve(lun);
    let list = stdout(Command::new("nbdinfo").arg("--list").arg(uri(server.local_addr(), "")));
    assert!(list.contains("export=\"lun\"") && list.contains("export=\"ro\""), "{list}");
    assert!(list.contains("test LUN"), "the description is listed: {list}");
    // An export for another network is neither listed nor opened.
    let (_b2, other) = file_lun(MIB);
    let hidden = strata_nbd::Export {
        clients: vec![strata_nbd::Cidr::parse("10.9.0.0/16").unwrap()],
        ..strata_nbd::Export::new(other)
    };
    exports.add("elsewhere", hidden).unwrap();
    let list = stdout(Command::new("nbdinfo").arg("--list").arg(uri(server.local_addr(), "")));
    assert!(!list.contains("elsewhere"), "{list}");
    for name in ["elsewhere", "nosuch"] {
        let out = Command::new("nbdinfo").arg(uri(server.local_addr(), name)).output().unwrap();
        assert!(!out.status.success(), "export {name} opened");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unknown") || err.contains("UNKNOWN") || err.contains("export"), "{name}: {err}");
    }
    server.shutdown();
}

/// Merge `nbdinfo --map` lines ("offset length type description") into (offset, length, hole).
fn map(uri: &str) -> Vec<(u64, u64, bool)> {
    let out = stdout(Command::new("nbdinfo").arg("--map").arg(uri));
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (off, len, ty): (u64, u64, u32) = (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap());
        let hole = ty & 1 != 0;
        match runs.last_mut() {
            Some(r) if r.2 == hole => r.1 += len,
            _ => runs.push((off, len, hole)),
        }
    }
    runs
}

#[test]
fn map_shows_data_after_writes_and_holes_after_trim_and_zero() {
    require("nbdinfo", "libnbd-bin");
    require("qemu-io", "qemu-utils");
    for (kind, _b, lun) in luns(8 * MIB) {
        let (server, _e) = serve(lun);
        let u = uri(server.local_addr(), "lun");
        assert_eq!(map(&u), vec![(0, 8 * MIB, true)], "{kind}: a new LUN is one hole");
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x55 0 4M", &u]));
        assert_eq!(map(&u), vec![(0, 4 * MIB, false), (4 * MIB, 4 * MIB, true)], "{kind}: after the write");
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "discard 1M 1M", &u]));
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -z -u 3M 1M", &u]));
        let m = map(&u);
        assert_eq!(
            m,
            vec![(0, MIB, false), (MIB, MIB, true), (2 * MIB, MIB, false), (3 * MIB, 5 * MIB, true)],
            "{kind}: after TRIM of 1M+1M and WRITE_ZEROES (may trim) of 3M+1M"
        );
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "read -P 0x55 0 1M", "-c", "read -P 0 1M 1M", &u]));
        server.shutdown();
    }
}

#[test]
fn qemu_io_patterns_zero_discard_and_map() {
    require("qemu-io", "qemu-utils");
    for (kind, _b, lun) in luns(8 * MIB) {
        let (server, _e) = serve(lun);
        let u = uri(server.local_addr(), "lun");
        run(Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            "write -P 0xa1 0 1M",
            "-c",
            "write -P 0xb2 1M 512",
            "-c",
            "write -P 0xc3 7M 1M",
            "-c",
            "write -z 5M 64k",
            &u,
        ]));
        run(Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            "read -P 0xa1 0 1M",
            "-c",
            "read -P 0xb2 1M 512",
            "-c",
            "read -P 0 1049088 4096",
            "-c",
            "read -P 0xc3 7M 1M",
            "-c",
            "read -P 0 5M 64k",
            &u,
        ]));
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "discard 7M 1M", "-c", "read -P 0 7M 1M", &u]));
        // qemu-io's `map` reports a raw image as allocated throughout; qemu-img's map shows
        // what base:allocation said.
        require("qemu-img", "qemu-utils");
        let m = qemu_img_map(&u);
        assert_eq!(m.first().map(|r| (r.0, r.2)), Some((0, true)), "{kind}: data at 0: {m:?}");
        assert!(m.iter().any(|r| !r.2 && r.0 <= 7 * MIB && r.0 + r.1 >= 8 * MIB), "{kind}: 7M+1M discarded: {m:?}");
        assert!(
            m.iter().any(|r| !r.2 && r.0 <= 2 * MIB && r.0 + r.1 >= 5 * MIB),
            "{kind}: 2M..5M never written: {m:?}"
        );
        // A pattern mismatch is seen: the verification itself can fail.
        let bad = Command::new("qemu-io").args(["-f", "raw", "-c", "read -P 0xa2 0 1M", &u]).output().unwrap();
        assert!(String::from_utf8_lossy(&bad.stdout).contains("Pattern verification failed"), "{kind}");
        server.shutdown();
    }
}

#[test]
fn nbdcopy_in_and_out_round_trips() {
    require("nbdcopy", "libnbd-bin");
    for (kind, _b, lun) in luns(16 * MIB) {
        let (server, _e) = serve(lun);
        let u = uri(server.local_addr(), "lun");
        let dir = TempDir::new("copy");
        let (src, dst) = (dir.0.join("src"), dir.0.join("dst"));
        let mut rng = strata_testkit::SimRng::new(11);
        let mut data = vec![0u8; 16 * MIB as usize];
        for (i, chunk) in data.chunks_mut(64 << 10).enumerate() {
            // Leave some chunks zero, so the copy has holes to skip.
            if i % 5 != 3 {
                chunk.copy_from_slice(&rng.bytes(chunk.len()));
            }
        }
        std::fs::write(&src, &data).unwrap();
        run(Command::new("nbdcopy").arg("--connections=4").arg(&src).arg(&u));
        run(Command::new("nbdcopy").arg(&u).arg(&dst));
        let back = std::fs::read(&dst).unwrap();
        assert!(back == data, "{kind}: nbdcopy out differs from what nbdcopy put in");
        server.shutdown();
    }
}

/// `qemu-img map --output=json`: (start, length, data).
fn qemu_img_map(uri: &str) -> Vec<(u64, u64, bool)> {
    let out = stdout(Command::new("qemu-img").args(["map", "-f", "raw", "--output=json", uri]));
    let field = |line: &str, name: &str| -> String {
        let at = line.find(&format!("\"{name}\": ")).unwrap_or_else(|| panic!("no {name} in {line}")) + name.len() + 4;
        line[at..].chars().take_while(|c| c.is_ascii_alphanumeric()).collect()
    };
    out.lines()
        .filter(|l| l.contains("\"start\""))
        .map(|l| (field(l, "start").parse().unwrap(), field(l, "length").parse().unwrap(), field(l, "data") == "true"))
        .collect()
}
