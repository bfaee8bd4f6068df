//! Extended-attribute namespaces and the POSIX access ACL, as Linux defines
//! them for its file systems.
//!
//! Linux accepts four prefixes (`user.`, `trusted.`, `security.`, `system.`)
//! and answers EOPNOTSUPP for any other name. Under `system.` only the two
//! POSIX ACL names mean anything. Ferrite does not evaluate ACLs in its
//! permission checks (the FUSE kernel module with `default_permissions`
//! checks the mode bits only), so it must not pretend to keep one: storing
//! an ACL as an opaque value would tell a program such as `cp -a`, which
//! copies permissions by copying the ACL, that the permissions were set when
//! the mode never changed. So, like ext4 for an ACL that says no more than
//! the mode, an access ACL made of the owner, group and other entries only
//! sets the mode bits and stores nothing; an ACL with named users, named
//! groups or a mask, and every default ACL, is refused with EOPNOTSUPP
//! (which programs already treat as "this file system has no ACLs" and
//! fall back to chmod), and so is reading either ACL (`Ferrite::getxattr`).

use crate::types::{Errno, FsResult};

/// What an extended-attribute name designates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XattrName {
    /// `user.`, `trusted.` or `security.`: a value stored as given.
    Stored,
    /// `system.posix_acl_access`: the mode bits in ACL form.
    AclAccess,
    /// `system.posix_acl_default`: inherited ACLs, not supported.
    AclDefault,
    /// A namespace's prefix with nothing after it (`user.`): EINVAL, as
    /// Linux's `xattr_resolve_name` answers for a prefix handler.
    EmptySuffix,
    /// Any other name: not supported (EOPNOTSUPP, as Linux).
    Unsupported,
}

pub(crate) fn classify(name: &[u8]) -> XattrName {
    const STORED_PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
    if STORED_PREFIXES.iter().any(|p| name.len() > p.len() && name.starts_with(p)) {
        XattrName::Stored
    } else if STORED_PREFIXES.contains(&name) {
        XattrName::EmptySuffix
    } else if name == b"system.posix_acl_access" {
        XattrName::AclAccess
    } else if name == b"system.posix_acl_default" {
        XattrName::AclDefault
    } else {
        XattrName::Unsupported
    }
}

/// Version of the ACL value format (`POSIX_ACL_XATTR_VERSION`).
const ACL_VERSION: u32 = 2;
const ACL_HEADER_BYTES: usize = 4;
const ACL_ENTRY_BYTES: usize = 8;
/// A limit on entries, as Linux's 32-entry ext4 ACL block is far below.
const ACL_ENTRIES_MAX: usize = 1024;

const TAG_USER_OBJ: u16 = 0x01;
const TAG_USER: u16 = 0x02;
const TAG_GROUP_OBJ: u16 = 0x04;
const TAG_GROUP: u16 = 0x08;
const TAG_MASK: u16 = 0x10;
const TAG_OTHER: u16 = 0x20;

/// The permission bits (0o777 part of a mode) an access ACL value stands
/// for; EINVAL for a malformed value, EOPNOTSUPP for an ACL that says more
/// than a mode can.
pub(crate) fn acl_access_mode(value: &[u8]) -> FsResult<u32> {
    if value.len() < ACL_HEADER_BYTES || !(value.len() - ACL_HEADER_BYTES).is_multiple_of(ACL_ENTRY_BYTES) {
        return Err(Errno::EINVAL);
    }
    let version = u32::from_le_bytes(value[..4].try_into().expect("4 bytes"));
    if version != ACL_VERSION {
        return Err(Errno::EINVAL);
    }
    let entries = &value[ACL_HEADER_BYTES..];
    if entries.len() / ACL_ENTRY_BYTES > ACL_ENTRIES_MAX {
        return Err(Errno::EINVAL);
    }
    let (mut owner, mut group, mut other) = (None, None, None);
    let mut extended = false;
    for e in entries.chunks_exact(ACL_ENTRY_BYTES) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        if perm & !0o7 != 0 {
            return Err(Errno::EINVAL);
        }
        let perm = u32::from(perm);
        let slot = match tag {
            TAG_USER_OBJ => &mut owner,
            TAG_GROUP_OBJ => &mut group,
            TAG_OTHER => &mut other,
            TAG_USER | TAG_GROUP | TAG_MASK => {
                extended = true;
                continue;
            }
            _ => return Err(Errno::EINVAL),
        };
        if slot.replace(perm).is_some() {
            return Err(Errno::EINVAL);
        }
    }
    let (Some(owner), Some(group), Some(other)) = (owner, group, other) else {
        return Err(Errno::EINVAL);
    };
    if extended {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(owner << 6 | group << 3 | other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16)]) -> Vec<u8> {
        let mut v = ACL_VERSION.to_le_bytes().to_vec();
        for &(tag, perm) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        v
    }

    #[test]
    fn names_fall_in_linux_namespaces() {
        assert_eq!(classify(b"user.x"), XattrName::Stored);
        assert_eq!(classify(b"trusted.overlay.opaque"), XattrName::Stored);
        assert_eq!(classify(b"security.selinux"), XattrName::Stored);
        assert_eq!(classify(b"user."), XattrName::EmptySuffix);
        assert_eq!(classify(b"trusted."), XattrName::EmptySuffix);
        assert_eq!(classify(b"usernoprefix"), XattrName::Unsupported);
        assert_eq!(classify(b"system.posix_acl_access"), XattrName::AclAccess);
        assert_eq!(classify(b"system.posix_acl_default"), XattrName::AclDefault);
        assert_eq!(classify(b"system.other"), XattrName::Unsupported);
        assert_eq!(classify(b"other.x"), XattrName::Unsupported);
        assert_eq!(classify(b"x"), XattrName::Unsupported);
    }

    #[test]
    fn a_minimal_acl_is_a_mode() {
        let v = acl(&[(TAG_USER_OBJ, 7), (TAG_GROUP_OBJ, 5), (TAG_OTHER, 4)]);
        assert_eq!(acl_access_mode(&v), Ok(0o754));
        // The exact bytes `cp -a` sent for a 0o600 file.
        let cp: &[u8] =
            b"\x02\0\0\0\x01\0\x06\0\xff\xff\xff\xff\x04\0\x04\0\xff\xff\xff\xff\x20\0\x04\0\xff\xff\xff\xff";
        assert_eq!(acl_access_mode(cp), Ok(0o644));
    }

    #[test]
    fn extended_or_malformed_acls_are_refused() {
        let named = acl(&[(TAG_USER_OBJ, 7), (TAG_USER, 7), (TAG_GROUP_OBJ, 5), (TAG_MASK, 7), (TAG_OTHER, 4)]);
        assert_eq!(acl_access_mode(&named), Err(Errno::EOPNOTSUPP));
        assert_eq!(acl_access_mode(&acl(&[(TAG_USER_OBJ, 7), (TAG_OTHER, 4)])), Err(Errno::EINVAL));
        let twice = acl(&[(TAG_USER_OBJ, 7), (TAG_USER_OBJ, 7), (TAG_GROUP_OBJ, 5), (TAG_OTHER, 4)]);
        assert_eq!(acl_access_mode(&twice), Err(Errno::EINVAL));
        assert_eq!(acl_access_mode(&acl(&[(TAG_USER_OBJ, 8), (TAG_GROUP_OBJ, 5), (TAG_OTHER, 4)])), Err(Errno::EINVAL));
        assert_eq!(acl_access_mode(&acl(&[(0x40, 7)])), Err(Errno::EINVAL));
        assert_eq!(acl_access_mode(b"\x02\0\0"), Err(Errno::EINVAL));
        assert_eq!(acl_access_mode(b"\x01\0\0\0"), Err(Errno::EINVAL));
        let mut odd = acl(&[(TAG_USER_OBJ, 7), (TAG_GROUP_OBJ, 5), (TAG_OTHER, 4)]);
        odd.push(0);
        assert_eq!(acl_access_mode(&odd), Err(Errno::EINVAL));
    }
}
