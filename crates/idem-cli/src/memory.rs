//! Memory the long-running commands (`idem proxy`, `idem serve`) freed,
//! given back to the system.
//!
//! glibc's allocator keeps freed memory in its arenas, one per thread that
//! allocated, and returns it only from the top of each heap: after a storm
//! of 3,000 MCP sessions had ended, the proxy's resident memory stayed
//! 17 MiB above where it started, for good. Every [`EVERY`], while more
//! than [`HELD`] lies free in the arenas, `malloc_trim` returns the free
//! pages wherever they are; the same storm then ends within 10 % of where
//! it started (`tests/proxy/storm.rs`). Other allocators and platforms
//! return memory their own way, and are left alone.

use std::time::Duration;

/// How often the arenas are looked at.
const EVERY: Duration = Duration::from_secs(10);

/// Free memory the arenas may keep without being trimmed.
const HELD: usize = 4 << 20;

/// Start giving freed memory back, for as long as the process runs.
pub(crate) fn give_back_while_serving() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let started = std::thread::Builder::new()
            .name("idem-memory".to_owned())
            .spawn(|| loop {
                std::thread::sleep(EVERY);
                trim();
            });
        if let Err(error) = started {
            eprintln!("idem: freed memory will not be given back to the system: {error}");
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: both are glibc's, without preconditions: each takes its
    // arenas' locks while it reads or trims them.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free > HELD {
        // SAFETY: as above; 1 MiB at the top of each heap is kept for the
        // next allocations.
        unsafe { libc::malloc_trim(1 << 20) };
    }
}
