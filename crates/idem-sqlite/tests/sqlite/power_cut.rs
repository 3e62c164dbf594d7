//! A power cut in the middle of a call, on a SQLite store that syncs every
//! commit (`Synchronous::Full`): what the store holds afterwards is what
//! was fsynced (the files go through `idem_testkit::power_cut`, a VFS that
//! counts fsyncs and, at the cut, puts every file back as it was at its
//! last sync), and the call made again with the same key once the power is
//! back does what its class promises:
//!
//! * an `idempotent_write` runs again, with the same key (the provider
//!   deduplicates on it), and completes;
//! * a `non_idempotent_write`, marked started before its body ran, is
//!   refused as unknown and never runs twice.
//!
//! Each test also checks the fsyncs of one first call of its class
//! (printed with `--nocapture`): an `idempotent_write` pays one (its
//! outcome; its claim may be lost, which the cut then shows), a
//! `non_idempotent_write` three (claim, started mark, outcome).

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::class::{IdempotentWrite, NonIdempotentWrite};
use idem_runtime::clock::ManualClock;
use idem_runtime::executor::ATTEMPT_STEP;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Record, Status};
use idem_runtime::store::StoreExt;
use idem_runtime::{
    CallOutput, Executor, IdemError, NoApprovalNeeded, Tool, ToolCtx, ToolDef, ToolError, ToolSpec,
};
use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use idem_testkit::power_cut::PowerCut;
use idem_testkit::TempDir;
use serde::{Deserialize, Serialize};

/// The executor's lease: the test's clock jumps past it while the power
/// is off.
const LEASE: Duration = Duration::from_secs(15);

/// The provider downstream of the tools: every request it applied, by the
/// idempotency key it came with. It runs on another machine: the power
/// cut does not touch it.
#[derive(Default)]
struct Provider {
    applied: Mutex<Vec<IdempotencyKey>>,
    /// Cut this power just after the next request is applied.
    cut_after_next: Mutex<Option<PowerCut>>,
}

type App = Arc<Provider>;

impl Provider {
    /// Apply a request under `key`; then, if asked, cut the power of the
    /// machine that sent it.
    fn apply(&self, key: &IdempotencyKey) -> Applied {
        self.applied.lock().unwrap().push(key.clone());
        if let Some(power) = self.cut_after_next.lock().unwrap().take() {
            power.cut_power();
        }
        Applied { key: key.clone() }
    }

    fn cut_power_after_next_request(&self, power: PowerCut) {
        *self.cut_after_next.lock().unwrap() = Some(power);
    }

    /// How many times a request under `key` was applied.
    fn applied(&self, key: &IdempotencyKey) -> usize {
        self.applied
            .lock()
            .unwrap()
            .iter()
            .filter(|k| *k == key)
            .count()
    }

    /// The key of the last request applied.
    fn last_key(&self) -> IdempotencyKey {
        self.applied
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request was applied")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Order {
    item: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Applied {
    key: IdempotencyKey,
}

fn order(item: &str) -> Order {
    Order { item: item.into() }
}

/// A tool that sends its request to the provider with the call's key
/// (what `#[tool]` generates, written by hand).
macro_rules! provider_tool {
    ($ty:ident, $class:ty, $name:literal) => {
        #[derive(Clone, Copy)]
        struct $ty;
        impl ToolDef for $ty {
            type Class = $class;
            type Args = Order;
            type Output = Applied;
            const SPEC: ToolSpec = ToolSpec::new($name, "sends an order to the provider");
        }
        impl Tool<App> for $ty {
            fn call(
                &self,
                _order: Order,
                ctx: &ToolCtx,
                provider: &App,
            ) -> impl Future<Output = Result<Applied, ToolError>> + Send {
                let key = ctx.key().expect("a write has a key").clone();
                std::future::ready(Ok(provider.apply(&key)))
            }
        }
    };
}

provider_tool!(Deliver, IdempotentWrite, "deliver");
provider_tool!(Charge, NonIdempotentWrite, "charge");

/// The store at `path`, synced in full, its files through `power`'s VFS.
async fn store_on_vfs(path: &Path, clock: &ManualClock, power: PowerCut) -> Arc<SqliteStore> {
    let options = SqliteOptions::default()
        .synchronous(Synchronous::Full)
        .clock(Arc::new(clock.clone()))
        .vfs(power.name());
    Arc::new(SqliteStore::open_with(path, options).await.unwrap())
}

/// The store at `path` after the power came back: the same files, through
/// SQLite's default VFS.
async fn store_after_power_came_back(path: &Path, clock: &ManualClock) -> Arc<SqliteStore> {
    let options = SqliteOptions::default()
        .synchronous(Synchronous::Full)
        .clock(Arc::new(clock.clone()));
    Arc::new(SqliteStore::open_with(path, options).await.unwrap())
}

fn executor(store: &Arc<SqliteStore>, provider: &App) -> Executor<App> {
    Executor::builder_shared(store.clone())
        .state(provider.clone())
        .lease(LEASE)
        // A takeover of a call started by an owner that vanished waits one
        // attempt's timeout before deciding: short, so the test is quick.
        .timeout(Duration::from_millis(200))
        .build()
}

/// The machine is off: close what the store still has open (every write
/// fails) so that nothing of it touches the files once the power is back.
async fn machine_off(exec: Executor<App>, store: Arc<SqliteStore>) {
    store.close().await;
    drop(exec);
    drop(store);
}

fn started(record: &Record) -> bool {
    record.steps.contains_key(ATTEMPT_STEP)
}

/// What a power cut in the middle of a call left.
struct AfterTheCut {
    /// The key of the call the power cut off, after its request reached
    /// the provider.
    key: IdempotencyKey,
    /// The store, reopened once the power came back, past the lease.
    store: Arc<SqliteStore>,
    provider: App,
}

impl AfterTheCut {
    /// The call the power cut off, made again with the same call id.
    async fn call_again<T>(&self, tool: T) -> Result<CallOutput<Applied>, IdemError>
    where
        T: Tool<App, Args = Order, Output = Applied>,
        T::Class: NoApprovalNeeded,
    {
        let exec = executor(&self.store, &self.provider);
        exec.call(tool, order("lamp")).call_id("lamp").await
    }
}

/// On a store synced in full through a fresh power-cut VFS named `vfs`:
/// one first call of `tool` with the power on, which must pay the fsyncs
/// `syncs` says (WAL, database, journal; `why` says why), then a call
/// whose request reaches the provider just before the power goes, so that
/// it cannot record its outcome; the store reopened past the lease.
async fn cut_off_mid_call<T>(
    tool: T,
    vfs: &'static str,
    syncs: (u64, u64, u64),
    why: &str,
) -> (AfterTheCut, TempDir)
where
    T: Tool<App, Args = Order, Output = Applied> + Copy,
    T::Class: NoApprovalNeeded,
{
    let dir = TempDir::new("idem-power-cut").unwrap();
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(1_700_000_000_000);
    let power = PowerCut::install(vfs);
    let provider = App::default();
    let store = store_on_vfs(&path, &clock, power).await;
    let exec = executor(&store, &provider);

    let before = power.syncs();
    exec.call(tool, order("book"))
        .call_id("first")
        .await
        .unwrap();
    let first_call = power.syncs().since(before);
    println!(
        "POWER-CUT first call of {}: {} WAL syncs, {} database syncs, {} journal syncs",
        T::SPEC.name,
        first_call.wal,
        first_call.database,
        first_call.journal
    );
    let paid = (first_call.wal, first_call.database, first_call.journal);
    assert_eq!(paid, syncs, "{why}");

    provider.cut_power_after_next_request(power);
    let cut = exec.call(tool, order("lamp")).call_id("lamp").await;
    assert!(!power.is_on());
    assert!(cut.is_err(), "recorded with the power off: {cut:?}");
    let key = provider.last_key();
    assert_eq!(provider.applied(&key), 1);
    machine_off(exec, store).await;

    clock.advance(LEASE * 2);
    let store = store_after_power_came_back(&path, &clock).await;
    (
        AfterTheCut {
            key,
            store,
            provider,
        },
        dir,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_write_cut_off_mid_call_runs_again_with_the_same_key() {
    let why = "a first idempotent_write pays one WAL fsync, for its outcome";
    let (cut, _dir) = cut_off_mid_call(Deliver, "idem-power-cut-idempotent", (1, 0, 0), why).await;
    let AfterTheCut { key, store, .. } = &cut;

    // Its claim was never synced (the completion's fsync would have
    // covered it): the cut lost it, and the store holds nothing.
    let held_after_cut = store.get(key).await.unwrap();
    assert!(
        held_after_cut.is_none(),
        "the claim of an idempotent write is not synced before its body runs, so a cut loses it: {held_after_cut:?}"
    );

    // Called again with the same call id: it runs again, under the same
    // key, and completes.
    let again = cut.call_again(Deliver).await.unwrap();
    assert!(!again.meta.deduplicated);
    assert_eq!(&again.output.key, key, "run again under another key");
    assert_eq!(
        cut.provider.applied(key),
        2,
        "the provider deduplicates on it"
    );
    let record = store.get(key).await.unwrap().expect("recorded");
    assert_eq!(record.status(), Status::Succeeded);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_write_cut_off_mid_call_is_refused_as_unknown() {
    let why = "a first non_idempotent_write syncs its claim and started mark before it runs, and its outcome";
    let (cut, _dir) =
        cut_off_mid_call(Charge, "idem-power-cut-non-idempotent", (3, 0, 0), why).await;
    let AfterTheCut { key, store, .. } = &cut;

    // The call is in flight, marked started: its effect may have happened.
    let held = store.get(key).await.unwrap().expect("the claim was synced");
    assert_eq!(held.status(), Status::InFlight);
    assert!(started(&held), "the started mark was synced: {held:?}");

    // Called again with the same call id: refused, never run twice.
    let err = cut.call_again(Charge).await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(cut.provider.applied(key), 1, "charged twice");
    store.close().await;
}
