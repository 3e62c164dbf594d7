//! What stops an inbox from starting or serving ([`InboxError`]): each
//! variant names the file, address or option at fault and what to do.

use std::net::SocketAddr;
use std::path::PathBuf;

use idem_runtime::catalog::CatalogError;

/// Why an inbox could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// A file the options name (the approvers file, the tool catalog)
    /// cannot be read.
    #[error("cannot read {what} {}: {source}", .path.display())]
    Unreadable {
        /// What the file is, `the approvers file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The approvers file is not valid.
    #[error("approvers file {}: {problem}", .path.display())]
    InvalidApprovers {
        /// The file.
        path: PathBuf,
        /// What is wrong in it: which entry, and how to fix it.
        problem: String,
    },
    /// The tool catalog is not valid.
    #[error("tool catalog {}: {source}", .path.display())]
    InvalidCatalog {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: CatalogError,
    },
    /// A webhook cannot be used as given.
    #[error("{0}")]
    Notify(String),
    /// Slack's buttons cannot be set up as given (the signing secret, the
    /// test's response base).
    #[error("{0}")]
    Slack(String),
    /// The inbox cannot listen on its address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why (in use, not this machine's, not allowed).
        source: std::io::Error,
    },
    /// A non-loopback address without TLS and without
    /// `allow_plain_http`.
    #[error(
        "--listen {addr}: not a loopback address, so serve HTTPS (--tls-cert FILE --tls-key \
         FILE), or say --allow-plain-http if a TLS-terminating proxy is in front"
    )]
    PlainHttp {
        /// The address.
        addr: SocketAddr,
    },
    /// `--origin` names no host the inbox could be served under.
    #[error("--origin {0}")]
    Origin(#[from] idem_net::hosts::HostsError),
    /// The certificate or key cannot be used.
    #[error("{0}")]
    Tls(String),
    /// The store could not be opened: the error of the future `run` was
    /// given, as it was.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
    /// Serving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
