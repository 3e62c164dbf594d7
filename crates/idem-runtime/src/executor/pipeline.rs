//! A call from its start to its end, read top to bottom.
//!
//! A `read` runs its attempts ([`read`]). A keyed call goes through these
//! phases and no other order; each is a function that takes what the one
//! before it handed on and returns what the next one needs, or ends the
//! call:
//!
//! 1. derive the key ([`key::derive`] → [`CallKey`]), in [`start`];
//! 2. claim it ([`claim`] → a [`Claim`]: owned, answered from the key's
//!    record, or refused), on the caller's thread in [`start`] when the
//!    store can answer there, else in [`keyed`], where concurrent calls of
//!    the key in this process share one claim;
//! 3. settle a takeover ([`takeover::settle`] → [`Owned`]);
//! 4. obtain an approval ([`approval::obtain`] → [`Approved`]);
//! 5. mark the attempt as started ([`record::mark_started`] → [`Started`]);
//! 6. run the attempts ([`attempts::run`] → [`Ran`]);
//! 7. record the outcome ([`record::outcome`]).
//!
//! Phases 3 to 7 are [`owned`], which keeps the lease alive while they
//! run. A call whose approval is pending waits for a person's
//! decision, as long as it may, then claims again ([`claim_and_wait`]).
//!
//! How the futures are built matters as much as what they do: the
//! phases most calls never take are boxed where they are taken, so that
//! their states do not size every call's future, and functions that
//! return a future are written with `async move` blocks rather than as
//! `async fn`s, whose futures keep their parameters twice.

use std::borrow::Borrow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use serde_json::Value;
use tracing::Instrument;

use crate::error::IdemError;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::EditedTo;
use crate::store::{StoreExt, WaitFor};
use crate::tool::Tool;

use super::answer;
use super::answer::Recorded;
use super::approval;
use super::attempts::{self, poll_once};
use super::claim::{self, Claimed};
use super::claimed;
use super::context::{CallOptions, RunContext};
use super::edited;
use super::env::Progress;
use super::env::{ApprovalSource, Call, CallEnv, CallPolicy, Core, Mode};
use super::errors;
use super::flight;
use super::key::{self, CallKey};
use super::output::{CallOutput, Edit};
use super::owner::{self, Owned, Owner};
use super::record::{self, Ran};
use super::takeover;
use super::telemetry;
use super::window;

#[cfg(doc)]
use super::owner::{Approved, Started};

/// The remaining phases of a call, boxed.
pub(super) type BoxedCall<'a, O> =
    Pin<Box<dyn Future<Output = Result<CallOutput<O>, IdemError>> + Send + 'a>>;

/// A call after [`start`].
// Returned once and taken apart at once, never stored: boxing the large
// variant would cost the first call an allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Begun<'a, A, O> {
    /// Answered (a duplicate on a store that answers on this thread), or
    /// refused before anything ran.
    Done(Result<CallOutput<O>, IdemError>),
    /// Still to await ([`finish`]).
    Running(Rest<'a, A>),
}

/// What [`finish`] goes on with.
pub(super) struct Rest<'a, A> {
    env: CallEnv<'a>,
    args: A,
    /// For a keyed class: the key, and the claim if the store answered it
    /// on this thread.
    key: Option<(CallKey, Option<Owner<'static>>)>,
}

/// How phase 2 ended.
enum Claim<'f, O> {
    /// This call owns the key: phases 3 to 7 follow.
    Owned(Owner<'f>),
    /// Answered from the key's record (a duplicate, or a call that waited
    /// for another owner of its key): nothing runs.
    Answered(Result<CallOutput<O>, IdemError>),
    /// Refused (the store could not be reached, the key is reused or in
    /// flight), or awaiting a person's approval: nothing runs.
    Refused(IdemError),
    /// Denied in favour of the call an approver edited it into: the call
    /// goes on as that one ([`edited`]).
    Edited(EditedTo),
}

/// How a keyed call's claim and owned phases ended.
enum Ended<O> {
    /// With the call's answer.
    Done(Result<CallOutput<O>, IdemError>),
    /// With the key's record pointing to the call an approver edited it
    /// into, which the call goes on as ([`keyed`]).
    Edited(EditedTo),
}

/// What a call can do without awaiting: phase 1 (the key) and, when the
/// store answers on this thread, phase 2 (the claim). A duplicate on the
/// in-memory store is answered here, without a future, a task switch or
/// an allocation beyond its key.
#[allow(clippy::too_many_arguments)]
pub(super) fn start<'a, S, T: Tool<S>>(
    core: &'a Core,
    mode: Mode,
    tool: &T,
    args: T::Args,
    call_id: Option<String>,
    run: RunContext,
    options: CallOptions,
    approval: ApprovalSource,
) -> Begun<'a, T::Args, T::Output> {
    let class = tool.runtime_class();
    let spec = tool.runtime_spec();
    // Not entered here: entering costs a subscriber's layers on every
    // call, and what happens before the call awaits emits no event but a
    // refusal's, which enters it (`errors::refuse`). The phases that await
    // run inside it (`finish`).
    let namespace = run.namespace.as_ref().unwrap_or(&core.config.namespace);
    let span = telemetry::span(spec, class, call_id.as_deref(), namespace);
    let env = CallEnv {
        core,
        mode,
        spec,
        class,
        call_id,
        run,
        policy: match options.retry {
            Some(policy) => CallPolicy::Given(policy),
            None => CallPolicy::Configured {
                policy: &core.config.retry,
                max_attempts: spec.max_attempts,
            },
        },
        approval_wait: options.approval_wait.unwrap_or(core.config.approval_wait),
        approval,
        span,
        #[cfg(feature = "otel")]
        started: std::time::Instant::now(),
    };
    if !class.is_keyed() {
        return Begun::Running(Rest {
            env,
            args,
            key: None,
        });
    }
    // Phase 1.
    let result = key::derive(&env, &args, tool.runtime_key_material(&args)).map(|key| {
        // Phase 2, when the store answers on this thread (memory; SQLite
        // for a duplicate): no flight is needed, its answer is as quick as
        // the flight's, and a flight would cost every call a map entry. A
        // key already in flight here is followed instead: the burst of
        // calls behind one first call waits for its outcome in memory
        // rather than each reading the store. A window's key is claimed
        // with reads of its neighbours, which only the usual claim makes.
        let local = match env.mode {
            Mode::Live if key.window.is_none() && !env.core.flights.contains(&key.key) => {
                claim::claim_local(&env, &key)
            }
            Mode::Live | Mode::Replay => None,
        };
        (key, local)
    });
    // `idem.key` is recorded with the end of a call answered here (one
    // record instead of two), at once for a call that goes on.
    let (done, key) = match result {
        Err(e) => (Err(e), None),
        // A denial that may point to an edited call is answered by the
        // usual claim, which can follow it (`edited`).
        Ok((key, Some(Ok(Claimed::Recorded { record, .. })))) if !edited::may_follow(&record) => {
            (answer::from_record(&env, &key.key, &record), Some(key))
        }
        // Refused (the store could not be reached, the key is reused), or
        // an approval pending that the call may not wait for: nothing ran,
        // and nothing will.
        Ok((key, Some(Err(e)))) if !waits_for_a_decision(&env, &e) => (Err(e), Some(key)),
        Ok((key, local)) => {
            // A pending approval the call waits for is claimed again the
            // usual way once decided (`claim_and_wait`).
            let local = local.and_then(|claimed| match claimed {
                Ok(Claimed::Owner(owner)) => Some(owner),
                Err(_) | Ok(Claimed::Recorded { .. }) => None,
            });
            match &local {
                Some(owner) => telemetry::tell_owner(
                    &env,
                    Some(&key.key),
                    owner.fence,
                    owner.takeover.is_some(),
                ),
                None => telemetry::tell_key(&env, &key.key),
            }
            return Begun::Running(Rest {
                env,
                args,
                key: Some((key, local)),
            });
        }
    };
    telemetry::end_keyed(
        &env,
        &done,
        &Progress::default(),
        key.as_ref().map(|k| &k.key),
    );
    Begun::Done(done)
}

/// The phases that await: the claim the usual way when the store did not
/// answer on this thread, then, as the key's owner, the tool.
///
/// One boxed future holds them all, the tool included (`tool` is the tool
/// or a reference to it): wrapping them in another `async` block would
/// keep the call's state twice, once captured and once moved into the
/// awaited future. It runs in the call's span, unless no subscriber wants
/// the span: then entering it on every poll would only cost the poll a
/// check.
pub(super) fn finish<'a, S, T, R>(
    state: &'a S,
    tool: R,
    rest: Rest<'a, T::Args>,
) -> BoxedCall<'a, T::Output>
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync + 'a,
{
    let span = (!rest.env.span.is_disabled()).then(|| rest.env.span.clone());
    let call = Call {
        env: rest.env,
        tool,
        state,
        flight: None,
        progress: Progress::default(),
        of: PhantomData,
    };
    match (rest.key, span) {
        (Some((key, local)), Some(span)) => {
            Box::pin(keyed(call, rest.args, key, local).instrument(span))
        }
        (Some((key, local)), None) => Box::pin(keyed(call, rest.args, key, local)),
        (None, Some(span)) => Box::pin(read(call, rest.args).instrument(span)),
        (None, None) => Box::pin(read(call, rest.args)),
    }
}

/// `read`: run with retries; no key, no store.
// Not an `async fn`, like `keyed`.
#[allow(clippy::manual_async_fn)]
fn read<'a, S, T, R>(
    call: Call<'a, S, T, R>,
    args: T::Args,
) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 'a
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync + 'a,
{
    async move {
        let ctx = attempts::base_ctx(&call.env);
        let (result, attempts) = attempts::run(&call, &args, ctx, None).await;
        let result = match result {
            Ok(output) => Ok(CallOutput {
                output,
                meta: answer::meta(&call.env, None, false, attempts),
            }),
            Err(error) => Err(errors::tool_failed(&call.env, error, false)),
        };
        telemetry::end(&call.env, &result, &call.progress);
        result
    }
}

/// A keyed call, its key derived (`local`: the claim if the store
/// answered it on this thread, in [`start`]): phase 2, shared by the calls
/// of the key in this process, then as the owner the rest.
// Not an `async fn`: an async fn's future keeps its parameters twice (as
// passed, and moved into the body), 700 bytes here; an `async move` block
// keeps what it captures once.
#[allow(clippy::manual_async_fn)]
fn keyed<'a, S, T, R>(
    mut call: Call<'a, S, T, R>,
    mut args: T::Args,
    mut key: CallKey,
    mut local: Option<Owner<'static>>,
) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 'a
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync + 'a,
{
    async move {
        // The phases, in a block of their own so that every way out of
        // them is told on the span.
        let result = async {
            if key.window.is_none() {
                claimed::note(&key.key);
            }
            if local.is_none() {
                if let Some(answer) = lead_or_follow(&mut call, &key).await {
                    return answer;
                }
            }
            // The edit the call goes on as, if an approver edited it.
            let mut edit = None;
            for _ in 0..=edited::MAX_EDITS {
                // Only an irreversible call can find its approval pending
                // and wait for a person's decision: boxed, so that its
                // loop does not size every other call's future.
                let ended = match call.env.class.needs_approval() {
                    false => claim_and_own(&call, &args, &mut key, &mut local).await,
                    true => Box::pin(claim_and_wait(&call, &args, &mut key, &mut local)).await,
                };
                let to = match ended {
                    Ended::Done(result) => return edited::tell(result, edit),
                    Ended::Edited(to) => to,
                };
                // Boxed: only a call an approver edited goes this way.
                let (to, edited_args, made) =
                    Box::pin(edited::follow(&call.env, &key, &to)).await?;
                // An edit of an edited call: the model made the first.
                edit = Some(Box::new(match edit {
                    Some(first) => Edit {
                        original: first.original,
                        ..made
                    },
                    None => made,
                }));
                (key, args) = (to, edited_args);
            }
            Err(errors::refuse(
                &call.env,
                IdemError::InvalidArguments {
                    tool: call.env.name().to_owned(),
                    detail: format!(
                        "its arguments were edited more than {} times; nothing ran",
                        edited::MAX_EDITS
                    ),
                },
            ))
        }
        .await;
        telemetry::end(&call.env, &result, &call.progress);
        result
    }
}

/// Meet the other calls of this key in this process: the first leads (its
/// outcome will be published to the others through `call.flight`), the
/// others follow it and answer from its outcome — `Some`, the answer — or,
/// when it recorded none, go on to the store like a leader would. A
/// window's calls meet in the store instead, whose key may change under
/// them, and a replay only reads.
async fn lead_or_follow<'a, S, T, R>(
    call: &mut Call<'a, S, T, R>,
    key: &CallKey,
) -> Option<Result<CallOutput<T::Output>, IdemError>>
where
    T: Tool<S>,
{
    if call.env.mode != Mode::Live || key.window.is_some() {
        return None;
    }
    let core = call.env.core;
    loop {
        match core
            .flights
            .join(&key.key, call.env.name(), &key.args.fingerprint)
        {
            flight::Joined::Leader(guard) => {
                call.flight = Some(guard);
                return None;
            }
            flight::Joined::Follower(flight) => {
                call.progress.joined();
                // Boxed: only a call that finds its key in flight here waits.
                match Box::pin(claim::follow(&call.env, &key.key, &flight)).await {
                    Err(e) => return Some(Err(e)),
                    Ok(Some(outcome)) => {
                        return Some(answer::from_outcome(&call.env, &key.key, Some(outcome)))
                    }
                    // The leader recorded nothing: ask the store.
                    Ok(None) => {}
                }
            }
            flight::Joined::Apart => return None,
        }
    }
}

/// [`claim_and_own`] for a call that needs an approval: claimed again
/// after a pending approval (parked by this call or an earlier one) is
/// decided, as long as the call may wait: to run under the approval, or
/// to answer with the denial.
async fn claim_and_wait<S, T, R>(
    call: &Call<'_, S, T, R>,
    args: &T::Args,
    key: &mut CallKey,
    local: &mut Option<Owner<'static>>,
) -> Ended<T::Output>
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync,
{
    let mut wait_until = None;
    loop {
        let ended = claim_and_own(call, args, key, local).await;
        let Ended::Done(Err(IdemError::ApprovalPending { .. })) = &ended else {
            return ended;
        };
        let until =
            *wait_until.get_or_insert_with(|| tokio::time::Instant::now() + call.env.approval_wait);
        match decided_in_time(&call.env, &key.key, until).await {
            Ok(true) => {}
            Ok(false) => return ended,
            Err(e) => return Ended::Done(Err(e)),
        }
    }
}

/// Phase 2, then as the key's owner phases 3 to 7.
#[allow(clippy::manual_async_fn)]
fn claim_and_own<'s, S, T, R>(
    call: &'s Call<'_, S, T, R>,
    args: &'s T::Args,
    key: &'s mut CallKey,
    local: &'s mut Option<Owner<'static>>,
) -> impl Future<Output = Ended<T::Output>> + Send + 's
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync,
{
    async move {
        let mut owner = match claim(call, key, local).await {
            Claim::Owned(owner) => owner,
            Claim::Answered(result) => return Ended::Done(result),
            Claim::Refused(e) => return Ended::Done(Err(e)),
            Claim::Edited(to) => return Ended::Edited(to),
        };
        owner.flight = call.flight.as_ref();
        if key.edited {
            owner.ctx.mark_edited();
        }
        // Boxed apart: with the claim's, the owner's phases made one
        // allocation of over 1 KB, which glibc serves from its bins
        // (consolidating the freed small chunks first, every call) rather
        // than from its per-thread cache; two smaller ones cost less.
        Ended::Done(Box::pin(owned(call, args, &key.args.fingerprint, &owner)).await)
    }
}

/// Phase 2: own the key, or be answered from its record, or refused.
/// `local` is the claim the store answered on this thread, if it did.
async fn claim<'f, S, T, R>(
    call: &Call<'f, S, T, R>,
    key: &mut CallKey,
    local: &mut Option<Owner<'static>>,
) -> Claim<'f, T::Output>
where
    T: Tool<S>,
{
    let env = &call.env;
    // Matched on a flag, not on `local.take()`, whose temporary would be
    // kept across the awaits.
    let here = local.is_some();
    let claimed = match here {
        // Told on the span when it was claimed (`start`).
        true => Ok(Claimed::Owner(local.take().expect("checked"))),
        // Boxed where it is awaited: the window's rounds keep records and
        // index state across several store calls, and inline they made
        // every first call's future 840 bytes larger, windowed or not.
        false if key.window.is_some() => Box::pin(window::claim(env, key)).await,
        // Boxed too: a store that does not answer on this thread pays an
        // allocation beside its round trip, rather than every call the
        // claim's state.
        false => Box::pin(claim::claim(env, key)).await,
    };
    if key.window.is_some() {
        // The window's claim found the effect's key.
        claimed::note(&key.key);
    }
    match claimed {
        Ok(Claimed::Owner(owner)) => {
            if !here {
                telemetry::tell_owner(env, None, owner.fence, owner.takeover.is_some());
            }
            Claim::Owned(owner)
        }
        Ok(Claimed::Recorded { record, joined }) => match edited::pointer(&record) {
            Some(to) => Claim::Edited(to),
            None => Claim::Answered(answer_recorded(call, &key.key, &record, joined)),
        },
        Err(e) => Claim::Refused(e),
    }
}

/// Answer from the record a claim found (`joined`: after waiting for
/// another owner in flight), passing its outcome on to the calls that
/// follow this one in this process.
fn answer_recorded<S, T, R>(
    call: &Call<'_, S, T, R>,
    key: &IdempotencyKey,
    record: &Recorded,
    joined: bool,
) -> Result<CallOutput<T::Output>, IdemError>
where
    T: Tool<S>,
{
    if joined {
        call.progress.joined();
    }
    if let (Some(flight), Some(outcome)) = (&call.flight, record.outcome()) {
        flight.publish(outcome);
    }
    answer::from_record(&call.env, key, record)
}

/// Phases 3 to 7, as the key's owner: each takes what the one before it
/// handed on, so none can run before the one above it has succeeded. The
/// lease is kept alive while they run.
///
/// A call that is over by the end of its first poll (a tool that answers
/// at once, on a store that answers on this thread) has no lease to renew:
/// the renewals start, boxed, only when it is not. Inline, their state
/// would size every call's future.
#[allow(clippy::manual_async_fn)]
fn owned<'s, S, T, R>(
    call: &'s Call<'_, S, T, R>,
    args: &'s T::Args,
    fingerprint: &'s Fingerprint,
    owner: &'s Owner<'s>,
) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 's
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync,
{
    async move {
        let env = &call.env;
        let phases = async {
            // 3. Settle what the owner inherited: an approval given for
            //    other arguments, a previous owner that vanished.
            let owned: Owned<'_> = match takeover::settle(call, args, owner).await {
                takeover::Settled::Run(owned) => owned,
                takeover::Settled::Done(result) => return result,
            };
            // 4. Obtain an approval (`irreversible` only).
            let args_json = || serde_json::to_value(args).unwrap_or(Value::Null);
            let approved = approval::obtain(env, owned, fingerprint, &args_json).await?;
            // 5. Mark the attempt as started (classes that are never re-run).
            let started = record::mark_started(env, approved).await?;
            // 6. Run the attempts.
            let (result, attempts) =
                attempts::run(call, args, owner.ctx.clone(), Some(owner)).await;
            // 7. Record the outcome.
            let ran = Ran {
                started,
                result,
                attempts,
            };
            record::outcome(call, args, ran).await
        };
        let mut phases = std::pin::pin!(phases);
        if let std::task::Poll::Ready(result) = poll_once(phases.as_mut()).await {
            return result;
        }
        let keep = Box::pin(owner::keep_lease(env, owner));
        tokio::select! {
            biased;
            result = phases => result,
            never = keep => match never {},
        }
    }
}

/// Whether `e` says the call's approval is pending and the call may wait
/// for a person's decision
/// ([`CallBuilder::wait_for_approval`](super::CallBuilder::wait_for_approval)).
fn waits_for_a_decision(env: &CallEnv<'_>, e: &IdemError) -> bool {
    matches!(e, IdemError::ApprovalPending { .. }) && !env.approval_wait.is_zero()
}

/// Wait until `until`, if the call may wait that long, for a person's
/// decision on the key's pending approval; whether one was made (the key
/// is then claimed again).
async fn decided_in_time(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
    until: tokio::time::Instant,
) -> Result<bool, IdemError> {
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    if left.is_zero() {
        return Ok(false);
    }
    tracing::info!("approval pending; waiting for a decision");
    let decided = env
        .store()
        .wait(key, WaitFor::Decision, left)
        .await
        .map_err(|e| errors::store(env, e))?;
    Ok(!decided.is_some_and(|r| crate::approval::transition::awaits_decision(&r)))
}
