//! The proxy's configuration file (TOML): a class and key options for each
//! upstream tool, by name or glob, and what `--print-config` infers from
//! the upstream's annotations where the file is silent.
//!
//! ```toml
//! [server]
//! name = "memory"                   # the records' namespace: mcp/memory
//! max_argument_bytes = 262144       # larger calls refused (default 65536)
//! tasks_after = "30s"               # a longer write becomes an MCP task (default 10s; "never")
//! catalog = "/var/lib/idem/memory-tools.json"  # the tools, for `idem serve --tools`
//!
//! [tools.create_entities]
//! class = "non_idempotent_write"
//! description = "Adds people and projects to the team's shared memory."  # for the inbox
//!
//! [tools."delete_*"]
//! class = "irreversible"
//! approval = "operator"             # chat_or_operator (default), chat, operator
//!
//! [tools.add_customer]
//! class = "idempotent_write"
//! key = ["email"]                   # a natural key: these argument fields
//! window = "24h"                    # … within 24 hours (default: for ever)
//! ttl = "7d"                        # how long the record is kept
//! timeout = "2m"                    # without a result or progress (default 5m)
//!
//! [tools.git_commit]
//! class = "non_idempotent_write"
//! window = "30s"                    # unkeyed repeats within 30 s are one effect (default 10m)
//! transient = ["index.lock"]        # an error saying so: nothing ran, not recorded
//! transient_codes = [-32001]        # JSON-RPC error codes that mean the same
//!
//! [tools.send_invoice]
//! class = "irreversible"
//! unkeyed = "refuse"                # a call without a key is refused
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Approver, Unkeyed};
use idem_net::glob::Glob;
use idem_runtime::class::ClassKind;
use idem_runtime::text::{parse_duration, visible};
use rmcp::model::Tool;
use serde::Deserialize;

mod error;
mod print;
mod transient;

pub use error::{ConfigError, Table};
pub(super) use print::print;
pub(super) use transient::Transient;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Config {
    /// About the upstream server.
    #[serde(default)]
    pub server: ServerSection,
    /// By tool name or glob (`*` any run of characters, `?` one).
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    /// Several upstream servers behind one endpoint
    /// ([`gateway`](super::gateway)).
    #[serde(default)]
    pub upstream: Vec<super::gateway::UpstreamConfig>,
    /// The file's path, for errors found after parsing.
    #[serde(skip)]
    path: String,
}

/// `[server]`.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerSection {
    /// The name records are kept under (namespace `mcp/NAME`); by default
    /// the name the upstream gives itself at `initialize`.
    pub name: Option<String>,
    /// The largest arguments a call may carry, in bytes of JSON (default
    /// 65536, `idem_runtime::dispatch::DEFAULT_MAX_ARGUMENT_BYTES`); a
    /// larger call is refused before anything runs, and the model is told
    /// the limit.
    pub max_argument_bytes: Option<usize>,
    /// How long a write runs before a client that takes MCP tasks is
    /// answered with one (default 10s); `"never"`: always in the request.
    pub tasks_after: Option<String>,
    /// A file the proxy writes its tools to at start (an
    /// `idem_runtime::catalog::Catalog`: name, description, class), for
    /// `idem serve --tools FILE` to show the person who decides.
    pub catalog: Option<std::path::PathBuf>,
}

impl ServerSection {
    /// `tasks_after` as the server takes it (`McpServer::tasks_after`).
    pub(super) fn tasks_after(&self) -> Option<Duration> {
        match self.tasks_after.as_deref() {
            None => Some(crate::call::DEFAULT_TASKS_AFTER),
            Some("never") => None,
            Some(text) => idem_runtime::text::parse_duration(text),
        }
    }
}

/// `[tools.NAME]`: what `#[tool]` says of a tool written in Rust.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ToolConfig {
    /// `read`, `idempotent_write`, `non_idempotent_write` or `irreversible`.
    pub class: Option<ClassKind>,
    /// A natural key: the argument fields that name the effect.
    pub key: Option<Vec<String>>,
    /// How long the record is kept (90s, 15m, 2h, 7d).
    pub ttl: Option<String>,
    /// How long a call may go without its result or a progress
    /// notification (progress starts it again); a call that goes longer is
    /// ambiguous.
    pub timeout: Option<String>,
    /// Who approves an irreversible call: `chat_or_operator`, `chat`,
    /// `operator`.
    pub approval: Option<ApprovalConfig>,
    /// With `key`: calls with the same key fields in different windows of
    /// this length are different effects. Without: a call without a key
    /// of idem's is one effect with an identical call of the same tool
    /// within this window (the server's is ten minutes).
    pub window: Option<String>,
    /// `refuse`: a write without a key of idem's (or a client's ids) is
    /// refused; `window`: keyed by the window (the default).
    pub unkeyed: Option<UnkeyedConfig>,
    /// What the tool does, written for the person who approves or
    /// settles its calls (the inbox); the upstream's description when
    /// absent. The model reads the upstream's.
    pub description: Option<String>,
    /// The upstream's error texts that say the call did not take effect
    /// (a lock held, a rate limit): a text without `*`, `?` or `[` is
    /// looked for anywhere in the error, one with them is a glob over the
    /// whole text. Such an error is transient: never recorded as the
    /// tool's failure; retried where the class allows.
    pub transient: Option<Vec<String>>,
    /// JSON-RPC error codes of the upstream's that say the same.
    pub transient_codes: Option<Vec<i64>>,
}

/// `unkeyed`: what a write without a key of idem's gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(in crate::proxy) enum UnkeyedConfig {
    /// Keyed by the repeat window (`window`, else the server's).
    Window,
    /// Refused: only keyed calls run.
    Refuse,
}

/// Who approves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalConfig {
    /// The person in the chat when the client can ask, else an operator.
    ChatOrOperator,
    /// The person in the chat.
    Chat,
    /// An operator (`idem approve`, `idem serve`).
    Operator,
}

impl From<ApprovalConfig> for Approver {
    fn from(a: ApprovalConfig) -> Approver {
        match a {
            ApprovalConfig::ChatOrOperator => Approver::ChatOrOperator,
            ApprovalConfig::Chat => Approver::Chat,
            ApprovalConfig::Operator => Approver::Operator,
        }
    }
}

/// What one upstream tool is run as.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    /// Its class.
    pub class: ClassKind,
    /// Where the class came from, for `--print-config`'s comment; `None`
    /// when the file gave it.
    pub guess: Option<String>,
    /// Natural key fields.
    pub key: Option<Vec<String>>,
    /// Record lifetime.
    pub ttl: Option<Duration>,
    /// How long a call may go without its result or progress.
    pub timeout: Option<Duration>,
    /// Who approves.
    pub approval: Option<ApprovalConfig>,
    /// How a call without a key of idem's is keyed, when not as the
    /// server's default (a tool with a natural key is keyed by it).
    pub unkeyed: Option<Unkeyed>,
    /// The natural key's window.
    pub key_window: Option<Duration>,
    /// The description for the inbox, when the file gives one.
    pub description: Option<String>,
    /// Which of its errors are transient.
    pub transient: Transient,
}

impl Config {
    /// Parse the file's text; `path` names it in errors.
    pub(super) fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.path = path.to_owned();
        let bad = |table: Table, field: &'static str, value: &str, expected: &str| {
            ConfigError::BadValue {
                path: path.to_owned(),
                table,
                field,
                value: format!("\"{}\"", visible(value)),
                expected: expected.to_owned(),
            }
        };
        if let Some(value) = &config.server.tasks_after {
            if value != "never" && parse_duration(value).is_none() {
                let expected = "not a duration (10s, 2m) nor \"never\"";
                return Err(bad(Table::Server, "tasks_after", value, expected));
            }
        }
        for (pattern, tool) in &config.tools {
            let table = || Table::Tool(pattern.clone());
            Glob::new(pattern).map_err(|e| bad(table(), "name", pattern, &e.to_string()))?;
            for (field, value) in [("ttl", &tool.ttl), ("timeout", &tool.timeout)] {
                if let Some(value) = value {
                    if parse_duration(value).is_none() {
                        let expected = "not a duration (90s, 15m, 2h, 7d)";
                        return Err(bad(table(), field, value, expected));
                    }
                }
            }
            if let Some(value) = &tool.window {
                if parse_duration(value).is_none_or(|d| d.is_zero()) {
                    let expected = "not a duration longer than nothing (30s, 10m, 24h)";
                    return Err(bad(table(), "window", value, expected));
                }
            }
            tool.check_keying(path, pattern)?;
            Transient::check(tool.transient.as_deref().unwrap_or_default())
                .map_err(|(value, why)| bad(table(), "transient", value, &why))?;
        }
        Ok(config)
    }

    /// Check every entry against the tools the upstream lists (`names`): a
    /// name it does not have, or a glob that matches none of them, is a
    /// mistake (a typo, the wrong server) that would otherwise leave a tool
    /// run by its annotations' guess; refused with the closest name.
    pub(super) fn check(&self, names: &[&str], path: &str) -> Result<(), ConfigError> {
        for pattern in self.tools.keys() {
            let is_glob = pattern.contains(['*', '?', '[']);
            let found = if is_glob {
                names.iter().any(|name| glob(pattern, name))
            } else {
                names.contains(&pattern.as_str())
            };
            if found {
                continue;
            }
            let closest = names
                .iter()
                .map(|name| (strsim::normalized_damerau_levenshtein(pattern, name), name))
                .filter(|(score, _)| *score >= 0.6)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, name)| (*name).to_owned());
            return Err(ConfigError::NoSuchTool {
                path: path.to_owned(),
                table: Table::Tool(pattern.clone()),
                glob: is_glob,
                listed: match closest {
                    Some(_) => Vec::new(),
                    None => names.iter().map(|n| (*n).to_owned()).collect(),
                },
                closest,
            });
        }
        Ok(())
    }

    /// The entry for `name`: its own, else the glob with the most literal
    /// characters that matches it.
    pub(super) fn entry(&self, name: &str) -> Option<&ToolConfig> {
        if let Some(exact) = self.tools.get(name) {
            return Some(exact);
        }
        self.tools
            .iter()
            .filter(|(pattern, _)| glob(pattern, name))
            .max_by_key(|(pattern, _)| pattern.chars().filter(|c| !matches!(c, '*' | '?')).count())
            .map(|(_, tool)| tool)
    }

    /// How `tool` runs: the file's entry, and where it names no class, the
    /// upstream's annotations.
    pub(super) fn resolve(&self, tool: &Tool) -> Resolved {
        let entry = self.entry(&tool.name).cloned().unwrap_or_default();
        let (class, guess) = match entry.class {
            Some(class) => (class, None),
            None => {
                let (class, why) = infer(tool);
                (class, Some(why))
            }
        };
        let duration =
            |d: &Option<String>| d.as_deref().and_then(idem_runtime::text::parse_duration);
        let window = duration(&entry.window);
        let natural = entry.key.is_some();
        Resolved {
            class,
            guess,
            key: entry.key.clone(),
            ttl: duration(&entry.ttl),
            timeout: duration(&entry.timeout),
            approval: entry.approval,
            unkeyed: match (entry.unkeyed, window) {
                _ if natural => None,
                (Some(UnkeyedConfig::Refuse), _) => Some(Unkeyed::Refuse),
                (_, Some(window)) => Some(Unkeyed::Window(window)),
                (Some(UnkeyedConfig::Window) | None, None) => None,
            },
            key_window: window.filter(|_| natural),
            description: entry.description.clone(),
            transient: Transient::new(
                entry.transient.as_deref().unwrap_or_default(),
                entry.transient_codes.as_deref().unwrap_or_default(),
            ),
        }
    }
}

impl Config {
    /// Write the tools `registry` runs (the upstream's `tools`) to `[server]
    /// catalog`, if the file names one, for `idem serve --tools`: each with
    /// its class and the file's `description` (else the upstream's).
    pub(super) fn write_catalog(
        &self,
        registry: &idem_runtime::Registry,
        tools: &[Tool],
    ) -> Result<(), ConfigError> {
        let Some(file) = &self.server.catalog else {
            return Ok(());
        };
        let mut catalog = registry.catalog();
        for entry in &mut catalog.tools {
            let own = tools.iter().find(|t| t.name == entry.name);
            if let Some(description) = own.and_then(|t| self.resolve(t).description) {
                entry.description = description;
            }
        }
        std::fs::write(file, catalog.to_json()).map_err(|e| ConfigError::BadValue {
            path: self.path.clone(),
            table: Table::Server,
            field: "catalog",
            value: format!("\"{}\"", visible(&file.display().to_string())),
            expected: format!("cannot write the file: {e}"),
        })
    }
}

/// `server` with each tool's approver and keying of calls without a key,
/// where `tools` (served name, how it runs) say.
pub(super) fn per_tool(
    mut server: crate::McpServer,
    tools: Vec<(String, Resolved)>,
) -> crate::McpServer {
    for (name, resolved) in tools {
        if let Some(approval) = resolved.approval {
            server = server.approver(&name, approval.into());
        }
        if let Some(policy) = resolved.unkeyed {
            server = server.unkeyed_for(&name, policy);
        }
    }
    server
}

impl ToolConfig {
    /// Refuse keying fields that cannot go together, naming both.
    fn check_keying(&self, path: &str, pattern: &str) -> Result<(), ConfigError> {
        let conflict = |first, second, why| ConfigError::Conflict {
            path: path.to_owned(),
            table: Table::Tool(pattern.to_owned()),
            first,
            second,
            why,
        };
        let refuses = self.unkeyed == Some(UnkeyedConfig::Refuse);
        if refuses && self.window.is_some() {
            return Err(conflict(
                "unkeyed = \"refuse\"",
                "window",
                "a tool that refuses calls without a key keys none by a window",
            ));
        }
        if self.key.is_some() && self.unkeyed.is_some() {
            return Err(conflict(
                "key",
                "unkeyed",
                "a tool with a natural key keys every call by it",
            ));
        }
        if self.class == Some(ClassKind::Read) {
            for (field, set) in [
                ("window", self.window.is_some()),
                ("unkeyed", self.unkeyed.is_some()),
            ] {
                if set {
                    return Err(conflict(
                        "class = \"read\"",
                        field,
                        "a read is never keyed nor recorded",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The class the upstream's annotations suggest, and why. MCP's hints
/// default to a write that is neither idempotent nor destructive, which is
/// also idem's safe default.
pub(super) fn infer(tool: &Tool) -> (ClassKind, String) {
    let hints = tool.annotations.as_ref();
    let hint = |f: fn(&rmcp::model::ToolAnnotations) -> Option<bool>| hints.and_then(f);
    if hint(|a| a.read_only_hint) == Some(true) {
        return (
            ClassKind::Read,
            "the server marks it readOnlyHint: never keyed, never recorded".into(),
        );
    }
    if hint(|a| a.destructive_hint) == Some(true) {
        return (
            ClassKind::Irreversible,
            "the server marks it destructiveHint: each call waits for a person's approval".into(),
        );
    }
    if hint(|a| a.idempotent_hint) == Some(true) {
        return (
            ClassKind::IdempotentWrite,
            "the server marks it idempotentHint: re-run with the same key after an \
             ambiguous failure"
                .into(),
        );
    }
    let why = if hints.is_none() {
        "the server gives no annotations: a write that repeats its effect (the safe default)"
    } else {
        "the server's annotations say neither read-only, idempotent nor destructive: a write \
         that repeats its effect (the safe default)"
    };
    (ClassKind::NonIdempotentWrite, why.into())
}

/// Whether `name` matches `pattern` ([`Glob`]: `*` any run, `?` one
/// character); the file's globs are checked when it is parsed.
pub(super) fn glob(pattern: &str, name: &str) -> bool {
    Glob::new(pattern).is_ok_and(|glob| glob.matches(name))
}

#[cfg(test)]
mod tests;
