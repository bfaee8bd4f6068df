//! Deterministic hashing: crash images (for deduplication) and trees (to
//! compare a recovered state with the allowed ones cheaply).

use ferrite_model::{NodeView, Tree};
use std::hash::{BuildHasher, Hash, Hasher};

fn hasher(seed: u64) -> impl Hasher {
    foldhash::fast::FixedState::with_seed(seed).build_hasher()
}

/// A 64-bit key of a whole image. Two images with the same key are treated
/// as the same image (the chance of a false match among a million images is
/// about 3e-8).
pub fn image_key(image: &[u8]) -> u64 {
    let mut h = hasher(0x1A6E_C0DE);
    // Hash in 64 KiB blocks so that the hasher's long-input path runs.
    for block in image.chunks(64 * 1024) {
        h.write(block);
    }
    h.finish()
}

/// A mixer for deriving seeds (splitmix64).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash of a string (labels, workload names) for seeding.
pub fn str_seed(s: &str) -> u64 {
    let mut h = hasher(0x5EED);
    h.write(s.as_bytes());
    h.finish()
}

fn hash_node(n: &NodeView, h: &mut impl Hasher) {
    (n.kind as u8).hash(h);
    n.perm.hash(h);
    n.uid.hash(h);
    n.gid.hash(h);
    n.size.hash(h);
    n.nlink.hash(h);
    n.mtime.hash(h);
    n.ctime.hash(h);
    n.atime.hash(h);
    n.blocks.hash(h);
    n.content.hash(h);
    n.target.hash(h);
    n.link_group.hash(h);
}

/// A 64-bit key of a whole tree (every field `diff_trees` compares).
pub fn tree_key(t: &Tree) -> u64 {
    let mut h = hasher(0x7EE);
    t.len().hash(&mut h);
    for (path, node) in t {
        path.hash(&mut h);
        hash_node(node, &mut h);
    }
    h.finish()
}
