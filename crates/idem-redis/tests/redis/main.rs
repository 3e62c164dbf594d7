//! `RedisStore` against real servers (and a cluster) the tests start on
//! loopback: the conformance suite and a module per scenario.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]

mod redis_support;

mod cluster_conformance;
mod conformance;
mod connecting;
mod old_and_bad_data;
mod processes;
mod retention;
mod round_trips;
mod scans;
mod server_failures;
mod tls;
mod tls_cluster_conformance;
mod tls_conformance;
