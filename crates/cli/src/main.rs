//! `strata`: the command line.
//!
//! Today every command works directly on a pool image or device (offline, like `zdb`);
//! when the daemon exists, pool and volume commands become clients of its API and the
//! offline forms stay for recovery (`strata check` always runs offline).
//!
//! Exit status: 0 success; 1 the checker found problems; 2 bad usage or an error, with a
//! message that says what to do next.

mod offline;
mod units;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "strata", version, about = "Copy-on-write storage for databases")]
struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, inspect pools.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Create, list, delete volumes.
    #[command(subcommand)]
    Volume(VolumeCmd),
    /// Verify every invariant of a pool, offline (the pool must not be in use).
    Check {
        /// Pool image file or block device.
        device: PathBuf,
        /// Verify metadata only (skip reading data blocks).
        #[arg(long)]
        no_data: bool,
    },
}

#[derive(Subcommand)]
enum PoolCmd {
    /// Make a new pool on an image file (created if missing) or a block device.
    Create {
        /// Pool name.
        name: String,
        /// Image file or block device; its contents are destroyed.
        #[arg(long)]
        device: PathBuf,
        /// Size of a new image file, e.g. 10G (ignored for an existing device).
        #[arg(long)]
        size: Option<String>,
        /// Checksum of new blocks: blake3 or crc32c.
        #[arg(long, default_value = "blake3")]
        checksum: String,
        /// Overwrite a device that already holds a Strata pool.
        #[arg(long)]
        force: bool,
    },
    /// Space, txg and health of a pool.
    Status { device: PathBuf },
}

#[derive(Subcommand)]
enum VolumeCmd {
    /// Create a volume.
    Create {
        /// Pool image or device.
        #[arg(long)]
        device: PathBuf,
        /// Volume name.
        name: String,
        /// Record size: 4K to 1M, a power of two.
        #[arg(long, default_value = "16K")]
        record_size: String,
        /// Size limit (thin: not reserved), e.g. 100G.
        #[arg(long)]
        size: Option<String>,
    },
    /// List volumes.
    List {
        #[arg(long)]
        device: PathBuf,
    },
    /// Delete a volume and everything in it.
    Delete {
        #[arg(long)]
        device: PathBuf,
        name: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { device, no_data } => offline::check(&device, !no_data, cli.json),
        Command::Pool(PoolCmd::Create { name, device, size, checksum, force }) => {
            offline::pool_create(&name, &device, size.as_deref(), &checksum, force, cli.json)
        }
        Command::Pool(PoolCmd::Status { device }) => offline::pool_status(&device, cli.json),
        Command::Volume(VolumeCmd::Create { device, name, record_size, size }) => {
            offline::volume_create(&device, &name, &record_size, size.as_deref(), cli.json)
        }
        Command::Volume(VolumeCmd::List { device }) => offline::volume_list(&device, cli.json),
        Command::Volume(VolumeCmd::Delete { device, name }) => offline::volume_delete(&device, &name, cli.json),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("strata: {msg}");
            ExitCode::from(2)
        }
    }
}
