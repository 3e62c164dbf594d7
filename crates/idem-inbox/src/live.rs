//! The inbox, live: one task looks at the inbox's first page and at the
//! audit log every `--refresh` and, when something changed (an item came,
//! went, or changed state, or a decision was recorded), sends every open
//! page's event stream (`GET /events`, server-sent events) an `inbox`
//! event that names what changed: `{"added": [KEY…], "changed": […],
//! "removed": […], "more": false}`. A page refreshes its own rows only when the change
//! concerns it: the first page on any change, a later page when an item
//! it shows changed or went (pages start after a given item, so new calls
//! never reach them).
//!
//! One look serves every open page, however many there are, and costs a
//! page of the store's open records and the audit events since the last
//! look, whatever the size of the store. When the server stops, or the
//! page's session ends (signed out or revoked, on any instance), its
//! stream ends; a page whose stream is then refused (401) says that its
//! person is signed out and links to the sign-in. A restart signs nobody
//! out: sessions are in the store. A decision made on a page reaches the
//! caller waiting for it through the store itself (`StoreExt::wait` for a
//! decision), not through this.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use idem_runtime::audit::AuditQuery;
use idem_runtime::clock::Timestamp;
use tokio::sync::watch;

use crate::change::{Change, Changes};
use crate::listing::{items, InboxFilter};
use crate::state::App;
use idem_runtime::store::StoreExt;

/// How many audit events one look reads at most; more since the last look
/// count as a change of everything (the pages refresh).
const AUDIT_PAGE: usize = 500;

/// Look at the inbox every `every`, and send `changed` what differs from
/// the last look.
pub(crate) async fn watch(app: Arc<App>, changed: watch::Sender<Changes>, every: Duration) {
    let mut last: Option<(BTreeMap<String, String>, Timestamp)> = None;
    // How many were looking at the last look (the app holds a receiver).
    let mut looking = 1;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now_looking = changed.receiver_count();
        // Nobody is looking: do not read the store.
        if now_looking <= 1 && last.is_some() {
            last = None;
            looking = now_looking;
            continue;
        }
        // Somebody started looking since the last look: what they were
        // shown may be older than it, so this look is a first one for
        // them (else a page opened just after a look would wait for the
        // next change to hear anything).
        if now_looking > looking {
            last = None;
        }
        looking = now_looking;
        let Ok(now) = app.operator.store().now().await else {
            continue;
        };
        let Ok(found) = items(&app, &InboxFilter::default()).await else {
            continue;
        };
        let page: BTreeMap<String, String> = found
            .items
            .into_iter()
            .map(|i| (i.key, i.version))
            .collect();
        let change = match &last {
            // The first look since somebody started looking counts as a
            // change: what they were shown may be older than it.
            None => Change {
                added: page.keys().cloned().collect(),
                ..Change::default()
            },
            Some((before, since)) => {
                let mut change = Change::between(before, &page);
                let query = AuditQuery {
                    since: Some(*since),
                    ..AuditQuery::default()
                };
                match app.operator.audit(&query, None, AUDIT_PAGE).await {
                    Ok(events) => {
                        change.more = events.cursor.is_some();
                        change
                            .changed
                            .extend(events.events.iter().map(|e| e.key.as_str().to_owned()));
                    }
                    Err(_) => continue,
                }
                change
            }
        };
        if last.is_none() || !change.is_empty() {
            changed.send_modify(|(n, sent)| {
                *n += 1;
                *sent = Arc::new(change);
            });
        }
        // Events of the millisecond just read are read again next time:
        // one written later in it is not missed.
        last = Some((page, now));
    }
}

/// `GET /events`: an `inbox` event each time the inbox changes. The
/// stream ends when the server stops, and when its session ends (on any
/// instance: it is read again every [`App::recheck`] and before each
/// event), so that the page's reconnection is refused and says so.
pub(crate) async fn events(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match app.page_user(&headers).await {
        Ok(Some(_)) => {}
        _ => return StatusCode::UNAUTHORIZED.into_response(),
    }
    let mut changes = app.changes.clone();
    changes.mark_unchanged();
    let stopping = app.stopping.clone();
    let mut recheck = tokio::time::interval(app.recheck);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    recheck.reset();
    let state = (app, headers, changes, stopping, recheck);
    let stream = stream::unfold(
        state,
        |(app, headers, mut changes, mut stopping, mut recheck)| async move {
            loop {
                if *stopping.borrow_and_update() {
                    return None;
                }
                let changed = tokio::select! {
                    changed = changes.changed() => {
                        changed.ok()?;
                        true
                    }
                    _ = stopping.changed() => return None,
                    _ = recheck.tick() => false,
                };
                if !matches!(app.page_user(&headers).await, Ok(Some(_))) {
                    return None;
                }
                if changed {
                    let change = changes.borrow_and_update().1.clone();
                    let data = serde_json::to_string(&*change).unwrap_or_default();
                    let event = Event::default().event("inbox").data(data);
                    return Some((
                        Ok::<_, Infallible>(event),
                        (app, headers, changes, stopping, recheck),
                    ));
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
