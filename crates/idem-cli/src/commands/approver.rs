//! `idem approver password|token NAME`: the approvers-file entry for a
//! person (an Argon2id hash of a password read from stdin) or a bot (a new
//! API token, shown once, and its digest).

use std::io::BufRead;

use idem_inbox::approvers;

use crate::cli::{ApproverArgs, ApproverCommand};
use crate::error::CliError;

/// The fewest characters `idem approver password` takes.
const MIN_PASSWORD: usize = 12;

/// `idem approver password|token NAME`: the entry to paste into the
/// approvers file.
pub(super) fn run(args: &ApproverArgs) -> Result<(), CliError> {
    let (entry, secret) = match &args.command {
        ApproverCommand::Password(a) | ApproverCommand::Token(a) => (a, &args.command),
        ApproverCommand::Revoke(_) => unreachable!("`idem approver revoke` opens the store"),
    };
    let role = entry.role;
    let name = entry.name.trim();
    if name.is_empty()
        || name.contains(idem_runtime::text::needs_escape)
        || name.contains(['"', '\\'])
    {
        return Err(CliError::ApproverName);
    }
    let line = match secret {
        ApproverCommand::Password(_) => {
            let mut password = String::new();
            std::io::stdin().lock().read_line(&mut password)?;
            let password = password.trim_end_matches(['\r', '\n']);
            if password.chars().count() < MIN_PASSWORD {
                return Err(CliError::ShortPassword { min: MIN_PASSWORD });
            }
            let hash = approvers::hash_password(password).map_err(CliError::HashPassword)?;
            format!("password = \"{hash}\"")
        }
        ApproverCommand::Revoke(_) => unreachable!("handled above"),
        ApproverCommand::Token(_) => {
            let token = approvers::new_token();
            eprintln!("API token for {name} (shown once; send it as `Authorization: Bearer TOKEN`):\n{token}");
            format!("tokens = [\"{}\"]", approvers::token_entry(&token))
        }
    };
    println!(
        "[[approver]]\nname = \"{name}\"\nrole = \"{}\"\n{line}\n",
        role.as_str()
    );
    Ok(())
}
