//! The approval rules in the chat (`tests/python/proxy_rules.py`): what
//! `idem serve` publishes holds for MCP elicitation through `idem proxy`
//! as for `idem approve`.

use super::upstreams::python_cases;

/// Under a rule of two approvals that forbids approving one's own call,
/// alice accepting her own call in the chat decides nothing and says why
/// in the audit log; dana and erin approve it and it runs once.
#[test]
fn the_chat_approval_holds_the_rules_idem_serve_published() {
    python_cases(
        "the_chat_approval_holds_the_rules_idem_serve_published",
        Some("chat_under_rules"),
        &[],
        "proxy-rules-transcript.md",
    );
}
