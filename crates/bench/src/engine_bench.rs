//! engine-bench: the engine's commit throughput and random 16 KiB read/write, on a
//! file-backed pool, next to the same I/O pattern done directly on a file on the same file
//! system (the peer: what the device gives with no engine in the way).
//!
//! Usage: engine-bench [--dir DIR] [--pool-mib N] [--object-mib N] [--ops N] [--buffered]
//! Prints a Markdown table of medians and p99s, with the ratio to the peer.
//!
//! Phases (each on Strata, then on the raw file):
//! - commit: write one 16 KiB record, commit (Strata: blocks + 2 flushes; raw: pwrite +
//!   fdatasync), repeated: commits/s and latency.
//! - random write: 16 KiB writes at random record-aligned offsets of a pre-filled object,
//!   committed every 256 writes (4 MiB txgs; raw: fdatasync every 256): MiB/s.
//! - random read: 16 KiB reads at random offsets, direct from the device (no data cache in
//!   the engine yet; raw file opened O_DIRECT alike): IOPS and latency.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use strata_engine::device::AlignedBuf;
use strata_engine::{
    ChecksumAlgo, CreateOptions, FileDevice, FileDeviceOptions, ManualClock, Pool, PoolOptions, VolumeOptions,
};
use strata_testkit::SimRng;

const REC: usize = 16384;

struct Args {
    dir: PathBuf,
    pool_mib: u64,
    object_mib: u64,
    ops: usize,
    direct: bool,
    checksum: ChecksumAlgo,
}

fn parse_args() -> Args {
    let mut a = Args {
        dir: PathBuf::from("target/bench"),
        pool_mib: 2048,
        object_mib: 512,
        ops: 4000,
        direct: true,
        checksum: ChecksumAlgo::Blake3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(val()),
            "--pool-mib" => a.pool_mib = val().parse().unwrap_or_else(|_| usage("--pool-mib takes a number")),
            "--object-mib" => a.object_mib = val().parse().unwrap_or_else(|_| usage("--object-mib takes a number")),
            "--ops" => a.ops = val().parse().unwrap_or_else(|_| usage("--ops takes a number")),
            "--buffered" => a.direct = false,
            "--crc32c" => a.checksum = ChecksumAlgo::Crc32c,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.object_mib * 2 + 64 > a.pool_mib {
        usage("--pool-mib must be at least twice --object-mib plus 64");
    }
    a
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("engine-bench: {msg}");
    }
    eprintln!("usage: engine-bench [--dir DIR] [--pool-mib N] [--object-mib N] [--ops N] [--buffered] [--crc32c]");
    std::process::exit(2)
}

struct Stats {
    lat_us: Vec<f64>,
    total_s: f64,
}

impl Stats {
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat_us.clone();
        v.sort_by(|a, b| a.partial_cmp(b).expect("latencies are finite"));
        v[((v.len() - 1) as f64 * p) as usize]
    }
    fn rate(&self) -> f64 {
        self.lat_us.len() as f64 / self.total_s
    }
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> Stats {
    let mut lat_us = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        f(i);
        lat_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Stats { lat_us, total_s: start.elapsed().as_secs_f64() }
}

fn main() {
    let a = parse_args();
    std::fs::create_dir_all(&a.dir).expect("create bench directory");
    let pool_path = a.dir.join("engine-bench.img");
    let raw_path = a.dir.join("engine-bench.raw");
    let _ = std::fs::remove_file(&pool_path);
    let _ = std::fs::remove_file(&raw_path);
    let records = a.object_mib * 1024 * 1024 / REC as u64;

    // --- Strata
    let dev =
        FileDevice::open(&pool_path, &FileDeviceOptions { direct: a.direct, create_size: Some(a.pool_mib << 20) })
            .expect("open pool image");
    let describe = strata_engine::BlockDevice::describe(&dev);
    let mut opts = PoolOptions::new(Arc::new(ManualClock::new(0)));
    opts.dirty_limit_bytes = 1 << 30;
    let create = CreateOptions { name: "bench".into(), pool_guid: 42, device_guid: 1, checksum: a.checksum };
    let pool = Pool::create(Arc::new(dev), create, opts).expect("create pool");
    let vol = pool.create_volume("bench", &VolumeOptions::default()).expect("create volume");
    let obj = pool.create_object(vol, b"").expect("create object");
    let mut rng = SimRng::new(1);
    let fill = rng.bytes(1 << 20);
    for mib in 0..a.object_mib {
        pool.write(vol, obj, mib << 20, &fill).expect("fill");
        if mib % 64 == 63 {
            pool.commit().expect("commit fill");
        }
    }
    pool.commit().expect("commit fill");
    let payload = rng.bytes(REC);
    let n_commit = a.ops / 4;
    let s_commit = timed(n_commit, |i| {
        pool.write(vol, obj, (i as u64 % records) * REC as u64, &payload).expect("write");
        pool.commit().expect("commit");
    });
    let mut offs: Vec<u64> = (0..a.ops).map(|_| rng.below(records) * REC as u64).collect();
    let s_write = timed(a.ops, |i| {
        pool.write(vol, obj, offs[i], &payload).expect("write");
        if i % 256 == 255 {
            pool.commit().expect("commit");
        }
    });
    pool.commit().expect("commit");
    offs.iter_mut().for_each(|o| *o = rng.below(records) * REC as u64);
    let s_read = timed(a.ops, |i| {
        let got = pool.read(vol, obj, offs[i], REC).expect("read");
        assert_eq!(got.len(), REC);
    });
    let status = pool.status();
    pool.close().expect("close pool");

    // --- Peer: the same patterns straight on a file of the same file system.
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true).truncate(true);
    if a.direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let raw = o.open(&raw_path).expect("open raw file");
    raw.set_len(a.object_mib << 20).expect("size raw file");
    let mut buf = AlignedBuf::zeroed(1 << 20);
    buf.copy_from_slice(&fill);
    for mib in 0..a.object_mib {
        raw.write_all_at(&buf, mib << 20).expect("fill raw");
    }
    raw.sync_data().expect("sync raw");
    let mut rec = AlignedBuf::zeroed(REC);
    rec.copy_from_slice(&payload);
    let r_commit = timed(n_commit, |i| {
        raw.write_all_at(&rec, (i as u64 % records) * REC as u64).expect("raw write");
        raw.sync_data().expect("raw sync");
    });
    offs.iter_mut().for_each(|o| *o = rng.below(records) * REC as u64);
    let r_write = timed(a.ops, |i| {
        raw.write_all_at(&rec, offs[i]).expect("raw write");
        if i % 256 == 255 {
            raw.sync_data().expect("raw sync");
        }
    });
    raw.sync_data().expect("raw sync");
    offs.iter_mut().for_each(|o| *o = rng.below(records) * REC as u64);
    let mut rbuf = AlignedBuf::zeroed(REC);
    let r_read = timed(a.ops, |i| raw.read_exact_at(&mut rbuf, offs[i]).expect("raw read"));
    drop(raw);
    let _ = std::fs::remove_file(&raw_path);
    let _ = std::fs::remove_file(&pool_path);

    println!(
        "engine-bench: pool {} MiB on {describe}, object {} MiB, {} ops per phase, checksum {:?}",
        a.pool_mib, a.object_mib, a.ops, a.checksum
    );
    println!(
        "Strata wrote {} blocks, read {}; peer = the same I/O on a plain file, same file system\n",
        status.blocks_written, status.blocks_read
    );
    println!("| phase | Strata rate | peer rate | ratio | Strata p50 µs | peer p50 µs | Strata p99 µs | peer p99 µs |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let row = |name: &str, unit: &str, s: &Stats, r: &Stats, scale: f64| {
        println!(
            "| {name} | {:.0} {unit} | {:.0} {unit} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.rate() * scale,
            r.rate() * scale,
            s.rate() / r.rate(),
            s.pct(0.5),
            r.pct(0.5),
            s.pct(0.99),
            r.pct(0.99)
        )
    };
    row("commit (16 KiB + sync)", "commits/s", &s_commit, &r_commit, 1.0);
    row("random write 16 KiB, sync/256", "MiB/s", &s_write, &r_write, REC as f64 / 1048576.0);
    row("random read 16 KiB", "IOPS", &s_read, &r_read, 1.0);
}
