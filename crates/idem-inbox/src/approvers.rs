//! Who may use the inbox: the approvers file, and checking a password or
//! an API token against it.
//!
//! ```toml
//! [[approver]]
//! name = "dana"
//! role = "approver"   # may decide; "viewer" may only look
//! password = "$argon2id$v=19$m=19456,t=2,p=1$…"   # idem approver password dana
//! tokens = ["sha256:…"]                           # idem approver token dana
//! slack = "U0123ABCD"   # optional: their Slack user id, for the buttons
//!
//! [[rule]]                 # optional: see `rules.rs`
//! tools = ["charge_*"]
//! required = 2
//!
//! [[notify]]               # optional: see `notify/endpoint.rs`
//! url = "https://hooks.slack.com/services/…"
//! format = "slack"
//! namespaces = ["mcp/billing/*"]
//! ```
//!
//! Passwords are kept as Argon2id PHC strings; API tokens (random, 256
//! bits) as their SHA-256, which is enough for a secret nobody chose.
//! The file is read once, at start-up; nothing in it is ever shown.

use std::collections::HashMap;
use std::path::Path;

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use base64::Engine;
use idem_net::token::TokenDigest;
use rand::RngCore;
use serde::Deserialize;

use super::notify::endpoint::NotifyEntry;
use crate::error::InboxError;
use crate::role::Role;
use idem_runtime::approval::rules::{RuleEntry, Rules};

/// One entry of the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: Role,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    /// Their Slack user id (`U…` or `W…`): a click on a Slack message's
    /// button by that user is a decision of theirs.
    #[serde(default)]
    slack: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    approver: Vec<Entry>,
    #[serde(default)]
    rule: Vec<RuleEntry>,
    #[serde(default)]
    notify: Vec<NotifyEntry>,
}

/// A signed-in person or bot, as decisions record them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name from the approvers file.
    pub name: String,
    /// What they may do.
    pub role: Role,
}

/// The approvers file, read.
#[derive(Debug)]
pub struct Approvers {
    by_name: HashMap<String, Entry>,
    /// The approval rules (`[[rule]]`).
    rules: Rules,
    /// The webhooks (`[[notify]]`), as written.
    notify: Vec<NotifyEntry>,
    /// The digest of each API token → the name it belongs to.
    by_token: HashMap<TokenDigest, String>,
    /// Each Slack user id → the name it belongs to.
    by_slack: HashMap<String, String>,
    /// Verified against when a name is unknown, so that a wrong name takes
    /// as long as a wrong password.
    decoy: String,
}

impl Approvers {
    /// Read and check the file at `path`.
    pub fn load(path: &Path) -> Result<Approvers, InboxError> {
        let text = std::fs::read_to_string(path).map_err(|source| InboxError::Unreadable {
            what: "the approvers file",
            path: path.to_owned(),
            source,
        })?;
        Approvers::parse(&text).map_err(|problem| InboxError::InvalidApprovers {
            path: path.to_owned(),
            problem,
        })
    }

    /// Read and check the file's text.
    pub(super) fn parse(text: &str) -> Result<Approvers, String> {
        let file: File = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => format!("line {}: {}", line_of(text, span.start), e.message()),
            None => e.message().to_owned(),
        })?;
        let mut by_name = HashMap::new();
        let mut by_token = HashMap::new();
        let mut by_slack = HashMap::new();
        for entry in file.approver {
            let name = entry.name.trim().to_owned();
            if name.is_empty() || name.chars().any(idem_runtime::text::needs_escape) {
                return Err(format!(
                    "approver name {:?} must be non-empty printable text",
                    entry.name
                ));
            }
            if let Some(hash) = &entry.password {
                PasswordHash::new(hash).map_err(|e| {
                    format!("approver {name}: the password is not a PHC hash ({e}); write it with `idem approver password {name}`")
                })?;
            }
            for token in &entry.tokens {
                let digest = TokenDigest::parse(token).ok_or_else(|| {
                    format!("approver {name}: a token must be written as sha256:<64 hex digits>; make one with `idem approver token {name}`")
                })?;
                by_token.insert(digest, name.clone());
            }
            if let Some(id) = &entry.slack {
                if !is_slack_user(id) {
                    return Err(format!("approver {name}: slack = {id:?} is not a Slack user id (U or W and capital letters and digits, as the member's profile shows: “Copy member ID”)"));
                }
                if let Some(other) = by_slack.insert(id.clone(), name.clone()) {
                    return Err(format!(
                        "approvers {other} and {name} have the same Slack user id {id}"
                    ));
                }
            }
            if by_name
                .insert(
                    name.clone(),
                    Entry {
                        name: name.clone(),
                        ..entry
                    },
                )
                .is_some()
            {
                return Err(format!("approver {name} is listed twice"));
            }
        }
        if by_name.is_empty() {
            return Err("no [[approver]] entries: nobody could sign in".to_owned());
        }
        let mut deciders: Vec<String> = by_name
            .values()
            .filter(|e| e.role == Role::Approver)
            .map(|e| e.name.clone())
            .collect();
        deciders.sort();
        let rules = Rules::check(file.rule, &deciders).map_err(|e| {
            match text.match_indices("[[rule]]").nth(e.index) {
                Some((at, _)) => format!("line {}: {e}", line_of(text, at)),
                None => e.to_string(),
            }
        })?;
        check_escalations(text, &rules, &by_name, &file.notify)?;
        Ok(Approvers {
            by_name,
            rules,
            notify: file.notify,
            by_token,
            by_slack,
            decoy: hash_password("decoy password, never accepted")
                .map_err(|e| format!("cannot hash a password: {e}"))?,
        })
    }

    /// The approval rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The webhooks of `[[notify]]` tables, as written (their secrets
    /// not read yet).
    pub(super) fn notify(&self) -> &[NotifyEntry] {
        &self.notify
    }

    /// The identity `name` has, if listed (for a name a trusted proxy
    /// vouches for, a live session, or `idem approve --by`).
    pub fn identity(&self, name: &str) -> Option<Identity> {
        self.by_name.get(name).map(|e| Identity {
            name: e.name.clone(),
            role: e.role,
        })
    }

    /// The approver whose Slack user id is `id`, if one is (a click on a
    /// Slack message's button).
    pub fn slack_user(&self, id: &str) -> Option<Identity> {
        self.by_slack.get(id).and_then(|name| self.identity(name))
    }

    /// Whether `name` is listed with a password (so that a sign-in with
    /// it is one of a bounded set of accounts).
    pub(super) fn has_password(&self, name: &str) -> bool {
        self.by_name
            .get(name.trim())
            .is_some_and(|e| e.password.is_some())
    }

    /// `name` signed in with `password`. Takes as long for an unknown name
    /// as for a wrong password (Argon2 verification, run off the async
    /// threads by the caller).
    ///
    /// The check's memory (19 MiB with the default parameters) is
    /// `scratch`, kept from one check to the next: allocated afresh for
    /// every check, the allocator keeps freed blocks per thread, and a
    /// stream of checks grew the process by hundreds of MiB.
    pub(super) fn check_password(
        &self,
        name: &str,
        password: &str,
        scratch: &mut Vec<Block>,
    ) -> Option<Identity> {
        let entry = self.by_name.get(name.trim());
        let hash = entry
            .and_then(|e| e.password.as_deref())
            .unwrap_or(&self.decoy);
        let parsed = PasswordHash::new(hash).ok()?;
        let ok = verify(&parsed, password.as_bytes(), scratch);
        match (ok, entry) {
            (true, Some(e)) if e.password.is_some() => self.identity(&e.name),
            _ => None,
        }
    }

    /// The identity an API token belongs to.
    pub(super) fn check_token(&self, token: &str) -> Option<Identity> {
        self.by_token
            .get(&TokenDigest::of(token.trim()))
            .and_then(|name| self.identity(name))
    }
}

/// Whether `id` is written as Slack writes a user id: `U` or `W`, then
/// capital letters and digits (`U0123ABCD`).
fn is_slack_user(id: &str) -> bool {
    (id.starts_with('U') || id.starts_with('W'))
        && (3..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Every name a rule's `escalate_to` gives is an approver or a
/// `[[notify]]` endpoint of the file: else the line of the rule, and who.
fn check_escalations(
    text: &str,
    rules: &Rules,
    approvers: &HashMap<String, Entry>,
    notify: &[NotifyEntry],
) -> Result<(), String> {
    for (i, rule) in rules.iter().enumerate() {
        let unknown = rule.timers.escalate_to.iter().find(|name| {
            !approvers.contains_key(name.as_str()) && !notify.iter().any(|n| n.name() == Some(name))
        });
        if let Some(name) = unknown {
            let line = text
                .match_indices("[[rule]]")
                .nth(i)
                .map_or(String::new(), |(at, _)| {
                    format!("line {}: ", line_of(text, at))
                });
            return Err(format!("{line}rule “{}”: escalate_to names {name:?}, which is neither an [[approver]] nor a [[notify]] endpoint's name in this file", rule.name));
        }
    }
    Ok(())
}

/// The line (from 1) of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// Whether `password` hashes to `hash` (its algorithm, version and
/// parameters), computed in `scratch`, grown as the parameters need.
fn verify(hash: &PasswordHash<'_>, password: &[u8], scratch: &mut Vec<Block>) -> bool {
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(hash.algorithm), Params::try_from(hash))
    else {
        return false;
    };
    let version = match hash.version.map(Version::try_from) {
        None => Version::default(),
        Some(Ok(version)) => version,
        Some(Err(_)) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if scratch.len() < params.block_count() {
        scratch.resize(params.block_count(), Block::new());
    }
    let mut out = vec![0u8; expected.len()];
    let computed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password,
        salt,
        &mut out,
        &mut scratch[..],
    );
    // `Output`'s equality is constant-time.
    computed.is_ok() && Output::new(&out).is_ok_and(|out| out == expected)
}

/// An Argon2id PHC string for `password`, with a fresh salt: the
/// `password` of an approvers-file entry.
pub fn hash_password(password: &str) -> Result<String, HashError> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(HashError)?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(HashError)
}

/// A password that could not be hashed ([`hash_password`]): Argon2's
/// reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HashError(argon2::password_hash::Error);

/// A new API token: 32 random bytes, base64url.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "idem_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// How a token is written in the file: `sha256:` and its hex digest.
pub fn token_entry(token: &str) -> String {
    TokenDigest::of(token).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn file(password: &str, token: &str) -> String {
        format!(
            "[[approver]]\nname = \"dana\"\nrole = \"approver\"\npassword = \"{}\"\ntokens = [\"{}\"]\n\n[[approver]]\nname = \"vic\"\nrole = \"viewer\"\npassword = \"{}\"\n",
            hash_password(password).unwrap(),
            token_entry(token),
            hash_password("viewer pw").unwrap(),
        )
    }

    #[test]
    fn passwords_and_tokens_are_checked_against_their_hashes() {
        let approvers = Approvers::parse(&file("s3cret pw", "idem_tok")).unwrap();
        let mut scratch = Vec::new();
        let mut check =
            |name: &str, password: &str| approvers.check_password(name, password, &mut scratch);
        let dana = check("dana", "s3cret pw").unwrap();
        assert_eq!(dana.role, Role::Approver);
        assert_eq!(check("dana", "wrong"), None);
        assert_eq!(check("nobody", "s3cret pw"), None);
        assert_eq!(check("vic", "viewer pw").unwrap().role, Role::Viewer);
        assert_eq!(approvers.check_token("idem_tok").unwrap().name, "dana");
        assert_eq!(approvers.check_token("idem_other"), None);
    }

    #[test]
    fn a_malformed_file_is_refused_with_what_is_wrong() {
        let refused = |text: &str| Approvers::parse(text).unwrap_err();
        assert!(refused("").contains("no [[approver]] entries"));
        assert!(
            refused("[[approver]]\nname = \"a\"\nrole = \"boss\"\n").contains("unknown variant")
        );
        assert!(
            refused("[[approver]]\nname = \"a\"\nrole = \"viewer\"\npassword = \"plain\"\n")
                .contains("not a PHC hash")
        );
        assert!(
            refused("[[approver]]\nname = \"a\"\nrole = \"viewer\"\ntokens = [\"abc\"]\n")
                .contains("sha256:<64 hex digits>")
        );
        let twice = "[[approver]]\nname = \"a\"\nrole = \"viewer\"\n".repeat(2);
        assert!(refused(&twice).contains("listed twice"));
    }

    #[test]
    fn slack_user_ids_name_one_approver_each() {
        let team = "[[approver]]\nname = \"dana\"\nrole = \"approver\"\nslack = \"U0DANA\"\n[[approver]]\nname = \"vic\"\nrole = \"viewer\"\nslack = \"W0VIC\"\n";
        let approvers = Approvers::parse(team).unwrap();
        assert_eq!(approvers.slack_user("U0DANA").unwrap().name, "dana");
        assert_eq!(approvers.slack_user("W0VIC").unwrap().role, Role::Viewer);
        assert_eq!(approvers.slack_user("U0OTHER"), None);
        assert_eq!(approvers.slack_user("dana"), None);
        let twice = team.replace("W0VIC", "U0DANA");
        assert!(Approvers::parse(&twice)
            .unwrap_err()
            .contains("the same Slack user id U0DANA"));
        for bad in ["u0dana", "dana", "U0<@U1>", "U"] {
            let said = Approvers::parse(&team.replace("U0DANA", bad)).unwrap_err();
            assert!(said.contains("is not a Slack user id"), "{bad}: {said}");
        }
    }

    /// The approvers of [`FINANCE`].
    const TEAM: &str = "[[approver]]\nname = \"dana\"\nrole = \"approver\"\n[[approver]]\nname = \"erin\"\nrole = \"approver\"\n[[approver]]\nname = \"frank\"\nrole = \"approver\"\n";

    /// A finance team's rules, as docs/inbox.md shows them.
    const FINANCE: &str = r#"
[[rule]]
name = "no refunds from CI"
principals = ["ci-*"]
tools = ["refund"]
reason = "CI jobs never refund; a person must ask for it."
decision = "deny"

[[rule]]
name = "trial accounts at weekends"
tools = ["refund"]
when = 'args.account.startsWith("trial-") && time.weekday >= 6'
decision = "deny"
reason = "Trial accounts get no refunds at weekends; ask again on Monday."

[[rule]]
name = "ceiling of 1,000 €"
shadow = true
tools = ["refund"]
when = "args.cents > 100000"
decision = "deny"
reason = "over the new ceiling"

[[rule]]
name = "small refunds"
decision = "run"
tools = ["refund"]
when = "args.cents < 5000"

[[rule]]
name = "refunds"
tools = ["refund"]
when = "args.cents <= 500000"
approvers = ["dana", "erin"]

[[rule]]
name = "large refunds"
tools = ["refund"]
approvers = ["dana", "erin", "frank"]
required = 2
forbid_self_approval = true
"#;

    #[test]
    fn a_finance_team_s_rules_read_and_a_broken_one_is_refused_with_its_line() {
        let approvers = Approvers::parse(&format!("{TEAM}{FINANCE}")).unwrap();
        assert_eq!(approvers.rules().len(), 6);
        let refused = |rules: &str| Approvers::parse(&format!("{TEAM}{rules}")).unwrap_err();
        // TEAM is 9 lines; the second rule starts on line 12.
        let bad = "\n[[rule]]\ntools = [\"a\"]\n\n[[rule]]\nwhen = \"args.cents >\"\n";
        let said = refused(bad);
        assert!(
            said.starts_with("line 14: rule “rule 2”: its condition does not parse"),
            "{said}"
        );
        let said = refused("\n[[rule]]\nwhen = \"cents > 5\"\n");
        assert!(
            said.starts_with("line 11: rule “rule 1”: its condition names `cents`"),
            "{said}"
        );
        let said = refused("\n[[rule]]\ntools = [\"a\"]\nwhenn = \"true\"\n");
        assert!(said.starts_with("line 13: unknown field `whenn`"), "{said}");
        let said = refused("\n[[rule]]\ndecision = \"maybe\"\n");
        assert!(
            said.starts_with("line 12: unknown variant `maybe`"),
            "{said}"
        );
    }

    #[test]
    fn timers_read_and_a_bad_one_is_refused_with_its_line_and_reason() {
        let pager = "\n[[notify]]\nname = \"pager\"\nurl = \"https://pager.example/hook\"\nformat = \"slack\"\n";
        let timed = "\n[[rule]]\ntools = [\"refund\"]\nvalid_for = \"15m\"\nescalate_after = \"30m\"\nescalate_to = [\"frank\", \"pager\"]\nexpires_after = \"4h\"\n";
        let approvers = Approvers::parse(&format!("{TEAM}{timed}{pager}")).unwrap();
        let timers = &approvers.rules().iter().next().unwrap().timers;
        assert_eq!(timers.valid_for, Some(Duration::from_secs(15 * 60)));
        assert_eq!(timers.escalate_after, Some(Duration::from_secs(30 * 60)));
        assert_eq!(timers.escalate_to, ["frank", "pager"]);
        assert_eq!(timers.expires_after, Some(Duration::from_secs(4 * 3600)));
        let refused = |rules: &str| Approvers::parse(&format!("{TEAM}{rules}{pager}")).unwrap_err();
        // TEAM is 9 lines; the rule starts on line 11.
        let said = refused("\n[[rule]]\ntools = [\"refund\"]\nvalid_for = \"15 minutes later\"\n");
        assert!(
            said.starts_with("line 13: \"15 minutes later\" is not a length of time: write numbers each with a unit"),
            "{said}"
        );
        let said = refused("\n[[rule]]\nexpires_after = \"0s\"\n");
        assert!(
            said.starts_with("line 12: \"0s\" is no time at all"),
            "{said}"
        );
        let said = refused("\n[[rule]]\nescalate_after = \"4h\"\nexpires_after = \"1h\"\n");
        assert!(
            said.starts_with(
                "line 11: rule “rule 1”: escalate_after must be shorter than expires_after"
            ),
            "{said}"
        );
        let said = refused("\n[[rule]]\nescalate_to = [\"frank\"]\n");
        assert!(
            said.starts_with("line 11: rule “rule 1”: escalate_to says who is told"),
            "{said}"
        );
        let said = refused("\n[[rule]]\nescalate_after = \"1h\"\nescalate_to = [\"zed\"]\n");
        assert!(
            said.starts_with("line 11: rule “rule 1”: escalate_to names \"zed\", which is neither an [[approver]] nor a [[notify]] endpoint's name"),
            "{said}"
        );
        let said = refused("\n[[rule]]\ndecision = \"run\"\nvalid_for = \"1h\"\n");
        assert!(
            said.starts_with("line 11: rule “rule 1”: valid_for, escalate_after, escalate_to and expires_after time a person's decision; decision = \"run\" asks nobody"),
            "{said}"
        );
    }
}
