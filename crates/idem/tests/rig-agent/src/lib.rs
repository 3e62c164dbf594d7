//! Nothing here: the test is `tests/agent.rs`, a rig agent run with a
//! scripted model calling idem tools through `idem::rig`.
