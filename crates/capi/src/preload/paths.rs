//! Which calls are Ferrite's: a path is the pool's when it names the root
//! or something under it, from an absolute path, from the current
//! directory, or from a Ferrite directory descriptor.
//!
//! The decision is lexical (as the kernel would see the path before
//! following any symlink outside the pool): `..` that climbs out of the
//! root sends the call to the kernel, which resolves it correctly (through
//! the mount, when the pool is mounted at the root).

use super::{is_ferrite, Preload};
use engine::{Fd, AT_FDCWD};
use libc::c_int;
use std::borrow::Cow;
use std::sync::atomic::Ordering;

/// Where a path-taking call goes.
pub enum Route<'a> {
    /// To the C library, unchanged.
    Kernel,
    /// To the engine session: the directory descriptor and the path from it
    /// (absolute paths are from the pool's root).
    Pool(Fd, Cow<'a, [u8]>),
}

/// Lexically normalize an absolute path: no empty or "." components, ".."
/// applied (at "/" it stays "/"), no trailing slash except for "/" itself.
pub fn normalize(p: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return b"/".to_vec();
    }
    let mut out = Vec::with_capacity(p.len());
    for c in parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    out
}

/// The pool path of the normalized absolute path `p` if it is `root` or
/// under it ("/" for the root itself).
pub fn under(p: &[u8], root: &[u8]) -> Option<Vec<u8>> {
    let rest = p.strip_prefix(root)?;
    match rest.first() {
        None => Some(b"/".to_vec()),
        Some(b'/') => Some(rest.to_vec()),
        _ => None,
    }
}

/// How far above its start a relative path climbs with "..": 0 if it
/// never goes above it.
fn climb(p: &[u8]) -> usize {
    let mut depth: isize = 0;
    let mut lowest: isize = 0;
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                lowest = lowest.min(depth);
            }
            _ => depth += 1,
        }
    }
    (-lowest) as usize
}

/// Components of an absolute pool path ("/" has none).
pub fn depth(p: &[u8]) -> usize {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").count()
}

/// `p` without its trailing slashes split before its last component, when
/// that component is "." or "..": (what precedes it, the component).
fn split_last_dot(p: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = p.iter().rposition(|&b| b != b'/')? + 1;
    let trimmed = &p[..end];
    let start = trimmed.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let last = &trimmed[start..];
    (last == b"." || last == b"..").then_some((&trimmed[..start], last))
}

fn needs_normalizing(p: &[u8]) -> bool {
    p.windows(2).any(|w| w == b"//" || w == b"/.")
}

impl Preload {
    /// The current directory as a host path.
    pub fn cwd_host(&self) -> Vec<u8> {
        if self.cwd_in_pool.load(Ordering::Relaxed) {
            if let Ok(c) = super::inside(|| engine::PathFs::getcwd(&self.session)) {
                return self.host_path(&c);
            }
        }
        self.kernel_cwd.lock().clone()
    }

    /// Route path `p` relative to kernel directory descriptor `dirfd`.
    pub fn route<'a>(&self, dirfd: c_int, p: &'a [u8]) -> Route<'a> {
        if p.first() == Some(&b'/') {
            return self.route_absolute(p);
        }
        if dirfd != libc::AT_FDCWD {
            if is_ferrite(dirfd) {
                return Route::Pool(Fd(dirfd as u64), Cow::Borrowed(p));
            }
            return Route::Kernel;
        }
        if self.cwd_in_pool.load(Ordering::Relaxed) {
            if climb(p) > self.cwd_depth.load(Ordering::Relaxed) {
                return self.route_from_kernel_cwd(p);
            }
            return Route::Pool(AT_FDCWD, Cow::Borrowed(p));
        }
        self.route_from_kernel_cwd(p)
    }

    fn route_absolute<'a>(&self, p: &'a [u8]) -> Route<'a> {
        if let Some(rest) = p.strip_prefix(self.root.as_slice()) {
            if rest.is_empty() {
                return Route::Pool(AT_FDCWD, Cow::Borrowed(b"/"));
            }
            if rest[0] == b'/' && !needs_normalizing(rest) {
                if climb(rest) > 0 {
                    return self.route_normalized(p);
                }
                return Route::Pool(AT_FDCWD, Cow::Borrowed(rest));
            }
        }
        if needs_normalizing(p) {
            return self.route_normalized(p);
        }
        Route::Kernel
    }

    /// Route an absolute path with ".", ".." or "//" in it by its lexical
    /// normal form, keeping a trailing slash (it means "a directory").
    fn route_normalized<'a>(&self, p: &[u8]) -> Route<'a> {
        let n = normalize(p);
        match under(&n, &self.root) {
            Some(mut rest) => {
                // A last component "." or ".." is kept after the normal form
                // of what precedes it: it names a directory through itself or
                // its child, and the calls that act on a name refuse that
                // (rmdir "d/." is EINVAL and "d/.." ENOTEMPTY, not a removal
                // of "d" or of its parent).
                if let Some((head, dot)) = split_last_dot(p) {
                    if let Some(mut h) = under(&normalize(head), &self.root) {
                        if h != b"/" {
                            h.push(b'/');
                        }
                        h.extend_from_slice(dot);
                        return Route::Pool(AT_FDCWD, Cow::Owned(h));
                    }
                }
                if p.last() == Some(&b'/') && rest != b"/" {
                    rest.push(b'/');
                }
                Route::Pool(AT_FDCWD, Cow::Owned(rest))
            }
            None => Route::Kernel,
        }
    }

    /// A relative path from a current directory outside the pool (or one
    /// that climbs out of it): the pool's only if it leads into the root.
    fn route_from_kernel_cwd<'a>(&self, p: &'a [u8]) -> Route<'a> {
        let cwd = self.cwd_host();
        // Without "..", a path from a directory that is not above the root
        // cannot reach it: the common case costs no allocation.
        let root_below_cwd = cwd == b"/" || under(&self.root, &cwd).is_some();
        if !root_below_cwd && climb(p) == 0 {
            return Route::Kernel;
        }
        let mut full = cwd;
        full.push(b'/');
        full.extend_from_slice(p);
        match self.route_normalized(&full) {
            Route::Pool(d, rest) => Route::Pool(d, Cow::Owned(rest.into_owned())),
            Route::Kernel => Route::Kernel,
        }
    }
}
