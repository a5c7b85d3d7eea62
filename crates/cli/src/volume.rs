//! `strata volume ...`: create, list, show, set, delete.

use crate::client::{seg, Client, Failure};
use crate::units::{human, parse_size};
use crate::Out;
use clap::Subcommand;
use strata_api::*;

#[derive(Subcommand)]
pub enum VolumeCmd {
    /// Create a volume POOL/VOLUME.
    Create {
        volume: String,
        /// Size limit (thin: not reserved), e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Record size, 4K to 1M, a power of two (16K suits PostgreSQL and InnoDB).
        #[arg(long, default_value = "16K")]
        record_size: String,
        /// Sync policy: standard (honour fsync), always (every write is synchronous),
        /// disabled (ignore fsync: UNSAFE, for scratch data).
        #[arg(long, default_value = "standard")]
        sync: String,
        /// Compression of data records: off, lz4, zstd or zstd-LEVEL (1-19; zstd = zstd-3).
        #[arg(long, default_value = "off")]
        compression: String,
        /// Space the pool keeps for this volume (thick provisioning), e.g. 10G. Refused if
        /// the pool cannot hold it.
        #[arg(long)]
        reserve: Option<String>,
        /// Deduplicate data records: on or off (identical records stored once; needs a
        /// pool with BLAKE3 checksums, the default).
        #[arg(long, default_value = "off")]
        dedup: String,
        /// Make the volume a block LUN of this size (served with `strata export nbd|iscsi`),
        /// e.g. 100G. Thin: space is used as data is written.
        #[arg(long)]
        lun: Option<String>,
        /// A LUN's block size: its record size, the unit of copy-on-write, checksums and
        /// compression (4K, 8K or 16K suit databases; writes below it read-modify-write in
        /// memory). Same as --record-size.
        #[arg(long)]
        block_size: Option<String>,
        /// A LUN's logical sector size as clients see it: 512 (default) or 4096.
        #[arg(long)]
        sector: Option<u32>,
    },
    /// List volumes (of one pool, or all).
    List { pool: Option<String> },
    /// Show one volume.
    Show { volume: String },
    /// Change a volume's settings (all of them, or none if one is refused).
    Set {
        volume: String,
        /// New size limit (0 = none); refused below what the volume uses.
        #[arg(long)]
        size: Option<String>,
        /// New sync policy: standard, always or disabled (UNSAFE).
        #[arg(long)]
        sync: Option<String>,
        /// New compression for data written from now on: off, lz4, zstd, zstd-LEVEL.
        #[arg(long)]
        compression: Option<String>,
        /// New reservation (0 = thin).
        #[arg(long)]
        reserve: Option<String>,
        /// Deduplicate data written from now on: on or off.
        #[arg(long)]
        dedup: Option<String>,
        /// Grow the volume's LUN to this size (a LUN never shrinks); clients see it at their
        /// next connection (iSCSI: a capacity-changed unit attention).
        #[arg(long)]
        lun_size: Option<String>,
    },
    /// Delete a volume and everything in it (it must not be mounted or exported). One with
    /// snapshots or clones needs --recursive, which deletes them too.
    Delete {
        volume: String,
        /// Also delete its snapshots and the clones made from them.
        #[arg(long)]
        recursive: bool,
    },
}

/// `on` / `off` for a switch option.
fn parse_on_off(option: &str, v: &str) -> Result<bool, Failure> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Failure::usage(format!("{option} {v:?}: use on or off"))),
    }
}

pub fn split(spec: &str) -> Result<(&str, &str), Failure> {
    match spec.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => Ok((p, v)),
        _ => Err(Failure::usage(format!("{spec:?} is not POOL/VOLUME (e.g. default/pgdata)"))),
    }
}

pub fn run(c: &Client, out: &Out, cmd: VolumeCmd) -> Result<(), Failure> {
    match cmd {
        VolumeCmd::Create { volume, size, record_size, sync, compression, reserve, dedup, lun, block_size, sector } => {
            let dedup = parse_on_off("--dedup", &dedup)?;
            let (p, name) = split(&volume)?;
            if lun.is_none() && (block_size.is_some() || sector.is_some()) {
                return Err(Failure::usage("--block-size and --sector are for LUNs: give --lun SIZE too"));
            }
            let rs = parse_size(block_size.as_deref().unwrap_or(&record_size))?;
            let lun_bytes = lun.as_deref().map(parse_size).transpose()?;
            let req = CreateVolume {
                name: name.into(),
                record_size: Some(u32::try_from(rs).map_err(|_| Failure::usage("--record-size: at most 1M"))?),
                size_bytes: size.as_deref().map(parse_size).transpose()?,
                sync: Some(sync),
                compression: Some(compression),
                reservation_bytes: reserve.as_deref().map(parse_size).transpose()?,
                dedup: Some(dedup),
                lun_bytes,
                lun_sector_bytes: sector,
            };
            let v: VolumeInfo = c.send("POST", &format!("/v1/pools/{}/volumes", seg(p)), &req)?;
            out.show(&v, |v| match &v.lun {
                Some(l) => println!(
                    "created LUN {volume}: {} ({}-byte sectors, block size {}, compression {})",
                    human(l.size_bytes),
                    l.sector_bytes,
                    human(rs),
                    v.compression
                ),
                None => {
                    println!("created volume {volume} (record size {}, compression {})", human(rs), v.compression)
                }
            });
        }
        VolumeCmd::List { pool } => {
            let pools: Vec<String> = match pool {
                Some(p) => vec![p],
                None => {
                    let all: Vec<PoolInfo> = c.get("/v1/pools")?;
                    all.into_iter().filter(|p| p.status.is_some()).map(|p| p.name).collect()
                }
            };
            let mut rows: Vec<VolumeInfo> = Vec::new();
            for p in pools {
                rows.extend(c.get::<Vec<VolumeInfo>>(&format!("/v1/pools/{}/volumes", seg(&p)))?);
            }
            out.show(&rows, |rows| print_volumes(rows));
        }
        VolumeCmd::Show { volume } => {
            let (p, name) = split(&volume)?;
            let v: VolumeInfo = c.get(&format!("/v1/pools/{}/volumes/{}", seg(p), seg(name)))?;
            out.show(&v, print_volume);
        }
        VolumeCmd::Set { volume, size, sync, compression, reserve, dedup, lun_size } => {
            let (p, name) = split(&volume)?;
            if size.is_none()
                && sync.is_none()
                && compression.is_none()
                && reserve.is_none()
                && dedup.is_none()
                && lun_size.is_none()
            {
                return Err(Failure::usage(
                    "nothing to set: give --size, --sync, --compression, --reserve, --dedup and/or --lun-size",
                ));
            }
            let req = SetVolume {
                size_bytes: size.as_deref().map(parse_size).transpose()?,
                sync,
                compression,
                reservation_bytes: reserve.as_deref().map(parse_size).transpose()?,
                dedup: dedup.as_deref().map(|d| parse_on_off("--dedup", d)).transpose()?,
                lun_bytes: lun_size.as_deref().map(parse_size).transpose()?,
            };
            let v: VolumeInfo = c.send("PATCH", &format!("/v1/pools/{}/volumes/{}", seg(p), seg(name)), &req)?;
            out.show(&v, print_volume);
        }
        VolumeCmd::Delete { volume, recursive } => {
            let (p, name) = split(&volume)?;
            let path = format!("/v1/pools/{}/volumes/{}?recursive={recursive}", seg(p), seg(name));
            let d: Done = c.call::<(), Done>("DELETE", &path, None)?;
            out.show(&d, |d| {
                println!("deleted volume {volume}");
                for a in &d.also {
                    println!("  and {a}");
                }
            });
        }
    }
    Ok(())
}

fn ratio_text(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into())
}

fn print_volumes(rows: &[VolumeInfo]) {
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9}  MOUNTED AT",
        "VOLUME", "RECORD", "USED", "LOGICAL", "LIMIT", "RATIO", "COMPRESS", "SYNC"
    );
    for v in rows {
        let limit = if v.size_bytes > 0 { human(v.size_bytes) } else { "-".into() };
        println!(
            "{:<28} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9}  {}",
            format!("{}/{}", v.pool, v.name),
            human(v.record_size as u64),
            human(v.used_bytes),
            v.logical_bytes.map(human).unwrap_or_else(|| "-".into()),
            limit,
            ratio_text(v.compress_ratio),
            v.compression,
            v.sync,
            match (&v.lun, &v.mounted_at) {
                (Some(l), _) => format!("(LUN {})", human(l.size_bytes)),
                (None, Some(m)) => m.display().to_string(),
                (None, None) => "-".into(),
            }
        );
    }
}

/// `strata volume show`: one volume, one field a line.
pub fn print_volume(v: &VolumeInfo) {
    let opt = |x: Option<u64>| x.map(human).unwrap_or_else(|| "- (not tracked: written by an older build)".into());
    println!("volume       {}/{}", v.pool, v.name);
    println!("record size  {}", human(v.record_size as u64));
    if let Some(l) = &v.lun {
        println!("LUN          {} ({}-byte sectors)", human(l.size_bytes), l.sector_bytes);
    }
    println!("compression  {}", v.compression);
    println!("dedup        {}", if v.dedup { "on" } else { "off" });
    println!("sync         {}", v.sync);
    println!("used         {} (physical: units allocated, data and metadata)", human(v.used_bytes));
    println!("logical      {}", opt(v.logical_bytes));
    println!("saved        {}", opt(v.saved_bytes));
    println!("ratio        {}", ratio_text(v.compress_ratio));
    println!("size limit   {}", if v.size_bytes > 0 { human(v.size_bytes) } else { "none (thin)".into() });
    println!(
        "reservation  {}",
        if v.reservation_bytes > 0 { human(v.reservation_bytes) } else { "none (thin)".into() }
    );
    println!("snapshots    {}", v.snapshots);
    if let Some(o) = &v.origin {
        println!("origin       {o}");
    }
    println!("mounted at   {}", v.mounted_at.as_ref().map_or("-".into(), |m| m.display().to_string()));
}
