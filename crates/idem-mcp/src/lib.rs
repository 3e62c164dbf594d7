//! Serve idem tools over MCP with [rmcp](https://docs.rs/rmcp), the
//! official Rust SDK (rmcp 3.11 or later 3.x): the crate behind the `idem`
//! facade's `idem::mcp` (its feature `mcp`), and with its own feature
//! `proxy`, the module `proxy`: `idem proxy` in front of any MCP server.
//! With feature `http-auth` (which `proxy` turns on), the module [`auth`]:
//! who is calling over streamable HTTP, for a server of your own.
//!
//! * [`McpServer`] is an rmcp [`ServerHandler`](rmcp::ServerHandler) for
//!   the tools of a [`Dispatcher`](idem_runtime::Dispatcher): `tools/list` with
//!   typed rmcp [`Tool`](rmcp::model::Tool)s (annotations from each tool's
//!   class, an output schema where the output is a JSON object whose type
//!   has one), and
//!   `tools/call` through the dispatcher. Serve it on any rmcp transport.
//! * [`McpServer::tool_router`] gives the same tools as a
//!   [`ToolRouter`](rmcp::handler::server::router::tool::ToolRouter)
//!   fragment, to merge into a server of your own next to its
//!   `#[tool_router]` tools.
//! * [`CallToolRequestParamsExt`] is the client side: it puts a key into a
//!   `tools/call`'s `_meta`.
//! * [`tool_definitions`] turns a registry into rmcp `Tool`s.
//!
//! # Keys
//!
//! MCP gives a `tools/call` nothing stable to key it by: its JSON-RPC id is
//! new for every request, retries included, and so is its progress token.
//! idem never uses either. The key of a call comes from, in this order:
//!
//! 1. the request's `_meta` field [`IDEMPOTENCY_KEY_META`]
//!    (`"io.idem/idempotencyKey"`), a string the client keeps for one
//!    intended effect;
//! 2. the HTTP header [`IDEMPOTENCY_KEY_HEADER`] (`Idempotency-Key`), on
//!    rmcp's streamable HTTP transport;
//! 3. the `_meta` fields [`RUN_ID_META`] (`"io.idem/runId"`, a string) and
//!    [`STEP_META`] (`"io.idem/step"`, an integer): the executor hashes them
//!    with the tool's name and the canonical arguments;
//! 4. what chat clients send of their own accord: Claude Code's
//!    [`CLAUDE_CODE_TOOL_USE_META`] (a call id), VS Code's
//!    [`VSCODE_CONVERSATION_META`] and [`VSCODE_REQUEST_META`], Codex's
//!    [`CODEX_TURN_META`] (runs);
//! 5. the server's policy for calls without a key of idem's
//!    ([`McpServer::unkeyed`], [`Unkeyed`]): by default a ten-minute
//!    window in which the same tool with the same arguments is one effect
//!    (for non-idempotent and irreversible tools, also on top of 4, since
//!    a chat client's ids are new when a model repeats a call in a later
//!    turn), with an optional [`REPEAT_ARGUMENT`] for a deliberate repeat;
//! 6. the tool's natural or custom key, which wins over all of these: that key
//!    names the effect ("the customer with this email").
//!
//! 1 and 2 become the call's *call id*, 3 its *run context*, exactly as a
//! provider's tool-call id and a run are on the other routes: the executor
//! derives the key from them (`docs/keys.md`), in the namespace of the
//! server ([`McpServer::namespace`]) and of the caller
//! ([`McpServer::principal`]), with the tool's key version.
//!
//! A present but unusable field of idem's (a key that is not a string, a
//! run id without a step, two `Idempotency-Key` headers) is an error,
//! never a reason to fall through to the next source. Reads need no key.
//!
//! # Why a call was made
//!
//! A client may say why, in the `_meta` field [`REASON_META`]
//! (`"io.idem/reason"`, a string: the model's own words that led to the
//! call). It is recorded with the call and shown, escaped, to whoever
//! decides on it; it is never part of the key.
//!
//! # Results
//!
//! A call's output is its text content — a string output as written
//! (`deleted c1`), any other as JSON — and also its `structuredContent`
//! when the tool declares an output schema. A refusal, an unknown outcome,
//! a pending or denied approval, invalid arguments or a failure of the
//! tool is a tool error result (`isError: true`) whose text is written for
//! the model: what happened, whether anything ran, and what to do next.
//! The code is for programs, in `_meta` [`ERROR_META`]. Each result's
//! `_meta` has [`DEDUPLICATED_META`] (whether it came from the record of
//! an earlier call) and, for an output, [`KEY_META`] (the key it is
//! recorded under). A duplicate that was not keyed by idem's own fields
//! (a model's repeat) starts with a sentence saying it was already done,
//! and when; a program's keyed retry is answered exactly as the first
//! time. Only a tool the server does not have is a protocol error
//! (JSON-RPC "invalid params"), with a "did you mean".
//!
//! # Approvals in the chat
//!
//! An `irreversible` call that the executor's approval policy leaves to a
//! person ([`ApprovalDecision::Pending`](idem_runtime::approval::ApprovalDecision))
//! is asked of the chat user when the client supports elicitation, unless
//! [`McpServer::approver`] says an operator decides: on protocol
//! 2026-07-28 an `InputRequiredResult` with a sealed, single-use
//! `requestState`; before it, an `elicitation/create` request. Accept
//! approves and runs it once, decline denies it, dismissing leaves it
//! pending, and nobody is asked about the same call twice.
//!
//! # Cancellation
//!
//! Each call runs on a task of its own. When the client cancels the
//! request (`notifications/cancelled`), hangs up, or the handler's future
//! is dropped, the server stops waiting but the call does not stop: a
//! write that has claimed its key finishes and records its outcome, and a
//! retry with the same key receives it. Abandoning it instead would leave
//! its outcome unknown.
//!
//! # Mixing with rmcp's `#[tool]`
//!
//! rmcp exports an attribute called `tool` too. With `use rmcp::tool;` (or
//! `use rmcp::*`) in scope, a bare `#[tool(class = …)]` is rmcp's, which
//! answers `Unknown field: class`. Write idem's by its path,
//! `#[idem::tool(class = "…")]`, wherever both are in scope.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod ask;
mod call;
mod client;
mod flight;
mod key;
mod meta;
mod policy;
mod server;
pub mod stdio;
mod tasks;
mod tools;
mod trace;

#[cfg(feature = "http-auth")]
pub mod auth;
#[cfg(feature = "proxy")]
pub mod proxy;

pub use client::CallToolRequestParamsExt;
pub use flight::{CallInFlight, CallsInFlight};
pub use key::{
    CLAUDE_CODE_TOOL_USE_META, CLIENT_FIELDS, CODEX_TURN_META, IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_META, RUN_ID_META, STEP_META, VSCODE_CONVERSATION_META, VSCODE_REQUEST_META,
};
pub use meta::{
    CAPABILITY, CLASS_META, DEDUPLICATED_META, ERROR_META, KEYING_META, KEY_META, REASON_META,
    REPEAT_ARGUMENT_META, WINDOW_SECONDS_META,
};
pub use policy::{Approver, Unkeyed, REPEAT_ARGUMENT};
pub use server::{McpServer, SecretError};
pub use stdio::stdio;
pub use tools::{tool_definition, tool_definitions};
pub use trace::{TRACEPARENT_META, TRACESTATE_META};
