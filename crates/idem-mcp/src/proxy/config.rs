//! The proxy's configuration file (TOML): a class and key options for each
//! upstream tool, by name or glob, and what `--print-config` infers from
//! the upstream's annotations where the file is silent.
//!
//! ```toml
//! [server]
//! name = "memory"                   # the records' namespace: mcp/memory
//! max_argument_bytes = 262144       # larger calls refused (default 65536)
//! tasks_after = "30s"               # a longer write becomes an MCP task (default 10s; "never")
//!
//! [tools.create_entities]
//! class = "non_idempotent_write"
//!
//! [tools."delete_*"]
//! class = "irreversible"
//! approval = "operator"             # chat_or_operator (default), chat, operator
//!
//! [tools.add_customer]
//! class = "idempotent_write"
//! key = ["email"]                   # a natural key: these argument fields
//! ttl = "7d"                        # how long the record is kept
//! timeout = "2m"                    # without a result or progress (default 5m)
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::Approver;
use idem_net::glob::Glob;
use idem_runtime::class::ClassKind;
use rmcp::model::Tool;
use serde::Deserialize;

use idem_runtime::text::clip;
use idem_runtime::text::{needs_escape, visible};

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
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
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
}

/// Who approves.
#[derive(Debug, Clone, Copy, Deserialize)]
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
}

impl Config {
    /// Parse the file's text; `path` names it in errors.
    pub(super) fn parse(text: &str, path: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| format!("{path}: {e}"))?;
        if let Some(value) = &config.server.tasks_after {
            if value != "never" && idem_runtime::text::parse_duration(value).is_none() {
                return Err(format!(
                    "{path}: [server] tasks_after = \"{value}\" is not a duration (10s, 2m) \
                     nor \"never\""
                ));
            }
        }
        for (pattern, tool) in &config.tools {
            Glob::new(pattern)
                .map_err(|e| format!("{path}: [tools.\"{}\"]: {e}", visible(pattern)))?;
            for (what, value) in [("ttl", &tool.ttl), ("timeout", &tool.timeout)] {
                if let Some(value) = value {
                    if idem_runtime::text::parse_duration(value).is_none() {
                        return Err(format!(
                            "{path}: [tools.\"{pattern}\"] {what} = \"{value}\" is not a duration \
                             (90s, 15m, 2h, 7d)"
                        ));
                    }
                }
            }
        }
        Ok(config)
    }

    /// Check every entry against the tools the upstream lists (`names`): a
    /// name it does not have, or a glob that matches none of them, is a
    /// mistake (a typo, the wrong server) that would otherwise leave a tool
    /// run by its annotations' guess; refused with the closest name.
    pub(super) fn check(&self, names: &[&str], path: &str) -> Result<(), String> {
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
            let shown = visible(pattern);
            let what = if is_glob {
                format!("{path}: [tools.\"{shown}\"] matches none of the upstream's tools")
            } else {
                format!("{path}: [tools.\"{shown}\"]: the upstream has no tool of that name")
            };
            let closest = names
                .iter()
                .map(|name| (strsim::normalized_damerau_levenshtein(pattern, name), name))
                .filter(|(score, _)| *score >= 0.6)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            return Err(match closest {
                Some((_, name)) => format!("{what}; did you mean `{}`?", visible(name)),
                None => format!(
                    "{what}; it lists {}",
                    names
                        .iter()
                        .map(|n| format!("`{}`", visible(n)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(())
    }

    /// The entry for `name`: its own, else the glob with the most literal
    /// characters that matches it.
    fn entry(&self, name: &str) -> Option<&ToolConfig> {
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
        Resolved {
            class,
            guess,
            key: entry.key.clone(),
            ttl: duration(&entry.ttl),
            timeout: duration(&entry.timeout),
            approval: entry.approval,
        }
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

/// The configuration file `--print-config` writes: every upstream tool
/// with its class, and a comment on each class that was guessed.
///
/// The server's own text (its name, version and each tool's description)
/// goes into comments escaped ([`visible`]): a line break in it cannot
/// start a line of configuration, and a control or bidirectional character
/// cannot redraw what the person reviewing the file reads.
pub(super) fn print(config: &Config, server: &str, version: &str, tools: &[Tool]) -> String {
    let mut out = String::new();
    let (shown, version) = (visible(server), visible(version));
    let _ = writeln!(
        out,
        "# idem proxy configuration for the MCP server `{shown}` {version}.\n\
         # Written by `idem proxy --print-config`: review each class once, then pass\n\
         # this file with `idem proxy --config FILE -- COMMAND…` (or --upstream\n\
         # URL). A class marked \"guessed\" comes from the server's own annotations.\n\
         # Classes: read, idempotent_write, non_idempotent_write, irreversible.\n\
         # Options: key = [\"field\", …] (a natural key), ttl = \"7d\",\n\
         # timeout = \"5m\", approval = \"chat_or_operator\" | \"chat\" | \"operator\".\n\
         \n\
         [server]\n\
         name = {}",
        toml_string(server)
    );
    for tool in tools {
        let resolved = config.resolve(tool);
        let _ = writeln!(out);
        if let Some(description) = tool.description.as_deref() {
            let first = description.lines().next().unwrap_or_default().trim();
            if !first.is_empty() {
                let _ = writeln!(out, "# {}", clip(first, 96));
            }
        }
        if let Some(why) = &resolved.guess {
            let _ = writeln!(out, "# Guessed: {why}.");
        }
        let _ = writeln!(out, "[tools.{}]", toml_key(&tool.name));
        let _ = writeln!(out, "class = \"{}\"", resolved.class.as_str());
        if let Some(key) = &resolved.key {
            let fields: Vec<String> = key.iter().map(|k| toml_string(k)).collect();
            let _ = writeln!(out, "key = [{}]", fields.join(", "));
        }
        let entry = config.entry(&tool.name);
        for (what, value) in [
            ("ttl", entry.and_then(|e| e.ttl.as_deref())),
            ("timeout", entry.and_then(|e| e.timeout.as_deref())),
        ] {
            if let Some(value) = value {
                let _ = writeln!(out, "{what} = {}", toml_string(value));
            }
        }
        if let Some(approval) = resolved.approval {
            let word = match approval {
                ApprovalConfig::ChatOrOperator => "chat_or_operator",
                ApprovalConfig::Chat => "chat",
                ApprovalConfig::Operator => "operator",
            };
            let _ = writeln!(out, "approval = \"{word}\"");
        }
    }
    out
}

/// A TOML basic string, with every character a screen must not show as
/// itself ([`needs_escape`]) written as a TOML escape.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) && (c as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\U{:08X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be, else quoted.
fn toml_key(text: &str) -> String {
    let bare = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        text.to_owned()
    } else {
        toml_string(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use std::sync::Arc;

    fn tool(name: &str, annotations: Option<ToolAnnotations>) -> Tool {
        let mut tool = Tool::new(name.to_owned(), "d", Arc::new(Default::default()));
        tool.annotations = annotations;
        tool
    }

    /// A server's name, version and descriptions are its own text: in the
    /// printed file they cannot add a line of configuration, and nothing
    /// in them reaches the screen that could redraw it.
    #[test]
    fn printed_server_text_cannot_forge_configuration_or_the_screen() {
        let forged = "x\n[tools.delete_all]\nclass = \"read\"\r\u{1b}[2J\u{202e}";
        let mut evil = tool("delete_all", Some(ToolAnnotations::new().destructive(true)));
        evil.description = Some(format!("{forged} more").into());
        let named = tool("na\u{202e}me\n[x]", None);
        let printed = print(&Config::default(), forged, forged, &[evil, named]);
        assert!(!printed.contains('\u{1b}') && !printed.contains('\u{202e}'));
        assert!(!printed.contains('\r'));
        let read = Config::parse(&printed, "printed.toml").expect("the printed file parses");
        let classes: Vec<ClassKind> = [tool("delete_all", None), tool("na\u{202e}me\n[x]", None)]
            .iter()
            .map(|t| read.resolve(t).class)
            .collect();
        assert_eq!(
            classes,
            [ClassKind::Irreversible, ClassKind::NonIdempotentWrite],
            "the server's text set a class:\n{printed}"
        );
        assert!(read.resolve(&tool("delete_all", None)).guess.is_none());
    }

    #[test]
    fn entries_the_upstream_has_no_tool_for_are_refused_with_the_closest_name() {
        let names = ["create_entities", "delete_entities", "read_graph"];
        let config = |text: &str| Config::parse(text, "proxy.toml").unwrap();
        let typo = config("[tools.create_entites]\nclass = \"read\"\n");
        let error = typo.check(&names, "proxy.toml").unwrap_err();
        assert!(
            error.contains("create_entites") && error.contains("did you mean `create_entities`"),
            "{error}"
        );
        let glob = config("[tools.\"drop_*\"]\nclass = \"irreversible\"\n");
        let error = glob.check(&names, "proxy.toml").unwrap_err();
        assert!(error.contains("matches none"), "{error}");
        let fine = config("[tools.\"delete_*\"]\nclass = \"irreversible\"\n[tools.read_graph]\nclass = \"read\"\n");
        assert_eq!(fine.check(&names, "proxy.toml"), Ok(()));
    }

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("delete_*", "delete_entities"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(glob("*_file", "edit_file"));
        assert!(glob("*e*e*", "delete"));
        assert!(!glob("delete_*", "create_entities"));
        assert!(!glob("a?c", "ac"));
    }

    #[test]
    fn the_annotations_decide_where_the_file_is_silent() {
        let config = Config::parse(
            "[tools.\"read_*\"]\nclass = \"idempotent_write\"\n[tools.read_graph]\nclass = \"read\"\nkey = [\"x\"]\nttl = \"7d\"\n",
            "f.toml",
        )
        .unwrap();
        let read = config.resolve(&tool("read_graph", None));
        assert_eq!(read.class, ClassKind::Read);
        assert!(read.guess.is_none());
        assert_eq!(read.ttl, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(
            config.resolve(&tool("read_file", None)).class,
            ClassKind::IdempotentWrite
        );
        let hinted = |a: ToolAnnotations| config.resolve(&tool("x", Some(a))).class;
        assert_eq!(
            hinted(ToolAnnotations::new().read_only(true)),
            ClassKind::Read
        );
        assert_eq!(
            hinted(ToolAnnotations::new().idempotent(true)),
            ClassKind::IdempotentWrite
        );
        assert_eq!(
            hinted(ToolAnnotations::new().destructive(true).idempotent(true)),
            ClassKind::Irreversible
        );
        let none = config.resolve(&tool("x", None));
        assert_eq!(none.class, ClassKind::NonIdempotentWrite);
        assert!(none.guess.unwrap().contains("no annotations"));
    }

    #[test]
    fn a_bad_duration_or_field_is_refused() {
        assert!(Config::parse("[tools.a]\nttl = \"soon\"\n", "f").is_err());
        assert!(Config::parse("[tools.a]\nclas = \"read\"\n", "f").is_err());
        assert!(Config::parse("[tools.a]\nclass = \"sometimes\"\n", "f").is_err());
    }

    #[test]
    fn the_printed_file_reads_back_as_the_same_classes() {
        let tools = [
            tool("create_entities", None),
            tool("read graph", Some(ToolAnnotations::new().read_only(true))),
        ];
        let text = print(&Config::default(), "memory", "1.0", &tools);
        assert!(text.contains("# Guessed: the server gives no annotations"));
        let back = Config::parse(&text, "printed").unwrap();
        assert_eq!(back.server.name.as_deref(), Some("memory"));
        assert_eq!(
            back.tools["create_entities"].class,
            Some(ClassKind::NonIdempotentWrite)
        );
        assert_eq!(back.tools["read graph"].class, Some(ClassKind::Read));
    }
}
