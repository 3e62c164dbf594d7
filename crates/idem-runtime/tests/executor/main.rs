//! The executor and the store contract on the in-memory store: one binary
//! with a module per scenario (duplicates, leases, crashes, retries,
//! approvals, durability, store failures), the interceptor, key vectors,
//! the kill tests and store URLs.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
mod support;

mod approvals;
mod crashes;
mod dedup;
mod durability;
mod intercept;
mod key_vectors;
mod kill;
mod leases;
mod memory_conformance;
mod retries;
mod store_failures;
