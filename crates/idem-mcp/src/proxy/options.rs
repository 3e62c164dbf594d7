//! What `idem proxy` is told, and how it fails before it serves.

use std::path::PathBuf;

use idem_runtime::store::StoreError;

pub use super::http::UpstreamUrlError;

/// How to run the proxy: the `idem proxy` command's options.
#[derive(Debug, Clone, Default)]
pub struct ProxyOptions {
    /// The configuration file (TOML): a class and key options for each
    /// upstream tool, by name or glob. Where it is silent, the upstream's
    /// annotations decide.
    pub config: Option<PathBuf>,
    /// Print the configuration the proxy infers for this server and stop.
    pub print_config: bool,
    /// Serve over streamable HTTP on this address (at `/mcp`) rather than
    /// over stdio.
    pub listen: Option<String>,
    /// An upstream MCP server already running, over streamable HTTP at
    /// this URL (`http://HOST:PORT/mcp`), instead of starting one.
    pub upstream: Option<String>,
    /// The upstream MCP server's command and its arguments.
    pub command: Vec<String>,
}

/// The proxy could not start, or stopped serving. Nothing was called on
/// the upstream's behalf when it could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The configuration file cannot be read or is not valid.
    #[error("{0}")]
    Config(String),
    /// The `--upstream` URL cannot be used.
    #[error(transparent)]
    UpstreamUrl(#[from] UpstreamUrlError),
    /// The upstream server could not be started or reached, or did not
    /// answer as an MCP server does.
    #[error("{0}")]
    Upstream(String),
    /// The upstream's name cannot name a namespace of records.
    #[error("the server's name `{name}` cannot name a namespace ({reason}); set [server] name")]
    Name {
        /// The name, as the upstream gave it.
        name: String,
        /// Why it cannot.
        reason: String,
    },
    /// The proxy's own client did not initialize an MCP session.
    #[error("the client did not initialize: {0}")]
    Client(String),
    /// `--listen`'s address cannot be listened on.
    #[error("--listen: cannot listen on {address}: {source}")]
    Listen {
        /// The address given.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store that records the calls failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Serving failed.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
}
