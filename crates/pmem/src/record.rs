//! The recording backend: a totally ordered trace of every store, flush and
//! fence, for crash simulation.

/// One event of a recorded trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Ordinary (cached) store of `data` at `offset`.
    Store { offset: u64, data: Vec<u8> },
    /// Non-temporal store: bypasses the cache; durable at the next fence, may
    /// persist earlier. Always whole, aligned cache lines.
    NtStore { offset: u64, data: Vec<u8> },
    /// Write-back of the cache lines covering [offset, offset+len) (offset/len
    /// as the caller gave them; the checker rounds to lines).
    Flush { offset: u64, len: u64 },
    /// sfence: every flushed line and every nt store before it is durable.
    Fence,
    /// An 8-byte aligned atomic store (the commit primitive). Also counts as
    /// a store. The bytes written are `value.to_ne_bytes()` (little-endian on
    /// x86_64).
    Commit { offset: u64, value: u64 },
    /// The same 8-byte aligned atomic store as a streaming store
    /// (`store_u64_nt`): atomic like `Commit`, and, like `NtStore`, durable
    /// at the next fence with no flush, or earlier.
    NtCommit { offset: u64, value: u64 },
    /// Marker set by the engine/test (operation begin/end etc.).
    Mark { label: u64 },
}

impl Event {
    /// The bytes this event stores into the pool and where, if it is a store
    /// (`Store`, `NtStore`, `Commit` or `NtCommit`). Replaying these in trace order onto
    /// the image the recording started from gives the current image.
    pub fn stored_bytes(&self) -> Option<(u64, std::borrow::Cow<'_, [u8]>)> {
        use std::borrow::Cow;
        match self {
            Event::Store { offset, data } | Event::NtStore { offset, data } => {
                Some((*offset, Cow::Borrowed(data.as_slice())))
            }
            Event::Commit { offset, value } | Event::NtCommit { offset, value } => {
                Some((*offset, Cow::Owned(value.to_ne_bytes().to_vec())))
            }
            Event::Flush { .. } | Event::Fence | Event::Mark { .. } => None,
        }
    }
}

/// Applies every store event of `events` to `image` in order: what the pool
/// holds when everything recorded has persisted. Panics if an event lies
/// outside `image` (a trace from a bigger pool).
pub fn replay_stores(image: &mut [u8], events: &[Event]) {
    for ev in events {
        if let Some((off, bytes)) = ev.stored_bytes() {
            let start = usize::try_from(off).expect("event offset overflows usize");
            let end = start.checked_add(bytes.len()).filter(|&e| e <= image.len()).unwrap_or_else(|| {
                panic!(
                    "ferrite-pmem: event at offset {off} of {} bytes lies outside an image of {} bytes",
                    bytes.len(),
                    image.len()
                )
            });
            image[start..end].copy_from_slice(&bytes);
        }
    }
}

/// Recording state, kept behind the pool's mutex. `on` duplicates the pool's
/// `AtomicBool` under the lock, so a call that saw the flag set but took the
/// lock after recording stopped does not push a stale event.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) on: bool,
    pub(crate) events: Vec<Event>,
}

impl Recorder {
    /// Pushes the event made by `make` if recording is still on. Taking a
    /// closure means no event (and no copy of the data) is built otherwise.
    #[inline]
    pub(crate) fn push(&mut self, make: impl FnOnce() -> Event) {
        if self.on {
            self.events.push(make());
        }
    }
}
