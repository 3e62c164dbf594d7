//! Where notifications go: `idem serve --notify URL` and the approvers
//! file's `[[notify]]` tables, each an endpoint with its format, its
//! signing secret and the namespaces and events it is told about.
//!
//! ```toml
//! [[notify]]
//! name = "billing"                  # shown in the delivery log; default its host
//! url = "https://hooks.example.com/idem"
//! format = "json"                   # or "slack" (incoming-webhook blocks)
//! secret_file = "/etc/idem/hook.secret"   # or secret_env = "VAR"; json needs one
//! namespaces = ["mcp/billing/*"]    # globs; default every namespace
//! events = ["pending", "decided"]   # default pending, overdue, escalated and decided
//! ```
//!
//! A URL is never shown whole (a Slack webhook's path is its secret): the
//! log names an endpoint by its name, or its scheme and host.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::event::Kind;
use idem_net::destination::{self, Refused};
use idem_net::glob::Glob;

/// The body an endpoint is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Format {
    /// idem's own JSON, signed.
    Json,
    /// A Slack incoming webhook's `blocks`, with a link into the inbox.
    Slack,
}

impl Format {
    /// `json` or `slack` (clap's parser of `--notify-format`).
    pub fn parse(text: &str) -> Result<Format, String> {
        match text.trim() {
            "json" => Ok(Format::Json),
            "slack" => Ok(Format::Slack),
            _ => Err("expected json (signed JSON) or slack (incoming-webhook blocks)".to_owned()),
        }
    }
}

/// Where an endpoint's signing secret is read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SecretSource {
    /// A file holding it (trailing whitespace ignored).
    pub file: Option<PathBuf>,
    /// An environment variable holding it.
    pub env: Option<String>,
}

/// One `[[notify]]` table, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotifyEntry {
    #[serde(default)]
    name: Option<String>,
    url: String,
    #[serde(default = "json")]
    format: Format,
    #[serde(default)]
    secret_file: Option<PathBuf>,
    #[serde(default)]
    secret_env: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    events: Option<Vec<Kind>>,
}

fn json() -> Format {
    Format::Json
}

impl NotifyEntry {
    /// Its name, if it has one (a rule's `escalate_to` may name it).
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref().map(str::trim)
    }

    /// The endpoint of `idem serve --notify URL`: every namespace, every
    /// event.
    pub(crate) fn command_line(url: &str, format: Format, secret: SecretSource) -> NotifyEntry {
        NotifyEntry {
            name: Some("--notify".to_owned()),
            url: url.to_owned(),
            format,
            secret_file: secret.file,
            secret_env: secret.env,
            namespaces: Vec::new(),
            events: None,
        }
    }
}

/// A signing secret; never shown.
#[derive(Clone)]
pub(crate) struct Secret(Vec<u8>);

impl Secret {
    /// A secret of `bytes`.
    pub(crate) fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    /// The secret's bytes, to sign with.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// An endpoint, checked, its secret read.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// How the delivery log names it.
    pub name: String,
    url: String,
    /// The body it is sent.
    pub format: Format,
    /// What its bodies are signed with (`None`: a Slack endpoint without
    /// one, whose URL is the secret).
    pub secret: Option<Secret>,
    namespaces: Vec<Glob>,
    events: Vec<Kind>,
    /// The outbox's name for it: the SHA-256 of its URL (hex), so a
    /// delivery record names no URL and another URL is another endpoint.
    pub id: String,
}

impl Endpoint {
    /// Check `entry` and read its secret; a relative `secret_file` is read
    /// from `dir` (the approvers file's folder). The error says which
    /// endpoint, and what to change.
    pub(crate) fn of(entry: NotifyEntry, dir: &Path) -> Result<Endpoint, String> {
        let url = entry.url.trim().to_owned();
        let shown = entry.name.clone().unwrap_or_else(|| origin_of(&url));
        check_url(&url).map_err(|e| format!("notify endpoint {shown}: {e}"))?;
        if shown.trim().is_empty() || shown.chars().any(idem_runtime::text::needs_escape) {
            return Err("a notify endpoint's name must be printable text".to_owned());
        }
        let secret = match (&entry.secret_file, &entry.secret_env) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "notify endpoint {shown}: give secret_file or secret_env, not both"
                ))
            }
            (Some(file), None) => Some(read_file(&dir.join(file), &shown)?),
            (None, Some(var)) => Some(read_env(var, &shown)?),
            (None, None) => None,
        };
        if secret.is_none() && entry.format == Format::Json {
            return Err(format!("notify endpoint {shown}: a JSON webhook is signed, so it needs a secret (secret_file or secret_env; --notify-secret-file or --notify-secret-env)"));
        }
        let mut namespaces = Vec::new();
        for glob in &entry.namespaces {
            if glob.trim().is_empty() {
                return Err(format!(
                    "notify endpoint {shown}: an empty namespace pattern"
                ));
            }
            namespaces.push(Glob::new(glob).map_err(|e| format!("notify endpoint {shown}: {e}"))?);
        }
        let events = entry
            .events
            .unwrap_or_else(|| vec![Kind::Pending, Kind::Overdue, Kind::Escalated, Kind::Decided]);
        if events.is_empty() {
            return Err(format!(
                "notify endpoint {shown}: events = [] sends nothing; leave it out for every event"
            ));
        }
        Ok(Endpoint {
            name: shown,
            id: hex::encode(Sha256::digest(url.as_bytes())),
            url,
            format: entry.format,
            secret,
            namespaces,
            events,
        })
    }

    /// Where to post (never shown: see the module's documentation).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Whether an event of `kind` in `namespace` goes to this endpoint.
    pub(crate) fn wants(&self, kind: Kind, namespace: Option<&str>) -> bool {
        self.events.contains(&kind)
            && (self.namespaces.is_empty()
                || namespace.is_some_and(|ns| self.namespaces.iter().any(|g| g.matches(ns))))
    }
}

/// An `https://` URL, or `http://` to this machine (loopback): a webhook
/// carries what waits for approval, so it travels over TLS.
fn check_url(url: &str) -> Result<(), String> {
    let no_scheme = "the URL must start with https:// (or http:// to loopback)";
    match destination::check(url) {
        Ok(_) => Ok(()),
        Err(Refused::PlainHttp) => {
            Err("plain http:// only to this machine (loopback); use https://".to_owned())
        }
        Err(Refused::OtherScheme) => Err(no_scheme.to_owned()),
        // `hooks.example.com/x`, which `http` does not read at all.
        Err(_) if !url.starts_with("https://") && !url.starts_with("http://") => {
            Err(no_scheme.to_owned())
        }
        Err(_) => Err("the URL has no host, or has spaces".to_owned()),
    }
}

/// `scheme://host[:port]` of `url`, escaped: how an unnamed endpoint is
/// shown.
fn origin_of(url: &str) -> String {
    // Cut by hand: it names the endpoint in the very message that says its
    // URL is malformed, where `http` reads nothing (`https://h/a b`:
    // "invalid uri character").
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    crate::view::shown(&format!("{scheme}://{authority}"))
}

fn read_file(path: &Path, shown: &str) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "notify endpoint {shown}: cannot read the secret file {}: {e}",
            path.display()
        )
    })?;
    nonempty(text.trim_end(), shown)
}

fn read_env(var: &str, shown: &str) -> Result<Secret, String> {
    let text = std::env::var(var).map_err(|_| {
        format!(
            "notify endpoint {shown}: the environment variable {var} holding its secret is not set"
        )
    })?;
    nonempty(text.trim_end(), shown)
}

fn nonempty(secret: &str, shown: &str) -> Result<Secret, String> {
    match secret.len() {
        0 => Err(format!("notify endpoint {shown}: its secret is empty")),
        1..=15 => Err(format!(
            "notify endpoint {shown}: its secret is shorter than 16 bytes; make one with `openssl rand -hex 32`"
        )),
        _ => Ok(Secret::new(secret.as_bytes().to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(toml_text: &str) -> NotifyEntry {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn urls_are_https_or_loopback_and_shown_by_their_origin_only() {
        assert!(check_url("https://hooks.slack.com/services/T/B/X").is_ok());
        assert!(check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(check_url("http://[::1]:9000/hook").is_ok());
        assert!(check_url("http://localhost/hook").is_ok());
        assert!(check_url("http://hooks.example.com/hook")
            .unwrap_err()
            .contains("loopback"));
        assert!(check_url("ftp://x").is_err());
        assert_eq!(
            origin_of("https://user:pw@hooks.slack.com/services/T/B/SECRET"),
            "https://hooks.slack.com"
        );
    }

    #[test]
    fn a_json_endpoint_needs_a_secret_and_namespaces_are_globs() {
        let dir = std::env::temp_dir();
        let file = format!("idem-test-hook-secret-{}", std::process::id());
        std::fs::write(dir.join(&file), "0123456789abcdef0123\n").unwrap();
        let refused = Endpoint::of(entry("url = \"https://h.example/x\""), &dir).unwrap_err();
        assert!(refused.contains("needs a secret"), "{refused}");
        let slack = Endpoint::of(
            entry("url = \"https://h.example/x\"\nformat = \"slack\"\nnamespaces = [\"mcp/billing/*\"]\nevents = [\"pending\"]"),
            &dir,
        )
        .unwrap();
        assert!(slack.wants(Kind::Pending, Some("mcp/billing/alice")));
        assert!(!slack.wants(Kind::Pending, Some("mcp/hr/alice")));
        assert!(!slack.wants(Kind::Pending, None));
        assert!(!slack.wants(Kind::Decided, Some("mcp/billing/alice")));
        let signed = Endpoint::of(
            entry(&format!(
                "url = \"https://h.example/x\"\nsecret_file = \"{file}\""
            )),
            &dir,
        )
        .unwrap();
        let _ = std::fs::remove_file(dir.join(&file));
        assert_eq!(
            signed.secret.as_ref().unwrap().bytes(),
            b"0123456789abcdef0123"
        );
        assert!(signed.wants(Kind::Overdue, None));
        assert_eq!(signed.name, "https://h.example");
        assert_eq!(format!("{:?}", signed.secret), "Some(Secret(…))");
    }
}
