//! The approval inbox of idem: a web page over an idem store for the
//! people who decide (a finance lead approving a refund, a support lead an
//! account deletion), and the same decisions as a JSON API under `/api/`
//! for bots. `idem serve` runs it; `docs/inbox.md` documents both.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use idem_inbox::InboxOptions;
//! use idem_runtime::operator::Operator;
//! use idem_runtime::store::{MemoryStore, StoreError};
//!
//! # async fn serve() -> Result<(), idem_inbox::InboxError> {
//! let mut options = InboxOptions::new("approvers.toml");
//! options.listen = "127.0.0.1:8080".parse().unwrap();
//! // Until Ctrl-C; the store is opened once the options are checked.
//! let store = async { Ok::<_, StoreError>(Operator::new(Arc::new(MemoryStore::new()))) };
//! idem_inbox::run(options, store).await
//! # }
//! ```
//!
//! Every decision goes through [`idem_runtime::operator::Operator`], fenced
//! on the record as it was shown: a record that changed in between is
//! refused with what changed, and nothing is written.
//!
//! The parts, lowest first (each module uses only those above it):
//! [`role`], [`rules`] (the approval rules: who may decide what, how many
//! approvals a call needs), `notify` (webhooks when a call begins to wait,
//! is overdue or is decided), [`approvers`] (the approvers file: who may
//! sign in, with which role), `slack` (Slack's request signatures, and
//! where outcomes may be posted), `cookies` (cookie names and attributes, CSRF
//! tokens, same-origin posts), [`session`] (sessions kept in the store,
//! shared by every instance on it), [`signins`] (sign-ins in the audit
//! log, failures bounded), `throttle` (bounded work before sign-in),
//! `view` (what a record looks like in words), `decide` (a decision,
//! checked against the version the person saw), `change` (what changed
//! since the last look), `state` (what every handler shares, and who a
//! request comes from); then the handlers: `listing`, `pages` (the HTML),
//! `login`, `api` (the JSON), `live` (server-sent events when the inbox
//! changes), `deliveries` (the webhooks' log, for approvers), `clicks`
//! (Slack's Approve and Deny buttons, deciding in place); `router`
//! and `server` (serving, and the drain on Ctrl-C) on top.

// Helpers return `Result<_, Response>`: the error *is* the page to send,
// built once per request; boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod api;
pub mod approvers;
mod change;
mod clicks;
mod cookies;
mod decide;
mod deliveries;
mod error;
mod expiry;
mod listing;
mod live;
mod login;
mod notify;
mod options;
mod pages;
mod quiet;
pub mod role;
mod router;
pub mod rules;
mod server;
pub mod session;
pub mod signins;
mod slack;
mod state;
mod throttle;
mod view;

pub use error::InboxError;
pub use options::{InboxOptions, NotifyFormat, TlsFiles};
pub use role::Role;
pub use server::run;
