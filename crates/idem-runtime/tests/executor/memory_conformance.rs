//! The in-memory store against the public conformance suite.
#![cfg(feature = "conformance")]

use idem_runtime::conformance::MemoryHarness;

async fn harness() -> Option<MemoryHarness> {
    Some(MemoryHarness::new())
}

idem_runtime::store_conformance_tests!(harness);
