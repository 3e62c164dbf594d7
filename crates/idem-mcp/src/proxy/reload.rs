//! SIGHUP on `idem proxy --listen --config FILE`: the file read again, and
//! what can change without changing a key put in place at once.
//!
//! A tool's `timeout`, `transient` and `transient_codes` apply from the
//! next call on. Everything else in the file decides how a call is keyed,
//! classed, approved or served — a tool's `class`, `key`, `window`, `ttl`,
//! `unkeyed`, `approval` and `description`, `[server]`, the
//! `[[upstream]]` tables — and a retry keyed after such a change would not
//! find the record of the call it repeats. A file that changes any of it
//! is not loaded: nothing changes, and stderr names what differs (restart
//! to change it: with two instances, one drained at a time). A file that
//! cannot be read or parsed is not loaded either.

use std::path::PathBuf;

use rmcp::model::Tool;

use super::config::{Config, Resolved};
use super::tool::{Live, LiveCell};

/// One served tool: as the upstream listed it, and its live settings.
pub(super) struct Served {
    pub listed: Tool,
    pub live: LiveCell,
}

/// What a SIGHUP reloads.
pub(super) struct Reload {
    path: PathBuf,
    /// The file as loaded at start: what every later file must keep.
    started: Config,
    tools: Vec<Served>,
}

impl Reload {
    /// The file at `path`, loaded at start as `started`, for `tools`.
    pub(super) fn new(path: PathBuf, started: Config, tools: Vec<Served>) -> Self {
        Reload {
            path,
            started,
            tools,
        }
    }

    /// Read the file again and put its live settings in place, all or
    /// none: what it says on stderr.
    pub(super) fn run(&self) -> String {
        let file = self.path.display();
        match self.load() {
            Ok(changed) => format!(
                "idem proxy: SIGHUP: --config {file} reloaded: timeouts and transient errors as \
                 the file says ({changed} tools)"
            ),
            Err(why) => {
                format!("idem proxy: SIGHUP: --config {file} not reloaded, nothing changed: {why}")
            }
        }
    }

    /// The number of tools served (each one's settings replaced).
    fn load(&self) -> Result<usize, String> {
        let path = self.path.display().to_string();
        let text =
            std::fs::read_to_string(&self.path).map_err(|e| format!("cannot read it: {e}"))?;
        let config = Config::parse(&text, &path).map_err(|e| e.to_string())?;
        let names: Vec<&str> = self.tools.iter().map(|t| &*t.listed.name).collect();
        config.check(&names, &path).map_err(|e| e.to_string())?;
        let mut fixed = Vec::new();
        if config.server != self.started.server {
            fixed.push("[server]".to_owned());
        }
        if config.upstream != self.started.upstream {
            fixed.push("the [[upstream]] tables".to_owned());
        }
        let mut lives = Vec::with_capacity(self.tools.len());
        for tool in &self.tools {
            let was = self.started.resolve(&tool.listed);
            let now = config.resolve(&tool.listed);
            fixed.extend(
                fixed_fields(&was, &now)
                    .into_iter()
                    .map(|field| format!("`{}`'s {field}", tool.listed.name)),
            );
            lives.push(Live::of(&now));
        }
        if !fixed.is_empty() {
            return Err(format!(
                "it changes {}, which decide how calls are keyed, classed, approved or served \
                 (a retry would not find the record of the call it repeats): restart to change \
                 them",
                fixed.join(", ")
            ));
        }
        for (tool, live) in self.tools.iter().zip(lives) {
            *tool
                .live
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = std::sync::Arc::new(live);
        }
        Ok(self.tools.len())
    }
}

/// The fields of a tool's configuration that differ between `was` and
/// `now` and cannot change while the proxy runs.
fn fixed_fields(was: &Resolved, now: &Resolved) -> Vec<&'static str> {
    let mut differ = Vec::new();
    let mut check = |field, same: bool| {
        if !same {
            differ.push(field);
        }
    };
    check("class", was.class == now.class);
    check("key", was.key == now.key);
    check("window", was.key_window == now.key_window);
    check("ttl", was.ttl == now.ttl);
    check("unkeyed", was.unkeyed == now.unkeyed);
    check("approval", was.approval == now.approval);
    check("description", was.description == now.description);
    differ
}
