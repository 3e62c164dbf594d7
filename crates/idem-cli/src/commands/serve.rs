//! `idem serve`: the approval inbox ([`idem_inbox`]) on the store, with
//! its log of sign-ins and refusals on stderr.

use crate::cli::ServeArgs;
use crate::error::CliError;
use crate::store;

/// `idem serve`: the inbox until Ctrl-C. The store is opened read-write
/// once the inbox has checked its options.
pub(super) async fn run(url: &str, args: &ServeArgs) -> Result<(), CliError> {
    // Sign-ins and refusals, on stderr (`RUST_LOG` is not read: the
    // inbox's own events only).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    Ok(idem_inbox::run(args.options(), store::open(url)).await?)
}
