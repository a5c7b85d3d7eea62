//! The foreign-data probe: what a device or image file already holds, so that `pool create`
//! can refuse to format over a file system, a partition table or a volume manager's label
//! unless told `--force`, and say what it found.
//!
//! Only the first and the last MiB are read ([`PROBE_WINDOW_BYTES`]; the whole file when it
//! is 2 MiB or smaller). That window holds every signature below: file systems and volume
//! managers put their primary superblock near the start, and the formats that keep a copy at
//! the end (GPT's backup header, md RAID v0.90 and v1.0, ZFS labels 2 and 3) put it within
//! the last MiB. The trade-off: data that sits only in the middle of a device goes unseen.
//! Reading a whole multi-terabyte disk would take hours to add little, since whatever put
//! data there also put its metadata at one end.
//!
//! Any non-zero byte in the window is a finding. It is named when a signature is recognised
//! and reported as "non-zero data at byte N" otherwise. Strata's own labels are reported as
//! [`ForeignData::Strata`], apart from foreign data, so the caller (which decodes them
//! itself) can word its refusal.
//!
//! Offsets and checks follow util-linux libblkid's probers (`libblkid/src/superblocks/*.c`
//! and `libblkid/src/partitions/{dos,gpt}.c`), cited at each detector. Detection is a
//! little looser than libblkid's: no checksums are verified. A missed name costs nothing,
//! because the bytes are still refused as non-zero data. A wrong name would mislead, so
//! every magic shorter than eight bytes also gets a plausibility check.
//!
//! Detectors run in libblkid's order (RAID and volume managers, then file systems, then
//! partition tables), and the first match is reported. A RAID member's data area may hold a
//! file system at its start, and the member is what formatting would break.
//!
//! Every read of the window goes through `Window::bytes`, which returns None outside
//! it, so damaged or short input never panics.

use crate::format::label::LABEL_MAGIC;
use crate::format::logdev::LOG_DEVICE_MAGIC;
use crate::format::member::{MEMBER_LABEL_COPY_1, MEMBER_MAGIC};
use crate::format::LABEL_SIZE;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes examined at each end of a device. One MiB covers every detector here: the
/// furthest from an end are ZFS label 2's uberblock ring (up to 768 KiB before the end)
/// and the LUKS2 secondary header (up to 512 KiB after the start).
pub const PROBE_WINDOW_BYTES: u64 = 1 << 20;

const KIB: u64 = 1024;

/// What a device or image file already holds, found in its first and last MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignData {
    /// A recognised signature; `offset` is the byte its [`Signature::located`] part sits at.
    Signature { signature: Signature, offset: u64 },
    /// A Strata label: the caller decides whether this is the pool it means to replace.
    Strata { label: StrataLabel, offset: u64 },
    /// Data that matches no known signature; `offset` is the first non-zero byte.
    NonZero { offset: u64 },
}

impl ForeignData {
    /// True for Strata's own labels, which the caller words differently.
    pub fn is_strata(&self) -> bool {
        matches!(self, ForeignData::Strata { .. })
    }

    /// The byte offset the finding was made at.
    pub fn offset(&self) -> u64 {
        match *self {
            ForeignData::Signature { offset, .. }
            | ForeignData::Strata { offset, .. }
            | ForeignData::NonZero { offset } => offset,
        }
    }
}

impl fmt::Display for ForeignData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForeignData::Signature { signature, offset } => {
                write!(f, "{} ({} at byte {offset})", signature.description(), signature.located())
            }
            ForeignData::Strata { label, offset } => write!(f, "{label} (label at byte {offset})"),
            ForeignData::NonZero { offset } => write!(f, "non-zero data at byte {offset}"),
        }
    }
}

/// Which Strata label was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrataLabel {
    /// A pool label (`format::label`), copy 0 at byte 0 or copy 1 at `LABEL_SIZE`.
    Pool,
    /// A separate intent-log device's label (`format::logdev`), at byte 0.
    LogDevice,
    /// A mirror member's label (`format::member`), copy 0 at byte 0 or copy 1 at
    /// `MEMBER_LABEL_COPY_1`.
    Member,
}

impl fmt::Display for StrataLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrataLabel::Pool => "a Strata pool",
            StrataLabel::LogDevice => "a Strata log device",
            StrataLabel::Member => "a device of a Strata mirror",
        })
    }
}

/// A recognised foreign signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Signature {
    Ext2,
    Ext3,
    Ext4,
    /// An ext3/ext4 external journal device (`mke2fs -O journal_dev`).
    ExtJournal,
    Xfs,
    Btrfs,
    F2fs,
    Squashfs,
    Iso9660,
    Ntfs,
    Exfat,
    Fat12,
    Fat16,
    Fat32,
    Swap,
    /// A swap area that holds a hibernation image.
    SwapSuspend,
    Luks1,
    Luks2,
    /// A LUKS2 secondary header (the primary one is gone).
    Luks2Secondary,
    Lvm2,
    MdRaidV090,
    MdRaidV10,
    MdRaidV11,
    MdRaidV12,
    Zfs,
    Bcache,
    Bcachefs,
    Gpt,
    GptBackup,
    /// A protective MBR (partition type 0xEE) whose GPT header is gone.
    GptProtectiveMbr,
    Mbr,
}

impl Signature {
    /// What the device holds, as a noun phrase: "an ext4 file system".
    pub fn description(&self) -> &'static str {
        use Signature::*;
        match self {
            Ext2 => "an ext2 file system",
            Ext3 => "an ext3 file system",
            Ext4 => "an ext4 file system",
            ExtJournal => "an ext3/ext4 external journal",
            Xfs => "an XFS file system",
            Btrfs => "a btrfs file system",
            F2fs => "an F2FS file system",
            Squashfs => "a squashfs image",
            Iso9660 => "an ISO 9660 file system",
            Ntfs => "an NTFS file system",
            Exfat => "an exFAT file system",
            Fat12 => "a FAT12 file system",
            Fat16 => "a FAT16 file system",
            Fat32 => "a FAT32 file system",
            Swap => "a Linux swap area",
            SwapSuspend => "a Linux swap area holding a hibernation image",
            Luks1 => "a LUKS1 encrypted volume",
            Luks2 | Luks2Secondary => "a LUKS2 encrypted volume",
            Lvm2 => "an LVM2 physical volume",
            MdRaidV090 | MdRaidV10 | MdRaidV11 | MdRaidV12 => "a Linux md RAID member",
            Zfs => "a ZFS pool member",
            Bcache => "a bcache device",
            Bcachefs => "a bcachefs file system",
            Gpt | GptBackup | GptProtectiveMbr => "a GPT partition table",
            Mbr => "a DOS/MBR partition table",
        }
    }

    /// The structure found at the reported offset: "superblock magic".
    pub fn located(&self) -> &'static str {
        use Signature::*;
        match self {
            Ext2 | Ext3 | Ext4 | ExtJournal | Btrfs | Bcache | Bcachefs => "superblock magic",
            Xfs | F2fs | Squashfs => "superblock",
            Iso9660 => "volume descriptor magic",
            Ntfs | Exfat => "boot sector OEM id",
            Fat12 | Fat16 | Fat32 => "boot sector",
            Swap | SwapSuspend => "signature",
            Luks1 | Luks2 => "header",
            Lvm2 => "label",
            Luks2Secondary => "secondary header",
            MdRaidV090 => "v0.90 superblock",
            MdRaidV10 => "v1.0 superblock",
            MdRaidV11 => "v1.1 superblock",
            MdRaidV12 => "v1.2 superblock",
            Zfs => "uberblock magic",
            Gpt => "header",
            GptBackup => "backup header",
            GptProtectiveMbr => "protective MBR",
            Mbr => "partition entries",
        }
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// Probe the file or block device at `path`: open it read-only and read its first and last
/// MiB with ordinary (page-cache) reads. An error names the path; a path that does not
/// exist is an error too (`NotFound`): the caller decides whether that is fine.
pub fn probe_foreign_data(path: &Path) -> io::Result<Option<ForeignData>> {
    let context = |e: io::Error| io::Error::new(e.kind(), format!("probe {} for existing data: {e}", path.display()));
    let mut file = File::open(path).map_err(context)?;
    probe_reader(&mut file).map_err(context)
}

/// Probe any seekable reader. The size comes from seeking to the end, which is what works
/// for a block device (its metadata length is 0).
pub fn probe_reader<R: Read + Seek>(reader: &mut R) -> io::Result<Option<ForeignData>> {
    let size = reader.seek(SeekFrom::End(0))?;
    let (head_len, tail_len) =
        if size <= 2 * PROBE_WINDOW_BYTES { (size, 0) } else { (PROBE_WINDOW_BYTES, PROBE_WINDOW_BYTES) };
    let mut head = vec![0u8; usize::try_from(head_len).expect("at most 2 MiB fits usize")];
    reader.seek(SeekFrom::Start(0))?;
    reader.read_exact(&mut head)?;
    let mut tail = vec![0u8; usize::try_from(tail_len).expect("at most 1 MiB fits usize")];
    reader.seek(SeekFrom::Start(size - tail_len))?;
    reader.read_exact(&mut tail)?;
    Ok(probe_window(size, &head, &tail))
}

/// The pure probe: `head` holds the device's bytes from offset 0, `tail` the bytes that end
/// at `device_size`; either may be empty. Bytes in neither are taken as unknown, not zero.
pub fn probe_window(device_size: u64, head: &[u8], tail: &[u8]) -> Option<ForeignData> {
    // A seek returns at most i64::MAX, so offsets near the end cannot overflow.
    assert!(device_size <= i64::MAX as u64, "device size {device_size} beyond what a seek can return");
    assert!(head.len() as u64 <= device_size, "head of {} bytes on a {device_size}-byte device", head.len());
    assert!(tail.len() as u64 <= device_size, "tail of {} bytes on a {device_size}-byte device", tail.len());
    let w = Window { size: device_size, head, tail };
    if let Some(found) = strata(&w) {
        return Some(found);
    }
    if let Some((signature, offset)) = DETECTORS.iter().find_map(|detect| detect(&w)) {
        return Some(ForeignData::Signature { signature, offset });
    }
    w.first_non_zero().map(|offset| ForeignData::NonZero { offset })
}

/// In libblkid's order: RAID and volume managers, file systems, partition tables; the
/// LUKS2 secondary header last, as libblkid only looks for it when nothing else matched.
const DETECTORS: &[fn(&Window) -> Option<(Signature, u64)>] = &[
    md_raid,
    bcache,
    lvm2,
    luks,
    ntfs_exfat,
    fat,
    swap,
    xfs,
    ext,
    iso9660,
    zfs,
    squashfs,
    btrfs,
    f2fs,
    gpt,
    mbr,
    luks2_secondary,
];

/// The bytes read from a device: `head` from offset 0, `tail` ending at `size`.
struct Window<'a> {
    size: u64,
    head: &'a [u8],
    tail: &'a [u8],
}

impl<'a> Window<'a> {
    /// `len` bytes at `offset`, if they all lie in the head or all in the tail.
    fn bytes(&self, offset: u64, len: usize) -> Option<&'a [u8]> {
        let end = offset.checked_add(u64::try_from(len).ok()?)?;
        if end <= self.head.len() as u64 {
            return self.head.get(usize::try_from(offset).ok()?..usize::try_from(end).ok()?);
        }
        let tail_start = self.size.checked_sub(self.tail.len() as u64)?;
        if offset < tail_start || end > self.size {
            return None;
        }
        let start = usize::try_from(offset - tail_start).ok()?;
        self.tail.get(start..start.checked_add(len)?)
    }

    fn is(&self, offset: u64, magic: &[u8]) -> bool {
        self.bytes(offset, magic.len()) == Some(magic)
    }

    fn array<const N: usize>(&self, offset: u64) -> Option<[u8; N]> {
        self.bytes(offset, N)?.try_into().ok()
    }

    fn u8(&self, offset: u64) -> Option<u8> {
        self.bytes(offset, 1)?.first().copied()
    }

    fn le_u16(&self, offset: u64) -> Option<u16> {
        self.array(offset).map(u16::from_le_bytes)
    }

    fn be_u16(&self, offset: u64) -> Option<u16> {
        self.array(offset).map(u16::from_be_bytes)
    }

    fn le_u32(&self, offset: u64) -> Option<u32> {
        self.array(offset).map(u32::from_le_bytes)
    }

    fn be_u32(&self, offset: u64) -> Option<u32> {
        self.array(offset).map(u32::from_be_bytes)
    }

    fn le_u64(&self, offset: u64) -> Option<u64> {
        self.array(offset).map(u64::from_le_bytes)
    }

    fn be_u64(&self, offset: u64) -> Option<u64> {
        self.array(offset).map(u64::from_be_bytes)
    }

    fn first_non_zero(&self) -> Option<u64> {
        if let Some(i) = self.head.iter().position(|&b| b != 0) {
            return Some(i as u64);
        }
        let tail_start = self.size - self.tail.len() as u64;
        self.tail.iter().position(|&b| b != 0).map(|i| tail_start + i as u64)
    }
}

/// Strata's labels (`format::label`, `format::logdev`): copy 0 of the pool label or the log
/// device label at byte 0, or copy 1 of the pool label at `LABEL_SIZE` if copy 0 is gone.
fn strata(w: &Window) -> Option<ForeignData> {
    let (label, offset) = if w.is(0, &LABEL_MAGIC) {
        (StrataLabel::Pool, 0)
    } else if w.is(0, &LOG_DEVICE_MAGIC) {
        (StrataLabel::LogDevice, 0)
    } else if w.is(0, &MEMBER_MAGIC) {
        (StrataLabel::Member, 0)
    } else if w.is(MEMBER_LABEL_COPY_1, &MEMBER_MAGIC) {
        (StrataLabel::Member, MEMBER_LABEL_COPY_1)
    } else if w.is(LABEL_SIZE, &LABEL_MAGIC) {
        (StrataLabel::Pool, LABEL_SIZE)
    } else {
        return None;
    };
    Some(ForeignData::Strata { label, offset })
}

/// linux_raid.c: magic 0xa92b4efc. v1.x little-endian with major_version 1 and its own
/// sector in `super_offset` (byte 144): v1.1 at 0, v1.2 at 4 KiB, v1.0 at the device size
/// rounded down to 4 KiB minus 8 KiB. v0.90 in either byte order at the size rounded down
/// to 64 KiB minus 64 KiB, with major_version 0.
fn md_raid(w: &Window) -> Option<(Signature, u64)> {
    const MD_SB_MAGIC: u32 = 0xa92b_4efc;
    const MD_RESERVED_BYTES: u64 = 64 * KIB;
    let v1_at = |offset: u64| {
        w.le_u32(offset) == Some(MD_SB_MAGIC)
            && w.le_u32(offset + 4) == Some(1)
            && w.le_u64(offset + 144) == Some(offset / 512)
    };
    if w.size > MD_RESERVED_BYTES {
        let offset = (w.size & !(MD_RESERVED_BYTES - 1)) - MD_RESERVED_BYTES;
        let le = w.le_u32(offset) == Some(MD_SB_MAGIC) && w.le_u32(offset + 4) == Some(0);
        let be = w.be_u32(offset) == Some(MD_SB_MAGIC) && w.be_u32(offset + 4) == Some(0);
        if le || be {
            return Some((Signature::MdRaidV090, offset));
        }
        if let Some(offset) = (w.size & !(4 * KIB - 1)).checked_sub(8 * KIB) {
            if v1_at(offset) {
                return Some((Signature::MdRaidV10, offset));
            }
        }
    }
    if v1_at(0) {
        return Some((Signature::MdRaidV11, 0));
    }
    if v1_at(4 * KIB) {
        return Some((Signature::MdRaidV12, 4 * KIB));
    }
    None
}

/// bcache.c: the superblock at 4 KiB, its 16-byte magic at +24 (after csum, offset and
/// version, three u64s). bcachefs uses the same place with its own magic.
fn bcache(w: &Window) -> Option<(Signature, u64)> {
    const BCACHE_MAGIC: [u8; 16] = *b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca\x82\x65\xf5\x7f\x48\xba\x6d\x81";
    const BCACHEFS_MAGIC: [u8; 16] = *b"\xc6\x85\x73\xf6\x66\xce\x90\xa9\xd9\x6a\x60\xcf\x80\x3d\xf7\xef";
    const MAGIC_AT: u64 = 4 * KIB + 24;
    if w.is(MAGIC_AT, &BCACHE_MAGIC) {
        return Some((Signature::Bcache, MAGIC_AT));
    }
    if w.is(MAGIC_AT, &BCACHEFS_MAGIC) {
        return Some((Signature::Bcachefs, MAGIC_AT));
    }
    None
}

/// lvm.c: "LABELONE" at the start of one of sectors 0..=3, "LVM2 001" at +24, and the
/// label's own sector number in `sector_xl` (+8).
fn lvm2(w: &Window) -> Option<(Signature, u64)> {
    (0..4u64).find_map(|sector| {
        let offset = sector * 512;
        let found = w.is(offset, b"LABELONE") && w.is(offset + 24, b"LVM2 001") && w.le_u64(offset + 8) == Some(sector);
        found.then_some((Signature::Lvm2, offset))
    })
}

/// luks.c: "LUKS\xba\xbe" at 0, then a big-endian u16 version, 1 or 2.
fn luks(w: &Window) -> Option<(Signature, u64)> {
    if !w.is(0, b"LUKS\xba\xbe") {
        return None;
    }
    match w.be_u16(6)? {
        1 => Some((Signature::Luks1, 0)),
        2 => Some((Signature::Luks2, 0)),
        _ => None,
    }
}

/// luks.c: a LUKS2 secondary header, "SKUL\xba\xbe", version 2, at one of the offsets
/// cryptsetup may put it, with that offset in its own big-endian `hdr_offset` (byte 256).
fn luks2_secondary(w: &Window) -> Option<(Signature, u64)> {
    const OFFSETS: [u64; 9] = [0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000];
    OFFSETS.into_iter().find_map(|offset| {
        let found =
            w.is(offset, b"SKUL\xba\xbe") && w.be_u16(offset + 6) == Some(2) && w.be_u64(offset + 256) == Some(offset);
        found.then_some((Signature::Luks2Secondary, offset))
    })
}

/// ntfs.c and exfat.c: the OEM id "NTFS    " or "EXFAT   " at byte 3 of the boot sector.
fn ntfs_exfat(w: &Window) -> Option<(Signature, u64)> {
    if w.is(3, b"NTFS    ") {
        return Some((Signature::Ntfs, 3));
    }
    if w.is(3, b"EXFAT   ") {
        return Some((Signature::Exfat, 3));
    }
    None
}

/// vfat.c: a boot sector with a FAT magic string (at 0x52 for FAT32, 0x36 otherwise), or
/// without one a jump instruction (0xEB/0xE9) and the 0x55AA boot signature; then the BIOS
/// parameter block must be sane (`fat_valid_superblock`). The cluster count decides FAT12
/// against FAT16; FAT32 is the one with its FAT length in the 32-bit field.
fn fat(w: &Window) -> Option<(Signature, u64)> {
    const FAT12_MAX: u32 = 0xff4;
    const FAT16_MAX: u32 = 0xfff4;
    const FAT32_MAX: u32 = 0x0fff_fff6;
    let magic_strings: [(u64, &[u8]); 6] = [
        (0x52, b"MSWIN"),
        (0x52, b"FAT32   "),
        (0x36, b"MSDOS"),
        (0x36, b"FAT16   "),
        (0x36, b"FAT12   "),
        (0x36, b"FAT     "),
    ];
    if !magic_strings.iter().any(|(offset, magic)| w.is(*offset, magic)) {
        let jump = matches!(w.u8(0)?, 0xeb | 0xe9);
        // OS/2 and DFSee put a FAT-like pseudo boot sector in front of JFS and HPFS.
        if !jump || !w.is(510, &[0x55, 0xaa]) || w.is(0x36, b"JFS     ") || w.is(0x36, b"HPFS    ") {
            return None;
        }
    }
    let sector_size = u32::from(w.le_u16(0x0b)?);
    let cluster_size = u32::from(w.u8(0x0d)?);
    let reserved = u32::from(w.le_u16(0x0e)?);
    let fats = u32::from(w.u8(0x10)?);
    let dir_entries = u32::from(w.le_u16(0x11)?);
    let sectors_16 = u32::from(w.le_u16(0x13)?);
    let media = w.u8(0x15)?;
    let fat_length_16 = u32::from(w.le_u16(0x16)?);
    let total_sectors_32 = w.le_u32(0x20)?;
    let fat_length_32 = w.le_u32(0x24)?;
    if fats == 0
        || reserved == 0
        || !(media >= 0xf8 || media == 0xf0)
        || !cluster_size.is_power_of_two()
        || !sector_size.is_power_of_two()
        || !(512..=4096).contains(&sector_size)
    {
        return None;
    }
    let sectors = if sectors_16 == 0 { total_sectors_32 } else { sectors_16 };
    let fat_length = if fat_length_16 == 0 { fat_length_32 } else { fat_length_16 };
    let dir_sectors = (dir_entries * 32).div_ceil(sector_size);
    let meta_sectors = reserved.checked_add(fat_length.checked_mul(fats)?)?.checked_add(dir_sectors)?;
    let clusters = sectors.checked_sub(meta_sectors)? / cluster_size;
    let (signature, max) = if fat_length_16 == 0 && fat_length_32 != 0 {
        (Signature::Fat32, FAT32_MAX)
    } else if clusters > FAT12_MAX {
        (Signature::Fat16, FAT16_MAX)
    } else {
        (Signature::Fat12, FAT12_MAX)
    };
    (clusters <= max).then_some((signature, 0))
}

/// swap.c: "SWAPSPACE2" (v1) or "SWAP-SPACE" (v0) in the last 10 bytes of the first page,
/// for page sizes 4 to 64 KiB; a hibernation image replaces it with one of the suspend
/// signatures.
fn swap(w: &Window) -> Option<(Signature, u64)> {
    const SUSPEND: [&[u8]; 4] = [b"S1SUSPEND", b"S2SUSPEND", b"ULSUSPEND", b"LINHIB0001"];
    [4, 8, 16, 32, 64].into_iter().find_map(|page_kib| {
        let offset = page_kib * KIB - 10;
        if w.is(offset, b"SWAPSPACE2") || w.is(offset, b"SWAP-SPACE") {
            Some((Signature::Swap, offset))
        } else if SUSPEND.iter().any(|magic| w.is(offset, magic)) {
            Some((Signature::SwapSuspend, offset))
        } else {
            None
        }
    })
}

/// xfs.c: "XFSB" at 0, and a big-endian block size (byte 4) that is a power of two from
/// 512 bytes to 64 KiB.
fn xfs(w: &Window) -> Option<(Signature, u64)> {
    let block_size = w.be_u32(4)?;
    let plausible = block_size.is_power_of_two() && (512..=64 * 1024).contains(&block_size);
    (w.is(0, b"XFSB") && plausible).then_some((Signature::Xfs, 0))
}

/// ext.c: the superblock at 1 KiB, magic 0xEF53 (little-endian) at +56 = byte 1080, and a
/// block size of at most 64 KiB (`s_log_block_size` at +24 at most 6). The feature flags
/// (compat at +92, incompat at +96, ro_compat at +100) tell the versions apart as libblkid
/// does: a journal device has INCOMPAT_JOURNAL_DEV; ext4 has a feature ext3 lacks; ext3
/// has COMPAT_HAS_JOURNAL; the rest is ext2.
fn ext(w: &Window) -> Option<(Signature, u64)> {
    const SB: u64 = 1024;
    const MAGIC_AT: u64 = SB + 56;
    const COMPAT_HAS_JOURNAL: u32 = 0x0004;
    const INCOMPAT_JOURNAL_DEV: u32 = 0x0008;
    // FILETYPE | RECOVER | META_BG
    const EXT3_INCOMPAT_SUPP: u32 = 0x0002 | 0x0004 | 0x0010;
    // SPARSE_SUPER | LARGE_FILE | BTREE_DIR
    const EXT3_RO_COMPAT_SUPP: u32 = 0x0001 | 0x0002 | 0x0004;
    if !w.is(MAGIC_AT, &[0x53, 0xef]) || w.le_u32(SB + 24)? > 6 {
        return None;
    }
    let compat = w.le_u32(SB + 92)?;
    let incompat = w.le_u32(SB + 96)?;
    let ro_compat = w.le_u32(SB + 100)?;
    let signature = if incompat & INCOMPAT_JOURNAL_DEV != 0 {
        Signature::ExtJournal
    } else if incompat & !EXT3_INCOMPAT_SUPP != 0 || ro_compat & !EXT3_RO_COMPAT_SUPP != 0 {
        Signature::Ext4
    } else if compat & COMPAT_HAS_JOURNAL != 0 {
        Signature::Ext3
    } else {
        Signature::Ext2
    };
    Some((signature, MAGIC_AT))
}

/// iso9660.c: "CD001" at byte 1 of the first volume descriptor (sector 16 of 2 KiB, byte
/// 32769), whose type byte is boot record (0), primary (1), supplementary (2), partition
/// (3) or terminator (255).
fn iso9660(w: &Window) -> Option<(Signature, u64)> {
    const DESCRIPTOR: u64 = 16 * 2048;
    let plausible = matches!(w.u8(DESCRIPTOR)?, 0..=3 | 0xff);
    (plausible && w.is(DESCRIPTOR + 1, b"CD001")).then_some((Signature::Iso9660, DESCRIPTOR + 1))
}

/// zfs.c and OpenZFS vdev_label.c: four 256 KiB labels, two at the start and two ending at
/// the device size rounded down to 256 KiB. Each ends in a 128 KiB uberblock ring of
/// slots of at least 1 KiB; a written slot starts with the uberblock magic 0x00bab10c in
/// the writer's byte order. (libblkid parses the label's nvlist instead; the ring needs no
/// parser and every imported pool has written it.)
fn zfs(w: &Window) -> Option<(Signature, u64)> {
    const LABEL: u64 = 256 * KIB;
    const RING: u64 = 128 * KIB;
    const SLOT: u64 = KIB;
    const UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;
    let end_labels = (w.size - w.size % LABEL).checked_sub(2 * LABEL);
    let labels = [Some(0), Some(LABEL), end_labels, end_labels.map(|l| l + LABEL)];
    labels.into_iter().flatten().find_map(|label| {
        (label + RING..label + LABEL).step_by(SLOT as usize).find_map(|slot| {
            let found = w.le_u64(slot) == Some(UBERBLOCK_MAGIC) || w.be_u64(slot) == Some(UBERBLOCK_MAGIC);
            found.then_some((Signature::Zfs, slot))
        })
    })
}

/// squashfs.c: "hsqs" at 0 (little-endian, version 4 and some earlier) or "sqsh"
/// (big-endian, version 3 and earlier), with a major version (byte 28) of 1 to 4.
fn squashfs(w: &Window) -> Option<(Signature, u64)> {
    let major = if w.is(0, b"hsqs") {
        w.le_u16(28)?
    } else if w.is(0, b"sqsh") {
        w.be_u16(28)?
    } else {
        return None;
    };
    (1..=4).contains(&major).then_some((Signature::Squashfs, 0))
}

/// btrfs.c: the primary superblock at 64 KiB, "_BHRfS_M" at +64 = byte 65600. (Its copies
/// at 64 MiB and 256 GiB are outside the window.)
fn btrfs(w: &Window) -> Option<(Signature, u64)> {
    const MAGIC_AT: u64 = 64 * KIB + 64;
    w.is(MAGIC_AT, b"_BHRfS_M").then_some((Signature::Btrfs, MAGIC_AT))
}

/// f2fs.c: magic 0xF2F52010 (little-endian) at 1 KiB, the second superblock's at 5 KiB,
/// with a log2 sector size (+8) of 9 to 12.
fn f2fs(w: &Window) -> Option<(Signature, u64)> {
    [KIB, 5 * KIB].into_iter().find_map(|offset| {
        let found = w.is(offset, &[0x10, 0x20, 0xf5, 0xf2]) && (9..=12).contains(&w.le_u32(offset + 8)?);
        found.then_some((Signature::F2fs, offset))
    })
}

/// gpt.c: "EFI PART" at the start of LBA 1 (byte 512 or 4096, by logical sector size) with
/// `my_lba` (+24) = 1; or the backup header in the last LBA, its `my_lba` = that LBA.
fn gpt(w: &Window) -> Option<(Signature, u64)> {
    let header_at = |lba: u64, sector: u64| w.is(lba * sector, b"EFI PART") && w.le_u64(lba * sector + 24) == Some(lba);
    for sector in [512, 4096] {
        if header_at(1, sector) {
            return Some((Signature::Gpt, sector));
        }
    }
    for sector in [512, 4096] {
        if let Some(last_lba) = (w.size / sector).checked_sub(1) {
            if last_lba > 1 && header_at(last_lba, sector) {
                return Some((Signature::GptBackup, last_lba * sector));
            }
        }
    }
    None
}

/// dos.c: the 0x55AA signature at 510, every boot indicator 0 or 0x80, and at least one
/// partition entry in use (type and sector count non-zero). Entries are 16 bytes from 446:
/// boot indicator +0, type +4, start +8, sectors +12. A type 0xEE entry is a protective
/// MBR, whose GPT header the GPT detector did not find.
fn mbr(w: &Window) -> Option<(Signature, u64)> {
    const ENTRIES: u64 = 446;
    const GPT_PROTECTIVE: u8 = 0xee;
    if !w.is(510, &[0x55, 0xaa]) {
        return None;
    }
    let mut in_use = false;
    let mut protective = false;
    for entry in (0..4).map(|i| ENTRIES + 16 * i) {
        if !matches!(w.u8(entry)?, 0 | 0x80) {
            return None;
        }
        let kind = w.u8(entry + 4)?;
        protective |= kind == GPT_PROTECTIVE;
        in_use |= kind != 0 && w.le_u32(entry + 12)? != 0;
    }
    match (protective, in_use) {
        (true, _) => Some((Signature::GptProtectiveMbr, ENTRIES)),
        (false, true) => Some((Signature::Mbr, ENTRIES)),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_reads_only_inside_head_or_tail() {
        let head = [1u8, 2, 3, 4];
        let tail = [5u8, 6];
        let w = Window { size: 100, head: &head, tail: &tail };
        assert_eq!(w.bytes(0, 4), Some(&head[..]));
        assert_eq!(w.bytes(2, 3), None);
        assert_eq!(w.bytes(98, 2), Some(&tail[..]));
        assert_eq!(w.bytes(97, 2), None);
        assert_eq!(w.bytes(99, 2), None);
        assert_eq!(w.bytes(u64::MAX, 2), None);
        assert_eq!(w.bytes(50, 1), None);
    }

    #[test]
    fn first_non_zero_reports_absolute_offsets() {
        let head = [0u8; 8];
        let mut tail = [0u8; 8];
        tail[3] = 7;
        let w = Window { size: 1000, head: &head, tail: &tail };
        assert_eq!(w.first_non_zero(), Some(995));
    }

    #[test]
    fn every_prefix_of_a_busy_buffer_probes_without_panic() {
        // Magic bytes everywhere a detector looks, then every truncation of that buffer.
        let mut buf = vec![0u8; 70 * 1024];
        buf[1080] = 0x53;
        buf[1081] = 0xef;
        buf[510] = 0x55;
        buf[511] = 0xaa;
        buf[0] = 0xeb;
        buf[0x36..0x3e].copy_from_slice(b"FAT16   ");
        for len in (0..buf.len()).step_by(509).chain([511, 512, 1081, 1082]) {
            let _ = probe_window(len as u64, &buf[..len], &[]);
            let _ = probe_window(len as u64 + 5, &[], &buf[..len]);
        }
    }
}
