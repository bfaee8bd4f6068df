//! Shared support for the whole-system tests.
