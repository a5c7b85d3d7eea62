//! commit-bench: the engine's CPU per record on a bulk commit — the cost behind a LUN's
//! sequential writes (a 1 MiB write on a 4K-block LUN is 256 records).
//!
//! Usage: commit-bench [--dir DIR] [--record N] [--mib N] [--rounds N] [--pool-mib N] [--buffered] [--crc32c]
//! Fills an object of MIB MiB with RECORD-sized records (1 MiB writes), commits; then,
//! ROUNDS times, rewrites it all and commits. Prints, per round, the commit's wall time and
//! the process's CPU time during it, and both per record. The pool is 6 × MIB + 256 MiB
//! unless --pool-mib says otherwise (a small one shows the commit near a full pool).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use strata_engine::{
    ChecksumAlgo, CreateOptions, FileDevice, FileDeviceOptions, ManualClock, Pool, PoolOptions, VolumeOptions,
};
use strata_testkit::SimRng;

fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("commit-bench: {msg}");
    }
    eprintln!("usage: commit-bench [--dir DIR] [--record BYTES] [--mib N] [--rounds N] [--pool-mib N] [--buffered] [--crc32c]");
    std::process::exit(2)
}

fn main() {
    let mut dir = PathBuf::from("target/bench");
    let (mut record, mut mib, mut rounds, mut direct) = (4096u32, 1024u64, 3usize, true);
    let mut checksum = ChecksumAlgo::Blake3;
    let mut pool_mib = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--dir" => dir = PathBuf::from(val()),
            "--record" => record = val().parse().unwrap_or_else(|_| usage("--record takes a number of bytes")),
            "--mib" => mib = val().parse().unwrap_or_else(|_| usage("--mib takes a number")),
            "--rounds" => rounds = val().parse().unwrap_or_else(|_| usage("--rounds takes a number")),
            "--buffered" => direct = false,
            "--crc32c" => checksum = ChecksumAlgo::Crc32c,
            "--pool-mib" => {
                pool_mib = Some(val().parse::<u64>().unwrap_or_else(|_| usage("--pool-mib takes a number")))
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| usage(&format!("cannot create {}: {e}", dir.display())));
    let path = dir.join("commit-bench.img");
    let _ = std::fs::remove_file(&path);
    let dev = FileDevice::open(
        &path,
        &FileDeviceOptions { direct, create_size: Some(pool_mib.unwrap_or(mib * 6 + 256) << 20) },
    )
    .unwrap_or_else(|e| usage(&format!("cannot open {}: {e}", path.display())));
    let mut opts = PoolOptions::new(Arc::new(ManualClock::new(0)));
    opts.dirty_limit_bytes = (mib + 64) << 20;
    let create = CreateOptions { name: "bench".into(), pool_guid: 42, device_guid: 1, checksum };
    let pool = Pool::create(Arc::new(dev), create, opts).unwrap_or_else(|e| usage(&format!("create pool: {e}")));
    let vol = pool
        .create_volume("bench", &VolumeOptions { record_size: record, ..Default::default() })
        .unwrap_or_else(|e| usage(&format!("create volume: {e}")));
    let obj = pool.create_object(vol, b"").expect("create object");
    let mut rng = SimRng::new(7);
    let records = mib * (1 << 20) / u64::from(record);
    println!("commit-bench: {mib} MiB of {record}-byte records ({records} records), direct I/O {direct}");
    println!("| round | write s | commit s | commit CPU s | CPU µs / record | wall µs / record | locked ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for round in 0..=rounds {
        let data = rng.bytes(1 << 20);
        let t0 = Instant::now();
        for m in 0..mib {
            pool.write(vol, obj, m << 20, &data).expect("write");
        }
        let w = t0.elapsed().as_secs_f64();
        let (c0, t1) = (cpu_seconds(), Instant::now());
        pool.commit().expect("commit");
        let (cpu, wall) = (cpu_seconds() - c0, t1.elapsed().as_secs_f64());
        let per = |s: f64| s * 1e6 / records as f64;
        let name = if round == 0 { "fill".to_string() } else { format!("rewrite {round}") };
        let locked = pool.status_commits().locked_us_last as f64 / 1e3;
        println!("| {name} | {w:.2} | {wall:.2} | {cpu:.2} | {:.2} | {:.2} | {locked:.0} |", per(cpu), per(wall));
    }
    pool.close().expect("close pool");
    let _ = std::fs::remove_file(&path);
}
