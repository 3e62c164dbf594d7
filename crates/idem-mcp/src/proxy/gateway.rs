//! Several upstream servers behind one endpoint: the `[[upstream]]` tables
//! of the `--config` file.
//!
//! ```toml
//! [server]
//! name = "team"                     # the records' namespace: mcp/team
//!
//! [[upstream]]
//! name = "git"                      # its tools served as git_…
//! command = ["uvx", "mcp-server-git", "--repository", "/srv/repo"]
//! exclude = ["git_reset"]           # not served
//!
//! [[upstream]]
//! name = "memory"
//! url = "https://memory.internal/mcp"
//! token_env = "MEMORY_TOKEN"        # or token_file = "/run/secrets/memory"
//! include = ["create_*", "read_graph"]
//! prefix = "mem_"                   # default: the name and `_`
//!
//! [tools."git_git_commit"]          # tools by the name they are served as
//! class = "non_idempotent_write"
//! ```
//!
//! Each upstream is started (or connected to), restarted and initialized
//! again on its own: one that dies fails only its own calls, as a lone
//! upstream's would. Their tools are served under their prefixes; their
//! resources, prompts and completions are not (a lone upstream's pass
//! through).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use idem_net::glob::Glob;
use rmcp::model::{InitializeResult, Tool};
use serde::Deserialize;

use super::upstream::{HttpUpstream, Source, Upstream};
use super::{http, ProxyError};

/// `[[upstream]]`: one server behind the gateway.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpstreamConfig {
    /// What it is called: letters, digits, `-` and `_`; the default
    /// prefix of its tools, and how messages and `/readyz` name it.
    pub name: String,
    /// The program (and its arguments) to start and speak to over stdio.
    pub command: Option<Vec<String>>,
    /// The streamable HTTP URL of a server already running.
    pub url: Option<String>,
    /// What its tools' names are prefixed with (default: `NAME_`).
    pub prefix: Option<String>,
    /// Only the tools matching one of these globs (by their own names).
    #[serde(default)]
    pub include: Vec<String>,
    /// Not the tools matching one of these globs (by their own names).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The environment variable holding the `url`'s bearer token.
    pub token_env: Option<String>,
    /// The file holding the `url`'s bearer token.
    pub token_file: Option<PathBuf>,
}

/// One upstream as the gateway serves it.
pub(super) struct Mount {
    /// Its name in the configuration.
    pub name: String,
    pub upstream: Arc<Upstream>,
    /// Its tools as served: each the upstream's own definition under the
    /// served name, with the upstream's name beside it.
    pub tools: Vec<(Tool, String)>,
    /// What it said at `initialize`.
    pub info: InitializeResult,
}

/// A configuration error about upstream `name`.
fn bad(name: &str, problem: impl std::fmt::Display) -> ProxyError {
    ProxyError::Config(format!("[[upstream]] `{name}`: {problem}"))
}

impl UpstreamConfig {
    /// Where the upstream is, checked.
    fn source(&self) -> Result<Source, ProxyError> {
        let name = &self.name;
        match (&self.command, &self.url) {
            (Some(command), None) if !command.is_empty() => {
                if self.token_env.is_some() || self.token_file.is_some() {
                    return Err(bad(name, "a token is for a `url`, not a `command`"));
                }
                Ok(Source::Command(command.clone()))
            }
            (None, Some(url)) => {
                http::check_url(url)?;
                Ok(Source::Http(Box::new(HttpUpstream {
                    url: url.clone(),
                    tls: http::tls_config(url)?,
                    token: super::read_token(
                        self.token_file.as_deref(),
                        self.token_env.as_deref(),
                        [
                            &format!("[[upstream]] `{name}` token_file"),
                            &format!("[[upstream]] `{name}` token_env"),
                        ],
                    )?,
                })))
            }
            (Some(_), None) => Err(bad(name, "`command` is empty")),
            _ => Err(bad(name, "give either `command` or `url`")),
        }
    }

    /// Whether the upstream's tool `tool` is served, by `include` and
    /// `exclude`.
    fn serves(&self, globs: &Globs, tool: &str) -> bool {
        (self.include.is_empty() || globs.include.iter().any(|g| g.matches(tool)))
            && !globs.exclude.iter().any(|g| g.matches(tool))
    }
}

/// `include` and `exclude`, compiled.
struct Globs {
    include: Vec<Glob>,
    exclude: Vec<Glob>,
}

impl Globs {
    fn of(config: &UpstreamConfig) -> Result<Globs, ProxyError> {
        let compile = |patterns: &[String], field: &str| {
            patterns
                .iter()
                .map(|p| Glob::new(p).map_err(|e| bad(&config.name, format!("{field}: {e}"))))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Globs {
            include: compile(&config.include, "include")?,
            exclude: compile(&config.exclude, "exclude")?,
        })
    }
}

/// Check the `[[upstream]]` tables before anything starts: names, where
/// each is, the globs.
pub(super) fn check(upstreams: &[UpstreamConfig]) -> Result<(), ProxyError> {
    let mut seen = HashMap::new();
    for config in upstreams {
        let name = &config.name;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ProxyError::Config(format!(
                "[[upstream]] name {:?}: use 1 to 64 letters, digits, `-` or `_`",
                idem_runtime::text::clip(name, 80)
            )));
        }
        if seen.insert(name.as_str(), ()).is_some() {
            return Err(bad(name, "named twice"));
        }
        config.source()?;
        Globs::of(config)?;
    }
    Ok(())
}

/// Start every upstream, list its tools and name them as served.
pub(super) async fn start(upstreams: &[UpstreamConfig]) -> Result<Vec<Mount>, ProxyError> {
    let mut mounts: Vec<Mount> = Vec::new();
    let mut served: HashMap<String, String> = HashMap::new();
    for config in upstreams {
        let name = &config.name;
        let globs = Globs::of(config)?;
        let upstream = Arc::new(Upstream::new(config.source()?));
        let started = async {
            let (peer, info) = upstream.start().await.map_err(|e| bad(name, e))?;
            let tools = peer
                .list_all_tools()
                .await
                .map_err(|e| bad(name, format!("the server did not list its tools: {e}")))?;
            Ok::<_, ProxyError>((info, tools))
        };
        let (info, listed) = match started.await {
            Ok(started) => started,
            Err(e) => {
                stop(&mounts).await;
                upstream.stop().await;
                return Err(e);
            }
        };
        let prefix = config.prefix.clone().unwrap_or_else(|| format!("{name}_"));
        let mut tools = Vec::new();
        for tool in listed {
            if !config.serves(&globs, &tool.name) {
                continue;
            }
            let remote = tool.name.to_string();
            let mut served_as = tool;
            served_as.name = format!("{prefix}{remote}").into();
            if let Some(other) = served.insert(served_as.name.to_string(), name.clone()) {
                stop(&mounts).await;
                upstream.stop().await;
                return Err(bad(
                    name,
                    format!(
                        "its tool `{remote}` is served as `{}`, as a tool of `{other}` is; give one of them another `prefix`",
                        served_as.name
                    ),
                ));
            }
            tools.push((served_as, remote));
        }
        mounts.push(Mount {
            name: name.clone(),
            upstream,
            tools,
            info,
        });
    }
    Ok(mounts)
}

/// Stop every upstream started.
pub(super) async fn stop(mounts: &[Mount]) {
    for mount in mounts {
        mount.upstream.stop().await;
    }
}

/// What the gateway says at `initialize`: its own name, the oldest
/// protocol version its upstreams speak, and tools as its one capability
/// (resources, prompts and completions of several servers are not
/// served).
pub(super) fn info(mounts: &[Mount], name: &str) -> InitializeResult {
    let mut info = mounts[0].info.clone();
    for mount in &mounts[1..] {
        if mount.info.protocol_version < info.protocol_version {
            info.protocol_version = mount.info.protocol_version.clone();
        }
    }
    info.capabilities = rmcp::model::ServerCapabilities::builder()
        .enable_tools()
        .build();
    info.server_info = rmcp::model::Implementation::new(name, env!("CARGO_PKG_VERSION"));
    info.instructions = None;
    info
}
