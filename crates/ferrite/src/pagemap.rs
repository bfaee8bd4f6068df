//! The DRAM index of a file: file page number to pool page (and the log
//! entry that maps it). The first `DENSE_PAGES_MAX` file pages (1 GiB of
//! file) live in a vector indexed by page number, so the common lookups and
//! updates cost one array access; pages beyond live in an ordered map, so a
//! sparse file with a far offset costs memory only for what it maps.
//!
//! A mapped page may also carry *deltas*: the bytes of small writes kept
//! in the log (Inline entries) over the page, applied in order when the
//! page is read, until a write folds them into a new page or a truncate,
//! punch or overwrite of the whole page drops them.

use crate::format::{PageNo, PoolOffset};
use crate::inode::PageRef;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

/// File pages kept in the dense vector.
const DENSE_PAGES_MAX: u64 = 1 << 18;

/// Pool page 0 holds a superblock, so it never maps file data: it marks an
/// empty slot of the dense vector.
const EMPTY: PageRef = PageRef { pool: PageNo(0), entry: crate::format::NO_LOG };

/// The bytes of one live Inline entry over a mapped page.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Delta {
    /// Where in the page the bytes land, and how many.
    pub at: u16,
    pub len: u16,
    /// Where the entry lies in the log (its bytes follow its header).
    pub entry: PoolOffset,
}

impl Delta {
    pub fn end(&self) -> usize {
        self.at as usize + self.len as usize
    }

    /// Where its bytes are in the pool.
    pub fn data(&self) -> PoolOffset {
        self.entry + crate::format::INLINE_DATA_AT as u64
    }
}

/// The deltas of one page, oldest first.
pub type Deltas = SmallVec<[Delta; 2]>;

#[derive(Default)]
#[repr(C)]
pub struct PageMap {
    /// First (`repr(C)`): `stat` reads it, right after the attributes.
    count: usize,
    dense: Vec<PageRef>,
    sparse: BTreeMap<u64, PageRef>,
    deltas: crate::Map<u64, Deltas>,
    delta_bytes: usize,
}

impl PageMap {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn get(&self, page: &u64) -> Option<&PageRef> {
        if *page < DENSE_PAGES_MAX {
            self.dense.get(*page as usize).filter(|r| r.pool != EMPTY.pool)
        } else {
            self.sparse.get(page)
        }
    }

    pub fn insert(&mut self, page: u64, r: PageRef) -> Option<PageRef> {
        assert!(r.pool != EMPTY.pool, "file page mapped to pool page 0");
        let old = if page < DENSE_PAGES_MAX {
            let i = page as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, EMPTY);
            }
            let old = std::mem::replace(&mut self.dense[i], r);
            (old.pool != EMPTY.pool).then_some(old)
        } else {
            self.sparse.insert(page, r)
        };
        if old.is_none() {
            self.count += 1;
        }
        old
    }

    pub fn remove(&mut self, page: &u64) -> Option<PageRef> {
        let old = if *page < DENSE_PAGES_MAX {
            let slot = self.dense.get_mut(*page as usize)?;
            let old = std::mem::replace(slot, EMPTY);
            (old.pool != EMPTY.pool).then_some(old)
        } else {
            self.sparse.remove(page)
        };
        if old.is_some() {
            self.count -= 1;
        }
        old
    }

    /// Mapped pages in `range`, in file order.
    pub fn range(&self, range: impl RangeBounds<u64>) -> impl Iterator<Item = (u64, &PageRef)> + '_ {
        let lo = match range.start_bound() {
            Bound::Included(&x) => x,
            Bound::Excluded(&x) => x.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let hi = match range.end_bound() {
            Bound::Included(&x) => Some(x),
            Bound::Excluded(&0) => None,
            Bound::Excluded(&x) => Some(x - 1),
            Bound::Unbounded => Some(u64::MAX),
        };
        let (dense_lo, dense_hi, sparse_lo, sparse_hi) = match hi {
            Some(hi) if lo <= hi => {
                let dense_end = (self.dense.len() as u64).min(hi.saturating_add(1));
                (lo.min(dense_end), dense_end, lo.max(DENSE_PAGES_MAX), hi)
            }
            _ => (0, 0, 1, 0),
        };
        let dense = self.dense[dense_lo as usize..dense_hi as usize]
            .iter()
            .enumerate()
            .filter(|(_, r)| r.pool != EMPTY.pool)
            .map(move |(i, r)| (dense_lo + i as u64, r));
        let sparse = (sparse_lo <= sparse_hi)
            .then(|| self.sparse.range(sparse_lo..=sparse_hi).map(|(&k, r)| (k, r)))
            .into_iter()
            .flatten();
        dense.chain(sparse)
    }

    /// The deltas over file page `page`, oldest first (empty if none).
    pub fn deltas(&self, page: u64) -> &[Delta] {
        self.deltas.get(&page).map_or(&[], |d| d.as_slice())
    }

    /// Pages that carry deltas, and the bytes those deltas hold in all.
    pub fn delta_pages(&self) -> impl Iterator<Item = (u64, &Deltas)> + '_ {
        self.deltas.iter().map(|(&p, d)| (p, d))
    }

    pub fn delta_bytes(&self) -> usize {
        self.delta_bytes
    }

    /// Add a delta over a mapped page. Older deltas that it covers
    /// entirely are dropped and returned (their entries lose their
    /// reason to stay).
    pub fn push_delta(&mut self, page: u64, delta: Delta) -> Deltas {
        assert!(self.get(&page).is_some(), "delta over unmapped file page {page}");
        let v = self.deltas.entry(page).or_default();
        let mut dropped = Deltas::new();
        v.retain(|old| {
            let covered = old.at >= delta.at && old.end() <= delta.end();
            if covered {
                dropped.push(*old);
            }
            !covered
        });
        v.push(delta);
        self.delta_bytes += delta.len as usize;
        self.delta_bytes -= dropped.iter().map(|d| d.len as usize).sum::<usize>();
        dropped
    }

    /// Drop every delta of `page` (its mapping was replaced or removed).
    pub fn take_deltas(&mut self, page: u64) -> Deltas {
        let v = self.deltas.remove(&page).unwrap_or_default();
        self.delta_bytes -= v.iter().map(|d| d.len as usize).sum::<usize>();
        v
    }

    /// Every mapping, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &PageRef)> + '_ {
        self.range(..)
    }

    pub fn values(&self) -> impl Iterator<Item = &PageRef> + '_ {
        self.iter().map(|(_, r)| r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(p: u64) -> PageRef {
        PageRef { pool: PageNo(p), entry: crate::format::PoolOffset(p * 64) }
    }

    #[test]
    fn behaves_like_an_ordered_map() {
        let mut m = PageMap::default();
        let mut model = BTreeMap::new();
        let keys = [0u64, 1, 5, 100, DENSE_PAGES_MAX - 1, DENSE_PAGES_MAX, DENSE_PAGES_MAX + 7, 1 << 30];
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(m.insert(k, r(i as u64 + 10)), model.insert(k, r(i as u64 + 10)));
        }
        assert_eq!(m.insert(5, r(99)), model.insert(5, r(99)));
        assert_eq!(m.remove(&1), model.remove(&1));
        assert_eq!(m.remove(&2), model.remove(&2));
        assert_eq!(m.len(), model.len());
        for (lo, hi) in [(0, u64::MAX), (2, 100), (101, DENSE_PAGES_MAX), (DENSE_PAGES_MAX, 1 << 31), (7, 3)] {
            let got: Vec<(u64, PageRef)> = m.range(lo..=hi).map(|(k, v)| (k, *v)).collect();
            let want: Vec<(u64, PageRef)> =
                if lo <= hi { model.range(lo..=hi).map(|(&k, &v)| (k, v)).collect() } else { Vec::new() };
            assert_eq!(got, want, "range {lo}..={hi}");
        }
        let from: Vec<u64> = m.range(6..).map(|(k, _)| k).collect();
        assert_eq!(from, model.range(6..).map(|(&k, _)| k).collect::<Vec<_>>());
        assert_eq!(m.get(&5), model.get(&5));
        assert_eq!(m.get(&3), None);
    }
}
