//! What a server's author chooses: how calls without a key are keyed
//! ([`Unkeyed`]), who decides an approval ([`Approver`]), and how a call
//! is keyed per class ([`Keyed`], what `tools/list` says of each tool).

use std::time::Duration;

use idem_runtime::registry::DynTool;
use idem_runtime::text::duration;

use idem_runtime::KeySpec;

/// What an MCP server does with a write whose request carries no key of
/// idem's (`_meta` `io.idem/idempotencyKey`, the `Idempotency-Key` header,
/// or `io.idem/runId` with `io.idem/step`) — which is every call from a
/// chat client (Claude Desktop, VS Code, Cursor, Claude Code): a model
/// cannot set `_meta`.
///
/// The default is a ten-minute [`Unkeyed::Window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unkeyed {
    /// The same tool with the same canonical arguments within this window
    /// of the first call is one effect ([`RepeatWindow`](idem_runtime::RepeatWindow)):
    /// a model that repeats a call "to be sure", a client that re-sends it
    /// after a dropped stream, gets the first call's result and is told it
    /// was already done. The window slides from the first call, so no clock
    /// boundary splits a retry from its call.
    ///
    /// This applies to every write class with the default key derivation
    /// (`idempotent_write`, `non_idempotent_write`, `irreversible`), *also*
    /// when a chat client sends ids of its own (Claude Code's tool-use id,
    /// VS Code's request, Codex's turn): those are new when the model
    /// repeats a call in a later turn, which is the duplicate chat users
    /// meet most — an email "sent again to be sure" is a second email
    /// whatever the tool's class. A call of the same tool with other
    /// arguments ends the window, so `set_status(open)`,
    /// `set_status(closed)`, `set_status(open)` runs three times; an
    /// effect in flight, awaiting approval or of unknown outcome holds its
    /// window open until it is settled. Each such tool gets an optional
    /// argument, [`REPEAT_ARGUMENT`], with which the model can mean a
    /// second identical effect.
    Window(Duration),
    /// Run a write only when the call carries a key: idem's own fields, or
    /// a chat client's ids (each then keys exactly, with no window). Any
    /// other write is refused, with an answer that tells the model to stop
    /// rather than loop.
    Refuse,
}

impl Default for Unkeyed {
    fn default() -> Self {
        Unkeyed::Window(Duration::from_secs(600))
    }
}

/// The optional argument a server adds to the input schema of each tool
/// keyed by a window ([`Unkeyed::Window`]): `1` means "a second identical
/// effect, on purpose", `2` a third, and so on. The server takes it out of
/// the arguments before the tool sees them. Not added to a tool that has
/// an argument of that name already.
pub const REPEAT_ARGUMENT: &str = "intended_repeat";

/// Who decides an `irreversible` call that the executor's approval policy
/// leaves to a person (it answers *pending*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approver {
    /// The person in the chat, through MCP elicitation, when the client
    /// supports it; otherwise an operator (`idem approve`, `idem serve`).
    #[default]
    ChatOrOperator,
    /// Only the person in the chat. A client without elicitation gets a
    /// pending answer that the model relays, and an operator may still
    /// decide it.
    Chat,
    /// Only an operator: the model is told the call waits for approval.
    Operator,
}

impl Approver {
    /// Whether the person in the chat is asked.
    pub(crate) fn asks_in_chat(self) -> bool {
        matches!(self, Approver::ChatOrOperator | Approver::Chat)
    }
}

/// How one tool's calls are keyed under a server's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keyed {
    /// A read: no key, no record.
    Not,
    /// By the tool's natural or custom key, always.
    ByTool(&'static str),
    /// By a window when the call carries no key of idem's.
    Window(Duration),
    /// By the call's key or a client's ids; refused otherwise.
    KeyRequired,
}

impl Keyed {
    /// How `tool` is keyed under `policy`.
    pub(crate) fn of<S: 'static>(tool: &dyn DynTool<S>, policy: Unkeyed) -> Keyed {
        let class = tool.class();
        if !class.is_keyed() {
            return Keyed::Not;
        }
        match tool.spec().key {
            KeySpec::Natural { .. } => return Keyed::ByTool("natural"),
            KeySpec::Custom => return Keyed::ByTool("custom"),
            KeySpec::Default => {}
        }
        match (policy, class) {
            (Unkeyed::Refuse, _) => Keyed::KeyRequired,
            (Unkeyed::Window(within), _) => Keyed::Window(within),
        }
    }

    /// The word `tools/list` gives it (`_meta` `io.idem/keying`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            Keyed::Not => "none",
            Keyed::ByTool(derivation) => derivation,
            Keyed::Window(_) => "window",
            Keyed::KeyRequired => "key-required",
        }
    }

    /// What the description tells the model, if anything.
    pub(crate) fn sentence(self) -> Option<String> {
        match self {
            Keyed::Window(within) => Some(format!(
                "Calling it again with the same arguments within {} of the first call does not do \
                 it again: the answer is the first call's result. To do the same thing again on \
                 purpose, add \"{REPEAT_ARGUMENT}\": 1.",
                duration::exact(within)
            )),
            _ => None,
        }
    }
}
