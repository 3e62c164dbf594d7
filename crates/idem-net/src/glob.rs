//! Globs of names: tool names in `idem proxy`'s configuration, tools and
//! namespaces in the approval rules and webhooks. They live in
//! [`idem_runtime::glob`], beside the approval rules that match with them;
//! here for the crates that found them here first.

pub use idem_runtime::glob::{Glob, GlobError};
