#!/usr/bin/env bash
# The project's test command (README.md, "Run the test suite"; CI runs it).
#
# 1. The whole workspace: `cargo test --workspace`. Its FUSE tests mount
#    with the default transport, which is FUSE over io_uring when the
#    kernel allows it (/sys/module/fuse/parameters/enable_uring = Y) and
#    /dev/fuse otherwise.
# 2. When io_uring served step 1, the FUSE suite again over /dev/fuse
#    (FERRITE_FUSE_TRANSPORT=dev), so that every FUSE test passes on both
#    transports; and the preload library's tests (`preload.rs`), whose
#    owner serves its own mount with the same default transport.
#
# Extra arguments go to every cargo run (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."

param=/sys/module/fuse/parameters/enable_uring
cargo test --workspace "$@"
if [ "$(cat "$param" 2>/dev/null)" = Y ] && [ "${FERRITE_FUSE_TRANSPORT:-auto}" != dev ]; then
    echo "== the FUSE suite again, over /dev/fuse (the run above used FUSE over io_uring)"
    FERRITE_FUSE_TRANSPORT=dev cargo test -p ferrite-fuse "$@"
    echo "== the preload library's tests again, its owner's mount over /dev/fuse"
    FERRITE_FUSE_TRANSPORT=dev cargo test -p ferrite-c --test preload "$@"
else
    echo "== FUSE over io_uring is not on here ($param: $(cat "$param" 2>/dev/null || echo absent)):" \
        "the FUSE suite ran over /dev/fuse only"
fi
