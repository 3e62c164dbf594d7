//! The executor on the in-memory store: one binary with a module per
//! scenario (duplicates, leases, crashes, retries, approvals, durability,
//! store failures) and key vectors. What needs another crate of the
//! workspace as well — the conformance suite on the in-memory store and
//! through the interceptor, the kill tests, a burst on SQLite — is in
//! idem-testkit's `faults` tests, so that idem-runtime dev-depends on none
//! of the crates that depend on it (`cargo package` needs an order).

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
mod support;

mod approvals;
mod crashes;
mod dedup;
mod durability;
mod key_vectors;
mod leases;
mod retries;
mod store_failures;
