//! Webhooks: approvers told where they already are (a Slack channel, a
//! pager, a bot) when a call begins to wait for approval, waits too long
//! (`--overdue`, or a rule's `escalate_after`), or is decided.
//!
//! The parts: `endpoint` (where to, in which format, signed with which
//! secret, for which namespaces and events), `event` (what happened, read
//! from the records awaiting approval and from the audit log), `body`
//! (idem's JSON or Slack's blocks, and the HMAC signature), `outbox` (the
//! store's records that make each delivery happen once), `deliver` (one
//! delivery, retried with backoff), `log` (the page's delivery log).
//!
//! One task looks at the store every `--refresh` and hands what it found
//! to one task per endpoint, which delivers what it has not delivered yet,
//! one event after another, oldest first. *Delivered once per event per
//! endpoint*: each delivery is claimed in the store under a key made of
//! the endpoint and the event's id before it is sent, and completed once
//! the endpoint answered; a restarted instance, or a second one on the
//! same store, finds it completed and sends nothing. The one case a
//! receiver sees an event twice is an instance that died after sending
//! and before recording the answer: its lease runs out, another instance
//! takes the delivery over and sends it again with the same
//! `Idem-Event-Id`, which receivers dedup on.

pub(crate) mod body;
mod deliver;
pub(crate) mod endpoint;
pub(crate) mod event;
pub(crate) mod log;
mod outbox;
pub(crate) mod progress;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_net::client::{client_config, HttpClient};
use idem_runtime::clock::Timestamp;
use idem_runtime::operator::Operator;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub(crate) use deliver::Retries;
use endpoint::Endpoint;
use event::{Event, Kind};
use idem_runtime::store::StoreExt;
use log::Log;
use outbox::Claimed;

/// How late a decision may reach the audit log with an earlier time than
/// one already read (another instance's clock, a slow transaction) and
/// still be told: a cursor stays this far behind the time of its read.
const OVERLAP: Duration = Duration::from_secs(10);

/// How often an endpoint's cursor is written to the store when nothing
/// else moved it; a restart rereads at most this much of the log.
const CURSOR_EVERY: Duration = Duration::from_secs(60);

/// How `idem serve` notifies.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The inbox's origin, for links to a record's page.
    pub inbox: String,
    /// How often to look at the store.
    pub every: Duration,
    /// When a call awaiting approval is overdue.
    pub overdue: Duration,
    /// How deliveries are tried.
    pub retries: Retries,
    /// Whether Slack messages carry Approve and Deny (Slack's
    /// interactivity is set up).
    pub buttons: bool,
}

/// What the store held at one look.
#[derive(Debug)]
struct Look {
    /// Every event found, oldest first.
    events: Vec<Event>,
    /// The store's time of the look.
    now: Timestamp,
}

/// The running notifier: its tasks, and how to stop them.
pub(crate) struct Notifier {
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
}

impl Notifier {
    /// Start notifying `settings.endpoints` of what happens in
    /// `operator`'s store, logging to `log`. `None` without endpoints.
    pub(crate) fn start(
        operator: Operator,
        settings: Settings,
        log: Arc<Log>,
    ) -> Result<Option<Notifier>, String> {
        if settings.endpoints.is_empty() {
            return Ok(None);
        }
        let client = HttpClient::new(client_config()?);
        let (stop, stopping) = watch::channel(false);
        let (found, looks) = watch::channel(Arc::new(Look {
            events: Vec::new(),
            now: Timestamp(0),
        }));
        let mut tasks = JoinSet::new();
        let mut cursors = Vec::new();
        let settings = Arc::new(settings);
        for endpoint in 0..settings.endpoints.len() {
            let cursor = Arc::new(AtomicU64::new(u64::MAX));
            cursors.push(cursor.clone());
            let worker = Worker {
                operator: operator.clone(),
                client: client.clone(),
                settings: settings.clone(),
                endpoint,
                log: log.clone(),
                cursor,
                done: HashMap::new(),
            };
            tasks.spawn(worker.run(looks.clone(), stopping.clone()));
        }
        tasks.spawn(look(operator, settings, cursors, found, stopping));
        Ok(Some(Notifier { tasks, stop }))
    }

    /// Stop: deliveries under way finish their attempt (for up to
    /// `within`), none begins.
    pub(crate) async fn stop(mut self, within: Duration) {
        let _ = self.stop.send(true);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(within, all).await.is_err() {
            self.tasks.abort_all();
        }
    }
}

/// Look at the store every `settings.every`: what awaits approval, and
/// the decisions since the endpoints' oldest cursor.
async fn look(
    operator: Operator,
    settings: Arc<Settings>,
    cursors: Vec<Arc<AtomicU64>>,
    found: watch::Sender<Arc<Look>>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(settings.every.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.changed() => return,
        }
        let oldest = cursors
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        if oldest == u64::MAX {
            // No endpoint has read its cursor yet.
            continue;
        }
        let read = async {
            let now = operator.store().now().await.map_err(|e| e.to_string())?;
            let mut events = event::read_decided(&operator, Timestamp(oldest)).await?;
            events.extend(event::read_waiting(&operator, settings.overdue).await?);
            events.sort_by_key(|e| e.at);
            Ok::<_, String>(Look { events, now })
        };
        match read.await {
            Ok(look) => {
                let _ = found.send(Arc::new(look));
            }
            Err(e) => tracing::warn!("notifications: cannot read the store: {e}"),
        }
    }
}

/// One endpoint's deliveries.
struct Worker {
    operator: Operator,
    client: HttpClient,
    settings: Arc<Settings>,
    endpoint: usize,
    log: Arc<Log>,
    /// Where the endpoint's cursor stands (ms), for the look; `u64::MAX`
    /// until it is read.
    cursor: Arc<AtomicU64>,
    /// Events this instance knows are delivered, with their time.
    done: HashMap<String, Timestamp>,
}

impl Worker {
    fn endpoint(&self) -> &Endpoint {
        &self.settings.endpoints[self.endpoint]
    }

    async fn run(
        mut self,
        mut looks: watch::Receiver<Arc<Look>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let store = self.operator.store().clone();
        let mut cursor = loop {
            let read = async {
                let now = store.now().await?;
                outbox::cursor(store.as_ref(), &self.endpoint().id, now).await
            };
            match read.await {
                Ok(cursor) => break cursor,
                Err(e) => {
                    tracing::warn!(endpoint = %self.endpoint().name, "notifications: cannot read the cursor: {e}");
                    tokio::select! {
                        () = tokio::time::sleep(self.settings.every.max(Duration::from_millis(50))) => {}
                        _ = stopping.changed() => return,
                    }
                }
            }
        };
        self.cursor.store(cursor.at.as_millis(), Ordering::Release);
        let mut written = cursor.at;
        loop {
            tokio::select! {
                changed = looks.changed() => if changed.is_err() { return },
                _ = stopping.changed() => return,
            }
            let look = looks.borrow_and_update().clone();
            let Some(through) = self.round(&look, cursor.at, &stopping).await else {
                return;
            };
            self.cursor.store(
                through.as_millis().max(cursor.at.as_millis()),
                Ordering::Release,
            );
            // The store's copy moves now and then: a restart rereads at
            // most that much of the log (each decision in it found
            // delivered by its claim), and never misses one.
            if through > cursor.at && written.until(look.now) >= CURSOR_EVERY {
                match outbox::advance(store.as_ref(), cursor.clone(), through).await {
                    Ok(moved) => {
                        cursor = moved;
                        written = look.now;
                    }
                    Err(e) => {
                        tracing::warn!(endpoint = %self.endpoint().name, "notifications: cannot move the cursor: {e}")
                    }
                }
            } else if through > cursor.at {
                cursor.at = through;
            }
            self.forget(&look, cursor.at);
        }
    }

    /// Deliver what `look` found that this endpoint wants and was not
    /// delivered: the time before which every decision is now told (the
    /// cursor's next place); `None` when the server is stopping.
    async fn round(
        &mut self,
        look: &Look,
        cursor: Timestamp,
        stopping: &watch::Receiver<bool>,
    ) -> Option<Timestamp> {
        let store = self.operator.store().clone();
        let mut through = Timestamp(
            look.now
                .as_millis()
                .saturating_sub(OVERLAP.as_millis() as u64),
        );
        let endpoint = self.endpoint().clone();
        for event in &look.events {
            if *stopping.borrow() {
                return None;
            }
            // An escalation goes where its rule names, too.
            let named = event.kind == Kind::Escalated && event.escalate_to.contains(&endpoint.name);
            if !(named || endpoint.wants(event.kind, event.namespace.as_deref()))
                || self.done.contains_key(&event.id)
                || (event.kind == Kind::Decided && event.at < cursor)
            {
                continue;
            }
            let blocked = match outbox::claim(store.as_ref(), &endpoint.id, &event.id).await {
                Ok(Claimed::Done) => {
                    self.log.already();
                    false
                }
                Ok(Claimed::Deliver { fence, again }) => {
                    let delivery = deliver::Delivery {
                        client: &self.client,
                        store: store.as_ref(),
                        endpoint: &endpoint,
                        event,
                        inbox: &self.settings.inbox,
                        buttons: self.settings.buttons,
                        retries: self.settings.retries,
                        log: &self.log,
                        stopping,
                    };
                    match delivery.run(fence, again).await {
                        Ok(Some(_)) => false,
                        Ok(None) => return None,
                        Err(e) => {
                            tracing::warn!(endpoint = %endpoint.name, event = %event.id, "notifications: the outbox failed: {e}");
                            true
                        }
                    }
                }
                // Another instance delivers it; if it dies, its lease runs
                // out and this one takes it over at a later look.
                Ok(Claimed::Elsewhere) => true,
                Err(e) => {
                    tracing::warn!(endpoint = %endpoint.name, event = %event.id, "notifications: cannot claim a delivery: {e}");
                    true
                }
            };
            if blocked {
                if event.kind == Kind::Decided {
                    through = through.min(event.at);
                }
            } else {
                self.done.insert(event.id.clone(), event.at);
            }
        }
        Some(through)
    }

    /// Forget delivered events that no look will show again: decisions
    /// before the cursor, and waits that ended.
    fn forget(&mut self, look: &Look, cursor: Timestamp) {
        let shown: HashSet<&str> = look.events.iter().map(|e| e.id.as_str()).collect();
        self.done
            .retain(|id, at| shown.contains(id.as_str()) || *at >= cursor);
    }
}
