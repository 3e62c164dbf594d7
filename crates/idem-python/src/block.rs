//! Waiting for a future on the calling thread, as `Executor.call` does.
//!
//! Not tokio's `Runtime::block_on`, which refuses to run inside another:
//! a plain `def` tool runs inline, inside its call's wait, and a tool that
//! calls another tool (or opens an executor) waits again on the same
//! thread. Here each wait has a flag of its own, so a wake-up meant for
//! the outer wait and taken by the inner one's park is not lost.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

/// Wakes one wait: sets its flag, then unparks its thread.
struct Wakeup {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Run `future` to its end on this thread, inside `runtime`'s context (its
/// timers, I/O and spawned tasks are the runtime's), parking between polls.
pub(crate) fn block_on<F: Future>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output {
    let _context = runtime.enter();
    let wakeup = Arc::new(Wakeup {
        woken: AtomicBool::new(false),
        thread: std::thread::current(),
    });
    let waker = Waker::from(wakeup.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        while !wakeup.woken.swap(false, Ordering::AcqRel) {
            std::thread::park();
        }
    }
}
