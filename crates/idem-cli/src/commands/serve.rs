//! `idem serve`: the approval inbox ([`idem_inbox`]) on the store, with
//! its log of sign-ins, refusals and troubles on stderr (`crate::logs`).

use crate::cli::ServeArgs;
use crate::error::CliError;
use crate::store;

/// `idem serve`: the inbox until SIGTERM or SIGINT. The store is opened read-write
/// once the inbox has checked its options.
pub(super) async fn run(url: &str, args: &ServeArgs) -> Result<(), CliError> {
    // Sign-ins, refusals and the store's troubles, on stderr. The store
    // is opened after this.
    let _traces = args.logs.init("idem-serve");
    crate::memory::give_back_while_serving();
    Ok(idem_inbox::run(args.options(), store::open(url)).await?)
}
