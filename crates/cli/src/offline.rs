//! `strata check --device`: the checker on a pool no daemon is serving (opened read-only).

use crate::units::human;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, FileDevice, FileDeviceOptions, Pool, PoolOptions};

fn open_file(path: &Path) -> Result<Arc<dyn BlockDevice>, String> {
    let dev =
        FileDevice::open(path, &FileDeviceOptions { direct: true, create_size: None }).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{}: no such file or device", path.display()),
            std::io::ErrorKind::PermissionDenied => format!("{}: permission denied (run as root)", path.display()),
            _ => format!("{}: {e}", path.display()),
        })?;
    Ok(Arc::new(dev))
}

pub fn check(path: &Path, log_device: Option<&Path>, verify_data: bool, json_out: bool) -> Result<ExitCode, String> {
    let dev = open_file(path)?;
    let log = log_device.map(open_file).transpose()?;
    let mut opts = PoolOptions::new(Arc::new(strata_daemon::SystemClock));
    opts.read_only = true;
    let pool = Pool::open_with_log(dev, log, opts).map_err(|e| {
        let hint = match e.kind() {
            ErrorKind::InvalidArgument => "give the pool's log device with --log-device",
            ErrorKind::Corruption => {
                "the pool cannot be opened at any root; restore the device from a replica or backup"
            }
            ErrorKind::Unsupported => "upgrade Strata",
            _ => "check the device",
        };
        format!("{e} ({hint})")
    })?;
    let r = pool.check(CheckOptions { verify_data, ..Default::default() }).map_err(|e| e.to_string())?;
    let v = strata_daemon::check_report(&r);
    if json_out {
        println!("{}", serde_json::to_string(&v).expect("serialises"));
    } else {
        print_check(&path.display().to_string(), &v);
    }
    Ok(if r.is_clean() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn print_check(what: &str, v: &strata_api::CheckReport) {
    println!("checked txg {} of {what}", v.txg);
    println!(
        "  {} volumes, {} objects, {} metadata blocks, {} data blocks ({} verified)",
        v.volumes,
        v.objects,
        v.metadata_blocks,
        v.data_blocks,
        human(v.data_bytes_verified)
    );
    println!("  referenced {} = allocated {}", human(v.referenced_bytes), human(v.allocated_bytes));
    println!(
        "  {} compressed data blocks; data records save {} (verified against the volumes)",
        v.compressed_blocks,
        human(v.saved_bytes)
    );
    for n in &v.notes {
        println!("  note: {n}");
    }
    for e in &v.errors {
        println!("  ERROR: {e}");
    }
    println!("{}", if v.clean { "clean" } else { "PROBLEMS FOUND" });
}
