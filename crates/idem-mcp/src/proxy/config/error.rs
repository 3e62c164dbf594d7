//! What can be wrong with the proxy's configuration file: each error names
//! the file, the table (`[server]`, `[tools."NAME"]`) and the field.

use std::fmt;

use idem_runtime::text::visible;

/// The proxy's configuration file (`--config`) is not valid, or does not
/// fit the upstream's tools. Nothing was started for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, a field the proxy does not know, or a value of the wrong
    /// type (the TOML parser's message, which names the line and field).
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// A field's value it cannot take.
    #[error("{path}: {table} {field} = {value}: {expected}")]
    BadValue {
        /// The file.
        path: String,
        /// Where the field is.
        table: Table,
        /// The field.
        field: &'static str,
        /// The value as written (escaped when shown).
        value: String,
        /// What it can be.
        expected: String,
    },
    /// Two fields of one tool that cannot go together.
    #[error("{path}: {table} sets both {first} and {second}: {why}")]
    Conflict {
        /// The file.
        path: String,
        /// The tool's table.
        table: Table,
        /// The first field.
        first: &'static str,
        /// The second field.
        second: &'static str,
        /// Why not.
        why: &'static str,
    },
    /// A `[tools."…"]` entry that names no tool of the upstream (a typo, the
    /// wrong server), which would otherwise leave a tool run by its
    /// annotations' guess.
    #[error("{path}: {table} {}{}", no_tool(*glob), suggestion(closest.as_deref(), listed))]
    NoSuchTool {
        /// The file.
        path: String,
        /// The entry.
        table: Table,
        /// Whether the entry is a glob (it matches none of the tools).
        glob: bool,
        /// The upstream's tool closest to the name, if one is close.
        closest: Option<String>,
        /// The upstream's tools, when none is close.
        listed: Vec<String>,
    },
}

/// Where a field is: `[server]` or a tool's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Table {
    /// `[server]`.
    Server,
    /// `[tools."NAME"]`: the tool's name or glob as written.
    Tool(String),
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Table::Server => f.write_str("[server]"),
            Table::Tool(name) => write!(f, "[tools.\"{}\"]", visible(name)),
        }
    }
}

fn no_tool(glob: bool) -> &'static str {
    match glob {
        true => "matches none of the upstream's tools",
        false => "names no tool of the upstream",
    }
}

fn suggestion(closest: Option<&str>, listed: &[String]) -> String {
    match closest {
        Some(name) => format!("; did you mean `{}`?", visible(name)),
        None => {
            let names: Vec<String> = listed.iter().map(|n| format!("`{}`", visible(n))).collect();
            format!("; it lists {}", names.join(", "))
        }
    }
}
