//! Phase 2 for a call keyed by a repeat window
//! ([`RepeatWindow`](crate::RepeatWindow)): find the effect the call
//! repeats in its tool's window index, or begin a new one.
//!
//! The index is one record per namespace and tool (tool
//! `idem:window:TOOL`, key [`KeySource::WindowIndex`](crate::key::KeySource::WindowIndex)),
//! completed with a small JSON output: the generation last given out, and
//! the effects that still matter — those of the latest arguments (one per
//! deliberate repeat), and those of earlier arguments not yet settled. It
//! is kept in the [`ledger`](crate::ledger): created once and changed by a
//! compare-and-swap, so every worker on the store agrees on it, and it
//! outlives restarts.
//!
//! A call whose effect is in the index claims that effect's key: the
//! claim then answers from its record, waits for it in flight, shares its
//! approval, or refuses it as unknown, as for any key. Only a call that
//! repeats nothing (other arguments came in between, or the effect is
//! settled and older than the window) begins a new effect: it writes the
//! new generation into the index first, then claims it, so two identical
//! calls racing each other meet on one key.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::IdemError;
use crate::key::IdempotencyKey;
use crate::ledger::{self, Entry, Ledger};
use crate::record::{Outcome, Record, RecordState};
use crate::store::WaitFor;

use super::claim::{self, Claimed};
use super::env::{CallEnv, Mode};
use super::errors;
use super::key::{CallKey, WindowKeys};
use crate::store::StoreExt;

/// How long an index is kept after its last change: long enough that an
/// effect of unknown outcome (kept until an operator settles it) is never
/// forgotten by the index that makes its repeats follow it.
const INDEX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// How many times a call reads the index again after another call changed
/// it first; each round either settles or sees another call's change.
const ROUNDS: usize = 16;

/// The index's output: what is stored in the record.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct WindowIndex {
    /// The generation last given out (the new effect's is larger).
    generation: u64,
    /// The effects that matter, oldest first; the last one's arguments are
    /// the latest.
    effects: Vec<Effect>,
}

/// One effect of the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Effect {
    /// Its arguments' fingerprint.
    fingerprint: String,
    /// Its deliberate repeat ([`RepeatWindow::repeat`](crate::RepeatWindow::repeat)).
    repeat: u32,
    /// Its generation.
    generation: u64,
    /// Its key (derived from the above; kept so that the effects of other
    /// arguments can be looked up).
    key: IdempotencyKey,
}

impl WindowIndex {
    /// Whether `fingerprint` is the latest call's arguments.
    fn is_latest(&self, fingerprint: &str) -> bool {
        self.effects
            .last()
            .is_some_and(|e| e.fingerprint == fingerprint)
    }

    /// The effect of these arguments and repeat, if the index holds one.
    fn find(&self, fingerprint: &str, repeat: u32) -> Option<&Effect> {
        self.effects
            .iter()
            .rev()
            .find(|e| e.fingerprint == fingerprint && e.repeat == repeat)
    }
}

/// Whether a record's effect is not settled: in flight, awaiting a
/// decision, or of unknown outcome. Such an effect is always the one an
/// identical call repeats.
fn unsettled(record: &Record) -> bool {
    match &record.state {
        RecordState::InFlight { .. } | RecordState::AwaitingApproval { .. } => true,
        RecordState::Completed { outcome, .. } => matches!(outcome, Outcome::Unknown { .. }),
    }
}

/// The index as read: its contents, and the entry to swap (`None`: there
/// is no index yet).
struct Read {
    index: WindowIndex,
    entry: Option<Entry<WindowIndex>>,
}

/// Own the key of the effect this call begins, or claim the one it
/// repeats (see the module's documentation). `call.key` ends as that
/// effect's key.
pub(super) async fn claim(
    env: &CallEnv<'_>,
    call: &mut CallKey,
) -> Result<Claimed<'static>, IdemError> {
    let window = *call.window.as_deref().expect("a window key");
    let fingerprint = call.args.fingerprint.as_str().to_owned();
    for _ in 0..ROUNDS {
        let read = read_index(env, call).await?;
        let latest = read.index.is_latest(&fingerprint);
        if let Some(effect) = read.index.find(&fingerprint, window.repeat) {
            call.key = effect.key.clone();
            if env.mode == Mode::Replay {
                return claim::claim(env, call).await;
            }
            let repeats = match claim::lookup(env, &call.key).await? {
                // Given out and not claimed yet, or its claim lost: the
                // one effect of these arguments, still to run.
                None => latest,
                Some(record) => unsettled(&record) || (latest && within(env, &record, &window)),
            };
            if repeats {
                return claim::claim(env, call).await;
            }
        } else if env.mode == Mode::Replay {
            // Nothing recorded for these arguments: the replay refuses.
            call.key = call.window_key(read.index.generation.saturating_add(1));
            return claim::claim(env, call).await;
        }
        let index = begin_effect(env, call, &read.index, latest).await?;
        if write_index(env, call, read.entry, &index).await? {
            call.key = index.effects.last().expect("the new effect").key.clone();
            return claim::claim(env, call).await;
        }
    }
    Err(errors::refuse(
        env,
        IdemError::InFlight {
            tool: env.name().to_owned(),
            key: call.key.clone(),
        },
    ))
}

/// Whether a settled effect's `record` is recent enough to answer an
/// identical call: its outcome came less than a window ago.
fn within(env: &CallEnv<'_>, record: &Record, window: &WindowKeys) -> bool {
    let RecordState::Completed { completed_at, .. } = &record.state else {
        return true;
    };
    let now = env.clock().now().as_millis();
    now.saturating_sub(completed_at.as_millis()) < window.millis()
}

/// The index with a new effect for this call: the next generation, the
/// effects of these arguments kept when they are the latest, and those
/// of earlier arguments kept only while unsettled.
async fn begin_effect(
    env: &CallEnv<'_>,
    call: &CallKey,
    index: &WindowIndex,
    latest: bool,
) -> Result<WindowIndex, IdemError> {
    let window = *call.window.as_deref().expect("a window key");
    let fingerprint = call.args.fingerprint.as_str();
    let now = env.clock().now().as_millis();
    // Unique and growing even when the index is new again.
    let generation = index.generation.saturating_add(1).max(now);
    let mut effects = Vec::with_capacity(index.effects.len() + 1);
    for effect in &index.effects {
        let same = effect.fingerprint == fingerprint;
        if same && effect.repeat == window.repeat {
            // This call's effect is replaced by the new one.
            continue;
        }
        if same && latest {
            effects.push(effect.clone());
            continue;
        }
        if let Some(record) = claim::lookup(env, &effect.key).await? {
            if unsettled(&record) {
                effects.push(effect.clone());
            }
        }
    }
    effects.push(Effect {
        fingerprint: fingerprint.to_owned(),
        repeat: window.repeat,
        generation,
        key: call.window_key(generation),
    });
    Ok(WindowIndex {
        generation,
        effects,
    })
}

/// The window index's book: the record of tool `idem:window:TOOL`
/// under the index key of this call's namespace.
fn index_book<'a>(env: &'a CallEnv<'_>, tool: &'a str, namespace: &'a str) -> Ledger<'a> {
    Ledger::new(env.store(), tool)
        .namespace(namespace)
        .worker(env.worker())
        .lease(env.lease())
        .clock(env.clock())
}

/// Read this call's window index; a store's index in flight (another
/// call creating it) is waited for.
async fn read_index(env: &CallEnv<'_>, call: &CallKey) -> Result<Read, IdemError> {
    let key = call.index_key();
    let tool = ledger::names::window_index(env.name());
    let namespace = env.namespace();
    let book = index_book(env, &tool, namespace.as_str());
    for _ in 0..ROUNDS {
        let Some(record) = claim::lookup(env, &key).await? else {
            return Ok(Read {
                index: WindowIndex::default(),
                entry: None,
            });
        };
        if let RecordState::InFlight { .. } = record.state {
            env.store()
                .wait(&key, WaitFor::Completion, env.lease())
                .await
                .map_err(|e| errors::store(env, e))?;
            continue;
        }
        let entry: Entry<WindowIndex> = book.read(record).map_err(|e| errors::store(env, e))?;
        return Ok(Read {
            index: entry.value.clone(),
            entry: Some(entry),
        });
    }
    Err(errors::refuse(
        env,
        IdemError::InFlight {
            tool: env.name().to_owned(),
            key,
        },
    ))
}

/// Store `index` in place of the one read (`None`: create it); `false`
/// when another call changed the index first (read it again).
async fn write_index(
    env: &CallEnv<'_>,
    call: &CallKey,
    read: Option<Entry<WindowIndex>>,
    index: &WindowIndex,
) -> Result<bool, IdemError> {
    let tool = ledger::names::window_index(env.name());
    let namespace = env.namespace();
    let book = index_book(env, &tool, namespace.as_str());
    let written = match read {
        Some(entry) => book.swap(&entry, index, INDEX_TTL).await,
        None => {
            let made_of = serde_json::json!({ "index": "window" });
            book.create(&call.index_key(), &made_of, index, INDEX_TTL)
                .await
        }
    };
    written.map_err(|e| errors::store(env, e))
}
