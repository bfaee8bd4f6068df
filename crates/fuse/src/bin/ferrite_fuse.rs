//! `ferrite-fuse POOL DIR [-o OPTIONS]`: mount a Ferrite pool and detach
//! (stay in the foreground with `-o foreground`), in the argument order of
//! mount(8) helpers. Installed (or symlinked) as /sbin/mount.fuse.ferrite it
//! serves `mount -t fuse.ferrite POOL DIR -o OPTIONS` and fstab lines of type
//! `fuse.ferrite`. `ferrite mount` is the same with the usual command line.

fn main() {
    std::process::exit(ferrite_fuse::helper_main(std::env::args_os().collect()));
}
