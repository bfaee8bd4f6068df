//! fsck (todo)
