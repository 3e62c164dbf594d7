//! The fake world, tools and stores shared by the executor's test files
//! (`mod executor_support;`): the executor's rules, through its public
//! API, with tools implemented by hand (the `#[tool]` attribute generates
//! the same impls).
#![allow(dead_code)] // each test file uses its own subset

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::class::{IdempotentWrite, Irreversible, NonIdempotentWrite, Read};
use idem_runtime::clock::ManualClock;
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem_runtime::store::{ClaimRequest, LocalClaim, MemoryStore, Store};
use idem_runtime::{
    Executor, IdemError, Reconciled, RetryPolicy, StoreError, Tool, ToolCtx, ToolDef, ToolError,
    ToolSpec,
};
use serde::{Deserialize, Serialize};

/// What the fake outside world saw, and what the tools will answer next.
#[derive(Default)]
pub struct World {
    pub effects: Mutex<Vec<String>>,
    pub calls: AtomicUsize,
    pub script: Mutex<VecDeque<ToolError>>,
    pub reconcile: Mutex<Option<Reconciled<Sent>>>,
    pub delay: Mutex<Option<Duration>>,
    pub crashed: AtomicBool,
}

pub type App = Arc<World>;

impl World {
    pub fn effects(&self) -> Vec<String> {
        self.effects.lock().unwrap().clone()
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    pub fn fail_next(&self, errors: impl IntoIterator<Item = ToolError>) {
        self.script.lock().unwrap().extend(errors);
    }
    /// Run one attempt: count it, maybe fail as scripted, else apply.
    pub async fn act(&self, what: String, ctx: &ToolCtx) -> Result<Sent, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = *self.delay.lock().unwrap();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if let Some(e) = self.script.lock().unwrap().pop_front() {
            return Err(e);
        }
        self.effects.lock().unwrap().push(what.clone());
        Ok(Sent {
            id: format!("{what}#{}", self.effects.lock().unwrap().len()),
            key: ctx.key().map(|k| k.to_string()),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Msg {
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    pub id: String,
    pub key: Option<String>,
}

macro_rules! test_tool {
    ($ty:ident, $class:ty, $name:literal) => {
        #[derive(Clone, Copy)]
        pub struct $ty;
        impl ToolDef for $ty {
            type Class = $class;
            type Args = Msg;
            type Output = Sent;
            const SPEC: ToolSpec = ToolSpec::new($name, "test tool");
        }
        impl Tool<App> for $ty {
            fn call(
                &self,
                args: Msg,
                ctx: &ToolCtx,
                world: &App,
            ) -> impl Future<Output = Result<Sent, ToolError>> + Send {
                let (world, ctx) = (world.clone(), ctx.clone());
                async move { world.act(format!("{}:{}", $name, args.to), &ctx).await }
            }
            fn reconcile(
                &self,
                _args: &Msg,
                _ctx: &ToolCtx,
                world: &App,
            ) -> impl Future<Output = Result<Reconciled<Sent>, ToolError>> + Send {
                let answer = world
                    .reconcile
                    .lock()
                    .unwrap()
                    .clone()
                    .unwrap_or(Reconciled::Unknown);
                std::future::ready(Ok(answer))
            }
        }
    };
}

test_tool!(SendEmail, IdempotentWrite, "send_email");
test_tool!(ChargeCard, NonIdempotentWrite, "charge_card");
test_tool!(DeleteAccount, Irreversible, "delete_account");
test_tool!(LookUp, Read, "look_up");

pub fn msg(to: &str) -> Msg {
    Msg { to: to.into() }
}

pub fn executor(store: Arc<MemoryStore>) -> (Executor<App>, App) {
    let world = App::default();
    let exec = Executor::builder_shared(store)
        .state(world.clone())
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(1))
                .without_jitter(),
        )
        // Short, so reconciling a takeover (which first outlasts the
        // previous owner's attempt) takes a second, not thirty.
        .timeout(Duration::from_secs(1))
        .build();
    (exec, world)
}

/// `send_email` to `to` under call id `id`.
pub async fn send(
    exec: &Executor<App>,
    to: &str,
    id: &str,
) -> Result<idem_runtime::CallOutput<Sent>, IdemError> {
    exec.call(SendEmail, msg(to)).call_id(id).await
}

/// `charge_card` for `to` under call id `id`.
pub async fn charge(
    exec: &Executor<App>,
    to: &str,
    id: &str,
) -> Result<idem_runtime::CallOutput<Sent>, IdemError> {
    exec.call(ChargeCard, msg(to)).call_id(id).await
}

pub fn fresh() -> (Executor<App>, App) {
    executor(Arc::new(MemoryStore::new()))
}

pub fn with_clock() -> (Executor<App>, App, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000);
    let (exec, world) = executor(Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))));
    (exec, world, clock)
}

/// A hook for the tests: counts the claims that reach the store, and makes
/// renewals work (`Renew`), fail as if the store could not be reached
/// (`Refused`; `Down`: recording an outcome fails too), or never answer
/// (`Hang`).
///
/// It declines the caller's-thread claim ([`Hook::around_local`]), so that
/// every claim takes the usual way and is counted: the tests that count
/// claims check what reaches the store once the in-process flight has
/// gathered a burst's duplicates, and the in-memory store would otherwise
/// answer each of them on its caller's thread, which is another path than
/// the one these tests are about (and the one a store over the network
/// never has).
#[derive(Debug)]
pub struct Probe {
    pub renewals: Renewals,
    pub claims: AtomicUsize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Renewals {
    Renew,
    Refused,
    Down,
    Hang,
}

/// A store behind a [`Probe`].
pub type Probed = Interceptor<Probe, Arc<dyn Store>>;

/// `inner` behind a probe that handles renewals as `renewals` says.
pub fn probed(inner: impl Store, renewals: Renewals) -> Probed {
    probed_shared(Arc::new(inner), renewals)
}

/// The shared `inner` behind a probe that handles renewals as `renewals`
/// says.
pub fn probed_shared(inner: Arc<dyn Store>, renewals: Renewals) -> Probed {
    let probe = Probe {
        renewals,
        claims: AtomicUsize::new(0),
    };
    Interceptor::new(inner, probe)
}

impl Probe {
    fn unreachable() -> StoreError {
        StoreError::Unavailable {
            store: "probe".into(),
            cause: "connection refused".into(),
        }
    }
}

#[async_trait::async_trait]
impl Hook for Probe {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match op.kind() {
            OpKind::Claim => {
                self.claims.fetch_add(1, Ordering::SeqCst);
            }
            OpKind::Renew => match self.renewals {
                Renewals::Renew => {}
                Renewals::Hang => std::future::pending::<()>().await,
                Renewals::Refused | Renewals::Down => return Err(Self::unreachable()),
            },
            OpKind::Complete if self.renewals == Renewals::Down => return Err(Self::unreachable()),
            _ => {}
        }
        op.run(store).await
    }

    fn around_local(
        &self,
        _req: &ClaimRequest<'_>,
        _store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        // Declined: see the type's docs.
        None
    }
}
