//! The command line: every command, option and its help text (clap derive).
//!
//! Parsing only: nothing here touches a store. Every value that has a type
//! is read here, by a value parser (durations, times, addresses, header
//! names, roles), so that a bad one is refused by clap naming its option.
//! What each command does lives in `commands/`, one file per command or
//! pair of commands. The options of `idem serve` and `idem approver` are
//! in `cli/serve.rs`.

use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use idem_runtime::record::Status;

use crate::time::{duration, since, Since};

mod serve;

pub(crate) use serve::{ApproverArgs, ApproverCommand, RevokeArgs, ServeArgs};

/// The store used when neither `--store` nor `IDEM_STORE` names one: the
/// SQLite file the demo writes.
pub(crate) const DEFAULT_STORE: &str = idem_runtime::store::url::DEFAULT_STORE_URL;

/// List, inspect and settle the records of an idem store: find the calls
/// idem refused to guess about (outcomes unknown, approvals pending) and
/// decide them.
///
/// A KEY is a full 64-digit key or a unique prefix of one (at least 4
/// digits), as git takes commits.
#[derive(Debug, Parser)]
#[command(name = "idem", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// The store: sqlite://PATH, redis://HOST:PORT/DB or
    /// postgres://USER@HOST/DB (default: sqlite://idem.db).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "IDEM_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,

    /// Print JSON for scripts (the schema is in docs/cli.md) instead of
    /// tables; never coloured.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List records, newest first.
    #[command(visible_alias = "list")]
    Ls(LsArgs),
    /// Everything a record holds: state, call, arguments, steps, outcome,
    /// audit.
    #[command(visible_alias = "describe")]
    Show(KeyArg),
    /// Approve a call awaiting approval: the next call with its key runs it
    /// once.
    Approve(ApproveArgs),
    /// Deny a call awaiting approval: it never runs, and every call with its
    /// key gets the reason.
    Deny(DenyArgs),
    /// Settle a call whose outcome idem does not know (or whose owner
    /// vanished): as succeeded, as failed, or released to run again.
    Resolve(ResolveArgs),
    /// Delete a record, so that the next call with its key runs as new.
    Delete(DeleteArgs),
    /// Delete records past their expiry.
    Purge(PurgeArgs),
    /// How many records are in each state, and per tool.
    Stats,
    /// The store's audit log, oldest first: every approval, denial,
    /// resolution, release and delete (who, when, why, state before and
    /// after), kept after the records they speak of are gone.
    Log(LogArgs),
    /// Create the store's schema, or migrate it to this idem's version
    /// (reading commands never do), and say from which version.
    Migrate,
    /// Derive the key of a call, exactly as the executor does
    /// (docs/keys.md), to find its record from a transcript. Reads no store.
    Key(KeyDeriveArgs),
    /// Serve the approval inbox: a web page (and a JSON API under /api/)
    /// where approvers see the calls waiting for a decision and decide
    /// them (docs/inbox.md).
    Serve(ServeArgs),
    /// Write an approver's entry for the `idem serve --approvers` file (a
    /// hashed password read from stdin, or a new API token), or end every
    /// session of an approver on every `idem serve` of the store.
    Approver(ApproverArgs),
    /// Write a principal's entry for the `idem proxy --principals` file:
    /// a new bearer token (printed once, on stderr) and its hashed entry
    /// (on stdout, to append to the file).
    Principal(PrincipalArgs),
    /// Put idem in front of an MCP server: start it (`idem proxy --
    /// COMMAND…`) and serve its tools over stdio, every call keyed,
    /// recorded and answered once (docs/proxy.md).
    Proxy(ProxyArgs),
}

/// `idem principal`.
#[derive(Debug, Args)]
pub(crate) struct PrincipalArgs {
    /// Who the token is for: the namespace of the records of their calls
    /// (`mcp/SERVER/NAME`).
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `idem proxy`.
#[derive(Debug, Args)]
pub(crate) struct ProxyArgs {
    /// The configuration file (TOML): a class and key options for each
    /// upstream tool, by name or glob. Where it is silent, the upstream's
    /// annotations decide.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Print the configuration the proxy infers for this server (a
    /// comment on every guess) and exit, to review it once.
    #[arg(long)]
    pub print_config: bool,
    /// Serve over streamable HTTP on this address (at /mcp) rather than
    /// over stdio. Loopback only, unless a reverse proxy with TLS is in
    /// front of it.
    #[arg(long, value_name = "ADDR", value_parser = host_and_port)]
    pub listen: Option<String>,
    /// With --listen: the file of principals who may call, each with the
    /// hashes of its bearer tokens (`idem principal NAME` writes an entry).
    /// Each principal's calls are recorded in a namespace of their own.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub principals: Option<std::path::PathBuf>,
    /// With --listen: accept OAuth 2.1 access tokens (JWTs) from this
    /// issuer (`https://…`), verified against its published keys. Each
    /// token's subject is a caller of its own (`oauth/SUB`), and the
    /// proxy publishes where to sign in at
    /// `/.well-known/oauth-protected-resource`. Needs --oauth-resource.
    #[arg(long, value_name = "URL", requires_all = ["listen", "oauth_resource"])]
    pub oauth_issuer: Option<String>,
    /// The URL clients reach this server at (such as
    /// `https://mcp.example.com/mcp`): the audience an access token must be
    /// for (RFC 8707).
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub oauth_resource: Option<String>,
    /// The issuer's key set (JWKS) URL, when the issuer's metadata does not
    /// name it.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub oauth_jwks: Option<String>,
    /// With --listen on a loopback address: serve without authentication,
    /// every caller one user with one record space.
    #[arg(long, requires = "listen", conflicts_with_all = ["principals", "oauth_issuer"])]
    pub no_auth: bool,
    /// With --listen: serve HTTPS with this PEM certificate chain.
    #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_key"])]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// With --listen on a non-loopback address: serve plain HTTP anyway,
    /// because a TLS-terminating proxy is in front of it.
    #[arg(long, requires = "listen", conflicts_with = "tls_cert")]
    pub allow_plain_http: bool,
    /// Connect to an upstream MCP server already running, over streamable
    /// HTTP at this URL (`https://HOST/mcp`, or `http://`), instead of
    /// starting one. Certificates are verified against the platform's roots
    /// and the CAs of `IDEM_TLS_CA_FILE`.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub upstream: Option<String>,
    /// A file holding the bearer token the upstream wants: every request
    /// carries `Authorization: Bearer TOKEN`. Never shown.
    #[arg(long, value_name = "FILE", requires = "upstream")]
    pub upstream_token_file: Option<std::path::PathBuf>,
    /// An environment variable holding that token, instead of a file.
    #[arg(
        long,
        value_name = "VAR",
        requires = "upstream",
        conflicts_with = "upstream_token_file"
    )]
    pub upstream_token_env: Option<String>,
    /// A file of at least 32 random bytes (`head -c 32 /dev/urandom`)
    /// that seals approval questions and MCP tasks. Every instance behind
    /// one load balancer names the same file, so each reads what the
    /// others sealed; by default each process makes its own.
    #[arg(long, value_name = "FILE")]
    pub state_secret_file: Option<std::path::PathBuf>,
    /// On SIGTERM or SIGINT, stop taking calls and give those under way
    /// this long to finish and be recorded (90s, 2m); then, or on a second
    /// signal, stop anyway, naming on stderr each call left in flight.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub shutdown_grace: std::time::Duration,
    /// What to log on stderr, and how.
    #[command(flatten)]
    pub logs: crate::logs::LogArgs,
    /// The upstream MCP server's command and its arguments, after `--`
    /// (or `--upstream URL`, or `[[upstream]]` tables in the `--config`
    /// file for several behind one endpoint).
    #[arg(
        last = true,
        required_unless_present_any = ["upstream", "config"],
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

impl Command {
    /// Whether the command changes records (its errors then say that
    /// nothing was changed).
    pub(crate) fn changes_records(&self) -> bool {
        matches!(
            self,
            Command::Approve(_)
                | Command::Deny(_)
                | Command::Resolve(_)
                | Command::Delete(_)
                | Command::Purge(_)
                | Command::Migrate
                | Command::Serve(_)
                | Command::Approver(ApproverArgs {
                    command: ApproverCommand::Revoke(_)
                })
        )
    }
}

/// `idem ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Only records in this state (repeat or separate with commas for
    /// several): in_flight, awaiting_approval, approved, succeeded, failed,
    /// unknown.
    #[arg(long = "state", value_name = "STATE", value_delimiter = ',')]
    pub states: Vec<Status>,
    /// Only calls of this tool.
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,
    /// Only calls of this namespace (tenant).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only records created since then: a duration back from now (90s, 15m,
    /// 2h, 7d, 1h30m) or an RFC 3339 time (2026-05-01T09:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = since)]
    pub since: Option<Since>,
    /// Show at most this many records, the newest (0: all).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
}

/// `idem log`.
#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// Only events about this key, or keys with this prefix (at least 4
    /// digits); the record itself may be long gone.
    pub key: Option<String>,
    /// Only events since then: a duration back from now (90s, 15m, 2h, 7d,
    /// 1h30m) or an RFC 3339 time (2026-05-01T09:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = since)]
    pub since: Option<Since>,
    /// Show at most this many events, the latest (0: all).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub limit: usize,
}

/// A command that names one record.
#[derive(Debug, Args)]
pub(crate) struct KeyArg {
    /// The record's key, or a unique prefix of it (at least 4 digits).
    pub key: String,
}

/// `idem approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The key (or a unique prefix) of the call awaiting approval.
    pub key: String,
    /// Who approves (recorded on the record).
    #[arg(long, value_name = "NAME")]
    pub by: String,
    /// A note recorded with the approval.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// The approvers file of `idem serve`: --by must be an approver in it,
    /// and its approval rules hold (who may decide, how many approvals,
    /// not one's own call). With or without it, the rules `idem serve`
    /// keeps in the store hold too.
    #[arg(long, value_name = "FILE", env = "IDEM_APPROVERS")]
    pub approvers: Option<std::path::PathBuf>,
    /// Approve the call with these arguments instead (a JSON object): the
    /// edited call is a new call with its own key, this approval one of
    /// those its rule needs, and the original is denied, naming it.
    #[arg(long, value_name = "JSON")]
    pub edit_args: Option<String>,
}

/// `idem deny`.
#[derive(Debug, Args)]
pub(crate) struct DenyArgs {
    /// The key (or a unique prefix) of the call awaiting approval.
    pub key: String,
    /// Who denies (recorded on the record).
    #[arg(long, value_name = "NAME")]
    pub by: String,
    /// Why: every later call with the key gets this reason.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// The approvers file of `idem serve`: --by must be an approver in it,
    /// whom its approval rules let decide the call. With or without it,
    /// the rules `idem serve` keeps in the store hold too.
    #[arg(long, value_name = "FILE", env = "IDEM_APPROVERS")]
    pub approvers: Option<std::path::PathBuf>,
}

/// `idem resolve`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("resolution")
        .required(true)
        .args(["succeeded", "failed", "release"])
))]
pub(crate) struct ResolveArgs {
    /// The key (or a unique prefix) of the call to settle.
    pub key: String,
    /// The effect happened: duplicates get this output (JSON).
    #[arg(long, value_name = "JSON")]
    pub succeeded: Option<String>,
    /// The effect did not happen and must not be tried again: duplicates
    /// get this failure message.
    #[arg(long, value_name = "MESSAGE")]
    pub failed: Option<String>,
    /// The effect did not happen: delete the record, so that the next call
    /// with the key runs the tool.
    #[arg(long)]
    pub release: bool,
    /// Who settles it (recorded on the record).
    #[arg(long, value_name = "NAME")]
    pub by: String,
    /// Why (recorded on the record).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Keep the resolution this long (90s, 15m, 2h, 7d) instead of the
    /// tool's own TTL, which is the default. After it, a duplicate runs the
    /// call again: a TTL shorter than the tool's is a decision to allow
    /// that.
    #[arg(
        long,
        value_name = "DURATION",
        conflicts_with = "release",
        value_parser = duration
    )]
    pub ttl: Option<Duration>,
}

/// `idem delete`.
#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The key (or a unique prefix) of the record.
    pub key: String,
    /// Who deletes it.
    #[arg(long, value_name = "NAME")]
    pub by: String,
    /// Why.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// `idem purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Delete completed records and unanswered approval requests past their
    /// expiry (they already read as absent).
    #[arg(long, required = true)]
    pub expired: bool,
}

/// `idem key`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("source")
        .required(true)
        .args(["call_id", "run", "natural", "custom", "repeat_window"])
))]
pub(crate) struct KeyDeriveArgs {
    /// The tool's name.
    #[arg(long, value_name = "TOOL")]
    pub tool: String,
    /// The provider's tool-call id (OpenAI `tool_calls[].id`, Anthropic
    /// `tool_use.id`).
    #[arg(long, value_name = "ID")]
    pub call_id: Option<String>,
    /// The agent run, for a call without a call id (with --step and --args).
    #[arg(long, value_name = "RUN", requires_all = ["step", "args"])]
    pub run: Option<String>,
    /// The step of the run that made the call.
    #[arg(long, value_name = "N", requires = "run")]
    pub step: Option<u64>,
    /// A natural key: the tool's natural-key fields as a JSON object, after
    /// the tool's normalisers.
    #[arg(long, value_name = "FIELDS")]
    pub natural: Option<String>,
    /// The time-window number of a natural key (floor(unix seconds / window
    /// seconds)).
    #[arg(long, value_name = "N", requires = "natural")]
    pub window: Option<u64>,
    /// The material a tool's custom key function returned.
    #[arg(long, value_name = "MATERIAL")]
    pub custom: Option<String>,
    /// A call that carried no key, keyed by a repeat window of this many
    /// seconds (an MCP chat client's call; with --generation and --args).
    #[arg(long, value_name = "SECONDS", requires_all = ["args", "generation"])]
    pub repeat_window: Option<u64>,
    /// The effect's generation, from its tool's window index (`idem show`
    /// of the record of tool `idem:window:TOOL`).
    #[arg(long, value_name = "N", requires = "repeat_window")]
    pub generation: Option<u64>,
    /// How many identical effects the caller meant before this one (its
    /// `intended_repeat`; 0 for the first).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        requires = "repeat_window"
    )]
    pub repeat: u32,
    /// The call's arguments as JSON (needed with --run; with --call-id, only
    /// to print their fingerprint).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// The namespace (tenant).
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// The tool's key derivation version (its `key_version`).
    #[arg(long, value_name = "V", default_value_t = idem_runtime::key::DEFAULT_KEY_VERSION)]
    pub key_version: u32,
}

/// clap's parser of `idem proxy --listen`: `HOST:PORT`, the host a name
/// (`localhost`) or an address, resolved when the proxy listens.
fn host_and_port(given: &str) -> Result<String, String> {
    let given = given.trim();
    match given.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(given.to_owned())
        }
        _ => Err("expected HOST:PORT, such as 127.0.0.1:8931 or localhost:8931".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::serve::origin;
    use super::*;
    use clap::CommandFactory;
    use idem_runtime::clock::Timestamp;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn an_origin_is_a_scheme_a_host_and_a_port_only() {
        assert_eq!(
            origin("https://Inbox.example.com/").unwrap(),
            "https://inbox.example.com"
        );
        assert_eq!(
            origin("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        // As a browser's `Origin` says it: no default port.
        assert_eq!(
            origin("https://inbox.example.com:443").unwrap(),
            "https://inbox.example.com"
        );
        for bad in [
            "inbox.example.com",
            "https://",
            "https://a.example/inbox",
            "https://a.example?x",
            "https://user@a.example",
            "ftp://a",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn states_are_read_repeated_or_comma_separated() {
        let cli = Cli::try_parse_from([
            "idem",
            "ls",
            "--state",
            "unknown,awaiting-approval",
            "--state",
            "failed",
        ])
        .unwrap();
        let Command::Ls(ls) = cli.command else {
            panic!("not ls")
        };
        assert_eq!(
            ls.states,
            [Status::Unknown, Status::AwaitingApproval, Status::Failed]
        );
    }

    #[test]
    fn typed_values_are_read_by_clap_and_bad_ones_refused_naming_the_option() {
        let parse = |args: &[&str]| Cli::try_parse_from(["idem"].iter().chain(args).copied());
        let resolve = [
            "resolve", "abcd", "--by", "ada", "--reason", "r", "--failed", "no",
        ];
        let with = |extra: &[&str]| parse(&[&resolve[..], extra].concat());
        let Command::Resolve(args) = with(&["--ttl", "1h30m"]).unwrap().command else {
            panic!("not resolve")
        };
        assert_eq!(args.ttl, Some(Duration::from_secs(5400)));
        let refused = with(&["--ttl", "nonsense"]).unwrap_err();
        assert_eq!(refused.kind(), clap::error::ErrorKind::ValueValidation);
        let text = refused.to_string();
        assert!(
            text.contains("'nonsense'") && text.contains("--ttl") && text.contains("90s, 15m"),
            "{text}"
        );

        let Command::Ls(ls) = parse(&["ls", "--since", "2026-05-01"]).unwrap().command else {
            panic!("not ls")
        };
        assert_eq!(ls.since, Some(Since::At(Timestamp(1_777_593_600_000))));
        let text = parse(&["log", "--since", "last tuesday"])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("--since") && text.contains("RFC 3339"),
            "{text}"
        );
        let serve = ["serve", "--approvers", "a.toml"];
        let Command::Serve(args) = parse(&serve).unwrap().command else {
            panic!("not serve")
        };
        assert_eq!(args.listen, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
        assert_eq!(args.overdue, Duration::from_secs(3600));
        assert_eq!(args.session, Duration::from_secs(12 * 3600));
        for (option, bad) in [
            ("--listen", "localhost"),
            ("--overdue", "soon"),
            ("--session", "12"),
            ("--trust-proxy-header", "X Forwarded"),
        ] {
            let text = parse(&[&serve[..], &[option, bad]].concat())
                .unwrap_err()
                .to_string();
            assert!(text.contains(option) && text.contains("expected"), "{text}");
        }
        let text = parse(&["approver", "token", "ada", "--role", "boss"])
            .unwrap_err()
            .to_string();
        assert!(text.contains("--role") && text.contains("viewer"), "{text}");

        // The proxy's host is resolved when it listens: a name is fine.
        let proxy = |listen: &str| parse(&["proxy", "--listen", listen, "--", "server"]);
        assert!(proxy("localhost:8931").is_ok());
        assert!(proxy("127.0.0.1:0").is_ok());
        for bad in [
            "8931",
            "localhost",
            "localhost:http",
            ":8931",
            "127.0.0.1:65536",
        ] {
            let text = proxy(bad).unwrap_err().to_string();
            assert!(
                text.contains("--listen") && text.contains("HOST:PORT"),
                "{text}"
            );
        }
    }

    #[test]
    fn resolve_takes_exactly_one_resolution() {
        let base = ["idem", "resolve", "abcd", "--by", "ada", "--reason", "r"];
        let with =
            |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra).copied()).map(|_| ());
        assert!(with(&["--release"]).is_ok());
        assert!(with(&[]).is_err());
        assert!(with(&["--release", "--failed", "no"]).is_err());
    }
}
