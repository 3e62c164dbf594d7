//! What each command does, one file per command or pair of commands:
//! `ls`, `show`, `decide` (approve, deny), `settle` (resolve, delete),
//! `purge`, `stats`, `log`, `key`, `migrate`, `serve` (the inbox),
//! `approver` (`idem approver password|token`), `revoke` (`idem approver
//! revoke`). Each validates its input first,
//! opens the store only then (`idem key` never does), read-only unless it
//! changes records, and prints through [`Output`].

mod approver;
mod decide;
mod edit;
mod key;
mod log;
mod ls;
mod migrate;
mod purge;
mod revoke;
mod serve;
mod settle;
mod show;
mod stats;

use std::io::Write;

use crate::render::json::RecordJson;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::{Operator, OperatorError};
use idem_runtime::record::Record;
use idem_runtime::text::visible;
use serde::Serialize;

use crate::cli::{ApproverArgs, ApproverCommand, Cli, Command};
use crate::error::CliError;
use crate::store;
use idem_runtime::store::StoreExt;
use idem_runtime::text::json_safe;

/// Run the command `cli` names.
pub(crate) async fn run(cli: Cli) -> Result<(), CliError> {
    let out = Output { json: cli.json };
    let url = store::url(cli.store.as_deref());
    match cli.command {
        // Needs no store.
        Command::Key(args) => key::run(&args, &out),
        Command::Migrate => migrate::run(url, &out).await,
        Command::Serve(args) => serve::run(url, &args).await,
        Command::Approver(ApproverArgs {
            command: ApproverCommand::Revoke(args),
        }) => {
            let operator = store::open(url).await?;
            let result = revoke::run(&operator, &args, &out).await;
            operator.store().close().await;
            result
        }
        Command::Approver(args) => approver::run(&args),
        Command::Proxy(args) => proxy(url, &args).await,
        Command::Principal(args) => principal(&args),
        command => {
            let operator = match command.changes_records() {
                true => store::open(url).await?,
                false => store::open_read_only(url).await?,
            };
            let result = run_on(&operator, command, &out).await;
            operator.store().close().await;
            result
        }
    }
}

async fn run_on(operator: &Operator, command: Command, out: &Output) -> Result<(), CliError> {
    match command {
        Command::Ls(args) => ls::run(operator, &args, out).await,
        Command::Show(args) => show::run(operator, &args.key, out).await,
        Command::Approve(args) => decide::approve(operator, &args, out).await,
        Command::Deny(args) => decide::deny(operator, &args, out).await,
        Command::Resolve(args) => settle::resolve(operator, &args, out).await,
        Command::Delete(args) => settle::delete(operator, &args, out).await,
        Command::Purge(_) => purge::run(operator, out).await,
        Command::Stats => stats::run(operator, out).await,
        Command::Log(args) => log::run(operator, &args, out).await,
        Command::Key(args) => key::run(&args, out),
        Command::Migrate
        | Command::Serve(_)
        | Command::Approver(_)
        | Command::Principal(_)
        | Command::Proxy(_) => {
            unreachable!("these open the store themselves, or need none")
        }
    }
}

/// Where a command prints: JSON for scripts, or styled text for people.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    /// `--json`.
    pub json: bool,
}

impl Output {
    /// Print `value` as pretty JSON on stdout, never styled, and with no
    /// raw control or bidirectional character in its strings
    /// ([`json_safe`]): it parses back to the record's own text.
    pub(crate) fn json<T: Serialize>(&self, value: &T) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value).map_err(std::io::Error::from)?;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(json_safe(&text).as_bytes())?;
        writeln!(stdout)?;
        Ok(())
    }

    /// Print styled text on stdout; colours are stripped unless stdout is a
    /// terminal that wants them.
    pub(crate) fn text(&self, text: &str) -> Result<(), CliError> {
        let mut stdout = anstream::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        Ok(())
    }

    /// A remark for people (an empty list, a cut list) on stderr, so that
    /// stdout holds only the table.
    pub(crate) fn note(&self, text: &str) {
        let _ = writeln!(anstream::stderr(), "{text}");
    }
}

/// A non-empty `--by` / `--reason` value, trimmed.
fn required(option: &'static str, value: &str) -> Result<String, CliError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(CliError::Empty { option });
    }
    Ok(value.to_owned())
}

/// The key a full key or unique prefix names.
async fn find(operator: &Operator, given: &str) -> Result<IdempotencyKey, CliError> {
    Ok(operator.find(given).await?)
}

/// The store's time, for ages and leases.
async fn now(operator: &Operator) -> Result<Timestamp, CliError> {
    Ok(operator.store().now().await.map_err(OperatorError::Store)?)
}

/// The tool and namespace of a record, to say what was acted on (escaped,
/// as all record text shown to a person).
fn what(record: &Record) -> String {
    let what = match &record.info.namespace {
        Some(ns) => format!("{}, namespace {ns}", record.tool),
        None => record.tool.clone(),
    };
    visible(&what).into_owned()
}

/// The record as changed (`--json`), or `line`.
async fn print(
    operator: &Operator,
    record: &Record,
    line: &str,
    out: &Output,
) -> Result<(), CliError> {
    if out.json {
        out.json(&RecordJson::new(record, now(operator).await?))
    } else {
        out.text(line)
    }
}

/// An operator error, with the store's time for its message.
async fn refused(operator: &Operator, error: OperatorError) -> CliError {
    if let OperatorError::Rule(refusal) = error {
        return CliError::Rule(*refusal);
    }
    let now = operator.store().now().await.ok();
    CliError::Operator { error, now }
}

/// `idem proxy`: the proxy of `idem_mcp`, recording on the store at `url`
/// (opened only once the upstream has answered).
async fn proxy(url: &str, args: &crate::cli::ProxyArgs) -> Result<(), CliError> {
    let mut options = idem_mcp::proxy::ProxyOptions::new(args.command.clone());
    copy_fields!(options <- args;
        config, print_config, listen, principals, no_auth, oauth_issuer, oauth_resource,
        oauth_jwks, tls_cert, tls_key, allow_plain_http, upstream, upstream_token_file,
        upstream_token_env, state_secret_file);
    options.shutdown_grace = Some(args.shutdown_grace);
    // Over stdio too: stdout is the protocol's, the logs go to stderr.
    let _traces = args.logs.init("idem-proxy");
    crate::memory::give_back_while_serving();
    idem_mcp::proxy::run(&options, || idem::store::connect(url))
        .await
        .map_err(CliError::from)
}

/// `idem principal NAME`: a new bearer token for `idem proxy
/// --principals`, shown once on stderr, and the file's entry on stdout.
fn principal(args: &crate::cli::PrincipalArgs) -> Result<(), CliError> {
    let name = args.name.trim();
    if name.is_empty()
        || name.contains(idem_runtime::text::needs_escape)
        || name.contains(['"', '\\', '/'])
    {
        return Err(CliError::PrincipalName);
    }
    let (token, line) = idem_mcp::proxy::new_token();
    eprintln!(
        "Bearer token for {name} (shown once; the client sends it as `Authorization: Bearer TOKEN`):\n{token}"
    );
    println!("[[principal]]\nname = \"{name}\"\ntokens = [\"{line}\"]\n");
    Ok(())
}
