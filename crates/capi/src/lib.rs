//! `libferrite.so`: Ferrite for C programs and for unmodified programs.
//!
//! One shared object serves two front ends over the same engine:
//! - the C API (`ferrite.h`, module `capi`): a program links `-lferrite`,
//!   mounts a pool and calls `ferrite_*` functions;
//! - the preload library (module `preload`): with `LD_PRELOAD=libferrite.so`,
//!   `FERRITE_POOL` and `FERRITE_ROOT`, the C library's file functions are
//!   intercepted and calls on paths under the root (and on the descriptors
//!   they open) are served by the engine in the calling process; everything
//!   else goes to the C library untouched. See docs/PRELOAD.md.
//!
//! Without `FERRITE_ROOT` the interposed functions pass every call through,
//! so linking the C API costs a program nothing else.

mod capi;
mod conv;
mod preload;
mod real;
