//! The foreign-data probe (engine `device::probe`), which `pool create` runs before it
//! formats a device: every finding is asserted exactly (signature and byte offset).
//!
//! Two kinds of case. Real tools, on sparse image files, where Debian ships them: mkfs.ext2/3/4,
//! mke2fs -O journal_dev, mkfs.xfs, mkfs.btrfs, mkfs.f2fs, mkfs.vfat, mkfs.exfat, mkntfs,
//! mkswap, mksquashfs, xorriso, cryptsetup, make-bcache, sgdisk and sfdisk. And synthetic
//! byte patterns for every signature, including those whose tools need a kernel block
//! device (pvcreate, mdadm) or are not in Debian main (ZFS), and for the plausibility checks
//! that keep a short magic from naming the wrong thing.
//!
//! A real-tool case whose tool is missing prints a SKIP line naming the Debian package and
//! passes, unless STRATA_REQUIRE_PROBE_TOOLS=1 (CI sets it after installing the packages),
//! which makes it fail instead.

use std::fs::{File, OpenOptions};
use std::io::Cursor;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::device::{
    probe_foreign_data, probe_reader, probe_window, ForeignData, Signature, StrataLabel, PROBE_WINDOW_BYTES,
};
use strata_engine::format::logdev::MIN_LOG_DEVICE_SIZE;
use strata_engine::format::LABEL_SIZE;
use strata_engine::{BlockDevice, FileDevice, FileDeviceOptions, LogDeviceSpec, Pool};
use strata_testkit::{test_create_options, test_pool_options};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------------------
// Helpers

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("strata-device-probe-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch directory");
        Scratch(dir)
    }

    /// A sparse (all-zero) file of `size` bytes.
    fn sparse(&self, name: &str, size: u64) -> PathBuf {
        let path = self.0.join(name);
        File::create(&path).and_then(|f| f.set_len(size)).expect("create sparse image");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open image for writing");
    f.write_all_at(bytes, offset).expect("write image");
}

fn probe(path: &Path) -> Option<ForeignData> {
    probe_foreign_data(path).unwrap_or_else(|e| panic!("probe {}: {e}", path.display()))
}

fn found(signature: Signature, offset: u64) -> Option<ForeignData> {
    Some(ForeignData::Signature { signature, offset })
}

/// Probe a sparse file of `size` bytes with `patches` written into it.
fn image(size: u64, patches: &[(u64, &[u8])]) -> Option<ForeignData> {
    let scratch = Scratch::new("synthetic");
    let path = scratch.sparse("image", size);
    for (offset, bytes) in patches {
        write_at(&path, *offset, bytes);
    }
    probe(&path)
}

/// Debian package of each tool, for the SKIP and failure messages.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "mkfs.ext2" | "mkfs.ext3" | "mkfs.ext4" | "mke2fs" => "e2fsprogs",
        "mkfs.xfs" => "xfsprogs",
        "mkfs.btrfs" => "btrfs-progs",
        "mkfs.f2fs" => "f2fs-tools",
        "mkfs.vfat" => "dosfstools",
        "mkfs.exfat" => "exfatprogs",
        "mkntfs" => "ntfs-3g",
        "mkswap" => "util-linux",
        "sfdisk" => "fdisk",
        "mksquashfs" => "squashfs-tools",
        "xorriso" => "xorriso",
        "cryptsetup" => "cryptsetup-bin",
        "make-bcache" => "bcache-tools",
        "sgdisk" => "gdisk",
        _ => "?",
    }
}

/// The path of `tool`, or None after printing a SKIP line (a failure when
/// STRATA_REQUIRE_PROBE_TOOLS=1).
fn tool(tool: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    let dirs = path_dirs.into_iter().chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    if let Some(found) = dirs.map(|d| d.join(tool)).find(|p| p.is_file()) {
        return Some(found);
    }
    let msg = format!("{tool} not installed: apt-get install {}", package_of(tool));
    if std::env::var("STRATA_REQUIRE_PROBE_TOOLS").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_PROBE_TOOLS=1)");
    }
    eprintln!("SKIP: {msg}");
    None
}

/// Run `program args`, failing the test with its output if it fails.
fn run(program: &Path, args: &[&str]) {
    run_with_stdin(program, args, None);
}

fn run_with_stdin(program: &Path, args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    use std::process::Stdio;
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    if let Some(text) = stdin {
        child.stdin.take().expect("piped stdin").write_all(text.as_bytes()).expect("write tool input");
    }
    let out = child.wait_with_output().expect("wait for tool");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}\nstdout: {}\nstderr: {}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn p(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// A directory with a couple of files, for image builders.
fn populated_dir(scratch: &Scratch) -> PathBuf {
    let dir = scratch.0.join("content");
    std::fs::create_dir_all(dir.join("sub")).expect("create content dir");
    std::fs::write(dir.join("hello.txt"), b"hello, probe\n").expect("write content");
    std::fs::write(dir.join("sub/data.bin"), vec![0x5a; 10_000]).expect("write content");
    dir
}

// ---------------------------------------------------------------------------------------
// Empty, zero, small and plain-data inputs

#[test]
fn empty_file_holds_nothing() {
    let scratch = Scratch::new("empty");
    assert_eq!(probe(&scratch.sparse("empty", 0)), None);
}

#[test]
fn all_zero_sparse_files_hold_nothing() {
    for size in [1, 511, 4 * KIB, 300 * KIB, MIB, MIB + 1, 2 * MIB, 2 * MIB + 1, 64 * MIB, 8 << 30] {
        let scratch = Scratch::new("zero");
        assert_eq!(probe(&scratch.sparse("zero", size)), None, "{size}-byte zero file");
    }
}

#[test]
fn one_non_zero_byte_in_the_first_mib_is_reported_at_its_offset() {
    assert_eq!(image(64 * MIB, &[(12288, &[1])]), Some(ForeignData::NonZero { offset: 12288 }));
    assert_eq!(image(64 * MIB, &[(0, &[0x80])]), Some(ForeignData::NonZero { offset: 0 }));
    assert_eq!(image(64 * MIB, &[(MIB - 1, &[9])]), Some(ForeignData::NonZero { offset: MIB - 1 }));
}

#[test]
fn one_non_zero_byte_in_the_last_mib_is_reported_at_its_offset() {
    let size = 64 * MIB + 3 * 512;
    for offset in [size - 1, size - MIB, size - 777_777] {
        assert_eq!(image(size, &[(offset, &[0xff])]), Some(ForeignData::NonZero { offset }), "byte at {offset}");
    }
}

#[test]
fn data_only_in_the_middle_is_not_examined() {
    let size = 64 * MIB;
    let patches: &[(u64, &[u8])] = &[(MIB, b"XFSB middle"), (32 * MIB, &[1; 4096]), (size - MIB - 1, &[7])];
    assert_eq!(image(size, patches), None);
}

#[test]
fn files_up_to_two_mib_are_read_whole() {
    // 1.5 MiB: the byte at 1.2 MiB is in neither "first MiB" nor would a naive last-MiB read
    // of a short file be aligned; the whole file is read.
    let size = 3 * MIB / 2;
    assert_eq!(image(size, &[(1_258_291, &[3])]), Some(ForeignData::NonZero { offset: 1_258_291 }));
    assert_eq!(image(2 * MIB, &[(MIB + 5, &[3])]), Some(ForeignData::NonZero { offset: MIB + 5 }));
}

#[test]
fn files_smaller_than_one_mib() {
    assert_eq!(image(1, &[(0, &[1])]), Some(ForeignData::NonZero { offset: 0 }));
    assert_eq!(image(4 * KIB, &[(4095, &[1])]), Some(ForeignData::NonZero { offset: 4095 }));
    assert_eq!(image(300 * KIB, &[(0, b"XFSB\0\0\x10\0")]), found(Signature::Xfs, 0));
    // A signature cut off by the end of the file is not named, but its bytes are refused.
    assert_eq!(image(1082, &[(1080, &[0x53, 0xef])]), Some(ForeignData::NonZero { offset: 1080 }));
    assert_eq!(image(65_603, &[(65_600, b"_BH")]), Some(ForeignData::NonZero { offset: 65_600 }));
    assert_eq!(image(6, &[(0, b"LUKS\xba\xbe")]), Some(ForeignData::NonZero { offset: 0 }));
}

#[test]
fn probe_reader_works_on_memory() {
    let mut bytes = vec![0u8; 3 * MIB as usize];
    bytes[65_600..65_608].copy_from_slice(b"_BHRfS_M");
    assert_eq!(probe_reader(&mut Cursor::new(&bytes)).unwrap(), found(Signature::Btrfs, 65_600));
    assert_eq!(probe_reader(&mut Cursor::new(Vec::<u8>::new())).unwrap(), None);
}

#[test]
fn a_missing_path_is_an_error_that_names_it() {
    let scratch = Scratch::new("missing");
    let path = scratch.0.join("no-such-image");
    let err = probe_foreign_data(&path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("no-such-image"), "{err}");
}

#[test]
fn probe_window_reads_nothing_outside_head_and_tail() {
    // The tail alone: a GPT backup header on a 1 GiB device whose head was not supplied.
    let size: u64 = 1 << 30;
    let mut tail = vec![0u8; 512];
    tail[..8].copy_from_slice(b"EFI PART");
    tail[24..32].copy_from_slice(&(size / 512 - 1).to_le_bytes());
    assert_eq!(probe_window(size, &[], &tail), found(Signature::GptBackup, size - 512));
    assert_eq!(PROBE_WINDOW_BYTES, MIB);
}

#[test]
fn damaged_and_truncated_inputs_never_panic() {
    // Every signature's magic at its place, then the file cut at many lengths, and random
    // bytes of many sizes: the probe must answer, never panic.
    let mut busy = vec![0u8; 2 * MIB as usize + 4096];
    let put =
        |buf: &mut Vec<u8>, at: u64, bytes: &[u8]| buf[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    put(&mut busy, 0, &[0xeb, 0x3c, 0x90]);
    put(&mut busy, 510, &[0x55, 0xaa]);
    put(&mut busy, 512, b"LABELONE");
    put(&mut busy, 1080, &[0x53, 0xef]);
    put(&mut busy, 4096, &0xa92b_4efc_u32.to_le_bytes());
    put(&mut busy, 4120, b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca");
    put(&mut busy, 32_769, b"CD001");
    put(&mut busy, 65_600, b"_BHRfS_M");
    put(&mut busy, 131_072, &0x00ba_b10c_u64.to_le_bytes());
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    for len in (0..busy.len()).step_by(4093).chain([1, 2, 3, 511, 512, 1081, 4100, 65_603]) {
        let _ = probe_reader(&mut Cursor::new(&busy[..len])).unwrap();
        let noise: Vec<u8> = (0..len.min(70_000))
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let finding = probe_reader(&mut Cursor::new(&noise)).unwrap();
        assert_eq!(finding.is_some(), noise.iter().any(|&b| b != 0), "{len} random bytes");
    }
}

// ---------------------------------------------------------------------------------------
// Messages

#[test]
fn messages_name_what_was_found_and_where() {
    let cases = [
        (found(Signature::Ext4, 1080), "an ext4 file system (superblock magic at byte 1080)"),
        (found(Signature::Gpt, 512), "a GPT partition table (header at byte 512)"),
        (found(Signature::GptBackup, 1_073_741_312), "a GPT partition table (backup header at byte 1073741312)"),
        (found(Signature::Mbr, 446), "a DOS/MBR partition table (partition entries at byte 446)"),
        (found(Signature::MdRaidV12, 4096), "a Linux md RAID member (v1.2 superblock at byte 4096)"),
        (found(Signature::Zfs, 131_072), "a ZFS pool member (uberblock magic at byte 131072)"),
        (found(Signature::Lvm2, 512), "an LVM2 physical volume (label at byte 512)"),
        (found(Signature::Swap, 4086), "a Linux swap area (signature at byte 4086)"),
        (Some(ForeignData::NonZero { offset: 12288 }), "non-zero data at byte 12288"),
        (Some(ForeignData::Strata { label: StrataLabel::Pool, offset: 0 }), "a Strata pool (label at byte 0)"),
        (
            Some(ForeignData::Strata { label: StrataLabel::LogDevice, offset: 0 }),
            "a Strata log device (label at byte 0)",
        ),
    ];
    for (finding, message) in cases {
        assert_eq!(finding.expect("a finding").to_string(), message);
    }
    assert!(ForeignData::Strata { label: StrataLabel::Pool, offset: 0 }.is_strata());
    assert!(!ForeignData::NonZero { offset: 3 }.is_strata());
    assert_eq!(ForeignData::NonZero { offset: 3 }.offset(), 3);
}

// ---------------------------------------------------------------------------------------
// Strata's own labels

#[test]
fn strata_pool_and_log_device_labels_are_reported_as_strata() {
    let scratch = Scratch::new("strata");
    let pool_path = scratch.0.join("pool.img");
    let log_path = scratch.0.join("log.img");
    let open = |path: &Path, size: u64| -> Arc<dyn BlockDevice> {
        Arc::new(FileDevice::open(path, &FileDeviceOptions { direct: false, create_size: Some(size) }).unwrap())
    };
    let spec = LogDeviceSpec { dev: open(&log_path, MIN_LOG_DEVICE_SIZE), log_device_guid: 0x10_6d };
    let pool =
        Pool::create_with_log(open(&pool_path, 64 * MIB), test_create_options(7), Some(spec), test_pool_options())
            .expect("create a pool with a log device");
    drop(pool);
    assert_eq!(probe(&pool_path), Some(ForeignData::Strata { label: StrataLabel::Pool, offset: 0 }));
    assert_eq!(probe(&log_path), Some(ForeignData::Strata { label: StrataLabel::LogDevice, offset: 0 }));
    // Label copy 0 destroyed: copy 1 still marks the device as a Strata pool.
    write_at(&pool_path, 0, &[0; 4096]);
    assert_eq!(probe(&pool_path), Some(ForeignData::Strata { label: StrataLabel::Pool, offset: LABEL_SIZE }));
    // Both gone: what is left is data.
    write_at(&pool_path, LABEL_SIZE, &[0; 4096]);
    assert!(matches!(probe(&pool_path), Some(ForeignData::NonZero { .. })), "{:?}", probe(&pool_path));
}

// ---------------------------------------------------------------------------------------
// Real tools

/// Make a `size`-byte sparse image, run `program` with `args` (where "IMG" is the image's
/// path), and return the probe's finding. None when the tool is missing (after SKIP).
fn with_tool(program: &str, size: u64, args: &[&str]) -> Option<(Scratch, PathBuf)> {
    let program = tool(program)?;
    let scratch = Scratch::new("tool");
    let img = scratch.sparse("image", size);
    let args: Vec<&str> = args.iter().map(|a| if *a == "IMG" { p(&img) } else { a }).collect();
    run(&program, &args);
    Some((scratch, img))
}

#[test]
fn real_ext2_ext3_ext4_and_journal_device() {
    let cases = [
        ("mkfs.ext2", vec!["-q", "-F", "IMG"], Signature::Ext2),
        ("mkfs.ext3", vec!["-q", "-F", "IMG"], Signature::Ext3),
        ("mkfs.ext4", vec!["-q", "-F", "IMG"], Signature::Ext4),
        ("mke2fs", vec!["-q", "-F", "-O", "journal_dev", "-b", "4096", "IMG"], Signature::ExtJournal),
    ];
    for (program, args, signature) in cases {
        if let Some((_scratch, img)) = with_tool(program, 64 * MIB, &args) {
            assert_eq!(probe(&img), found(signature, 1080), "{program} {args:?}");
        }
    }
}

#[test]
fn real_xfs() {
    if let Some((_scratch, img)) = with_tool("mkfs.xfs", 512 * MIB, &["-f", "-q", "IMG"]) {
        assert_eq!(probe(&img), found(Signature::Xfs, 0));
    }
}

#[test]
fn real_btrfs() {
    if let Some((_scratch, img)) = with_tool("mkfs.btrfs", 256 * MIB, &["-f", "-q", "IMG"]) {
        assert_eq!(probe(&img), found(Signature::Btrfs, 65_600));
    }
}

#[test]
fn real_f2fs() {
    if let Some((_scratch, img)) = with_tool("mkfs.f2fs", 128 * MIB, &["-q", "-f", "IMG"]) {
        assert_eq!(probe(&img), found(Signature::F2fs, 1024));
    }
}

#[test]
fn real_fat12_fat16_fat32() {
    let cases = [
        (4 * MIB, vec!["-F", "12", "IMG"], Signature::Fat12),
        (64 * MIB, vec!["-F", "16", "IMG"], Signature::Fat16),
        (64 * MIB, vec!["IMG"], Signature::Fat16),
        (256 * MIB, vec!["-F", "32", "IMG"], Signature::Fat32),
    ];
    for (size, args, signature) in cases {
        if let Some((_scratch, img)) = with_tool("mkfs.vfat", size, &args) {
            assert_eq!(probe(&img), found(signature, 0), "mkfs.vfat {args:?} on {size} bytes");
        }
    }
}

#[test]
fn real_exfat() {
    if let Some((_scratch, img)) = with_tool("mkfs.exfat", 64 * MIB, &["IMG"]) {
        assert_eq!(probe(&img), found(Signature::Exfat, 3));
    }
}

#[test]
fn real_ntfs() {
    if let Some((_scratch, img)) = with_tool("mkntfs", 64 * MIB, &["-q", "-F", "-f", "IMG"]) {
        assert_eq!(probe(&img), found(Signature::Ntfs, 3));
    }
}

#[test]
fn real_swap_at_each_page_size() {
    for page in [4096u64, 65_536] {
        let page_arg = page.to_string();
        if let Some((_scratch, img)) = with_tool("mkswap", 64 * MIB, &["-p", &page_arg, "IMG"]) {
            assert_eq!(probe(&img), found(Signature::Swap, page - 10), "page size {page}");
        }
    }
}

#[test]
fn real_squashfs() {
    let Some(mksquashfs) = tool("mksquashfs") else { return };
    let scratch = Scratch::new("squashfs");
    let dir = populated_dir(&scratch);
    let img = scratch.0.join("image.sqsh");
    run(&mksquashfs, &[p(&dir), p(&img), "-quiet", "-noappend", "-no-progress"]);
    assert_eq!(probe(&img), found(Signature::Squashfs, 0));
}

#[test]
fn real_iso9660() {
    let Some(xorriso) = tool("xorriso") else { return };
    let scratch = Scratch::new("iso");
    let dir = populated_dir(&scratch);
    let img = scratch.0.join("image.iso");
    run(&xorriso, &["-as", "mkisofs", "-quiet", "-o", p(&img), p(&dir)]);
    assert_eq!(probe(&img), found(Signature::Iso9660, 32_769));
}

#[test]
fn real_luks1_and_luks2_and_the_luks2_secondary_header() {
    let Some(cryptsetup) = tool("cryptsetup") else { return };
    let scratch = Scratch::new("luks");
    let key = scratch.0.join("key");
    std::fs::write(&key, b"a test key, not a secret").expect("write key file");
    for (kind, signature) in [("luks1", Signature::Luks1), ("luks2", Signature::Luks2)] {
        let img = scratch.sparse(kind, 64 * MIB);
        // Cheap key derivation: the test checks the header, not its strength.
        let args = ["luksFormat", "--batch-mode", "--type", kind, "--key-file", p(&key)];
        let kdf = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", p(&img)];
        run(&cryptsetup, &[&args[..], &kdf[..]].concat());
        assert_eq!(probe(&img), found(signature, 0), "{kind}");
        if kind == "luks2" {
            // The primary LUKS2 header area is the first 16 KiB: the secondary copy follows.
            write_at(&img, 0, &[0; 16 * 1024]);
            assert_eq!(probe(&img), found(Signature::Luks2Secondary, 16 * KIB));
        }
    }
}

#[test]
fn real_bcache_backing_and_cache_devices() {
    for kind in ["-B", "-C"] {
        if let Some((_scratch, img)) = with_tool("make-bcache", 64 * MIB, &[kind, "IMG"]) {
            assert_eq!(probe(&img), found(Signature::Bcache, 4120), "make-bcache {kind}");
        }
    }
}

#[test]
fn real_gpt_from_sgdisk_then_damaged() {
    let size = 64 * MIB;
    let Some((_scratch, img)) = with_tool("sgdisk", size, &["-o", "-n", "1:2048:0", "-t", "1:8300", "IMG"]) else {
        return;
    };
    assert_eq!(probe(&img), found(Signature::Gpt, 512));
    // Primary header destroyed: the backup header in the last sector remains.
    write_at(&img, 512, &[0; 512]);
    assert_eq!(probe(&img), found(Signature::GptBackup, size - 512));
    // The backup gone too: the protective MBR still says GPT.
    write_at(&img, size - MIB, &vec![0; MIB as usize]);
    assert_eq!(probe(&img), found(Signature::GptProtectiveMbr, 446));
    // And without it, the partition entries at LBA 2 are still data.
    write_at(&img, 0, &[0; 512]);
    assert_eq!(probe(&img), Some(ForeignData::NonZero { offset: 1024 }));
}

#[test]
fn real_gpt_and_mbr_from_sfdisk() {
    for (label, signature, offset) in [("gpt", Signature::Gpt, 512), ("dos", Signature::Mbr, 446)] {
        let Some(sfdisk) = tool("sfdisk") else { return };
        let scratch = Scratch::new("sfdisk");
        let img = scratch.sparse("image", 64 * MIB);
        run_with_stdin(
            &sfdisk,
            &["--quiet", "--no-reread", "--no-tell-kernel", p(&img)],
            Some(&format!("label: {label}\n,,L\n")),
        );
        assert_eq!(probe(&img), found(signature, offset), "sfdisk label {label}");
    }
}

// ---------------------------------------------------------------------------------------
// Synthetic signatures, each at its exact offset

fn ext_superblock(compat: u32, incompat: u32, ro_compat: u32) -> Vec<u8> {
    let mut sb = vec![0u8; 1024];
    sb[24..28].copy_from_slice(&2u32.to_le_bytes()); // 4 KiB blocks
    sb[56..58].copy_from_slice(&[0x53, 0xef]);
    sb[92..96].copy_from_slice(&compat.to_le_bytes());
    sb[96..100].copy_from_slice(&incompat.to_le_bytes());
    sb[100..104].copy_from_slice(&ro_compat.to_le_bytes());
    sb
}

#[test]
fn synthetic_ext_versions_by_feature_flags() {
    let cases = [
        (ext_superblock(0, 0x0002, 0x0003), Signature::Ext2),
        (ext_superblock(0x0004, 0x0002, 0x0003), Signature::Ext3),
        (ext_superblock(0x0004, 0x0002 | 0x0040, 0x0003), Signature::Ext4), // extents
        (ext_superblock(0, 0x0002, 0x0003 | 0x0400), Signature::Ext4),      // metadata_csum
        (ext_superblock(0x0004, 0x0008, 0), Signature::ExtJournal),
    ];
    for (sb, signature) in cases {
        assert_eq!(image(8 * MIB, &[(1024, &sb)]), found(signature, 1080), "{signature:?}");
    }
    // An absurd block size (2^(10+20)) is not an ext superblock.
    let mut bad = ext_superblock(0, 0, 0);
    bad[24..28].copy_from_slice(&20u32.to_le_bytes());
    assert_eq!(image(8 * MIB, &[(1024, &bad)]), Some(ForeignData::NonZero { offset: 1024 + 24 }));
}

#[test]
fn synthetic_xfs_btrfs_squashfs_f2fs() {
    assert_eq!(image(8 * MIB, &[(0, b"XFSB\0\0\x10\0")]), found(Signature::Xfs, 0));
    assert_eq!(image(8 * MIB, &[(0, b"XFSB\0\0\x10\x01")]), Some(ForeignData::NonZero { offset: 0 }));
    assert_eq!(image(8 * MIB, &[(65_600, b"_BHRfS_M")]), found(Signature::Btrfs, 65_600));
    assert_eq!(image(8 * MIB, &[(0, b"hsqs"), (28, &[4, 0])]), found(Signature::Squashfs, 0));
    assert_eq!(image(8 * MIB, &[(0, b"sqsh"), (28, &[0, 3])]), found(Signature::Squashfs, 0));
    assert_eq!(image(8 * MIB, &[(0, b"hsqs"), (28, &[9, 0])]), Some(ForeignData::NonZero { offset: 0 }));
    let f2fs_sb: &[u8] = &[0x10, 0x20, 0xf5, 0xf2, 1, 0, 15, 0, 9, 0, 0, 0];
    assert_eq!(image(8 * MIB, &[(1024, f2fs_sb)]), found(Signature::F2fs, 1024));
    assert_eq!(image(8 * MIB, &[(5 * 1024, f2fs_sb)]), found(Signature::F2fs, 5 * 1024));
}

#[test]
fn synthetic_iso9660_ntfs_exfat() {
    assert_eq!(image(8 * MIB, &[(32_768, b"\x01CD001\x01")]), found(Signature::Iso9660, 32_769));
    assert_eq!(image(8 * MIB, &[(32_768, b"\x07CD001\x01")]), Some(ForeignData::NonZero { offset: 32_768 }));
    assert_eq!(image(8 * MIB, &[(0, b"\xebR\x90NTFS    ")]), found(Signature::Ntfs, 3));
    assert_eq!(image(8 * MIB, &[(0, b"\xebv\x90EXFAT   ")]), found(Signature::Exfat, 3));
}

/// A FAT boot sector: `sectors` of 512 bytes, one sector per cluster.
fn fat_boot_sector(sectors: u32, fat_length_16: u16, fat_length_32: u32, magic: Option<(usize, &[u8])>) -> Vec<u8> {
    let mut bs = vec![0u8; 512];
    bs[0..3].copy_from_slice(&[0xeb, 0x3c, 0x90]);
    bs[0x0b..0x0d].copy_from_slice(&512u16.to_le_bytes());
    bs[0x0d] = 1;
    bs[0x0e..0x10].copy_from_slice(&1u16.to_le_bytes());
    bs[0x10] = 2;
    bs[0x15] = 0xf8;
    bs[0x16..0x18].copy_from_slice(&fat_length_16.to_le_bytes());
    bs[0x20..0x24].copy_from_slice(&sectors.to_le_bytes());
    bs[0x24..0x28].copy_from_slice(&fat_length_32.to_le_bytes());
    if let Some((at, m)) = magic {
        bs[at..at + m.len()].copy_from_slice(m);
    }
    bs[510..512].copy_from_slice(&[0x55, 0xaa]);
    bs
}

#[test]
fn synthetic_fat_variants_and_their_sanity_checks() {
    let fat12 = fat_boot_sector(2000, 6, 0, Some((0x36, b"FAT12   ")));
    let fat16 = fat_boot_sector(20_000, 80, 0, Some((0x36, b"FAT16   ")));
    let fat32 = fat_boot_sector(600_000, 0, 4700, Some((0x52, b"FAT32   ")));
    let no_magic = fat_boot_sector(20_000, 80, 0, None);
    assert_eq!(image(8 * MIB, &[(0, &fat12)]), found(Signature::Fat12, 0));
    assert_eq!(image(8 * MIB, &[(0, &fat16)]), found(Signature::Fat16, 0));
    assert_eq!(image(8 * MIB, &[(0, &fat32)]), found(Signature::Fat32, 0));
    assert_eq!(image(8 * MIB, &[(0, &no_magic)]), found(Signature::Fat16, 0));
    // No FATs, or a media byte FAT never uses: a boot sector, not a FAT file system.
    let mut no_fats = fat16.clone();
    no_fats[0x10] = 0;
    assert_eq!(image(8 * MIB, &[(0, &no_fats)]), Some(ForeignData::NonZero { offset: 0 }));
    let mut bad_media = fat16.clone();
    bad_media[0x15] = 0x12;
    assert_eq!(image(8 * MIB, &[(0, &bad_media)]), Some(ForeignData::NonZero { offset: 0 }));
    // The cluster count decides FAT12 against FAT16, whatever the label string says...
    let counted_fat16 = fat_boot_sector(20_000, 80, 0, Some((0x36, b"FAT12   ")));
    assert_eq!(image(8 * MIB, &[(0, &counted_fat16)]), found(Signature::Fat16, 0));
    // ...and more clusters than FAT16 can address is no FAT file system at all.
    let too_many_clusters = fat_boot_sector(2_000_000, 6, 0, Some((0x36, b"FAT16   ")));
    assert_eq!(image(8 * MIB, &[(0, &too_many_clusters)]), Some(ForeignData::NonZero { offset: 0 }));
}

#[test]
fn synthetic_swap_at_every_page_size_and_hibernation() {
    for page in [4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB] {
        assert_eq!(image(8 * MIB, &[(page - 10, b"SWAPSPACE2")]), found(Signature::Swap, page - 10));
        assert_eq!(image(8 * MIB, &[(page - 10, b"SWAP-SPACE")]), found(Signature::Swap, page - 10));
    }
    assert_eq!(image(8 * MIB, &[(4086, b"S1SUSPEND")]), found(Signature::SwapSuspend, 4086));
    assert_eq!(image(8 * MIB, &[(4086, b"LINHIB0001")]), found(Signature::SwapSuspend, 4086));
}

fn luks_header(magic: &[u8; 6], version: u16, hdr_offset: u64) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..6].copy_from_slice(magic);
    h[6..8].copy_from_slice(&version.to_be_bytes());
    h[256..264].copy_from_slice(&hdr_offset.to_be_bytes());
    h
}

#[test]
fn synthetic_luks_headers() {
    assert_eq!(image(8 * MIB, &[(0, &luks_header(b"LUKS\xba\xbe", 1, 0))]), found(Signature::Luks1, 0));
    assert_eq!(image(8 * MIB, &[(0, &luks_header(b"LUKS\xba\xbe", 2, 0))]), found(Signature::Luks2, 0));
    assert_eq!(image(8 * MIB, &[(0, &luks_header(b"LUKS\xba\xbe", 7, 0))]), Some(ForeignData::NonZero { offset: 0 }));
    for at in [0x4000u64, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000] {
        let secondary = luks_header(b"SKUL\xba\xbe", 2, at);
        assert_eq!(image(8 * MIB, &[(at, &secondary)]), found(Signature::Luks2Secondary, at));
    }
    // A secondary header that does not name its own offset is not one.
    let misplaced = luks_header(b"SKUL\xba\xbe", 2, 0x8000);
    assert_eq!(image(8 * MIB, &[(0x4000, &misplaced)]), Some(ForeignData::NonZero { offset: 0x4000 }));
}

/// An LVM2 label as pvcreate writes it (checked against real pvcreate output on a loop
/// device): "LABELONE", its sector, a CRC, the offset 32 of the PV header, "LVM2 001", the
/// PV UUID.
fn lvm2_label(sector: u64) -> Vec<u8> {
    let mut l = vec![0u8; 512];
    l[..8].copy_from_slice(b"LABELONE");
    l[8..16].copy_from_slice(&sector.to_le_bytes());
    l[16..20].copy_from_slice(&0x181b_409d_u32.to_le_bytes());
    l[20..24].copy_from_slice(&32u32.to_le_bytes());
    l[24..32].copy_from_slice(b"LVM2 001");
    l[32..64].copy_from_slice(b"DyczHGN7Sxdc1lWbOPWn5Riz4y8hcHmh");
    l
}

#[test]
fn synthetic_lvm2_label_in_each_of_the_first_four_sectors() {
    for sector in 0..4u64 {
        assert_eq!(image(64 * MIB, &[(sector * 512, &lvm2_label(sector))]), found(Signature::Lvm2, sector * 512));
    }
    // A label that claims another sector than the one it sits in is not taken as one.
    assert_eq!(image(64 * MIB, &[(512, &lvm2_label(3))]), Some(ForeignData::NonZero { offset: 512 }));
}

/// An md v1.x superblock: magic, major_version 1, its own sector in `super_offset`.
fn md_v1_superblock(offset: u64) -> Vec<u8> {
    let mut sb = vec![0u8; 256];
    sb[0..4].copy_from_slice(&0xa92b_4efc_u32.to_le_bytes());
    sb[4..8].copy_from_slice(&1u32.to_le_bytes());
    sb[16..32].copy_from_slice(&[0x42; 16]); // set uuid
    sb[32..36].copy_from_slice(b"md0\0");
    sb[144..152].copy_from_slice(&(offset / 512).to_le_bytes());
    sb
}

#[test]
fn synthetic_md_raid_superblocks_at_each_version_place() {
    let size = 64 * MIB + 12 * KIB; // not 64 KiB aligned: the end offsets round down
    let v10 = (size & !4095) - 8 * KIB;
    assert_eq!(image(size, &[(0, &md_v1_superblock(0))]), found(Signature::MdRaidV11, 0));
    assert_eq!(image(size, &[(4096, &md_v1_superblock(4096))]), found(Signature::MdRaidV12, 4096));
    assert_eq!(image(size, &[(v10, &md_v1_superblock(v10))]), found(Signature::MdRaidV10, v10));
    // v0.90: the size rounded down to 64 KiB, minus 64 KiB; either byte order.
    let v090 = 64 * MIB - 64 * KIB;
    let mut le = vec![0u8; 64];
    le[0..4].copy_from_slice(&0xa92b_4efc_u32.to_le_bytes());
    le[8..12].copy_from_slice(&90u32.to_le_bytes());
    let mut be = vec![0u8; 64];
    be[0..4].copy_from_slice(&0xa92b_4efc_u32.to_be_bytes());
    be[8..12].copy_from_slice(&90u32.to_be_bytes());
    assert_eq!(image(size, &[(v090, &le)]), found(Signature::MdRaidV090, v090));
    assert_eq!(image(size, &[(v090, &be)]), found(Signature::MdRaidV090, v090));
    // A v1.2 superblock at the wrong place names the wrong sector: only non-zero data.
    assert_eq!(image(size, &[(0, &md_v1_superblock(4096))]), Some(ForeignData::NonZero { offset: 0 }));
    // The member of a v1.0 array holds a file system at its start; the array is what counts.
    let ext4 = ext_superblock(0x0004, 0x0042, 0x0003);
    assert_eq!(image(size, &[(1024, &ext4), (v10, &md_v1_superblock(v10))]), found(Signature::MdRaidV10, v10));
}

#[test]
fn synthetic_zfs_uberblocks_in_each_label_and_byte_order() {
    let size = 128 * MIB + 100 * KIB; // not 256 KiB aligned: labels 2 and 3 round down
    let aligned_end = size - size % (256 * KIB);
    let magic_le = 0x00ba_b10c_u64.to_le_bytes();
    let magic_be = 0x00ba_b10c_u64.to_be_bytes();
    let label2 = aligned_end - 512 * KIB;
    let label3 = aligned_end - 256 * KIB;
    let cases: [(u64, &[u8]); 6] = [
        (128 * KIB, &magic_le),                       // label 0, first slot
        (128 * KIB + 5 * KIB, &magic_be),             // label 0, a later 1 KiB slot, big-endian
        (256 * KIB + 128 * KIB + 8 * KIB, &magic_le), // label 1, an 8 KiB-slot ring
        (label2 + 128 * KIB, &magic_le),              // label 2, in the last MiB
        (label3 + 255 * KIB, &magic_be),              // label 3, last slot
        (label3 + 128 * KIB + 4 * KIB, &magic_le),
    ];
    for (at, magic) in cases {
        assert_eq!(image(size, &[(at, magic)]), found(Signature::Zfs, at), "uberblock at {at}");
    }
    // Outside the ring (the nvlist area) or off a slot boundary, it is only data.
    assert_eq!(image(size, &[(16 * KIB, &magic_le)]), Some(ForeignData::NonZero { offset: 16 * KIB }));
    assert_eq!(image(size, &[(128 * KIB + 8, &magic_le)]), Some(ForeignData::NonZero { offset: 128 * KIB + 8 }));
}

#[test]
fn synthetic_bcache_and_bcachefs() {
    let bcache = b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca\x82\x65\xf5\x7f\x48\xba\x6d\x81";
    let bcachefs = b"\xc6\x85\x73\xf6\x66\xce\x90\xa9\xd9\x6a\x60\xcf\x80\x3d\xf7\xef";
    assert_eq!(image(8 * MIB, &[(4120, bcache)]), found(Signature::Bcache, 4120));
    assert_eq!(image(8 * MIB, &[(4120, bcachefs)]), found(Signature::Bcachefs, 4120));
}

fn mbr_with(entries: &[(u8, u8, u32, u32)]) -> Vec<u8> {
    let mut s = vec![0u8; 512];
    for (i, &(boot, kind, start, sectors)) in entries.iter().enumerate() {
        let e = 446 + 16 * i;
        s[e] = boot;
        s[e + 4] = kind;
        s[e + 8..e + 12].copy_from_slice(&start.to_le_bytes());
        s[e + 12..e + 16].copy_from_slice(&sectors.to_le_bytes());
    }
    s[510..512].copy_from_slice(&[0x55, 0xaa]);
    s
}

fn gpt_header(my_lba: u64) -> Vec<u8> {
    let mut h = vec![0u8; 92];
    h[..8].copy_from_slice(b"EFI PART");
    h[8..12].copy_from_slice(&0x0001_0000_u32.to_le_bytes());
    h[12..16].copy_from_slice(&92u32.to_le_bytes());
    h[24..32].copy_from_slice(&my_lba.to_le_bytes());
    h
}

#[test]
fn synthetic_partition_tables() {
    let size = 64 * MIB;
    let protective = mbr_with(&[(0, 0xee, 1, u32::MAX)]);
    assert_eq!(image(size, &[(0, &protective), (512, &gpt_header(1))]), found(Signature::Gpt, 512));
    assert_eq!(image(size, &[(0, &protective), (4096, &gpt_header(1))]), found(Signature::Gpt, 4096));
    assert_eq!(image(size, &[(size - 512, &gpt_header(size / 512 - 1))]), found(Signature::GptBackup, size - 512));
    assert_eq!(image(size, &[(size - 4096, &gpt_header(size / 4096 - 1))]), found(Signature::GptBackup, size - 4096));
    assert_eq!(image(size, &[(0, &protective)]), found(Signature::GptProtectiveMbr, 446));
    // A header naming the wrong LBA is not a GPT header.
    assert_eq!(image(size, &[(512, &gpt_header(2))]), Some(ForeignData::NonZero { offset: 512 }));

    assert_eq!(image(size, &[(0, &mbr_with(&[(0x80, 0x83, 2048, 100_000)]))]), found(Signature::Mbr, 446));
    assert_eq!(
        image(size, &[(0, &mbr_with(&[(0, 0, 0, 0), (0, 0, 0, 0), (0, 0x07, 63, 10)]))]),
        found(Signature::Mbr, 446)
    );
    // A boot signature without a partition in use, or with a bogus boot indicator, is only data.
    assert_eq!(image(size, &[(0, &mbr_with(&[]))]), Some(ForeignData::NonZero { offset: 510 }));
    assert_eq!(image(size, &[(0, &mbr_with(&[(0x12, 0x83, 2048, 100)]))]), Some(ForeignData::NonZero { offset: 446 }));
}

#[test]
fn a_fat_boot_sector_is_not_taken_for_a_partition_table() {
    // A FAT boot sector has 0x55AA at 510 and non-zero bytes in the partition entries area.
    let mut fat16 = fat_boot_sector(20_000, 80, 0, Some((0x36, b"FAT16   ")));
    fat16[446..462].copy_from_slice(&[0, 1, 2, 3, 0x83, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    assert_eq!(image(8 * MIB, &[(0, &fat16)]), found(Signature::Fat16, 0));
}
