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
        mut local: Option<Result<claim::Claimed<'static>, IdemError>>,
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
                    match self.env.follow(&key.key, &flight).await {
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
    async fn claim_and_own(
        &self,
        args: &T::Args,
        key: &mut key::CallKey,
        // By reference: a parameter by value is kept twice in the future.
        local: &mut Option<Result<claim::Claimed<'static>, IdemError>>,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        let wait_until = tokio::time::Instant::now() + self.env.approval_wait;
        loop {
            let claimed = match local.take() {
                Some(claimed) => claimed,
                // Boxed where it is awaited: the window's rounds keep
                // records and index state across several store calls, and
                // inline they made every first call's future 840 bytes
                // larger, windowed or not.
                None if key.window.is_some() => Box::pin(self.env.claim_windowed(key)).await,
                None => self.env.claim(key).await,
            };
            if key.window.is_some() {
                // The window's claim found the effect's key.
                claimed::note(&key.key);
            }
            let result = match claimed {
                Ok(claim::Claimed::Owner(owner)) => {
                    let owner = owner.leading(self.flight.as_ref());
                    // Not boxed apart: this future is boxed already
                    // (`Executor::finish`), and a second box cost every
                    // first call an allocation and a copy of the owner's
                    // state. A duplicate that comes this way (a store
                    // that does not answer on the caller's thread) pays
                    // a larger box instead, once.
                    self.owned(args, &key.args.fingerprint, owner).await
                }
                Ok(claim::Claimed::Recorded { record, joined }) => {
                    return self.answer_recorded(&key.key, &record, joined)
                }
                Err(e) => Err(e),
            };
            let Err(IdemError::ApprovalPending { .. }) = &result else {
                return result;
            };
            if !self.decided_in_time(&key.key, wait_until).await? {
                return result;
            }
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
