//! Colours: one style per record state, bold headers, dim hints.
//!
//! Styled text is plain ANSI in a `String`; it reaches the terminal through
//! `anstream`, which strips the codes when stdout is not a terminal, under
//! `NO_COLOR`, or with `CLICOLOR=0` (and keeps them with `CLICOLOR_FORCE`).
//! JSON output never goes through it and is never styled.

use anstyle::{AnsiColor, Style};
use idem_runtime::record::Status;

/// Table headers and field names.
pub(crate) const HEADER: Style = Style::new().bold();

/// Hints and secondary text.
pub(crate) const DIM: Style = Style::new().dimmed();

/// The words of a command to type next.
pub(crate) const COMMAND: Style = Style::new().bold();

/// How a state is shown: what needs a person stands out.
pub(crate) fn status(status: Status) -> Style {
    let color = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
    match status {
        Status::InFlight => color(AnsiColor::Blue),
        Status::AwaitingApproval => color(AnsiColor::Yellow).bold(),
        Status::Approved => color(AnsiColor::Cyan),
        Status::Succeeded => color(AnsiColor::Green),
        Status::Failed => color(AnsiColor::Red),
        Status::Unknown => color(AnsiColor::Red).bold(),
    }
}

/// `text` in `style`.
pub(crate) fn paint(style: Style, text: &str) -> String {
    if style == Style::new() {
        return text.to_owned();
    }
    format!("{style}{text}{style:#}")
}
