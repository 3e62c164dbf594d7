//! The in-memory store against the public conformance suite.

use idem_conformance::MemoryHarness;

async fn harness() -> Option<MemoryHarness> {
    Some(MemoryHarness::new())
}

idem_conformance::store_conformance_tests!(harness);
