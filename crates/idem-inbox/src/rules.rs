//! The approval rules: the approvers file's `[[rule]]` tables, saying per
//! tool and per namespace who may decide a call awaiting approval, how
//! many distinct approvals it needs and whether whoever asked may approve
//! it. They live in [`idem_runtime::approval::rules`], beside the
//! [`Operator`](idem_runtime::operator::Operator) that enforces them on
//! every decision; `idem serve` publishes the file's rules to the store
//! at start and on every reload, so that `idem approve`, the MCP chat
//! approval and a program's own operator obey the same ones.

pub use idem_runtime::approval::rules::{Act, Allowed, Rule, RuleEntry, RuleRefusal, Rules};
