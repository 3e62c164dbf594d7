//! `idem serve`: the approval inbox ([`idem_inbox`]) on the store, with
//! its log of sign-ins and refusals on stderr.

use crate::cli::ServeArgs;
use crate::error::CliError;
use crate::store;

/// `idem serve`: the inbox until Ctrl-C. The store is opened read-write
/// once the inbox has checked its options.
pub(super) async fn run(url: &str, args: &ServeArgs) -> Result<(), CliError> {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    // Sign-ins and refusals, on stderr (`RUST_LOG` is not read). The store
    // is opened after this: its driver's chatter (PostgreSQL's notices,
    // "relation already exists, skipping") is left out below a warning.
    let quiet_drivers = tracing_subscriber::filter::Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("tokio_postgres", LevelFilter::WARN)
        .with_target("redis", LevelFilter::WARN);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_target(false),
        )
        .with(quiet_drivers)
        .try_init();
    Ok(idem_inbox::run(args.options(), store::open(url)).await?)
}
