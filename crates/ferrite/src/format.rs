//! The on-media format, in one place: every structure Ferrite stores in the
//! pool, its byte layout, its encoder and its checked decoder.
//!
//! All integers are little-endian and explicitly sized. Every structure that
//! recovery trusts carries a CRC-32C; decoders never trust a value read from
//! media: they return `Err(Corrupt)` for anything out of range, and never
//! panic. `docs/FORMAT.md` documents the same layout byte by byte; the two
//! must change together, and `FORMAT_VERSION` with them.

use crate::types::{FileMode, FileType, InodeNo};
pub use ferrite_pmem::PoolOffset;

/// Version of the on-media format this code reads and writes.
pub const FORMAT_VERSION: u32 = 2;
/// First 8 bytes of both superblock copies.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"FeRrItE\x01";
/// Size of a page: the unit of allocation, of logs and of file data.
pub const PAGE_SIZE: u64 = 4096;
pub const PAGE_SHIFT: u32 = 12;
/// Bytes of one inode slot in the inode table.
pub const INODE_SLOT_SIZE: u64 = 128;
pub const INODES_PER_PAGE: u64 = PAGE_SIZE / INODE_SLOT_SIZE;
/// Size of the log page header; entries start after it.
pub const LOG_PAGE_HEADER_SIZE: u64 = 64;
/// Log entries are made of 64-byte units (one cache line each).
pub const LOG_UNIT: u64 = 64;
/// Units available for entries in one log page.
pub const LOG_UNITS_PER_PAGE: u64 = (PAGE_SIZE - LOG_PAGE_HEADER_SIZE) / LOG_UNIT;
/// Magic of a log page header.
pub const LOG_PAGE_MAGIC: u32 = u32::from_le_bytes(*b"FLOG");
/// Journal layout: a 64-byte header, then 16-byte records.
pub const JOURNAL_HEADER_SIZE: u64 = 64;
pub const JOURNAL_RECORD_SIZE: u64 = 16;
pub const JOURNAL_RECORDS_MAX: usize = ((PAGE_SIZE - JOURNAL_HEADER_SIZE) / JOURNAL_RECORD_SIZE) as usize;
/// Most lanes (journals, allocator partitions) a pool may have.
pub const LANES_MAX: u32 = 64;
/// Smallest pool: enough for the fixed regions and a handful of files.
pub const POOL_PAGES_MIN: u64 = 64;
/// Largest pool: 2^40 pages (4 PiB); bounds every page number read from media.
pub const POOL_PAGES_MAX: u64 = 1 << 40;

/// A structure read from the pool failed its checks.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Corrupt(pub String);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupt pool: {}", self.0)
    }
}

macro_rules! corrupt {
    ($($arg:tt)*) => { $crate::format::Corrupt(format!($($arg)*)) };
}
pub(crate) use corrupt;

/// A page number in the pool (page = 4 KiB).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct PageNo(pub u64);

impl PageNo {
    /// Where the page starts in the pool.
    pub fn offset(self) -> PoolOffset {
        PoolOffset(self.0 << PAGE_SHIFT)
    }

    /// The page holding byte `at`.
    pub fn containing(at: PoolOffset) -> PageNo {
        PageNo(at.0 >> PAGE_SHIFT)
    }

    /// The page `n` pages further on.
    pub fn plus(self, n: u64) -> PageNo {
        PageNo(self.0.checked_add(n).expect("page number overflows u64"))
    }
}

pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

// ---------------------------------------------------------------------------
// Little-endian field access on byte buffers. Callers pass buffers of the
// structure's fixed size, so the slices below are always in range.

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn get_i64(b: &[u8], at: usize) -> i64 {
    get_u64(b, at) as i64
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_i64(b: &mut [u8], at: usize, v: i64) {
    put_u64(b, at, v as u64)
}

// ---------------------------------------------------------------------------
// Superblock: page 0 holds copy A, page 1 copy B. Each copy is 256 bytes.

pub const SUPERBLOCK_SIZE: usize = 256;
pub const SUPERBLOCK_COPIES: [PageNo; 2] = [PageNo(0), PageNo(1)];

/// Mount state recorded in the superblock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MountState {
    /// Unmounted cleanly: the saved allocator is valid, no journal is open.
    Clean,
    /// Mounted now, or the last mount ended in a crash.
    Dirty,
}

/// Geometry and state of a pool, as stored in the superblock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Superblock {
    pub total_pages: u64,
    pub lane_count: u32,
    pub journal_start: PageNo,
    pub inode_table_start: PageNo,
    pub inode_table_pages: u64,
    /// Slots in the inode table; slot 0 is reserved, inode n lives in slot n.
    pub inode_count: u64,
    /// Region where a clean unmount saves the allocator (page and inode bitmaps).
    pub save_start: PageNo,
    pub save_pages: u64,
    /// First page of the log and data region.
    pub data_start: PageNo,
    pub uuid: [u8; 16],
    pub created_ns: i64,
    /// Incremented at every superblock write; the valid copy with the
    /// highest generation wins at mount.
    pub generation: u64,
    pub state: MountState,
    /// Feature bits (`FEATURE_*`, see FORMAT.md); a bit this code does not
    /// know makes the pool unmountable.
    pub features: u32,
    /// CRC-32C of the saved allocator bitmaps (valid when state is Clean).
    pub saved_alloc_crc: u32,
    pub saved_free_pages: u64,
    pub saved_free_inodes: u64,
    pub mount_count: u64,
}

const _: () = assert!(SUPERBLOCK_SIZE <= PAGE_SIZE as usize);

/// Feature bit: inodes may be FIFOs, sockets or device nodes (file types
/// 4..=7, device number in the inode header). Set at mkfs, and by the first
/// read-write mount of an older pool, so that a reader that predates it
/// refuses the pool instead of calling those inodes corrupt.
pub const FEATURE_SPECIAL_FILES: u32 = 1;
/// Feature bit: logs may hold Punch entries (kind 8, fallocate
/// PUNCH_HOLE). Set like `FEATURE_SPECIAL_FILES`.
pub const FEATURE_PUNCH_HOLE: u32 = 2;
/// Every feature bit this code understands; mkfs and every read-write
/// mount set them all (none changes what an older structure means, so
/// setting them early only keeps older readers out).
/// Feature bit 2: Attr entries may carry a file mode other than strict
/// (entry byte 2), and logs may hold Inline entries (kind 9, small writes
/// with their bytes in the log). Set like `FEATURE_SPECIAL_FILES`.
pub const FEATURE_MODES_INLINE: u32 = 4;
/// Feature bit 3: an inode slot may hold the inode's first Attr entry in
/// its bytes 64..128 (`INODE_ATTR_OFFSET`), and a live inode's log may be
/// empty (tail 0: no log page yet). Set like `FEATURE_SPECIAL_FILES`.
pub const FEATURE_SLOT_ATTR: u32 = 8;
pub const FEATURES_KNOWN: u32 = FEATURE_SPECIAL_FILES | FEATURE_PUNCH_HOLE | FEATURE_MODES_INLINE | FEATURE_SLOT_ATTR;

impl Superblock {
    pub fn encode(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut b = [0u8; SUPERBLOCK_SIZE];
        b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, PAGE_SIZE as u32);
        put_u64(&mut b, 16, self.total_pages);
        put_u32(&mut b, 24, self.lane_count);
        put_u32(&mut b, 28, INODE_SLOT_SIZE as u32);
        put_u64(&mut b, 32, self.journal_start.0);
        put_u64(&mut b, 40, self.inode_table_start.0);
        put_u64(&mut b, 48, self.inode_table_pages);
        put_u64(&mut b, 56, self.inode_count);
        put_u64(&mut b, 64, self.save_start.0);
        put_u64(&mut b, 72, self.save_pages);
        put_u64(&mut b, 80, self.data_start.0);
        b[88..104].copy_from_slice(&self.uuid);
        put_i64(&mut b, 104, self.created_ns);
        put_u64(&mut b, 112, self.generation);
        put_u32(&mut b, 120, if self.state == MountState::Clean { 1 } else { 0 });
        put_u32(&mut b, 124, self.features);
        put_u32(&mut b, 128, self.saved_alloc_crc);
        put_u64(&mut b, 136, self.saved_free_pages);
        put_u64(&mut b, 144, self.saved_free_inodes);
        put_u64(&mut b, 152, self.mount_count);
        let c = crc(&b[..252]);
        put_u32(&mut b, 252, c);
        b
    }

    /// Decode and check one superblock copy against the pool length.
    pub fn decode(b: &[u8], pool_len: u64) -> Result<Superblock, SuperblockError> {
        if b.len() < SUPERBLOCK_SIZE || b[0..8] != SUPERBLOCK_MAGIC {
            return Err(SuperblockError::NotFerrite);
        }
        if get_u32(b, 252) != crc(&b[..252]) {
            return Err(SuperblockError::Corrupt(corrupt!("superblock checksum mismatch")));
        }
        let version = get_u32(b, 8);
        if version != FORMAT_VERSION {
            return Err(SuperblockError::Version(version));
        }
        if get_u32(b, 12) as u64 != PAGE_SIZE || get_u32(b, 28) as u64 != INODE_SLOT_SIZE {
            return Err(SuperblockError::Corrupt(corrupt!("unsupported page or inode size")));
        }
        let state = match get_u32(b, 120) {
            1 => MountState::Clean,
            0 => MountState::Dirty,
            s => return Err(SuperblockError::Corrupt(corrupt!("bad mount state {s}"))),
        };
        let sb = Superblock {
            total_pages: get_u64(b, 16),
            lane_count: get_u32(b, 24),
            journal_start: PageNo(get_u64(b, 32)),
            inode_table_start: PageNo(get_u64(b, 40)),
            inode_table_pages: get_u64(b, 48),
            inode_count: get_u64(b, 56),
            save_start: PageNo(get_u64(b, 64)),
            save_pages: get_u64(b, 72),
            data_start: PageNo(get_u64(b, 80)),
            uuid: b[88..104].try_into().expect("16 bytes"),
            created_ns: get_i64(b, 104),
            generation: get_u64(b, 112),
            state,
            features: get_u32(b, 124),
            saved_alloc_crc: get_u32(b, 128),
            saved_free_pages: get_u64(b, 136),
            saved_free_inodes: get_u64(b, 144),
            mount_count: get_u64(b, 152),
        };
        sb.check_geometry(pool_len).map_err(SuperblockError::Corrupt)?;
        Ok(sb)
    }

    /// The layout must be exactly what `Geometry::compute` gives for the
    /// recorded size and parameters, and fit the pool.
    fn check_geometry(&self, pool_len: u64) -> Result<(), Corrupt> {
        if self.features & !FEATURES_KNOWN != 0 {
            return Err(corrupt!(
                "unknown feature bits {:#x} (a newer Ferrite made this pool)",
                self.features & !FEATURES_KNOWN
            ));
        }
        if self.total_pages < POOL_PAGES_MIN || self.total_pages > POOL_PAGES_MAX {
            return Err(corrupt!("pool of {} pages out of range", self.total_pages));
        }
        if self.total_pages.checked_mul(PAGE_SIZE) != Some(pool_len) {
            return Err(corrupt!(
                "superblock says {} pages but the pool file holds {} bytes",
                self.total_pages,
                pool_len
            ));
        }
        let expect = Layout::compute(self.total_pages, self.lane_count, self.inode_count)
            .map_err(|e| corrupt!("superblock geometry: {e}"))?;
        if expect.journal_start != self.journal_start
            || expect.inode_table_start != self.inode_table_start
            || expect.inode_table_pages != self.inode_table_pages
            || expect.save_start != self.save_start
            || expect.save_pages != self.save_pages
            || expect.data_start != self.data_start
        {
            return Err(corrupt!("superblock geometry is inconsistent"));
        }
        Ok(())
    }
}

/// Why a superblock copy was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SuperblockError {
    NotFerrite,
    Version(u32),
    Corrupt(Corrupt),
}

/// The fixed regions of a pool, derived from its size and parameters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Layout {
    pub total_pages: u64,
    pub lane_count: u32,
    pub journal_start: PageNo,
    pub inode_table_start: PageNo,
    pub inode_table_pages: u64,
    pub inode_count: u64,
    pub save_start: PageNo,
    pub save_pages: u64,
    pub data_start: PageNo,
}

impl Layout {
    /// Lay out a pool: superblocks, journals, inode table, allocator save
    /// area, then logs and data. `inode_count` is rounded up to fill whole
    /// inode-table pages.
    pub fn compute(total_pages: u64, lane_count: u32, inode_count: u64) -> Result<Layout, String> {
        if !(1..=LANES_MAX).contains(&lane_count) {
            return Err(format!("lane count {lane_count} not in 1..={LANES_MAX}"));
        }
        if !(POOL_PAGES_MIN..=POOL_PAGES_MAX).contains(&total_pages) {
            return Err(format!("pool of {total_pages} pages not in {POOL_PAGES_MIN}..={POOL_PAGES_MAX}"));
        }
        if inode_count < 2 || inode_count > total_pages.saturating_mul(INODES_PER_PAGE) {
            return Err(format!("inode count {inode_count} out of range"));
        }
        let journal_start = PageNo(2);
        let inode_table_start = PageNo(journal_start.0 + lane_count as u64);
        let inode_table_pages = inode_count.div_ceil(INODES_PER_PAGE);
        let inode_count = inode_table_pages * INODES_PER_PAGE;
        let save_start = PageNo(inode_table_start.0 + inode_table_pages);
        // One bit per pool page plus one bit per inode slot.
        let save_bits = total_pages + inode_count;
        let save_pages = save_bits.div_ceil(8).div_ceil(PAGE_SIZE);
        let data_start = PageNo(save_start.0 + save_pages);
        if data_start.0 + 16 > total_pages {
            return Err(format!("pool of {total_pages} pages is too small for its metadata ({} pages)", data_start.0));
        }
        Ok(Layout {
            total_pages,
            lane_count,
            journal_start,
            inode_table_start,
            inode_table_pages,
            inode_count,
            save_start,
            save_pages,
            data_start,
        })
    }

    pub fn journal_page(&self, lane: u32) -> PageNo {
        PageNo(self.journal_start.0 + lane as u64)
    }

    /// Byte offset of the slot of inode `ino`.
    pub fn inode_slot(&self, ino: InodeNo) -> PoolOffset {
        self.inode_table_start.offset() + ino.0 * INODE_SLOT_SIZE
    }

    pub fn is_data_page(&self, p: PageNo) -> bool {
        p.0 >= self.data_start.0 && p.0 < self.total_pages
    }
}

// ---------------------------------------------------------------------------
// Journal: one page per lane, an undo log of 8-byte words.
//
// Header (64 bytes): [0..8) active word = (seq << 16) | record count, zero
// when idle; [8..12) CRC-32C over the active word and the records.
// Records (16 bytes each, from byte 64): [0..8) pool offset of the word,
// [8..16) its old value.

pub const JOURNAL_ACTIVE_OFFSET: u64 = 0;
/// The 8-byte word holding the header's CRC (and 4 reserved bytes).
pub const JOURNAL_CRC_WORD_OFFSET: u64 = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct JournalRecord {
    pub offset: PoolOffset,
    pub old: u64,
}

pub fn journal_active_word(seq: u64, count: usize) -> u64 {
    debug_assert!(count > 0 && count <= JOURNAL_RECORDS_MAX);
    (seq << 16) | count as u64
}

/// Encode the records and the header of an open transaction.
pub fn journal_encode(seq: u64, records: &[JournalRecord]) -> smallvec::SmallVec<[u8; 128]> {
    assert!(!records.is_empty() && records.len() <= JOURNAL_RECORDS_MAX);
    let mut b: smallvec::SmallVec<[u8; 128]> =
        smallvec::smallvec![0u8; JOURNAL_HEADER_SIZE as usize + records.len() * JOURNAL_RECORD_SIZE as usize];
    put_u64(&mut b, 0, journal_active_word(seq, records.len()));
    for (i, r) in records.iter().enumerate() {
        let at = JOURNAL_HEADER_SIZE as usize + i * JOURNAL_RECORD_SIZE as usize;
        put_u64(&mut b, at, r.offset.0);
        put_u64(&mut b, at + 8, r.old);
    }
    let c = journal_crc(&b);
    put_u32(&mut b, 8, c);
    b
}

fn journal_crc(b: &[u8]) -> u32 {
    let mut h = crc(&b[0..8]);
    h = crc32c::crc32c_append(h, &b[JOURNAL_HEADER_SIZE as usize..]);
    h
}

/// What a journal page holds.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum JournalState {
    Idle,
    /// A transaction whose records all persisted: roll it back.
    Open(Vec<JournalRecord>),
    /// The header is set but records or CRC disagree: the transaction never
    /// reached its commit point, so nothing it covers was changed.
    Torn,
}

/// Decode a journal page (the whole 4 KiB page).
pub fn journal_decode(page: &[u8]) -> JournalState {
    let active = get_u64(page, 0);
    if active == 0 {
        return JournalState::Idle;
    }
    let count = (active & 0xffff) as usize;
    if count == 0 || count > JOURNAL_RECORDS_MAX {
        return JournalState::Torn;
    }
    let end = JOURNAL_HEADER_SIZE as usize + count * JOURNAL_RECORD_SIZE as usize;
    let mut tmp = Vec::with_capacity(end);
    tmp.extend_from_slice(&page[..end]);
    put_u32(&mut tmp, 8, 0);
    if journal_crc(&tmp) != get_u32(page, 8) {
        return JournalState::Torn;
    }
    let records = (0..count)
        .map(|i| {
            let at = JOURNAL_HEADER_SIZE as usize + i * JOURNAL_RECORD_SIZE as usize;
            JournalRecord { offset: PoolOffset(get_u64(page, at)), old: get_u64(page, at + 8) }
        })
        .collect();
    JournalState::Open(records)
}

// ---------------------------------------------------------------------------
// Inode slot (128 bytes).
//
// [0..8)    state word: 0 = free; INODE_LIVE_TAG | generation = live.
// [8..16)   log head: pool offset of the first log page, 0 for none.
// [16..24)  log tail: pool offset where the next entry goes (commit point).
// [24..32)  inode number (must equal the slot index).
// [32..36)  generation.
// [36]      file type.   [37] flags (0 in version 1).  [38..40) reserved.
// [40..48)  device number (device nodes only, else 0; feature bit
//           FEATURE_SPECIAL_FILES).
// [48..60)  reserved, zero.
// [60..64)  CRC-32C of [24..60).
// [64..128) the inode's first Attr entry (one 64-byte unit, sequence number
//           0, its own CRC), written with the identity; all zero in slots of
//           inodes made before feature bit FEATURE_SLOT_ATTR.

pub const INODE_STATE_OFFSET: u64 = 0;
pub const INODE_HEAD_OFFSET: u64 = 8;
pub const INODE_TAIL_OFFSET: u64 = 16;
/// Where the identity (`InodeHeader`, 40 bytes with its CRC) starts.
pub const INODE_HEADER_OFFSET: u64 = 24;
/// Where the generation lies inside the slot (within the identity).
pub const INODE_GENERATION_OFFSET: u64 = INODE_HEADER_OFFSET + 8;
/// The bytes of a slot before its Attr entry: state, head, tail, identity.
pub const INODE_SLOT_USED_BYTES: u64 = 64;
/// Where the slot's Attr entry lies (`FEATURE_SLOT_ATTR`): the attributes
/// a new inode starts with, so that an inode whose log has no entry yet
/// needs no log page. Later Attr entries in the log supersede it.
pub const INODE_ATTR_OFFSET: u64 = INODE_SLOT_USED_BYTES;
/// The sequence number of a slot's Attr entry: below every log entry's
/// (they start at 1), as it comes first.
pub const SLOT_ATTR_SEQ: u64 = 0;
pub const INODE_LIVE_TAG: u64 = 0x4E4F_4445_0000_0000; // "NODE" in the high half.

const _: () = assert!(INODE_SLOT_SIZE == 128 && PAGE_SIZE.is_multiple_of(INODE_SLOT_SIZE));
const _: () = assert!(INODE_HEAD_OFFSET + 8 == INODE_TAIL_OFFSET && INODE_TAIL_OFFSET + 8 == INODE_HEADER_OFFSET);
const _: () = assert!(INODE_HEADER_OFFSET + InodeHeader::ENCODED_SIZE as u64 == INODE_SLOT_USED_BYTES);
const _: () = assert!(INODE_ATTR_OFFSET + LOG_UNIT == INODE_SLOT_SIZE);

pub fn inode_live_word(generation: u32) -> u64 {
    INODE_LIVE_TAG | generation as u64
}

/// The fixed identity part of an inode slot, written once at creation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct InodeHeader {
    pub ino: InodeNo,
    pub generation: u32,
    pub kind: FileType,
    /// Device number of a device node; 0 for every other type.
    pub rdev: u64,
}

impl InodeHeader {
    pub const ENCODED_SIZE: usize = 40;

    /// Encode bytes [24..64) of the slot.
    pub fn encode(&self) -> [u8; Self::ENCODED_SIZE] {
        let mut b = [0u8; Self::ENCODED_SIZE];
        put_u64(&mut b, 0, self.ino.0);
        put_u32(&mut b, 8, self.generation);
        b[12] = self.kind as u8;
        put_u64(&mut b, 16, self.rdev);
        let c = crc(&b[..36]);
        put_u32(&mut b, 36, c);
        b
    }
}

/// A decoded slot. `attr` is the slot's Attr entry (`FEATURE_SLOT_ATTR`),
/// if it has one; a tail of `NO_LOG` is an empty log (and the head is
/// then meaningless: it may name a page staged before a crash).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InodeSlot {
    Free,
    Live { header: InodeHeader, head: PoolOffset, tail: PoolOffset, attr: Option<AttrEntry> },
}

/// Encode a slot's Attr entry (bytes 64..128).
pub fn encode_slot_attr(a: &AttrEntry) -> [u8; LOG_UNIT as usize] {
    // On the stack: this runs once per create, and a heap buffer here was
    // a measurable share of one.
    let mut buf = [0u8; LOG_UNIT as usize];
    Entry::Attr(*a).encode_into(SLOT_ATTR_SEQ, &mut buf);
    buf
}

/// Decode a slot's Attr entry: all zero is none (an inode made before
/// `FEATURE_SLOT_ATTR`); anything else must be a valid one-unit Attr entry
/// with sequence number `SLOT_ATTR_SEQ`.
fn decode_slot_attr(b: &[u8], ino: InodeNo) -> Result<Option<AttrEntry>, Corrupt> {
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    match Entry::decode(b) {
        Ok((Entry::Attr(a), SLOT_ATTR_SEQ, len)) if len == LOG_UNIT as usize => Ok(Some(a)),
        Ok(_) => Err(corrupt!("inode {}: slot holds an entry that is not its first Attr", ino.0)),
        Err(c) => Err(corrupt!("inode {}: slot attributes: {}", ino.0, c.0)),
    }
}

pub fn decode_inode_slot(slot: &[u8], expect_ino: InodeNo) -> Result<InodeSlot, Corrupt> {
    let state = get_u64(slot, 0);
    if state == 0 {
        return Ok(InodeSlot::Free);
    }
    if state & 0xFFFF_FFFF_0000_0000 != INODE_LIVE_TAG {
        return Err(corrupt!("inode {}: bad state word {state:#x}", expect_ino.0));
    }
    let h = &slot[24..64];
    if get_u32(h, 36) != crc(&h[..36]) {
        return Err(corrupt!("inode {}: header checksum mismatch", expect_ino.0));
    }
    let ino = InodeNo(get_u64(h, 0));
    let generation = get_u32(h, 8);
    if ino != expect_ino {
        return Err(corrupt!("inode slot {} holds inode {}", expect_ino.0, ino.0));
    }
    if state as u32 != generation {
        return Err(corrupt!("inode {}: state generation differs from header", ino.0));
    }
    let kind = FileType::from_u8(h[12]).ok_or_else(|| corrupt!("inode {}: bad type {}", ino.0, h[12]))?;
    let rdev = get_u64(h, 16);
    if rdev != 0 && !kind.has_rdev() {
        return Err(corrupt!("inode {}: device number {rdev:#x} on a {kind:?}", ino.0));
    }
    let attr = decode_slot_attr(&slot[INODE_ATTR_OFFSET as usize..INODE_SLOT_SIZE as usize], ino)?;
    let tail = PoolOffset(get_u64(slot, INODE_TAIL_OFFSET as usize));
    if tail == NO_LOG && attr.is_none() {
        return Err(corrupt!("inode {}: neither attributes in its slot nor a log", ino.0));
    }
    Ok(InodeSlot::Live {
        header: InodeHeader { ino, generation, kind, rdev },
        head: PoolOffset(get_u64(slot, INODE_HEAD_OFFSET as usize)),
        tail,
        attr,
    })
}

// ---------------------------------------------------------------------------
// Log page header (64 bytes at the start of each log page).
//
// [0..4) magic "FLOG"; [4..8) reserved; [8..16) owner inode; [16..20) owner
// generation; [20..24) CRC-32C of [0..20); [24..32) next log page (pool
// offset, 0 = none; updated in place by an 8-byte store, so not covered by
// the CRC: it is checked by decoding the page it points to).

pub const LOG_NEXT_OFFSET: u64 = 24;

/// A log head or tail that names no log (an inode before its first commit,
/// or a checkpoint chain started from nothing).
pub const NO_LOG: PoolOffset = PoolOffset(0);

/// The log page of the last entry before `tail` (the tail's own page: a
/// tail at the very end of a page still belongs to it).
pub fn tail_page(tail: PoolOffset) -> PageNo {
    assert!(tail != NO_LOG, "the page of an empty log's tail");
    PageNo((tail.0 - 1) >> PAGE_SHIFT)
}

/// Is `tail` a place a log tail may point at: just past a whole entry
/// inside a log page (after its header and at least one unit), on a unit
/// boundary. Checked by replay on the tail read from media and asserted by
/// the engine on every tail it commits.
pub fn log_tail_in_bounds(tail: PoolOffset) -> bool {
    let tail = tail.0;
    if tail < LOG_PAGE_HEADER_SIZE + LOG_UNIT {
        return false;
    }
    let in_page = tail - ((tail - 1) & !(PAGE_SIZE - 1));
    (LOG_PAGE_HEADER_SIZE + LOG_UNIT..=PAGE_SIZE).contains(&in_page) && in_page.is_multiple_of(LOG_UNIT)
}

pub fn encode_log_page_header(owner: InodeNo, generation: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    put_u32(&mut b, 0, LOG_PAGE_MAGIC);
    put_u64(&mut b, 8, owner.0);
    put_u32(&mut b, 16, generation);
    let c = crc(&b[..20]);
    put_u32(&mut b, 20, c);
    b
}

/// Check a log page header; returns the next pointer.
pub fn decode_log_page_header(b: &[u8], owner: InodeNo, generation: u32) -> Result<PoolOffset, Corrupt> {
    if get_u32(b, 0) != LOG_PAGE_MAGIC || get_u32(b, 20) != crc(&b[..20]) {
        return Err(corrupt!("inode {}: log page header invalid", owner.0));
    }
    if get_u64(b, 8) != owner.0 || get_u32(b, 16) != generation {
        return Err(corrupt!("inode {}: log page belongs to inode {}", owner.0, get_u64(b, 8)));
    }
    Ok(PoolOffset(get_u64(b, LOG_NEXT_OFFSET as usize)))
}

// ---------------------------------------------------------------------------
// Log entries. Each is 1..=16 units of 64 bytes and never crosses a page.
//
// Common header (16 bytes): [0] kind; [1] units; [2..4) reserved (Attr: [2] is the file mode);
// [4..8) CRC-32C of the whole entry with this field zero; [8..16) sequence
// number (per inode, strictly increasing; directory cookies use it).

pub const ENTRY_HEADER_SIZE: usize = 16;
pub const ENTRY_UNITS_MAX: u8 = 16;

#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EntryKind {
    Attr = 1,
    Write = 2,
    Truncate = 3,
    DentryAdd = 4,
    DentryRemove = 5,
    XattrSet = 6,
    XattrRemove = 7,
    /// Needs feature bit `FEATURE_PUNCH_HOLE`.
    Punch = 8,
    /// Needs feature bit `FEATURE_MODES_INLINE`.
    Inline = 9,
}

/// Where an Inline entry's bytes start, and the most one entry carries.
pub const INLINE_DATA_AT: usize = 48;
pub const INLINE_DATA_MAX: usize = ENTRY_UNITS_MAX as usize * LOG_UNIT as usize - INLINE_DATA_AT;

/// Longest extended-attribute name (as Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
const XATTR_NAME_AT: usize = 32;
/// Most bytes of name plus value one extended attribute may hold: what fits
/// in the largest entry.
pub const XATTR_BYTES_MAX: usize = ENTRY_UNITS_MAX as usize * LOG_UNIT as usize - XATTR_NAME_AT;

/// Set (or, with `value` None, remove) one extended attribute.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct XattrEntry {
    pub name: Vec<u8>,
    pub value: Option<Vec<u8>>,
    /// The inode's new ctime.
    pub ctime_ns: i64,
}

/// All inode attributes except the size, as a snapshot (an Attr entry).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AttrEntry {
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// For directories, the parent directory (the root is its own parent).
    pub parent: InodeNo,
    /// The file's consistency mode (entry byte 2; strict is 0, so entries
    /// written before modes existed read as strict).
    pub mode: FileMode,
}

/// A small write with its bytes in the log (Libnvmmio's differential
/// logging): `data` lands at file offset `offset`, inside one file page,
/// over whatever that page holds. Sets the size and both mtime and ctime.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct InlineEntry {
    pub offset: u64,
    pub size_after: u64,
    pub time_ns: i64,
    pub data: Vec<u8>,
}

impl InlineEntry {
    /// The file page the bytes land in.
    pub fn file_page(&self) -> u64 {
        self.offset >> PAGE_SHIFT
    }

    /// Where the bytes start within that page.
    pub fn page_offset(&self) -> usize {
        (self.offset & (PAGE_SIZE - 1)) as usize
    }

    fn in_range(&self) -> bool {
        (1..=INLINE_DATA_MAX).contains(&self.data.len())
            && self.page_offset() + self.data.len() <= PAGE_SIZE as usize
            && self.offset + (self.data.len() as u64) <= crate::types::limits::FILE_SIZE_MAX
            && self.size_after <= crate::types::limits::FILE_SIZE_MAX
    }
}

/// `num_pages` file pages from `file_page` map to pool pages from `pool_page`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WriteEntry {
    pub file_page: u64,
    pub pool_page: PageNo,
    pub num_pages: u32,
    pub size_after: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TruncateEntry {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Set the size only, never below the current size, and keep pages
    /// mapped past it (fallocate growing the size over preallocated pages).
    /// Without it the entry also unmaps every page past the new size.
    pub size_only: bool,
}

/// Unmap `num_pages` file pages from `file_page` (fallocate PUNCH_HOLE);
/// the size does not change.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PunchEntry {
    pub file_page: u64,
    pub num_pages: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DentryEntry {
    pub ino: InodeNo,
    pub kind: FileType,
    /// The directory's new mtime and ctime.
    pub time_ns: i64,
    pub name: EntryName,
}

/// A directory entry's name, inline up to 24 bytes: building or decoding
/// the entry of a common name allocates nothing.
pub type EntryName = smallvec::SmallVec<[u8; 24]>;

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Entry {
    Attr(AttrEntry),
    Write(WriteEntry),
    Truncate(TruncateEntry),
    DentryAdd(DentryEntry),
    DentryRemove(DentryEntry),
    Xattr(XattrEntry),
    Punch(PunchEntry),
    Inline(InlineEntry),
}

/// Largest file page index a write entry may name (file size limit).
pub const FILE_PAGES_MAX: u64 = crate::types::limits::FILE_SIZE_MAX >> PAGE_SHIFT;
const DENTRY_NAME_AT: usize = 40;

impl Entry {
    /// Units of 64 bytes this entry takes (1..=ENTRY_UNITS_MAX, asserted).
    pub fn units(&self) -> u8 {
        let units = self.units_unchecked();
        assert!((1..=ENTRY_UNITS_MAX as usize).contains(&units), "log entry of {units} units");
        units as u8
    }

    pub fn size_bytes(&self) -> usize {
        self.units() as usize * LOG_UNIT as usize
    }

    /// Assert what `decode` checks (assertions that stay on in release
    /// builds): the engine never writes an entry its own decoder would
    /// call corrupt, nor lets a field be silently cut to its width.
    fn assert_encodable(&self) {
        let units = self.units_unchecked();
        assert!((1..=ENTRY_UNITS_MAX as usize).contains(&units), "log entry of {units} units: {self:?}");
        let name_ok = |n: &[u8]| (1..=u8::MAX as usize).contains(&n.len()) && !n.contains(&0);
        match self {
            Entry::Attr(_) => {}
            Entry::Write(w) => assert!(
                w.num_pages > 0
                    && w.file_page.checked_add(w.num_pages as u64).is_some_and(|end| end <= FILE_PAGES_MAX)
                    && w.size_after <= crate::types::limits::FILE_SIZE_MAX,
                "write entry out of range: {w:?}"
            ),
            Entry::Truncate(t) => {
                assert!(t.size <= crate::types::limits::FILE_SIZE_MAX, "truncate entry out of range: {t:?}")
            }
            Entry::Punch(h) => assert!(
                h.num_pages > 0 && h.file_page.checked_add(h.num_pages).is_some_and(|end| end <= FILE_PAGES_MAX),
                "punch entry out of range: {h:?}"
            ),
            Entry::DentryAdd(d) | Entry::DentryRemove(d) => assert!(
                name_ok(&d.name) && !d.name.contains(&b'/') && d.name[..] != *b"." && d.name[..] != *b"..",
                "dentry name of {} bytes invalid",
                d.name.len()
            ),
            Entry::Xattr(x) => assert!(name_ok(&x.name), "extended attribute name of {} bytes invalid", x.name.len()),
            Entry::Inline(i) => assert!(
                i.in_range(),
                "inline entry out of range: offset {} len {} size {}",
                i.offset,
                i.data.len(),
                i.size_after
            ),
        }
    }

    fn units_unchecked(&self) -> usize {
        match self {
            Entry::DentryAdd(d) | Entry::DentryRemove(d) => (DENTRY_NAME_AT + d.name.len()).div_ceil(LOG_UNIT as usize),
            Entry::Xattr(x) => {
                (XATTR_NAME_AT + x.name.len() + x.value.as_ref().map_or(0, |v| v.len())).div_ceil(LOG_UNIT as usize)
            }
            Entry::Inline(i) => (INLINE_DATA_AT + i.data.len()).div_ceil(LOG_UNIT as usize),
            _ => 1,
        }
    }

    /// Encode with its sequence number into `out` (cleared first).
    pub fn encode(&self, seq: u64, out: &mut Vec<u8>) {
        self.assert_encodable();
        out.clear();
        out.resize(self.size_bytes(), 0);
        self.write_fields(seq, out);
    }

    /// Encode with its sequence number into `b`, which must be exactly
    /// `size_bytes()` long and all zero (the padding is not written).
    pub fn encode_into(&self, seq: u64, b: &mut [u8]) {
        self.assert_encodable();
        assert_eq!(b.len(), self.size_bytes(), "entry encoded into a buffer of the wrong size");
        self.write_fields(seq, b);
    }

    /// The encoding itself, into a zeroed buffer of `size_bytes()`; both
    /// callers have asserted the entry encodable first.
    fn write_fields(&self, seq: u64, b: &mut [u8]) {
        b[1] = self.units();
        put_u64(b, 8, seq);
        match self {
            Entry::Attr(a) => {
                b[0] = EntryKind::Attr as u8;
                b[2] = a.mode as u8;
                put_u32(b, 16, a.perm);
                put_u32(b, 20, a.uid);
                put_u32(b, 24, a.gid);
                put_u32(b, 28, a.nlink);
                put_i64(b, 32, a.atime_ns);
                put_i64(b, 40, a.mtime_ns);
                put_i64(b, 48, a.ctime_ns);
                put_u64(b, 56, a.parent.0);
            }
            Entry::Write(w) => {
                b[0] = EntryKind::Write as u8;
                put_u64(b, 16, w.file_page);
                put_u64(b, 24, w.pool_page.0);
                put_u32(b, 32, w.num_pages);
                put_u64(b, 40, w.size_after);
                put_i64(b, 48, w.mtime_ns);
                put_i64(b, 56, w.ctime_ns);
            }
            Entry::Truncate(t) => {
                b[0] = EntryKind::Truncate as u8;
                put_u64(b, 16, t.size);
                put_i64(b, 24, t.mtime_ns);
                put_i64(b, 32, t.ctime_ns);
                put_u32(b, 40, t.size_only as u32);
            }
            Entry::Punch(h) => {
                b[0] = EntryKind::Punch as u8;
                put_u64(b, 16, h.file_page);
                put_u64(b, 24, h.num_pages);
                put_i64(b, 32, h.mtime_ns);
                put_i64(b, 40, h.ctime_ns);
            }
            Entry::DentryAdd(d) | Entry::DentryRemove(d) => {
                b[0] = if matches!(self, Entry::DentryAdd(_)) {
                    EntryKind::DentryAdd as u8
                } else {
                    EntryKind::DentryRemove as u8
                };
                put_u64(b, 16, d.ino.0);
                b[24] = d.kind as u8;
                b[25] = d.name.len() as u8;
                put_i64(b, 32, d.time_ns);
                b[DENTRY_NAME_AT..DENTRY_NAME_AT + d.name.len()].copy_from_slice(&d.name);
            }
            Entry::Xattr(x) => {
                b[0] = if x.value.is_some() { EntryKind::XattrSet as u8 } else { EntryKind::XattrRemove as u8 };
                b[16] = x.name.len() as u8;
                let value = x.value.as_deref().unwrap_or(&[]);
                put_u32(b, 20, value.len() as u32);
                put_i64(b, 24, x.ctime_ns);
                let at = XATTR_NAME_AT;
                b[at..at + x.name.len()].copy_from_slice(&x.name);
                b[at + x.name.len()..at + x.name.len() + value.len()].copy_from_slice(value);
            }
            Entry::Inline(i) => {
                b[0] = EntryKind::Inline as u8;
                put_u64(b, 16, i.offset);
                put_u64(b, 24, i.size_after);
                put_i64(b, 32, i.time_ns);
                b[40..42].copy_from_slice(&(i.data.len() as u16).to_le_bytes());
                b[INLINE_DATA_AT..INLINE_DATA_AT + i.data.len()].copy_from_slice(&i.data);
            }
        }
        let c = crc(b);
        put_u32(b, 4, c);
    }

    /// Decode the entry at the start of `b` (which extends to the end of
    /// its log page). Returns the entry, its sequence number and its size.
    pub fn decode(b: &[u8]) -> Result<(Entry, u64, usize), Corrupt> {
        if b.len() < LOG_UNIT as usize {
            return Err(corrupt!("log entry truncated by the page end"));
        }
        let units = b[1];
        if units == 0 || units > ENTRY_UNITS_MAX {
            return Err(corrupt!("log entry of {units} units"));
        }
        let len = units as usize * LOG_UNIT as usize;
        if len > b.len() {
            return Err(corrupt!("log entry crosses its page end"));
        }
        let mut tmp = [0u8; ENTRY_UNITS_MAX as usize * LOG_UNIT as usize];
        let e = &mut tmp[..len];
        e.copy_from_slice(&b[..len]);
        let stored = get_u32(e, 4);
        put_u32(e, 4, 0);
        if crc(e) != stored {
            return Err(corrupt!("log entry checksum mismatch"));
        }
        let seq = get_u64(e, 8);
        let entry = match e[0] {
            k if k == EntryKind::Attr as u8 => Entry::Attr(AttrEntry {
                perm: get_u32(e, 16),
                uid: get_u32(e, 20),
                gid: get_u32(e, 24),
                nlink: get_u32(e, 28),
                atime_ns: get_i64(e, 32),
                mtime_ns: get_i64(e, 40),
                ctime_ns: get_i64(e, 48),
                parent: InodeNo(get_u64(e, 56)),
                mode: FileMode::from_u8(e[2]).ok_or_else(|| corrupt!("attr entry with file mode {}", e[2]))?,
            }),
            k if k == EntryKind::Write as u8 => {
                let w = WriteEntry {
                    file_page: get_u64(e, 16),
                    pool_page: PageNo(get_u64(e, 24)),
                    num_pages: get_u32(e, 32),
                    size_after: get_u64(e, 40),
                    mtime_ns: get_i64(e, 48),
                    ctime_ns: get_i64(e, 56),
                };
                if w.num_pages == 0
                    || w.file_page.checked_add(w.num_pages as u64).is_none_or(|end| end > FILE_PAGES_MAX)
                    || w.size_after > crate::types::limits::FILE_SIZE_MAX
                {
                    return Err(corrupt!("write entry out of range"));
                }
                Entry::Write(w)
            }
            k if k == EntryKind::Truncate as u8 => {
                let flags = get_u32(e, 40);
                let t = TruncateEntry {
                    size: get_u64(e, 16),
                    mtime_ns: get_i64(e, 24),
                    ctime_ns: get_i64(e, 32),
                    size_only: flags == 1,
                };
                if t.size > crate::types::limits::FILE_SIZE_MAX || flags > 1 {
                    return Err(corrupt!("truncate entry out of range"));
                }
                Entry::Truncate(t)
            }
            k if k == EntryKind::Punch as u8 => {
                let h = PunchEntry {
                    file_page: get_u64(e, 16),
                    num_pages: get_u64(e, 24),
                    mtime_ns: get_i64(e, 32),
                    ctime_ns: get_i64(e, 40),
                };
                if h.num_pages == 0 || h.file_page.checked_add(h.num_pages).is_none_or(|end| end > FILE_PAGES_MAX) {
                    return Err(corrupt!("punch entry out of range"));
                }
                Entry::Punch(h)
            }
            k if k == EntryKind::DentryAdd as u8 || k == EntryKind::DentryRemove as u8 => {
                let name_len = e[25] as usize;
                if name_len == 0 || DENTRY_NAME_AT + name_len > len {
                    return Err(corrupt!("dentry name length {name_len} invalid"));
                }
                let name = EntryName::from_slice(&e[DENTRY_NAME_AT..DENTRY_NAME_AT + name_len]);
                if name.contains(&b'/') || name.contains(&0) || name[..] == *b"." || name[..] == *b".." {
                    return Err(corrupt!("dentry name invalid"));
                }
                let kind = FileType::from_u8(e[24]).ok_or_else(|| corrupt!("dentry type {}", e[24]))?;
                let d = DentryEntry { ino: InodeNo(get_u64(e, 16)), kind, time_ns: get_i64(e, 32), name };
                if k == EntryKind::DentryAdd as u8 {
                    Entry::DentryAdd(d)
                } else {
                    Entry::DentryRemove(d)
                }
            }
            k if k == EntryKind::XattrSet as u8 || k == EntryKind::XattrRemove as u8 => {
                let name_len = e[16] as usize;
                let value_len = get_u32(e, 20) as usize;
                let end = XATTR_NAME_AT + name_len + value_len;
                if name_len == 0 || end > len || (k == EntryKind::XattrRemove as u8 && value_len != 0) {
                    return Err(corrupt!("extended attribute entry lengths invalid"));
                }
                let name = e[XATTR_NAME_AT..XATTR_NAME_AT + name_len].to_vec();
                if name.contains(&0) {
                    return Err(corrupt!("extended attribute name invalid"));
                }
                let value = (k == EntryKind::XattrSet as u8).then(|| e[XATTR_NAME_AT + name_len..end].to_vec());
                Entry::Xattr(XattrEntry { name, value, ctime_ns: get_i64(e, 24) })
            }
            k if k == EntryKind::Inline as u8 => {
                let n = u16::from_le_bytes([e[40], e[41]]) as usize;
                if n == 0
                    || INLINE_DATA_AT + n > len
                    || (INLINE_DATA_AT + n).div_ceil(LOG_UNIT as usize) != units as usize
                {
                    return Err(corrupt!("inline entry length {n} invalid"));
                }
                let i = InlineEntry {
                    offset: get_u64(e, 16),
                    size_after: get_u64(e, 24),
                    time_ns: get_i64(e, 32),
                    data: e[INLINE_DATA_AT..INLINE_DATA_AT + n].to_vec(),
                };
                if !i.in_range() {
                    return Err(corrupt!("inline entry out of range"));
                }
                Entry::Inline(i)
            }
            k => return Err(corrupt!("unknown log entry kind {k}")),
        };
        Ok((entry, seq, len))
    }
}

// ---------------------------------------------------------------------------
// Allocator save area: a bitmap of pool pages (bit set = in use), then a
// bitmap of inode slots (bit set = live), each bit i in byte i/8, bit i%8.
// Its CRC-32C and the free counts are in the superblock.

pub fn bitmap_bytes(bits: u64) -> usize {
    bits.div_ceil(8) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_flips() {
        let entries = [
            Entry::Attr(AttrEntry {
                perm: 0o644,
                uid: 1,
                gid: 2,
                nlink: 3,
                atime_ns: -5,
                mtime_ns: 6,
                ctime_ns: 7,
                parent: InodeNo(1),
                mode: FileMode::FsyncAtomic,
            }),
            Entry::Inline(InlineEntry { offset: 4096 * 3 + 100, size_after: 20000, time_ns: 9, data: vec![5; 128] }),
            Entry::Inline(InlineEntry { offset: 4096 - 976, size_after: 4096, time_ns: 9, data: vec![6; 976] }),
            Entry::Write(WriteEntry {
                file_page: 9,
                pool_page: PageNo(100),
                num_pages: 3,
                size_after: 40000,
                mtime_ns: 1,
                ctime_ns: 2,
            }),
            Entry::Truncate(TruncateEntry { size: 77, mtime_ns: 3, ctime_ns: 4, size_only: true }),
            Entry::DentryAdd(DentryEntry {
                ino: InodeNo(5),
                kind: FileType::Directory,
                time_ns: 8,
                name: EntryName::from_elem(b'x', 255),
            }),
            Entry::DentryRemove(DentryEntry {
                ino: InodeNo(5),
                kind: FileType::Regular,
                time_ns: 8,
                name: EntryName::from_slice(b"a"),
            }),
            Entry::Xattr(XattrEntry { name: b"user.x".to_vec(), value: Some(vec![7; 900]), ctime_ns: 3 }),
            Entry::Xattr(XattrEntry { name: b"user.gone".to_vec(), value: None, ctime_ns: 4 }),
        ];
        let mut buf = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            e.encode(i as u64 + 10, &mut buf);
            assert!(e.units() <= ENTRY_UNITS_MAX);
            let (d, seq, len) = Entry::decode(&buf).unwrap();
            assert_eq!((&d, seq, len), (e, i as u64 + 10, buf.len()));
            for bit in 0..buf.len() * 8 {
                let mut bad = buf.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(Entry::decode(&bad).is_err(), "flip of bit {bit} in {e:?} went unnoticed");
            }
        }
    }

    #[test]
    fn superblock_round_trip() {
        let l = Layout::compute(1024, 4, 256).unwrap();
        let sb = Superblock {
            total_pages: l.total_pages,
            lane_count: l.lane_count,
            journal_start: l.journal_start,
            inode_table_start: l.inode_table_start,
            inode_table_pages: l.inode_table_pages,
            inode_count: l.inode_count,
            save_start: l.save_start,
            save_pages: l.save_pages,
            data_start: l.data_start,
            uuid: [7; 16],
            created_ns: 1,
            generation: 2,
            state: MountState::Clean,
            features: 0,
            saved_alloc_crc: 3,
            saved_free_pages: 4,
            saved_free_inodes: 5,
            mount_count: 6,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 1024 * PAGE_SIZE).unwrap(), sb);
        assert!(Superblock::decode(&b, 1023 * PAGE_SIZE).is_err());
        let mut bad = b;
        bad[20] ^= 1;
        assert!(matches!(Superblock::decode(&bad, 1024 * PAGE_SIZE), Err(SuperblockError::Corrupt(_))));
    }

    #[test]
    fn journal_round_trip_and_torn() {
        let recs =
            vec![JournalRecord { offset: PoolOffset(64), old: 5 }, JournalRecord { offset: PoolOffset(128), old: 6 }];
        let enc = journal_encode(9, &recs);
        let mut page = vec![0u8; PAGE_SIZE as usize];
        assert_eq!(journal_decode(&page), JournalState::Idle);
        page[..enc.len()].copy_from_slice(&enc);
        assert_eq!(journal_decode(&page), JournalState::Open(recs));
        page[70] ^= 1;
        assert_eq!(journal_decode(&page), JournalState::Torn);
    }
}
