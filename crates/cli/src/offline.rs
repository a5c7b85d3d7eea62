//! `strata check --device`: the checker on a pool no daemon is serving (opened read-only).
//! Several `--device`s (or one member of a set): the device set is opened read-only from
//! its member labels and every copy of every block is verified; damaged copies are
//! reported per member, not repaired (nothing is written offline).

use crate::units::human;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use strata_engine::{
    read_member_identity, BlockDevice, CheckOptions, ErrorKind, FileDevice, FileDeviceOptions, MirrorDevice, Pool,
    PoolOptions,
};

fn open_file(path: &Path) -> Result<Arc<dyn BlockDevice>, String> {
    let dev =
        FileDevice::open(path, &FileDeviceOptions { direct: true, create_size: None }).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{}: no such file or device", path.display()),
            std::io::ErrorKind::PermissionDenied => format!("{}: permission denied (run as root)", path.display()),
            _ => format!("{}: {e}", path.display()),
        })?;
    Ok(Arc::new(dev))
}

pub fn check(
    paths: &[std::path::PathBuf],
    log_device: Option<&Path>,
    verify_data: bool,
    json_out: bool,
) -> Result<ExitCode, String> {
    let [path] = paths else { return check_set(paths, log_device, verify_data, json_out) };
    let dev = open_file(path)?;
    if read_member_identity(dev.as_ref()).is_ok() {
        drop(dev);
        return check_set(paths, log_device, verify_data, json_out);
    }
    let log = log_device.map(open_file).transpose()?;
    let mut opts = PoolOptions::new(Arc::new(strata_daemon::SystemClock));
    opts.read_only = true;
    let pool = open_pool(dev, log, opts)?;
    let r = pool.check(CheckOptions { verify_data, ..Default::default() }).map_err(|e| e.to_string())?;
    let v = strata_daemon::check_report(&r);
    finish(&path.display().to_string(), v, json_out)
}

fn open_pool(dev: Arc<dyn BlockDevice>, log: Option<Arc<dyn BlockDevice>>, opts: PoolOptions) -> Result<Pool, String> {
    Pool::open_with_log(dev, log, opts).map_err(|e| {
        let hint = match e.kind() {
            ErrorKind::InvalidArgument => "give the pool's log device with --log-device",
            ErrorKind::Corruption => {
                "the pool cannot be opened at any root; restore the device from a replica or backup"
            }
            ErrorKind::Unsupported => "upgrade Strata",
            _ => "check the device",
        };
        format!("{e} ({hint})")
    })
}

fn finish(what: &str, v: strata_api::CheckReport, json_out: bool) -> Result<ExitCode, String> {
    if json_out {
        println!("{}", serde_json::to_string(&v).expect("serialises"));
    } else {
        print_check(what, &v);
    }
    Ok(if v.clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The check of a device set — or of the sets of a pool's device groups, given together —
/// opened read-only from the members given (those missing are named; each set opens as
/// far as its layout tolerates), assembled as the pool's label says, every copy verified.
fn check_set(
    paths: &[std::path::PathBuf],
    log_device: Option<&Path>,
    verify_data: bool,
    json_out: bool,
) -> Result<ExitCode, String> {
    // The members, by set.
    let mut sets: Vec<(u64, Vec<Result<Arc<dyn BlockDevice>, String>>)> = Vec::new();
    for p in paths {
        let dev = open_file(p)?;
        let id = read_member_identity(dev.as_ref()).map_err(|e| {
            format!(
                "{}: not a member of a device set ({e}); give every member of one set, or a single-device pool alone",
                p.display()
            )
        })?;
        match sets.iter_mut().find(|(guid, _)| *guid == id.set_guid) {
            Some((_, members)) => members.push(Ok(dev)),
            None => sets.push((id.set_guid, vec![Ok(dev)])),
        }
    }
    let mut notes = Vec::new();
    let mut opened: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for (_, found) in sets {
        let (set, n) = MirrorDevice::open(found, false).map_err(|e| format!("{e} (give the members of one set)"))?;
        notes.extend(n);
        opened.push(Arc::new(set));
    }
    // The pool's first group is the set holding its label; the others are its groups.
    let first = opened
        .iter()
        .position(|s| strata_engine::pool::groups::group_set_guids(s.as_ref()).is_ok())
        .ok_or("no set given holds a pool label: give the members of the pool's first device group too")?;
    let first = opened.remove(first);
    let (dev, n) = strata_engine::pool::groups::assemble(first, opened).map_err(|e| e.to_string())?;
    notes.extend(n);
    let log = log_device.map(open_file).transpose()?;
    let mut opts = PoolOptions::new(Arc::new(strata_daemon::SystemClock));
    opts.read_only = true;
    let pool = open_pool(dev.clone(), log, opts)?;
    let r = pool.check(CheckOptions { verify_data, all_copies: true }).map_err(|e| e.to_string())?;
    let mut v = strata_daemon::check_report(&r);
    v.notes.extend(notes);
    if let Some(st) = dev.set_status() {
        v.notes.push(format!("{} set, {}", st.layout.name(), st.health.name()));
        let grouped = dev.group_count() > 1;
        for m in &st.members {
            let why = m.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default();
            let name = if grouped { format!("{}.{}", m.group, m.index) } else { m.index.to_string() };
            v.notes.push(format!("member {name} {}: {}{why}", m.device, m.state.name()));
            if m.checksum_errors > 0 || m.read_errors > 0 {
                v.errors.push(format!(
                    "member {name} {}: {} damaged copies, {} read errors (the other copies verified; not repaired: \
                     nothing is written offline — serve the pool and run `strata pool scrub`)",
                    m.device, m.checksum_errors, m.read_errors
                ));
            }
        }
    }
    v.clean = v.errors.is_empty();
    let what = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    finish(&what, v, json_out)
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
