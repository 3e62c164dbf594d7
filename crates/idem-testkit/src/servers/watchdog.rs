//! A watchdog that ends a test's helper process once the test process is
//! gone, so that neither a server kept in a `static` (whose `Drop` never
//! runs) nor one left by a test process killed from outside (a timeout,
//! say) outlives the tests.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A small `sh` loop watching this test process and one helper process.
///
/// When the test process is gone it sends the helper its stop signal, then
/// `SIGKILL` two seconds later, and deletes the helper's directory. When
/// the helper stops first it exits quietly. Dropping the watchdog ends it
/// and leaves the helper alone: the helper's owner stops it itself.
#[derive(Debug)]
pub struct Watchdog {
    /// `None` when `sh` could not be started (then nothing is watched).
    shell: Option<Child>,
}

impl Watchdog {
    /// Watch `target` — a process id, or `-PGID` for every process of a
    /// process group — whose clean stop is `stop_signal` (`TERM`, `QUIT`,
    /// `KILL`…) and whose directory is `dir`.
    pub fn new(target: &str, stop_signal: &str, dir: &Path) -> Watchdog {
        let shell = Command::new("sh")
            .arg("-c")
            .arg(
                r#"while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 0.5; done
                   if ! kill -0 "$1" 2>/dev/null; then
                     kill -"$3" "$2" 2>/dev/null; sleep 2; kill -9 "$2" 2>/dev/null; rm -rf "$4"
                   fi"#,
            )
            .arg("idem-test-watchdog")
            .arg(std::process::id().to_string())
            .arg(target)
            .arg(stop_signal)
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        Watchdog { shell }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut shell) = self.shell.take() {
            let _ = shell.kill();
            let _ = shell.wait();
        }
    }
}
