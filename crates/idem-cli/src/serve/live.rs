//! The inbox, live: one task looks at what waits for a decision every
//! `--refresh` and, when it changed (an item came, went, or changed
//! state), bumps a counter that every open page's event stream
//! (`GET /events`, server-sent events) turns into an `inbox` event.
//!
//! One look serves every open page, however many there are. When the
//! server stops, or the page's session ends (signed out or revoked, on
//! any instance), its stream ends; a page whose stream is then refused
//! (401) says that its person is signed out and links to the sign-in. A
//! restart signs nobody out: sessions are in the store. A decision
//! made on a page reaches the caller waiting for it through the store
//! itself (`Store::wait` for a decision), not through this.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::sync::watch;

use super::pages::{items, InboxFilter};
use super::App;

/// Look at the inbox every `every`, and bump `changed` when it differs
/// from the last look.
pub(super) async fn watch(app: Arc<App>, changed: watch::Sender<u64>, every: Duration) {
    let mut last: Option<Vec<(String, String)>> = None;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Nobody is looking: do not read the store.
        if changed.receiver_count() <= 1 && last.is_some() {
            last = None;
            continue;
        }
        let Ok((found, _)) = items(&app, &InboxFilter::default()).await else {
            continue;
        };
        let now: Vec<(String, String)> = found.into_iter().map(|i| (i.key, i.version)).collect();
        // The first look since somebody started looking counts as a
        // change: what they were shown may be older than it.
        if last.as_ref() != Some(&now) {
            changed.send_modify(|n| *n += 1);
        }
        last = Some(now);
    }
}

/// `GET /events`: an `inbox` event each time the inbox changes. The
/// stream ends when the server stops, and when its session ends (on any
/// instance: it is read again every [`App::recheck`] and before each
/// event), so that the page's reconnection is refused and says so.
pub(super) async fn events(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
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
                    let n = *changes.borrow_and_update();
                    let event = Event::default().event("inbox").data(n.to_string());
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
