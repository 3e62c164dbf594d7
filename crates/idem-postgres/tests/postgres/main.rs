//! `PostgresStore` against a real server the tests start on loopback: the
//! conformance suite and a module per scenario.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]

mod postgres_support;

mod bad_data;
mod conformance;
mod durability;
mod migrations;
mod open_index;
mod processes;
mod read_only;
mod round_trips;
mod schema_names;
mod server_failures;
mod tls;
mod tls_conformance;
