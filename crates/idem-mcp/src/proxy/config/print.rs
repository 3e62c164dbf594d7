//! `--print-config`: the configuration file written from what the
//! upstream lists.

use std::fmt::Write as _;

use rmcp::model::Tool;

use super::{ApprovalConfig, Config, UnkeyedConfig};
use idem_runtime::text::{clip, needs_escape, visible};

/// The configuration file `--print-config` writes: every upstream tool
/// with its class, and a comment on each class that was guessed.
///
/// The server's own text (its name, version and each tool's description)
/// goes into comments escaped ([`visible`]): a line break in it cannot
/// start a line of configuration, and a control or bidirectional character
/// cannot redraw what the person reviewing the file reads.
pub(in crate::proxy) fn print(
    config: &Config,
    server: &str,
    version: &str,
    tools: &[Tool],
) -> String {
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
         # timeout = \"5m\", approval = \"chat_or_operator\" | \"chat\" | \"operator\",\n\
         # window = \"10m\", unkeyed = \"refuse\", description = \"…\" (for the inbox),\n\
         # transient = [\"error text\", …], transient_codes = [-32001, …].\n\
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
            ("window", entry.and_then(|e| e.window.as_deref())),
            ("description", entry.and_then(|e| e.description.as_deref())),
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
        if entry.and_then(|e| e.unkeyed) == Some(UnkeyedConfig::Refuse) {
            let _ = writeln!(out, "unkeyed = \"refuse\"");
        }
        if let Some(texts) = entry.and_then(|e| e.transient.as_deref()) {
            let texts: Vec<String> = texts.iter().map(|t| toml_string(t)).collect();
            let _ = writeln!(out, "transient = [{}]", texts.join(", "));
        }
        if let Some(codes) = entry.and_then(|e| e.transient_codes.as_deref()) {
            let codes: Vec<String> = codes.iter().map(i64::to_string).collect();
            let _ = writeln!(out, "transient_codes = [{}]", codes.join(", "));
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
