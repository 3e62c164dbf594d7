//! What an owner of a key carries through the phases after the claim
//! ([`Owner`]), and the lease it keeps alive while it works
//! ([`keep_lease`]).

use std::convert::Infallible;

use crate::ctx::{LeaseWatch, ToolCtx};
use crate::key::{IdempotencyKey, Namespace};
use crate::record::Fence;
use crate::store::Takeover;

use super::env::CallEnv;
use super::flight::FlightGuard;

/// What an owner of a key carries through the later phases.
pub(super) struct Owner<'f> {
    pub(super) key: IdempotencyKey,
    pub(super) fence: Fence,
    /// Set when a previous owner vanished without an outcome.
    pub(super) takeover: Option<Takeover>,
    /// Set when the steps hold an approval given for other arguments (a
    /// natural key took over an approved call): this owner must not run
    /// under it.
    pub(super) foreign_approval: bool,
    /// The recorded steps hold an approval ([`APPROVAL_STEP`]).
    pub(super) approved: bool,
    /// The recorded steps hold an attempt mark ([`ATTEMPT_STEP`]): a
    /// previous owner started the tool.
    pub(super) started: bool,
    /// The context the tool sees — its key, namespace, the steps a
    /// previous owner completed — and the lease it is told about, whose
    /// deadline starts from just before the winning claim was sent, so it
    /// is never later than the store's.
    pub(super) ctx: ToolCtx,
    /// The in-process flight this owner leads, if any: its outcome is
    /// published there for the calls of its key that follow it.
    pub(super) flight: Option<&'f FlightGuard<'f>>,
}

impl<'f> Owner<'f> {
    /// The lease this owner holds and its tool is told about.
    pub(super) fn lease(&self) -> &LeaseWatch {
        self.ctx
            .lease()
            .expect("an owner's context watches its lease")
    }

    /// Whether the lease was lost (a renewal found a newer fence, or could
    /// not reach the store before the lease ran out).
    pub(super) fn lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// The namespace the key belongs to.
    pub(super) fn namespace(&self) -> &Namespace {
        self.ctx.namespace()
    }
}

/// Renew the owner's lease every third of it, for as long as the owner
/// works (the caller drops this future when the work ends, so a call
/// that finishes within a third of the lease pays no renewal); see
/// `ToolCtx::keep_lease` for a renewal that fails.
pub(super) async fn keep_lease(env: &CallEnv<'_>, owner: &Owner<'_>) -> Infallible {
    owner.ctx.keep_lease(env.lease() / 3).await
}

/// The owner once what it inherited is settled (phase 3): it holds no
/// approval given for other arguments, and no vanished owner's attempt
/// is left to reconcile. Made by the takeover phase (`takeover::settle`).
#[derive(Clone, Copy)]
pub(super) struct Owned<'o>(pub(super) &'o Owner<'o>);

/// The owner once approved, where its class needs an approval (phase 4).
/// Made by the approval phase (`approval::obtain`).
#[derive(Clone, Copy)]
pub(super) struct Approved<'o>(pub(super) &'o Owner<'o>);

/// The owner once its attempt is marked as started, where its class is
/// never re-run (phase 5): the tool may run. Made by
/// the started mark (`record::mark_started`).
#[derive(Clone, Copy)]
pub(super) struct Started<'o>(pub(super) &'o Owner<'o>);
