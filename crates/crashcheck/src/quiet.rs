//! Running code that may panic without flooding the output: a panic inside
//! [`catch`] on this thread is recorded (message and location) and returned
//! as an error instead of being printed. (A panic in a helper thread, e.g. a
//! recovery scan thread, is still printed; the caller gets it through the
//! join.)

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static QUIET: Cell<u32> = const { Cell::new(0) };
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) > 0 {
                let msg = info.to_string().replace('\n', " | ");
                LAST.with(|l| *l.borrow_mut() = Some(msg));
            } else {
                default(info);
            }
        }));
    });
}

/// Run `f`; a panic becomes `Err("PANIC: message at file:line")`.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install();
    QUIET.with(|q| q.set(q.get() + 1));
    LAST.with(|l| *l.borrow_mut() = None);
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r.map_err(|_| {
        let m = LAST.with(|l| l.borrow_mut().take()).unwrap_or_else(|| "(no message)".into());
        format!("PANIC: {m}")
    })
}
