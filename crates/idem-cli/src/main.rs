//! `idem`: list, inspect, approve, deny and resolve the records of an idem
//! store from a shell. A thin layer over
//! [`idem_runtime::operator::Operator`]; `docs/cli.md` documents every
//! command, its JSON output and its exit codes.
//!
//! The parts: `cli` (the command line), `commands/` (what each command
//! does; `idem serve` runs the [`idem_inbox`] crate's inbox), `render/` (tables, descriptions, colours, the JSON schema),
//! `logs` (what `idem proxy` and `idem serve` log, and how), `memory`
//! (freed memory given back while they serve), `store`
//! (which store, and opening it), `time` (RFC 3339 and relative
//! times), `error` (messages and exit codes).

/// Sets each named field of the options `$to` from the field of the same
/// name of `$from`: a command's flags are named as the options they set.
macro_rules! copy_fields {
    ($to:ident <- $from:expr; $($field:ident),* $(,)?) => {
        $($to.$field.clone_from(&$from.$field);)*
    };
}

mod cli;
mod commands;
mod error;
mod logs;
mod memory;
mod render;
mod store;
mod time;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let acting = cli.command.changes_records();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&error::CliError::Output(e), false),
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::from(error::exit::OK),
        // `idem ls | head`: the reader has all it wanted.
        Err(e) if e.is_broken_pipe() => ExitCode::from(error::exit::OK),
        Err(e) => fail(&e, acting),
    }
}

/// Report `e` on one line of stderr, as clap reports usage errors.
fn fail(e: &error::CliError, acting: bool) -> ExitCode {
    let label = anstyle::Style::new()
        .bold()
        .fg_color(Some(anstyle::AnsiColor::Red.into()));
    let _ = writeln!(
        anstream::stderr(),
        "{label}error:{label:#} {}",
        e.line(acting)
    );
    e.exit_code()
}
