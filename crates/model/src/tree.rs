//! A canonical, comparable view of a whole file-system tree, built either
//! from the model's state directly or from any [`PathFs`] through the trait.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use ferrite::{Errno, FileType, FsResult, OpenFlags, PathFs, Stat, TimeSpec};

use crate::state::ModelState;

/// Every object reachable from the root, by full path (`b"/"`, `b"/a"`,
/// `b"/a/b"`), in byte order of the paths.
pub type Tree = BTreeMap<Vec<u8>, NodeView>;

/// What a tree comparison looks at for one path. Inode numbers are left
/// out; hard links show as a shared `link_group`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeView {
    pub kind: FileType,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub mtime: TimeSpec,
    pub ctime: TimeSpec,
    pub atime: TimeSpec,
    /// st_blocks; None for directories (their allocation is the engine's
    /// own business).
    pub blocks: Option<u64>,
    /// The bytes of a regular file (empty for other kinds).
    pub content: Vec<u8>,
    /// The target of a symlink (empty for other kinds).
    pub target: Vec<u8>,
    /// The device number of a device node (0 for other kinds).
    pub rdev: u64,
    /// 0 if the inode appears at only one path of the tree; otherwise all
    /// the paths of one inode share a number, numbered 1, 2, ... by the
    /// first path of each such inode in path order.
    pub link_group: usize,
}

impl NodeView {
    fn from_stat(st: &Stat, content: Vec<u8>, target: Vec<u8>) -> NodeView {
        NodeView {
            kind: st.kind,
            perm: st.perm,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            nlink: st.nlink,
            mtime: st.mtime,
            ctime: st.ctime,
            atime: st.atime,
            blocks: if st.kind == FileType::Directory { None } else { Some(st.blocks) },
            content,
            target,
            rdev: st.rdev,
            link_group: 0,
        }
    }
}

/// Number the inodes that appear at more than one path.
fn assemble(nodes: Vec<(Vec<u8>, u64, NodeView)>) -> Tree {
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (_, ino, _) in &nodes {
        *seen.entry(*ino).or_default() += 1;
    }
    let mut nodes = nodes;
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    let mut groups: HashMap<u64, usize> = HashMap::new();
    let mut tree = Tree::new();
    for (path, ino, mut view) in nodes {
        if seen[&ino] > 1 {
            let next = groups.len() + 1;
            view.link_group = *groups.entry(ino).or_insert(next);
        }
        tree.insert(path, view);
    }
    tree
}

pub(crate) fn tree_of_state(s: &ModelState) -> Tree {
    let nodes = s
        .paths()
        .into_iter()
        .map(|(path, ino)| {
            let (content, target) = s.data_of(ino);
            (path, ino, NodeView::from_stat(&s.stat_of(ino), content, target))
        })
        .collect();
    assemble(nodes)
}

fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Run `body` on a descriptor and close it whatever happens.
fn with_fd<T>(
    fs: &dyn PathFs,
    path: &[u8],
    flags: OpenFlags,
    body: impl FnOnce(ferrite::Fd) -> FsResult<T>,
) -> FsResult<T> {
    let fd = fs.open(path, flags, 0)?;
    let r = body(fd);
    let c = fs.close(fd);
    let v = r?;
    c?;
    Ok(v)
}

fn list_dir(fs: &dyn PathFs, path: &[u8]) -> FsResult<Vec<Vec<u8>>> {
    with_fd(fs, path, OpenFlags::RDONLY.directory(), |fd| {
        let mut names = BTreeSet::new();
        let mut cookie = 0u64;
        loop {
            let batch = fs.readdir(fd, cookie, 128)?;
            let Some(last) = batch.last() else { break };
            if last.next_cookie == cookie {
                // No progress: the listing would never end.
                return Err(Errno::ECORRUPT);
            }
            cookie = last.next_cookie;
            for e in batch {
                let bad = e.name.is_empty() || e.name == b"." || e.name == b".." || e.name.contains(&b'/');
                if bad || !names.insert(e.name) {
                    return Err(Errno::ECORRUPT);
                }
            }
        }
        Ok(names.into_iter().collect())
    })
}

fn read_all(fs: &dyn PathFs, path: &[u8], size: u64) -> FsResult<Vec<u8>> {
    const CHUNK: usize = 64 * 1024;
    with_fd(fs, path, OpenFlags::RDONLY, |fd| {
        let mut out = Vec::new();
        let mut buf = vec![0u8; CHUNK];
        // Read until EOF, but never far beyond the size stat reported (a
        // broken engine must not make this loop forever).
        while (out.len() as u64) <= size {
            let n = fs.pread(fd, &mut buf, out.len() as u64)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        Ok(out)
    })
}

/// Build the [`Tree`] of any [`PathFs`] through the trait only: lstat of
/// every path, open(O_DIRECTORY) + readdir + close for directories,
/// open + pread + close for file contents, readlink for symlinks.
/// The result equals [`crate::ModelFs::tree`] for a model in the same state.
///
/// A listing that repeats a name, returns `.`, `..`, an empty name or a name
/// with a slash, or does not advance its cookie gives `ECORRUPT`.
pub fn tree_of(fs: &dyn PathFs) -> Result<Tree, Errno> {
    let mut nodes = Vec::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(path) = stack.pop() {
        let st = fs.lstat(&path)?;
        let (mut content, mut target) = (Vec::new(), Vec::new());
        match st.kind {
            FileType::Directory => {
                for name in list_dir(fs, &path)? {
                    stack.push(child_path(&path, &name));
                }
            }
            FileType::Regular => content = read_all(fs, &path, st.size)?,
            FileType::Symlink => target = fs.readlink(&path)?,
            // FIFOs, sockets and device nodes: their stat is all there is.
            FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {}
        }
        nodes.push((path, st.ino.0, NodeView::from_stat(&st, content, target)));
    }
    Ok(assemble(nodes))
}

fn show_bytes(b: &[u8]) -> String {
    const MAX: usize = 64;
    let shown: String = b[..b.len().min(MAX)].escape_ascii().to_string();
    if b.len() > MAX {
        format!("\"{shown}\"... ({} bytes)", b.len())
    } else {
        format!("\"{shown}\"")
    }
}

fn show_time(t: TimeSpec) -> String {
    format!("{}.{:09}", t.sec, t.nsec)
}

/// Differences of one node, one line each.
fn node_diffs(path: &str, e: &NodeView, g: &NodeView, out: &mut Vec<String>) {
    let mut field = |name: &str, exp: String, got: String| {
        if exp != got {
            out.push(format!("{path}: {name}: expected {exp}, got {got}"));
        }
    };
    field("kind", format!("{:?}", e.kind), format!("{:?}", g.kind));
    field("perm", format!("{:o}", e.perm), format!("{:o}", g.perm));
    field("uid", e.uid.to_string(), g.uid.to_string());
    field("gid", e.gid.to_string(), g.gid.to_string());
    field("size", e.size.to_string(), g.size.to_string());
    field("nlink", e.nlink.to_string(), g.nlink.to_string());
    field("mtime", show_time(e.mtime), show_time(g.mtime));
    field("ctime", show_time(e.ctime), show_time(g.ctime));
    field("atime", show_time(e.atime), show_time(g.atime));
    field("blocks", format!("{:?}", e.blocks), format!("{:?}", g.blocks));
    field("target", show_bytes(&e.target), show_bytes(&g.target));
    field("rdev", format!("{:#x}", e.rdev), format!("{:#x}", g.rdev));
    field("link_group", e.link_group.to_string(), g.link_group.to_string());
    if e.content != g.content {
        let at = e.content.iter().zip(&g.content).position(|(a, b)| a != b);
        let at = at.unwrap_or(e.content.len().min(g.content.len()));
        let byte = |c: &[u8]| c.get(at).map_or("EOF".to_string(), |b| format!("{b:#04x}"));
        out.push(format!(
            "{path}: content: first difference at offset {at} (expected {}, got {}); \
             expected length {}, got length {}",
            byte(&e.content),
            byte(&g.content),
            e.content.len(),
            g.content.len()
        ));
    }
}

/// A readable description of how `got` differs from `expected`: one line
/// per difference (path, field, expected, got), at most 20 lines plus a
/// count of the rest. Empty when the trees are equal.
pub fn diff_trees(expected: &Tree, got: &Tree) -> String {
    const SHOWN: usize = 20;
    let mut lines = Vec::new();
    let paths: BTreeSet<&Vec<u8>> = expected.keys().chain(got.keys()).collect();
    for p in paths {
        let path = p.escape_ascii().to_string();
        match (expected.get(p), got.get(p)) {
            (Some(e), Some(g)) => node_diffs(&path, e, g, &mut lines),
            (Some(e), None) => lines.push(format!("{path}: missing (expected a {:?})", e.kind)),
            (None, Some(g)) => lines.push(format!("{path}: unexpected {:?}", g.kind)),
            (None, None) => unreachable!(),
        }
    }
    let mut out = String::new();
    for l in lines.iter().take(SHOWN) {
        let _ = writeln!(out, "{l}");
    }
    if lines.len() > SHOWN {
        let _ = writeln!(out, "... and {} more differences", lines.len() - SHOWN);
    }
    out
}
