//! The engine's view of the pool: the persistence layer plus the layout,
//! with the few composite accesses every module needs. All stores still go
//! through `ferrite_pmem::Pmem`; this module only names offsets.

use crate::format::{self, corrupt, Corrupt, InodeSlot, Layout, PageNo, PoolOffset, INODE_SLOT_SIZE, PAGE_SIZE};
use crate::types::InodeNo;
use ferrite_pmem::Pmem;
use std::sync::Arc;

pub struct Media {
    pub pmem: Arc<Pmem>,
    pub layout: Layout,
}

impl Media {
    pub fn read(&self, offset: PoolOffset, buf: &mut [u8]) {
        self.pmem.read(offset, buf)
    }

    /// Read bytes whose offset came from media: out of range is corruption.
    pub fn read_checked(&self, offset: PoolOffset, buf: &mut [u8]) -> Result<(), Corrupt> {
        self.pmem
            .read_checked(offset, buf)
            .ok_or_else(|| corrupt!("read of {} bytes at {offset} outside the pool", buf.len()))
    }

    pub fn read_u64(&self, offset: PoolOffset) -> u64 {
        self.pmem.read_u64(offset)
    }

    pub fn write(&self, offset: PoolOffset, data: &[u8]) {
        self.pmem.write(offset, data)
    }

    pub fn write_nt(&self, offset: PoolOffset, data: &[u8]) {
        self.pmem.write_nt(offset, data)
    }

    pub fn fill_nt(&self, offset: PoolOffset, len: u64, byte: u8) {
        self.pmem.fill_nt(offset, len, byte)
    }

    pub fn flush(&self, offset: PoolOffset, len: u64) {
        self.pmem.flush(offset, len)
    }

    pub fn fence(&self) {
        self.pmem.fence()
    }

    pub fn store_u64(&self, offset: PoolOffset, value: u64) {
        self.pmem.store_u64(offset, value)
    }

    /// The commit primitive: one atomic 8-byte store, made durable.
    pub fn commit_u64(&self, offset: PoolOffset, value: u64) {
        self.pmem.store_u64(offset, value);
        self.pmem.flush(offset, 8);
        self.pmem.fence();
    }

    pub fn slot_offset(&self, ino: InodeNo) -> PoolOffset {
        self.layout.inode_slot(ino)
    }

    pub fn read_slot(&self, ino: InodeNo) -> Result<InodeSlot, Corrupt> {
        if ino.0 == 0 || ino.0 >= self.layout.inode_count {
            return Err(corrupt!("inode number {} out of range", ino.0));
        }
        let mut b = [0u8; INODE_SLOT_SIZE as usize];
        self.read(self.slot_offset(ino), &mut b);
        format::decode_inode_slot(&b, ino)
    }

    /// The generation stored in a slot's header, whatever its state (used
    /// to pick the next generation when a slot is reused).
    pub fn slot_generation(&self, ino: InodeNo) -> u32 {
        let mut b = [0u8; 4];
        self.read(self.slot_offset(ino) + format::INODE_GENERATION_OFFSET, &mut b);
        u32::from_le_bytes(b)
    }

    /// Write a new inode's slot, all but its state word: its identity and
    /// the head and tail of its staged first log page; then flush. The slot
    /// is not live until a journal transaction sets the state word.
    pub fn write_slot_identity(
        &self,
        ino: InodeNo,
        header: &format::InodeHeader,
        attr: &format::AttrEntry,
        staged: &crate::inode::Staged,
    ) {
        assert_eq!(header.ino, ino, "slot identity of another inode");
        let slot = self.slot_offset(ino);
        // Head, tail, identity and the first Attr entry: bytes 8..128, the
        // whole slot but its state word, in one write. A new inode with no
        // entry beyond its attributes has no log yet (head and tail 0).
        let mut b = [0u8; (format::INODE_SLOT_SIZE - 8) as usize];
        let head = staged.new_pages.first().map_or(format::NO_LOG, |p| p.offset());
        b[..8].copy_from_slice(&head.0.to_le_bytes());
        b[8..16].copy_from_slice(&staged.new_tail.0.to_le_bytes());
        let at = (format::INODE_HEADER_OFFSET - 8) as usize;
        b[at..at + format::InodeHeader::ENCODED_SIZE].copy_from_slice(&header.encode());
        b[(format::INODE_ATTR_OFFSET - 8) as usize..].copy_from_slice(&format::encode_slot_attr(attr));
        self.write(slot + format::INODE_HEAD_OFFSET, &b);
        self.flush(slot, format::INODE_SLOT_SIZE);
    }

    /// A page number read from media must lie in the data region.
    pub fn check_data_page(&self, p: PageNo, what: &str) -> Result<(), Corrupt> {
        if self.layout.is_data_page(p) {
            Ok(())
        } else {
            Err(corrupt!("{what} points at page {} outside the data region", p.0))
        }
    }

    /// A log page pointer read from media must be page-aligned and in the data region.
    pub fn check_log_pointer(&self, off: PoolOffset, what: &str) -> Result<PageNo, Corrupt> {
        let off = off.0;
        if !off.is_multiple_of(PAGE_SIZE) {
            return Err(corrupt!("{what} {off:#x} is not page aligned"));
        }
        let p = PageNo(off / PAGE_SIZE);
        self.check_data_page(p, what)?;
        Ok(p)
    }
}
