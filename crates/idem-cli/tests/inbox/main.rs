//! `idem serve`, the approval inbox: its JSON API and pages over HTTP, and
//! headless Chromium driving them as an approver (and an attacker) would.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
#[path = "../support/mod.rs"]
mod support;

mod api;
mod browser;
mod connections;
mod edit;
mod hosts;
mod lifecycle;
mod limits;
mod notify;
mod pages;
mod planted;
mod resolve;
mod rules;
mod sessions;
mod signin;
mod slack;
mod timers;
mod tls;
