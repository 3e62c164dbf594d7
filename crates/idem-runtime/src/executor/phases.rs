//! A call's phases in the order they run: a `read` runs its attempts; a
//! keyed call claims its key (phase 2, shared by the calls of the key in
//! this process), then as the owner goes on to the later phases, and waits
//! for a person's decision when its approval is pending.

use std::borrow::Borrow;
use std::future::Future;
use std::sync::atomic::Ordering;

use crate::error::IdemError;
use crate::store::WaitFor;
use crate::tool::Tool;

use super::{claim, flight, key, Call, CallOutput, Mode};

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
            self.env.end(&result);
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
        mut local: Option<Result<claim::Claimed, IdemError>>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 'a {
        async move {
            // The phases, in a block of their own so that every way out of
            // them (a `return`, a `?`) is told on the span.
            let result = async {
                // A window's calls meet in the store, whose key may change
                // under them; the flights of this process are by key.
                if local.is_none() && self.env.mode == Mode::Live && key.window.is_none() {
                    let core = self.env.core;
                    loop {
                        match core
                            .flights
                            .join(&key.key, self.env.name(), &key.args.fingerprint)
                        {
                            flight::Joined::Leader(guard) => {
                                self.env.flight = Some(guard);
                                break;
                            }
                            flight::Joined::Follower(flight) => {
                                self.env.joined.store(true, Ordering::Relaxed);
                                if let Some(outcome) = self.env.follow(&key.key, &flight).await? {
                                    return self.env.answer_outcome(&key.key, Some(outcome));
                                }
                                // The leader recorded nothing: ask the store.
                            }
                            flight::Joined::Apart => break,
                        }
                    }
                }
                let wait_until = tokio::time::Instant::now() + self.env.approval_wait;
                loop {
                    let claimed = match local.take() {
                        Some(claimed) => claimed,
                        None if key.window.is_some() && self.env.mode == Mode::Live => {
                            self.env.claim_windowed(&mut key).await
                        }
                        None => self.env.claim(&key).await,
                    };
                    let result = match claimed {
                        Ok(claim::Claimed::Owner(owner)) => {
                            // Not boxed apart: this future is boxed already
                            // (`Executor::finish`), and a second box cost every
                            // first call an allocation and a copy of the owner's
                            // state. A duplicate that comes this way (a store
                            // that does not answer on the caller's thread) pays
                            // a larger box instead, once.
                            self.owned(&args, &key.args.fingerprint, owner).await
                        }
                        Ok(claim::Claimed::Recorded(record)) => {
                            if let (Some(flight), Some(outcome)) =
                                (&self.env.flight, record.outcome())
                            {
                                flight.publish(outcome);
                            }
                            return self.env.answer(&record);
                        }
                        // Pending because an earlier call parked the key: this call
                        // waits for the decision as if it had parked it itself.
                        Err(e) => Err(e),
                    };
                    let Err(IdemError::ApprovalPending { .. }) = &result else {
                        return result;
                    };
                    // Pending: wait for a person's decision if the call may, then
                    // claim again (to run under the approval, or to get the denial).
                    let left = wait_until.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return result;
                    }
                    tracing::info!("approval pending; waiting for a decision");
                    let decided = self
                        .env
                        .store()
                        .wait(&key.key, WaitFor::Decision, left)
                        .await
                        .map_err(|e| self.env.store_err(e))?;
                    if decided.is_some_and(|r| crate::approval::transition::awaits_decision(&r)) {
                        return result;
                    }
                }
            }
            .await;
            self.env.end(&result);
            result
        }
    }
}
