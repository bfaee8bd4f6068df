//! Consistency modes under the preload library (docs/PRELOAD.md, "Modes"):
//! `FERRITE_MODE` sets the engine's default mode of new regular files, and
//! `FERRITE_ATOMIC` lists glob patterns of files made fsync-atomic when
//! this process creates or opens them for writing, so that a program (say
//! SQLite with `journal_mode=OFF` on `*.db`) gets failure-atomic fsync
//! without being changed.
//!
//! A pattern without `/` is matched against the file's name (the last
//! component of the path it was opened by); a pattern with `/` against its
//! absolute path in the pool (the root is `/`), lexically normalized.
//! Patterns are separated by `:` or `,`. In a pattern, `*` matches any run
//! of bytes but `/`, `?` one byte but `/`, `[...]` one byte of a set
//! (ranges `a-z`, negation `[!...]` or `[^...]`), and `\` quotes the next
//! byte.

use engine::FileMode;

/// The parsed `FERRITE_ATOMIC` list.
#[derive(Clone, Debug, Default)]
pub struct AtomicPatterns {
    patterns: Vec<Vec<u8>>,
}

impl AtomicPatterns {
    /// Parse a colon- or comma-separated list; empty items are skipped.
    pub fn parse(list: &[u8]) -> AtomicPatterns {
        let patterns = list.split(|&b| b == b':' || b == b',').filter(|p| !p.is_empty()).map(|p| p.to_vec()).collect();
        AtomicPatterns { patterns }
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Does the file at normalized absolute pool path `path` match?
    pub fn matches(&self, path: &[u8]) -> bool {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        self.patterns.iter().any(|p| if p.contains(&b'/') { glob(p, path) } else { glob(p, name) })
    }
}

/// Parse `FERRITE_MODE`'s value.
pub fn parse_mode(v: &[u8]) -> Option<FileMode> {
    FileMode::parse(v)
}

/// Does the set `[...]` starting after its `[` at `p[0..]` contain `c`?
/// Returns (contains, bytes of the set after the `[`), or None when the set
/// is not closed (the `[` is then an ordinary byte).
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 0;
    let negate = matches!(p.first(), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    loop {
        let b = *p.get(i)?;
        if b == b']' && !first {
            return Some((found != negate, i + 1));
        }
        first = false;
        let lo = if b == b'\\' {
            i += 1;
            *p.get(i)?
        } else {
            b
        };
        i += 1;
        if p.get(i) == Some(&b'-') && p.get(i + 1).is_some_and(|&h| h != b']') {
            let hi = p[i + 1];
            found |= (lo..=hi).contains(&c);
            i += 2;
        } else {
            found |= lo == c;
        }
    }
}

/// Glob match of the whole of `s` against pattern `p` (`*` and `?` do not
/// match `/`). Iterative, with backtracking to the last `*` only: linear in
/// practice, never exponential.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, string index).
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let c = s[si];
        let step = match p.get(pi) {
            Some(b'*') => {
                star = Some((pi + 1, si));
                pi += 1;
                continue;
            }
            Some(b'?') if c != b'/' => Some(1),
            Some(b'[') if c != b'/' => match class(&p[pi + 1..], c) {
                Some((true, n)) => Some(1 + n),
                Some((false, _)) => None,
                None => (c == b'[').then_some(1),
            },
            Some(b'\\') if p.get(pi + 1) == Some(&c) => Some(2),
            Some(&b) if b == c && b != b'?' && b != b'[' && b != b'\\' => Some(1),
            _ => None,
        };
        match step {
            Some(n) => {
                pi += n;
                si += 1;
            }
            None => match star {
                // Let the last `*` take one more byte (never a `/`).
                Some((sp, ss)) if s[ss] != b'/' => {
                    star = Some((sp, ss + 1));
                    pi = sp;
                    si = ss + 1;
                }
                _ => return false,
            },
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"*.db", b"app.db"));
        assert!(glob(b"*.db", b".db"));
        assert!(!glob(b"*.db", b"app.db-journal"));
        assert!(!glob(b"*.db", b"dir/app.db"), "* does not cross /");
        assert!(glob(b"/data/*.db", b"/data/x.db"));
        assert!(!glob(b"/data/*.db", b"/data/sub/x.db"));
        assert!(glob(b"/*/*.db", b"/data/x.db"));
        assert!(glob(b"a?c", b"abc"));
        assert!(!glob(b"a?c", b"a/c"));
        assert!(glob(b"file[0-9]", b"file7"));
        assert!(!glob(b"file[0-9]", b"filex"));
        assert!(glob(b"file[!0-9]", b"filex"));
        assert!(glob(b"file[^0-9]", b"filex"));
        assert!(glob(b"[]]", b"]"));
        assert!(glob(b"x[", b"x["), "an unclosed [ is a plain byte");
        assert!(glob(b"\\*", b"*"));
        assert!(!glob(b"\\*", b"a"));
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"**", b""));
        assert!(glob(b"a*b*c", b"axxbyyc"));
        assert!(!glob(b"a*b*c", b"axxbyy"));
        assert!(glob(b"*a*a*a*a*a*b", &[b"a".repeat(40), b"b".to_vec()].concat()));
        assert!(!glob(b"*a*a*a*a*a*b", &b"a".repeat(40)));
    }

    #[test]
    fn pattern_lists() {
        let p = AtomicPatterns::parse(b"*.db:*.sqlite,/logs/*.wal");
        assert!(p.matches(b"/app.db"));
        assert!(p.matches(b"/deep/dir/app.db"), "a name pattern matches in every directory");
        assert!(p.matches(b"/x.sqlite"));
        assert!(p.matches(b"/logs/a.wal"));
        assert!(!p.matches(b"/other/a.wal"));
        assert!(!p.matches(b"/app.db-wal"));
        assert!(AtomicPatterns::parse(b"::,").is_empty());
        assert_eq!(parse_mode(b"fsync-atomic"), Some(FileMode::FsyncAtomic));
        assert_eq!(parse_mode(b"strict"), Some(FileMode::Strict));
        assert_eq!(parse_mode(b"atomic"), None);
    }
}
