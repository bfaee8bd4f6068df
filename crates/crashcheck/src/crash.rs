//! Crash images, in Vinter's persistence model.
//!
//! The trace is replayed event by event. Every store is split into 8-byte
//! words; a word's pending writes (not yet durable) form a list in program
//! order, each marked flushed or not:
//! - a cached store (`Store`, `Commit`) starts unflushed; a `Flush` covering
//!   its cache line marks every write so far to that line flushed;
//! - a non-temporal store (`NtStore`) starts flushed (durable at the next
//!   fence). It does not write back earlier cached stores to its line (the
//!   weaker, conservative assumption);
//! - a `Fence` makes every flushed write durable, with every earlier write
//!   to the same word (a word persists as an in-order prefix of its writes);
//! - anything pending may also have persisted at any time (eviction).
//!
//! So at a crash point, each pending word may hold any prefix of its pending
//! writes, independently of the other words. The candidates built at a point
//! (see [`Sim::candidates`]) pick a prefix length per word:
//! - nothing pending persisted, and everything persisted;
//! - subsets of the pending cache lines (each line all-or-nothing): every
//!   subset when at most 6 lines are pending, otherwise each line alone, all
//!   lines but one, pairs, the cached and the streamed lines as groups, and
//!   seeded random subsets, up to a cap (128 by default);
//! - torn stores: for every pending store of two words or more, only its
//!   first k words or only its last k words persisted (inside one line too:
//!   a 16-byte store is not atomic), over both bounding images;
//! - older values: a word written several times while pending left at an
//!   earlier write, everything else persisted (or nothing else).
//!
//! Every candidate has a label; a token names the point and the label, and
//! a replay rebuilds the same candidate list and picks it by label.
//!
//! Image keys are content hashes computed incrementally: the key is the sum
//! of one hash per page, so a candidate's key costs only the pages it
//! changes, and the full image is built only for a key not seen before.

use crate::hash::mix;
use ferrite_pmem::Event;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};

const PAGE: usize = 4096;
const LINE: u64 = 64;

/// One pending write to one 8-byte word.
#[derive(Clone, Copy, Debug)]
pub struct Pw {
    /// Event index of the store.
    pub ev: u32,
    /// Which bytes of the word it writes (bit i = byte i).
    pub mask: u8,
    pub bytes: [u8; 8],
    pub flushed: bool,
    pub nt: bool,
}

fn apply_pw(img: &mut [u8], word: u64, pw: &Pw) {
    let base = (word * 8) as usize;
    if pw.mask == 0xFF {
        img[base..base + 8].copy_from_slice(&pw.bytes);
    } else {
        for i in 0..8 {
            if pw.mask & (1 << i) != 0 {
                img[base + i] = pw.bytes[i];
            }
        }
    }
}

fn page_term(page: usize, bytes: &[u8]) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(0xC4A5 ^ page as u64).build_hasher();
    h.write(bytes);
    mix(h.finish() ^ page as u64)
}

/// How many candidates to build at a point.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Line subsets (beyond nothing/everything) per point.
    pub subsets: usize,
    /// Torn-store candidates per point.
    pub torn: usize,
    /// Older-value candidates per point.
    pub older: usize,
    /// Exhaustive subsets up to this many pending lines.
    pub exhaustive_lines: usize,
}

impl Caps {
    pub const FULL: Caps = Caps { subsets: 128, torn: 32, older: 8, exhaustive_lines: 6 };
}

/// Where a crash point lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// Just before the fence at this event index.
    Fence,
    /// At a marker (everything before it has executed).
    Mark(u64),
    /// After the last event.
    End,
}

/// A crash image to build: the prefix length of each pending word that
/// differs from the default (0 = none of its pending writes persisted).
#[derive(Clone, Debug)]
pub struct Candidate {
    pub label: String,
    /// (word, prefix length); words not listed keep none of their pending
    /// writes.
    pub prefix: Vec<(u64, usize)>,
}

/// The trace replayer.
pub struct Sim<'a> {
    events: &'a [Event],
    next: usize,
    persisted: Vec<u8>,
    current: Vec<u8>,
    pending: BTreeMap<u64, Vec<Pw>>,
    terms: Vec<u64>,
    sum: u64,
    reported_fence: Option<usize>,
    ended: bool,
}

impl<'a> Sim<'a> {
    pub fn new(base: &[u8], events: &'a [Event]) -> Sim<'a> {
        let terms: Vec<u64> = base.chunks(PAGE).enumerate().map(|(p, b)| page_term(p, b)).collect();
        let sum = terms.iter().fold(0u64, |a, &t| a.wrapping_add(t));
        Sim {
            events,
            next: 0,
            persisted: base.to_vec(),
            current: base.to_vec(),
            pending: BTreeMap::new(),
            terms,
            sum,
            reported_fence: None,
            ended: false,
        }
    }

    /// Index of the next event to execute (a crash point lies before it).
    pub fn position(&self) -> usize {
        self.next
    }

    pub fn persisted(&self) -> &[u8] {
        &self.persisted
    }

    pub fn current(&self) -> &[u8] {
        &self.current
    }

    /// The pending writes, by word.
    pub fn pending(&self) -> &BTreeMap<u64, Vec<Pw>> {
        &self.pending
    }

    /// Pending cache lines, in order.
    pub fn pending_lines(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.pending.keys().map(|w| w / 8).collect();
        v.dedup();
        v
    }

    fn store(&mut self, idx: usize, offset: u64, data: &[u8], nt: bool) {
        let end = offset + data.len() as u64;
        self.current[offset as usize..end as usize].copy_from_slice(data);
        let mut at = offset;
        while at < end {
            let word = at / 8;
            let wend = ((word + 1) * 8).min(end);
            let mut pw = Pw { ev: idx as u32, mask: 0, bytes: [0; 8], flushed: nt, nt };
            for b in at..wend {
                let i = (b - word * 8) as usize;
                pw.mask |= 1 << i;
                pw.bytes[i] = data[(b - offset) as usize];
            }
            self.pending.entry(word).or_default().push(pw);
            at = wend;
        }
    }

    fn flush(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = offset / LINE * 8;
        let last = ((offset + len - 1) / LINE + 1) * 8;
        for (_, list) in self.pending.range_mut(first..last) {
            for pw in list.iter_mut() {
                pw.flushed = true;
            }
        }
    }

    fn fence(&mut self) {
        let mut touched = BTreeSet::new();
        let mut empty = Vec::new();
        for (&word, list) in self.pending.iter_mut() {
            let Some(j) = list.iter().rposition(|pw| pw.flushed) else {
                continue;
            };
            for pw in &list[..=j] {
                apply_pw(&mut self.persisted, word, pw);
            }
            list.drain(..=j);
            touched.insert((word * 8) as usize / PAGE);
            if list.is_empty() {
                empty.push(word);
            }
        }
        for w in empty {
            self.pending.remove(&w);
        }
        for p in touched {
            let t = page_term(p, &self.persisted[p * PAGE..(p + 1) * PAGE]);
            self.sum = self.sum.wrapping_sub(self.terms[p]).wrapping_add(t);
            self.terms[p] = t;
        }
    }

    /// Execute the next event.
    pub fn step(&mut self) -> Option<&'a Event> {
        let ev = self.events.get(self.next)?;
        let idx = self.next;
        self.next += 1;
        match ev {
            Event::Store { offset, data } => self.store(idx, *offset, data, false),
            Event::NtStore { offset, data } => self.store(idx, *offset, data, true),
            Event::Commit { offset, value } => self.store(idx, *offset, &value.to_le_bytes(), false),
            Event::NtCommit { offset, value } => self.store(idx, *offset, &value.to_le_bytes(), true),
            Event::Flush { offset, len } => self.flush(*offset, *len),
            Event::Fence => self.fence(),
            Event::Mark { .. } => {}
        }
        Some(ev)
    }

    /// Run to the next crash point: just before each fence, at each marker
    /// (after executing it), and at the end. None once the end was reported.
    pub fn next_point(&mut self) -> Option<PointKind> {
        loop {
            match self.events.get(self.next) {
                None => {
                    if self.ended {
                        return None;
                    }
                    self.ended = true;
                    return Some(PointKind::End);
                }
                Some(Event::Fence) => {
                    let at = self.next;
                    if self.reported_fence == Some(at) {
                        self.step();
                        continue;
                    }
                    self.reported_fence = Some(at);
                    return Some(PointKind::Fence);
                }
                Some(Event::Mark { label }) => {
                    let l = *label;
                    self.step();
                    return Some(PointKind::Mark(l));
                }
                Some(_) => {
                    self.step();
                }
            }
        }
    }

    /// Run until the crash point that lies before event `at` (as
    /// `position()` reports it); false if there is none.
    pub fn run_to(&mut self, at: usize) -> Option<PointKind> {
        while let Some(k) = self.next_point() {
            if self.next == at {
                return Some(k);
            }
            if self.next > at {
                return None;
            }
        }
        None
    }

    /// Every pending write of every word persisted.
    pub fn all(&self) -> Candidate {
        Candidate { label: "all".into(), prefix: self.pending.iter().map(|(&w, l)| (w, l.len())).collect() }
    }

    /// The key of a candidate's image (see the module comment).
    pub fn key(&self, c: &Candidate) -> u64 {
        let mut sum = self.sum;
        let mut i = 0;
        let pf = &c.prefix;
        let mut buf = vec![0u8; PAGE];
        while i < pf.len() {
            let page = (pf[i].0 * 8) as usize / PAGE;
            let mut j = i;
            let mut changed = false;
            buf.copy_from_slice(&self.persisted[page * PAGE..(page + 1) * PAGE]);
            while j < pf.len() && (pf[j].0 * 8) as usize / PAGE == page {
                let (w, k) = pf[j];
                if k > 0 {
                    let list = &self.pending[&w];
                    for pw in &list[..k.min(list.len())] {
                        apply_pw(&mut buf, w - (page * PAGE / 8) as u64, pw);
                    }
                    changed = true;
                }
                j += 1;
            }
            if changed {
                let t = page_term(page, &buf);
                sum = sum.wrapping_sub(self.terms[page]).wrapping_add(t);
            }
            i = j;
        }
        sum
    }

    /// The image of a candidate.
    pub fn build(&self, c: &Candidate) -> Vec<u8> {
        let mut img = self.persisted.clone();
        for &(w, k) in &c.prefix {
            if k == 0 {
                continue;
            }
            let list = &self.pending[&w];
            for pw in &list[..k.min(list.len())] {
                apply_pw(&mut img, w, pw);
            }
        }
        img
    }

    /// The candidates at this point (see the module comment). `seed` makes
    /// the random subsets reproducible; it should depend on the workload and
    /// the point.
    pub fn candidates(&self, caps: &Caps, seed: u64) -> Vec<Candidate> {
        let mut out = vec![Candidate { label: "none".into(), prefix: Vec::new() }, self.all()];
        if self.pending.is_empty() {
            out.truncate(1);
            return out;
        }
        let lines = self.pending_lines();
        let n = lines.len();
        // Words of each line, for building line subsets.
        let line_words = |set: &mut dyn Iterator<Item = usize>| -> Vec<(u64, usize)> {
            let mut v = Vec::new();
            for li in set {
                let l = lines[li];
                for (&w, list) in self.pending.range(l * 8..l * 8 + 8) {
                    v.push((w, list.len()));
                }
            }
            v.sort_by_key(|x| x.0);
            v
        };
        let mut subsets: Vec<Candidate> = Vec::new();
        if n <= caps.exhaustive_lines {
            for mask in 1u64..(1 << n) - 1 {
                let prefix = line_words(&mut (0..n).filter(|i| mask & (1 << i) != 0));
                subsets.push(Candidate { label: format!("L:{mask:x}"), prefix });
            }
        } else {
            let cap = caps.subsets;
            let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ 0x5B5E7));
            // Lines written by cached stores (metadata, mostly) first: they
            // are few and their order matters most.
            let cached: Vec<usize> = (0..n)
                .filter(|&i| {
                    let l = lines[i];
                    self.pending.range(l * 8..l * 8 + 8).any(|(_, list)| list.iter().any(|pw| !pw.nt))
                })
                .collect();
            let streamed: Vec<usize> = (0..n).filter(|i| !cached.contains(i)).collect();
            if !cached.is_empty() && !streamed.is_empty() {
                subsets.push(Candidate { label: "G:cached".into(), prefix: line_words(&mut cached.iter().copied()) });
                subsets
                    .push(Candidate { label: "G:streamed".into(), prefix: line_words(&mut streamed.iter().copied()) });
            }
            // Pick up to `k` items of `from`, evenly spread when too many.
            let spread = |from: &[usize], k: usize| -> Vec<usize> {
                if from.len() <= k {
                    from.to_vec()
                } else {
                    (0..k).map(|j| from[j * from.len() / k]).collect()
                }
            };
            let quarter = (cap / 4).max(1);
            let mut singles = spread(&cached, quarter);
            singles.extend(spread(&streamed, quarter.saturating_sub(singles.len()).max(2)));
            for &i in &singles {
                subsets.push(Candidate { label: format!("L1:{i}"), prefix: line_words(&mut std::iter::once(i)) });
                subsets
                    .push(Candidate { label: format!("B:{i}"), prefix: line_words(&mut (0..n).filter(|&j| j != i)) });
            }
            // Pairs: among cached lines first, then a cached and a streamed
            // line, then streamed lines.
            let mut pairs = BTreeSet::new();
            for (a, &i) in cached.iter().enumerate() {
                for &j in &cached[a + 1..] {
                    pairs.insert((i, j));
                }
            }
            for &i in cached.iter().take(4) {
                for &j in spread(&streamed, 4).iter() {
                    pairs.insert((i.min(j), i.max(j)));
                }
            }
            for &i in spread(&streamed, 6).iter() {
                for &j in spread(&streamed, 6).iter() {
                    if i < j {
                        pairs.insert((i, j));
                    }
                }
            }
            let pairs: Vec<(usize, usize)> = pairs.into_iter().collect();
            let room = cap.saturating_sub(subsets.len()) / 2;
            for k in spread(&(0..pairs.len()).collect::<Vec<_>>(), room) {
                let (a, b) = pairs[k];
                subsets.push(Candidate { label: format!("L2:{a}.{b}"), prefix: line_words(&mut [a, b].into_iter()) });
            }
            let mut r = 0;
            while subsets.len() < cap {
                let set: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.5)).collect();
                subsets.push(Candidate { label: format!("R:{r}"), prefix: line_words(&mut set.into_iter()) });
                r += 1;
            }
            subsets.truncate(cap);
        }
        out.extend(subsets);
        out.extend(self.torn(caps.torn));
        out.extend(self.older(caps.older));
        out
    }

    /// Torn stores: for each pending store of two words or more (biggest
    /// first), its first or last k words persisted, over nothing else
    /// persisted ("n") or everything else persisted ("a").
    fn torn(&self, cap: usize) -> Vec<Candidate> {
        if cap == 0 {
            return Vec::new();
        }
        // Pending words of each store event, in address order.
        let mut by_ev: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (&w, list) in &self.pending {
            for pw in list {
                by_ev.entry(pw.ev).or_default().push(w);
            }
        }
        let mut evs: Vec<(u32, Vec<u64>)> = by_ev.into_iter().filter(|(_, v)| v.len() >= 2).collect();
        // Cached stores first (metadata), then the biggest.
        evs.sort_by_key(|(ev, v)| {
            let nt = self.pending[&v[0]].iter().any(|pw| pw.ev == *ev && pw.nt);
            (nt, std::cmp::Reverse(v.len()), *ev)
        });
        let mut out = Vec::new();
        'outer: for (ev, words) in &evs {
            let n = words.len();
            let mut cuts: Vec<usize> = vec![1, n / 2, n - 1];
            if n > 16 {
                cuts.push(8);
            }
            cuts.sort_unstable();
            cuts.dedup();
            cuts.retain(|&k| k >= 1 && k < n);
            for &k in &cuts {
                for (dir, part) in [("p", &words[..k]), ("s", &words[n - k..])] {
                    for base in ["n", "a"] {
                        if out.len() >= cap {
                            break 'outer;
                        }
                        out.push(self.torn_candidate(*ev, words, part, base, &format!("T:{ev}:{dir}{k}:{base}")));
                    }
                }
            }
        }
        out
    }

    /// Words of store `ev` in `part` persist up to and including `ev`; its
    /// other words persist up to just before `ev`; every other pending word
    /// persists nothing ("n") or everything ("a").
    fn torn_candidate(&self, ev: u32, words: &[u64], part: &[u64], base: &str, label: &str) -> Candidate {
        let inpart: BTreeSet<u64> = part.iter().copied().collect();
        let mine: BTreeSet<u64> = words.iter().copied().collect();
        let mut prefix = Vec::new();
        for (&w, list) in &self.pending {
            let pos = list.iter().position(|pw| pw.ev == ev);
            let k = match pos {
                Some(p) if mine.contains(&w) => {
                    if inpart.contains(&w) {
                        p + 1
                    } else {
                        p
                    }
                }
                _ => {
                    if base == "a" {
                        list.len()
                    } else {
                        0
                    }
                }
            };
            if k > 0 {
                prefix.push((w, k));
            }
        }
        Candidate { label: label.to_string(), prefix }
    }

    /// Older values: a word with several pending writes left at its first
    /// one, over everything else persisted ("a") or nothing ("n").
    fn older(&self, cap: usize) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (&w, list) in &self.pending {
            if list.len() < 2 {
                continue;
            }
            for base in ["a", "n"] {
                if out.len() >= cap {
                    return out;
                }
                let prefix = if base == "a" {
                    self.pending.iter().map(|(&x, l)| (x, if x == w { 1 } else { l.len() })).collect()
                } else {
                    vec![(w, 1)]
                };
                out.push(Candidate { label: format!("W:{w:x}:1:{base}"), prefix });
            }
        }
        out
    }
}
