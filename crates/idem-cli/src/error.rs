//! What can go wrong, as one line on stderr and an exit code per kind, so a
//! script can tell "no such record" from "the store is down" without
//! reading the message. Every refusal happens before anything is written:
//! whatever the error, nothing changed.

use std::path::PathBuf;
use std::process::ExitCode;

use idem_runtime::clock::Timestamp;
use idem_runtime::key::KeyError;
use idem_runtime::operator::OperatorError;
use idem_runtime::record::CorruptRecord;
use idem_runtime::store::StoreError;

use crate::render::clip;
use crate::time::relative;
use idem_runtime::text::visible;

/// The exit codes (documented in `docs/cli.md`).
pub(crate) mod exit {
    /// Done.
    pub(crate) const OK: u8 = 0;
    /// The record's state does not allow the action (not awaiting approval,
    /// already approved, already settled, in flight under a live lease,
    /// changed meanwhile), or an approval rule does not let `--by` decide.
    pub(crate) const REFUSED: u8 = 1;
    /// Bad command line: unknown option, malformed JSON, bad key text, bad
    /// time, an unreadable file named by an option, an address that cannot
    /// be listened on (clap's own code for usage errors).
    pub(crate) const USAGE: u8 = 2;
    /// No record matches the key or prefix.
    pub(crate) const NOT_FOUND: u8 = 3;
    /// The key prefix matches several records.
    pub(crate) const AMBIGUOUS: u8 = 4;
    /// The store cannot be used: unreachable, misconfigured, written by a
    /// newer idem, corrupt.
    pub(crate) const STORE: u8 = 5;
    /// `ls` or `stats` printed what it could read, but some stored records
    /// could not be decoded; they are named on stderr and were left out
    /// (and untouched).
    pub(crate) const CORRUPT: u8 = 6;
}

/// Why a command failed. Nothing was changed.
///
/// The first variants, up to [`CliError::Proxy`], and
/// [`CliError::UpstreamUrl`] are usage errors (exit code 2): the command
/// line is wrong in a way clap cannot see.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// An option that must say something (`--by`, `--reason`) is empty or
    /// only spaces.
    #[error("{option} must not be empty")]
    Empty {
        /// The option, `--by`.
        option: &'static str,
    },
    /// An option that takes JSON (`--args`, `--natural`) was given text
    /// that is not JSON.
    #[error("{option} is not valid JSON ({source})")]
    InvalidJson {
        /// The option, `--args`.
        option: &'static str,
        /// Where and why the text is not JSON.
        source: serde_json::Error,
    },
    /// `idem resolve --succeeded` was given an output that is not JSON.
    #[error(
        "--succeeded takes the tool's output as JSON, and '{}' is not JSON ({source}); write a string as '\"text\"'",
        clip(.given, 60)
    )]
    OutputNotJson {
        /// The text given.
        given: String,
        /// Where and why it is not JSON.
        source: serde_json::Error,
    },
    /// `idem key --natural` was given JSON that is not an object.
    #[error("--natural takes the natural-key fields as a JSON object")]
    NaturalKeyNotAnObject,
    /// An option given without the others it needs (clap checks this
    /// first; here in case it is bypassed).
    #[error("{option} needs {needs}")]
    Needs {
        /// The option given, `--run`.
        option: &'static str,
        /// What it needs, `--step and --args`.
        needs: &'static str,
    },
    /// `idem key` was told nothing to derive a key from.
    #[error("say where the key comes from: --call-id, --run with --step and --args, --natural, --custom, or --repeat-window with --args")]
    NoKeySource,
    /// `idem key`'s namespace, arguments or source derive no key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `idem serve` cannot start or serve, or an approvers file (`idem
    /// approve --approvers`) cannot be used: in the inbox's words.
    #[error(transparent)]
    Inbox(idem_inbox::InboxError),
    /// `idem approver`'s NAME cannot be written in the approvers file.
    #[error("the approver's name must be printable text, without quotes or backslashes")]
    ApproverName,
    /// `idem principal`'s NAME cannot name a principal.
    #[error("the principal's name must be printable text, without quotes, backslashes or `/`")]
    PrincipalName,
    /// `idem approver password` read too short a password.
    #[error("the password (read from stdin) must be at least {min} characters")]
    ShortPassword {
        /// The fewest characters accepted.
        min: usize,
    },
    /// The password could not be hashed.
    #[error("cannot hash the password: {0}")]
    HashPassword(idem_inbox::approvers::HashError),
    /// `idem proxy` cannot start from what it was given or started: its
    /// configuration, the upstream server, the address to listen on.
    #[error(transparent)]
    Proxy(idem_mcp::proxy::ProxyError),
    /// The store could not be opened.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The SQLite file named does not exist (and is not created).
    #[error("there is no idem store at {url}: the file {path} does not exist (name the store with --store URL or IDEM_STORE)")]
    NoSqliteFile {
        /// The store's URL, password hidden.
        url: String,
        /// The file.
        path: String,
    },
    /// `idem migrate` on a SQLite file whose directory does not exist.
    #[error("cannot create the idem store at {url}: the directory {dir} does not exist (create it first, or name another file)")]
    NoSqliteDirectory {
        /// The store's URL, password hidden.
        url: String,
        /// The directory.
        dir: String,
    },
    /// An operator action was refused.
    #[error("{}", operator_message(.error, *.now))]
    Operator {
        /// Why.
        error: OperatorError,
        /// The store's time, to say "in 12s" rather than an epoch number
        /// (`None` when it could not be read).
        now: Option<Timestamp>,
    },
    /// An approval rule does not let `--by` make this decision.
    #[error("{0}")]
    Rule(#[from] idem_inbox::rules::RuleRefusal),
    /// `--by` is not an approver in the `--approvers` file.
    #[error("--by {name}: not an [[approver]] with role = \"approver\" in the approvers file {}, so the approval rules do not let them decide", .path.display())]
    NotAnApprover {
        /// The name given.
        name: String,
        /// The file.
        path: PathBuf,
    },
    /// `idem approve` without `--approvers` on a call that already has
    /// approvals towards a rule needing several: the rule cannot be
    /// checked, so the approval is refused.
    #[error("key {key} already has {given} approval(s) towards a rule that needs several (by {by}); give --approvers FILE (or IDEM_APPROVERS) so that the rule is checked")]
    RulesNotChecked {
        /// The key.
        key: String,
        /// How many approvals it has.
        given: usize,
        /// Who gave them.
        by: String,
    },
    /// Some stored records could not be decoded: the output left them out.
    #[error("{}", corrupt_message(.0))]
    Corrupt(Vec<CorruptRecord>),
    /// `idem proxy --upstream` was given a URL it cannot use (`https://`,
    /// not a URL).
    #[error("{0}")]
    UpstreamUrl(#[from] idem_mcp::proxy::UpstreamUrlError),
    /// Writing the output failed (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl From<idem_mcp::proxy::ProxyError> for CliError {
    fn from(error: idem_mcp::proxy::ProxyError) -> Self {
        use idem_mcp::proxy::ProxyError;
        match error {
            ProxyError::UpstreamUrl(e) => CliError::UpstreamUrl(e),
            ProxyError::Store(e) => CliError::Store(e),
            ProxyError::Io(e) => CliError::Output(e),
            // What the operator gave or started does not work: a usage
            // error (exit code 2), in the proxy's own words.
            other => CliError::Proxy(other),
        }
    }
}

impl From<idem_inbox::InboxError> for CliError {
    fn from(error: idem_inbox::InboxError) -> Self {
        use idem_inbox::InboxError;
        match error {
            // The store `idem serve` was given to open: the program's own
            // error, as every other command reports it.
            InboxError::Store(e) => match e.downcast::<CliError>() {
                Ok(e) => *e,
                Err(e) => CliError::Inbox(InboxError::Store(e)),
            },
            InboxError::Io(e) => CliError::Output(e),
            other => CliError::Inbox(other),
        }
    }
}

impl From<OperatorError> for CliError {
    fn from(error: OperatorError) -> Self {
        CliError::Operator { error, now: None }
    }
}

impl CliError {
    /// The process's exit code.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::Empty { .. }
            | CliError::InvalidJson { .. }
            | CliError::OutputNotJson { .. }
            | CliError::NaturalKeyNotAnObject
            | CliError::Needs { .. }
            | CliError::NoKeySource
            | CliError::Key(_)
            | CliError::ApproverName
            | CliError::PrincipalName
            | CliError::ShortPassword { .. }
            | CliError::HashPassword(_) => exit::USAGE,
            // Stopped with calls left under way: not the command line's
            // fault.
            CliError::Proxy(idem_mcp::proxy::ProxyError::Stopped { .. }) => exit::REFUSED,
            CliError::Proxy(_) | CliError::UpstreamUrl(_) => exit::USAGE,
            CliError::Inbox(e) => match e {
                idem_inbox::InboxError::Store(_) | idem_inbox::InboxError::Io(_) => exit::STORE,
                // What the operator gave: a file, an address, a webhook.
                _ => exit::USAGE,
            },
            CliError::Store(_)
            | CliError::NoSqliteFile { .. }
            | CliError::NoSqliteDirectory { .. }
            | CliError::Output(_) => exit::STORE,
            CliError::Corrupt(_) => exit::CORRUPT,
            CliError::Rule(_)
            | CliError::NotAnApprover { .. }
            | CliError::RulesNotChecked { .. } => exit::REFUSED,
            CliError::Operator { error, .. } => match error {
                OperatorError::NotFound { .. } => exit::NOT_FOUND,
                OperatorError::Ambiguous { .. } => exit::AMBIGUOUS,
                OperatorError::InvalidKey { .. } => exit::USAGE,
                OperatorError::Store(_) => exit::STORE,
                _ => exit::REFUSED,
            },
        })
    }

    /// Whether the output stream was closed under us (`idem ls | head`):
    /// not worth a message.
    pub(crate) fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The message on one line; for a command that changes records
    /// (`acting`), saying that nothing was changed. A driver's multi-line
    /// message is joined; what the message quotes from a record or the
    /// command line (a tool, a worker, a key prefix) is shown escaped
    /// ([`visible`]), carriage returns and escape sequences included.
    pub(crate) fn line(&self, acting: bool) -> String {
        let text = self.to_string();
        let joined = text
            .split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let mut line = visible(&joined).into_owned();
        if acting && !matches!(self, CliError::Output(_)) && !line.contains("nothing") {
            // "… by dana." and not "… by dana.; nothing was changed".
            line.truncate(line.trim_end_matches(['.', ' ']).len());
            line.push_str("; nothing was changed");
        }
        line
    }
}

/// The corrupt records named, keys escaped (a corrupt row's key may hold
/// anything).
fn corrupt_message(corrupt: &[CorruptRecord]) -> String {
    let n = corrupt.len();
    let s = if n == 1 { "" } else { "s" };
    let named: Vec<String> = corrupt
        .iter()
        .map(|c| format!("{:?} ({})", c.key, c.detail.escape_debug()))
        .collect();
    format!(
        "{n} stored record{s} could not be read and {} left out of the output above (left untouched in the store): {}",
        if n == 1 { "was" } else { "were" },
        named.join("; ")
    )
}

/// The library's message, with times said as times rather than epoch
/// milliseconds.
fn operator_message(error: &OperatorError, now: Option<Timestamp>) -> String {
    match error {
        OperatorError::LiveLease { key, until, worker } => {
            let when = match now {
                Some(now) => format!("{} ({})", until.rfc3339(), relative(now, *until)),
                None => until.rfc3339(),
            };
            format!(
                "key {key} is in flight under a live lease (worker {worker}, until {when}); wait for it to finish or for its lease to run out"
            )
        }
        error => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::key::IdempotencyKey;
    use idem_runtime::record::Status;
    use idem_runtime::store::{BadOption, UnknownOption};

    fn key() -> IdempotencyKey {
        IdempotencyKey::parse(&"ab".repeat(32)).unwrap()
    }

    #[test]
    fn each_kind_of_failure_has_its_exit_code() {
        let code = |e: CliError| e.exit_code();
        assert_eq!(code(CliError::Empty { option: "--by" }), ExitCode::from(2));
        let not_json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert_eq!(
            code(CliError::InvalidJson {
                option: "--args",
                source: not_json
            }),
            ExitCode::from(2)
        );
        assert_eq!(code(CliError::NoKeySource), ExitCode::from(2));
        assert_eq!(
            code(CliError::Inbox(idem_inbox::InboxError::Listen {
                addr: "127.0.0.1:8080".parse().unwrap(),
                source: std::io::ErrorKind::AddrInUse.into(),
            })),
            ExitCode::from(2)
        );
        assert_eq!(
            code(CliError::Inbox(idem_inbox::InboxError::Unreadable {
                what: "the tool catalog",
                path: "tools.json".into(),
                source: std::io::ErrorKind::NotFound.into(),
            })),
            ExitCode::from(2)
        );
        assert_eq!(
            code(OperatorError::NotFound { key: "abcd".into() }.into()),
            ExitCode::from(3)
        );
        assert_eq!(
            code(
                OperatorError::Ambiguous {
                    prefix: "abcd".into(),
                    candidates: vec![],
                    more: false
                }
                .into()
            ),
            ExitCode::from(4)
        );
        assert_eq!(
            code(
                OperatorError::NotPending {
                    key: key(),
                    status: Status::Succeeded
                }
                .into()
            ),
            ExitCode::from(1)
        );
        let store = || "redis://cache".to_owned();
        for error in [
            StoreError::from(UnknownOption {
                store: store(),
                backend: "Redis",
                options: vec!["prefx".into()],
                known: "prefix=NAME",
            }),
            StoreError::from(BadOption {
                store: store(),
                option: "replicas",
                value: "all".into(),
                expected: "a number of replicas",
            }),
            StoreError::BadCursor {
                store: store(),
                cursor: "xyz".into(),
                kind: "scan",
            },
            StoreError::InvalidUrl {
                store: store(),
                reason: "bad Redis URL".into(),
            },
        ] {
            assert_eq!(code(error.into()), ExitCode::from(5));
        }
    }

    #[test]
    fn a_live_lease_is_said_in_times_not_epoch_numbers() {
        let error = CliError::Operator {
            error: OperatorError::LiveLease {
                key: key(),
                until: Timestamp(30_000),
                worker: "w1:7".into(),
            },
            now: Some(Timestamp(18_000)),
        };
        let line = error.line(true);
        assert!(
            line.contains("1970-01-01T00:00:30.000Z (in 12s)") && line.contains("worker w1:7"),
            "{line}"
        );
        assert!(line.ends_with("nothing was changed"), "{line}");
        assert!(!line.contains(".;"), "{line}");
    }

    #[test]
    fn a_refusal_that_ends_a_sentence_says_nothing_was_changed_once() {
        let error = CliError::Operator {
            error: idem_runtime::approval::rules::RuleRefusal::NotAnApprover {
                who: "mallory".into(),
                approvers: "dana, erin".into(),
                tool: "refund".into(),
            }
            .into(),
            now: None,
        };
        let line = error.line(true);
        assert!(
            line.ends_with("may not decide calls of refund; nothing was changed"),
            "{line}"
        );
    }

    #[test]
    fn record_text_quoted_by_a_message_is_shown_escaped() {
        let error = CliError::Operator {
            error: OperatorError::LiveLease {
                key: key(),
                until: Timestamp(30_000),
                worker: "w1\r\x1b[2Kworker ok\u{202e}".into(),
            },
            now: None,
        };
        let line = error.line(false);
        assert!(
            line.contains("worker w1\\r\\u{1b}[2Kworker ok\\u{202e}"),
            "{line}"
        );
        assert!(!line.contains(['\r', '\x1b', '\u{202e}']), "{line}");
        // A driver's lines are joined, not escaped.
        let error = CliError::Proxy(idem_mcp::proxy::ProxyError::Config(
            "first line\r\n  second line\n".into(),
        ));
        assert_eq!(error.line(false), "first line second line");
    }
}
