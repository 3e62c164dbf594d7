//! A call's phases in the order they run: a `read` runs its attempts; a
//! keyed call claims its key (phase 2, shared by the calls of the key in
//! this process), then as the owner goes on to the later phases, and waits
//! for a person's decision when its approval is pending.

use std::borrow::Borrow;
use std::future::Future;

use crate::error::IdemError;
use crate::store::WaitFor;
use crate::tool::Tool;

use super::{claim, claimed, flight, key, Call, CallOutput, Mode};
use crate::store::StoreExt;

impl<'a, S, T, R> Call<'a, S, T, R>
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync + 'a,
{
    /// `read`: run with retries; no key, no store.
    // Not an `async fn`, like `keyed`.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn read(
        self,
        args: T::Args,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 'a {
        async move {
            let ctx = self.env.base_ctx();
            let (result, attempts) = self.attempts(&args, ctx, None).await;
            let result = match result {
                Ok(output) => Ok(CallOutput {
                    output,
                    meta: self.env.meta(None, false, attempts),
                }),
                Err(error) => Err(self.env.tool_failed(error, false)),
            };
            self.env.end(&result, &self.progress);
            result
        }
    }

    /// A keyed class, its key derived: phase 2 (claim, shared by the calls
    /// of the key in this process), then as the owner the rest.
    ///
    /// `local` is the claim if the store answered it on this thread
    /// ([`Executor::start`]).
    // Not an `async fn`: an async fn's future keeps its parameters twice
    // (as passed, and moved into the body), 700 bytes here; an `async
    // move` block keeps what it captures once.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn keyed(
        mut self,
        args: T::Args,
        mut key: key::CallKey,
        mut local: Option<claim::Owner<'static>>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 'a {
        async move {
            // The phases, in a block of their own so that every way out of
            // them (a `return`, a `?`) is told on the span.
            let result = async {
                if key.window.is_none() {
                    claimed::note(&key.key);
                }
                if local.is_none() {
                    if let Some(answer) = self.lead_or_follow(&key).await {
                        return answer;
                    }
                }
                self.claim_and_own(&args, &mut key, &mut local).await
            }
            .await;
            self.env.end(&result, &self.progress);
            result
        }
    }

    /// Meet the other calls of this key in this process: the first leads
    /// (its outcome will be published to the others through
    /// `self.flight`), the others follow it and answer from its outcome —
    /// `Some`, the answer — or, when it recorded none, go on to the store
    /// like a leader would. A window's calls meet in the store instead,
    /// whose key may change under them, and a replay only reads.
    async fn lead_or_follow(
        &mut self,
        key: &key::CallKey,
    ) -> Option<Result<CallOutput<T::Output>, IdemError>> {
        if self.env.mode != Mode::Live || key.window.is_some() {
            return None;
        }
        let core = self.env.core;
        loop {
            match core
                .flights
                .join(&key.key, self.env.name(), &key.args.fingerprint)
            {
                flight::Joined::Leader(guard) => {
                    self.flight = Some(guard);
                    return None;
                }
                flight::Joined::Follower(flight) => {
                    self.progress.joined();
                    // Boxed: only a call that finds its key in flight here waits.
                    match Box::pin(self.env.follow(&key.key, &flight)).await {
                        Err(e) => return Some(Err(e)),
                        Ok(Some(outcome)) => {
                            return Some(self.env.answer_outcome(&key.key, Some(outcome)))
                        }
                        // The leader recorded nothing: ask the store.
                        Ok(None) => {}
                    }
                }
                flight::Joined::Apart => return None,
            }
        }
    }

    /// Claim the key (`local`: the claim the store answered on this
    /// thread) and, as its owner, run the call; or answer from its record.
    /// An approval pending (parked by this call or an earlier one) is
    /// waited for as long as the call may, then the key claimed again: to
    /// run under the approval, or to answer with the denial.
    // Not an `async fn`, as `keyed` (its parameters would be kept twice,
    // and, laid out apart, keep the steps below from sharing space).
    #[allow(clippy::manual_async_fn)]
    fn claim_and_own<'s>(
        &'s self,
        args: &'s T::Args,
        key: &'s mut key::CallKey,
        local: &'s mut Option<claim::Owner<'static>>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 's {
        async move {
            // Only an irreversible call can find its approval pending and
            // wait for a person's decision: boxed, so that its loop does not
            // size every other call's future.
            if !self.env.class.needs_approval() {
                return self.claim_once(args, key, local).await;
            }
            Box::pin(self.claim_and_wait(args, key, local)).await
        }
    }

    /// [`claim_and_own`](Self::claim_and_own) for a call that needs an
    /// approval: claimed again after a pending approval is decided, as
    /// long as the call may wait.
    async fn claim_and_wait(
        &self,
        args: &T::Args,
        key: &mut key::CallKey,
        local: &mut Option<claim::Owner<'static>>,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        let mut wait_until = None;
        loop {
            let result = self.claim_once(args, key, local).await;
            let Err(IdemError::ApprovalPending { .. }) = &result else {
                return result;
            };
            let until = *wait_until
                .get_or_insert_with(|| tokio::time::Instant::now() + self.env.approval_wait);
            if !self.decided_in_time(&key.key, until).await? {
                return result;
            }
        }
    }

    /// Claim the key once and, as its owner, run the call; or answer from
    /// its record.
    #[allow(clippy::manual_async_fn)]
    fn claim_once<'s>(
        &'s self,
        args: &'s T::Args,
        key: &'s mut key::CallKey,
        local: &'s mut Option<claim::Owner<'static>>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 's {
        async move {
            // In a block of its own, so that what the claim found is not kept
            // beside the owner's phases.
            let mut owner: claim::Owner<'_> = {
                // Matched on a flag, not on `local.take()`, whose temporary
                // would be kept across the awaits.
                let here = local.is_some();
                let claimed = match here {
                    // Told on the span when it was claimed
                    // (`Executor::start`).
                    true => Ok(claim::Claimed::Owner(local.take().expect("checked"))),
                    // Boxed where it is awaited: the window's rounds keep
                    // records and index state across several store calls, and
                    // inline they made every first call's future 840 bytes
                    // larger, windowed or not.
                    false if key.window.is_some() => Box::pin(self.env.claim_windowed(key)).await,
                    // Boxed too: a store that does not answer on this
                    // thread pays an allocation beside its round trip,
                    // rather than every call the claim's state.
                    false => Box::pin(self.env.claim(key)).await,
                };
                if key.window.is_some() {
                    // The window's claim found the effect's key.
                    claimed::note(&key.key);
                }
                match claimed {
                    Ok(claim::Claimed::Owner(owner)) => {
                        if !here {
                            self.env
                                .tell_owner(None, owner.fence, owner.takeover.is_some());
                        }
                        owner
                    }
                    Ok(claim::Claimed::Recorded { record, joined }) => {
                        return self.answer_recorded(&key.key, &record, joined)
                    }
                    Err(e) => return Err(e),
                }
            };
            owner.flight = self.flight.as_ref();
            // Boxed apart: with the claim's, the owner's phases made one
            // allocation of over 1 KB, which glibc serves from its bins
            // (consolidating the freed small chunks first, every call)
            // rather than from its per-thread cache; two smaller ones
            // cost less.
            Box::pin(self.owned(args, &key.args.fingerprint, &owner)).await
        }
    }

    /// Answer from the record a claim found (`joined`: after waiting for
    /// another owner in flight), passing its outcome on to the calls that
    /// follow this one in this process.
    fn answer_recorded(
        &self,
        key: &crate::key::IdempotencyKey,
        record: &claim::Recorded,
        joined: bool,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        if joined {
            self.progress.joined();
        }
        if let (Some(flight), Some(outcome)) = (&self.flight, record.outcome()) {
            flight.publish(outcome);
        }
        self.env.answer(key, record)
    }

    /// Wait until `until`, if the call may wait that long, for a person's
    /// decision on the key's pending approval; whether one was made (the
    /// key is then claimed again).
    async fn decided_in_time(
        &self,
        key: &crate::key::IdempotencyKey,
        until: tokio::time::Instant,
    ) -> Result<bool, IdemError> {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        tracing::info!("approval pending; waiting for a decision");
        let decided = self
            .env
            .store()
            .wait(key, WaitFor::Decision, left)
            .await
            .map_err(|e| self.env.store_err(e))?;
        Ok(!decided.is_some_and(|r| crate::approval::transition::awaits_decision(&r)))
    }
}
