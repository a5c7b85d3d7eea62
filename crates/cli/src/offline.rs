//! Commands that open a pool image or device directly.

use crate::units::{human, parse_size};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use strata_engine::{
    BlockDevice, CheckOptions, ChecksumAlgo, Clock, CreateOptions, Error, ErrorKind, FileDevice, FileDeviceOptions,
    Pool, PoolOptions, VolumeOptions,
};

struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        let t = SystemClock.now_ns();
        b = (t ^ (std::process::id() as u64).rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(b) | 1
}

fn options(read_only: bool) -> PoolOptions {
    let mut o = PoolOptions::new(Arc::new(SystemClock));
    o.read_only = read_only;
    o
}

/// An engine error as a message that says what to do next.
fn explain(e: Error, device: &Path) -> String {
    let hint = match e.kind() {
        ErrorKind::Corruption => {
            format!("run `strata check {}` for a full report", device.display())
        }
        ErrorKind::Io => "check the device and its permissions".into(),
        ErrorKind::NotFound => "see `strata volume list`".into(),
        ErrorKind::AlreadyExists => "choose another name".into(),
        ErrorKind::NoSpace => "free space or grow the pool".into(),
        ErrorKind::ReadOnly => "reopen the pool once the device is healthy".into(),
        ErrorKind::Unsupported => "upgrade Strata".into(),
        ErrorKind::InvalidArgument => "see `strata --help`".into(),
    };
    format!("{e} ({hint})")
}

fn open_device(path: &Path, create_size: Option<u64>) -> Result<Arc<dyn BlockDevice>, String> {
    let opts = FileDeviceOptions { direct: true, create_size };
    let dev = FileDevice::open(path, &opts).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{}: no such file (create a pool with `strata pool create`)", path.display())
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("{}: permission denied (run as root or fix permissions)", path.display())
        }
        _ => format!("{}: {e}", path.display()),
    })?;
    Ok(Arc::new(dev))
}

fn open_pool(path: &Path, read_only: bool) -> Result<Pool, String> {
    let dev = open_device(path, None)?;
    Pool::open(dev, options(read_only)).map_err(|e| explain(e, path))
}

pub fn pool_create(
    name: &str,
    path: &Path,
    size: Option<&str>,
    checksum: &str,
    force: bool,
    json: bool,
) -> Result<ExitCode, String> {
    let checksum = match checksum {
        "blake3" => ChecksumAlgo::Blake3,
        "crc32c" => ChecksumAlgo::Crc32c,
        other => return Err(format!("checksum {other:?}: use blake3 or crc32c")),
    };
    let exists = path.exists();
    let size = match (size, exists) {
        (Some(s), _) => Some(parse_size(s)?),
        (None, false) => return Err(format!("{} does not exist: give --size to create an image file", path.display())),
        (None, true) => None,
    };
    if exists && !force && open_pool(path, true).is_ok() {
        return Err(format!("{} already holds a Strata pool; add --force to destroy it", path.display()));
    }
    let dev = open_device(path, size)?;
    let create = CreateOptions { name: name.to_string(), pool_guid: random_u64(), device_guid: random_u64(), checksum };
    let pool = Pool::create(dev, create, options(false)).map_err(|e| explain(e, path))?;
    let st = pool.status();
    pool.close().map_err(|e| explain(e, path))?;
    if json {
        println!("{}", json!({"name": st.name, "guid": format!("{:016x}", st.pool_guid), "size_bytes": st.size_bytes}));
    } else {
        println!("created pool {} on {} ({} usable)", st.name, st.device, human(st.size_bytes));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn pool_status(path: &Path, json: bool) -> Result<ExitCode, String> {
    let pool = open_pool(path, true)?;
    let st = pool.status();
    if json {
        println!(
            "{}",
            json!({
                "name": st.name, "guid": format!("{:016x}", st.pool_guid), "device": st.device, "txg": st.txg,
                "size_bytes": st.size_bytes, "allocated_bytes": st.allocated_bytes, "free_bytes": st.free_bytes,
                "volumes": st.volumes, "open_notes": st.open_notes,
            })
        );
    } else {
        println!("pool      {}", st.name);
        println!("guid      {:016x}", st.pool_guid);
        println!("device    {}", st.device);
        println!("txg       {}", st.txg);
        println!("size      {}", human(st.size_bytes));
        println!(
            "allocated {} ({:.1}%)",
            human(st.allocated_bytes),
            100.0 * st.allocated_bytes as f64 / st.size_bytes as f64
        );
        println!("free      {}", human(st.free_bytes));
        println!("volumes   {}", st.volumes);
        for n in &st.open_notes {
            println!("note      {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn volume_create(
    path: &Path,
    name: &str,
    record_size: &str,
    size: Option<&str>,
    json: bool,
) -> Result<ExitCode, String> {
    let rs = parse_size(record_size)?;
    let record_size = u32::try_from(rs).map_err(|_| format!("record size {record_size}: 4K to 1M"))?;
    let quota_bytes = size.map(parse_size).transpose()?.unwrap_or(0);
    let pool = open_pool(path, false)?;
    let id = pool.create_volume(name, &VolumeOptions { record_size, quota_bytes }).map_err(|e| explain(e, path))?;
    pool.close().map_err(|e| explain(e, path))?;
    if json {
        println!("{}", json!({"name": name, "id": id.0, "record_size": record_size, "quota_bytes": quota_bytes}));
    } else {
        println!("created volume {name} (record size {})", human(record_size as u64));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn volume_list(path: &Path, json: bool) -> Result<ExitCode, String> {
    let pool = open_pool(path, true)?;
    let vols = pool.volumes();
    if json {
        let rows: Vec<_> = vols
            .iter()
            .map(|v| json!({"name": v.name, "id": v.id.0, "record_size": v.record_size, "used_bytes": v.used_bytes, "quota_bytes": v.quota_bytes, "created_txg": v.created_txg}))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        println!("{:<24} {:>8} {:>10} {:>10}", "NAME", "RECORD", "USED", "LIMIT");
        for v in vols {
            let limit = if v.quota_bytes == 0 { "-".to_string() } else { human(v.quota_bytes) };
            println!("{:<24} {:>8} {:>10} {:>10}", v.name, human(v.record_size as u64), human(v.used_bytes), limit);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn volume_delete(path: &Path, name: &str, json: bool) -> Result<ExitCode, String> {
    let pool = open_pool(path, false)?;
    pool.delete_volume(name).map_err(|e| explain(e, path))?;
    pool.close().map_err(|e| explain(e, path))?;
    if json {
        println!("{}", json!({"deleted": name}));
    } else {
        println!("deleted volume {name}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn check(path: &Path, verify_data: bool, json: bool) -> Result<ExitCode, String> {
    let pool = open_pool(path, true)?;
    let r = pool.check(CheckOptions { verify_data }).map_err(|e| explain(e, path))?;
    if json {
        println!(
            "{}",
            json!({
                "clean": r.is_clean(), "txg": r.txg, "volumes": r.volumes, "objects": r.objects,
                "metadata_blocks": r.metadata_blocks, "data_blocks": r.data_blocks,
                "referenced_bytes": r.referenced_units * 4096, "allocated_bytes": r.allocated_units * 4096,
                "data_bytes_verified": r.data_bytes_verified, "errors": r.errors, "notes": r.notes,
            })
        );
    } else {
        println!("checked txg {} of {}", r.txg, path.display());
        println!(
            "  {} volumes, {} objects, {} metadata blocks, {} data blocks ({} verified)",
            r.volumes,
            r.objects,
            r.metadata_blocks,
            r.data_blocks,
            human(r.data_bytes_verified)
        );
        println!("  referenced {} = allocated {}", human(r.referenced_units * 4096), human(r.allocated_units * 4096));
        for n in &r.notes {
            println!("  note: {n}");
        }
        for e in &r.errors {
            println!("  ERROR: {e}");
        }
        println!("{}", if r.is_clean() { "clean" } else { "PROBLEMS FOUND" });
    }
    Ok(if r.is_clean() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
