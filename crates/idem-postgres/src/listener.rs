//! LISTEN/NOTIFY: the one connection per store that listens on
//! `idem_done` and wakes the waiters of each notified key.

use std::sync::Arc;
use std::time::Duration;

use crate::connector::RustlsConnector;
use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, Config};

use idem_runtime::store::backend::{reconnect_pause, Waiters};

/// The longest a waiter goes without re-reading its record when no
/// notification arrives.
pub const SAFETY_POLL: Duration = Duration::from_secs(1);

/// Subscribes to the channel completions and releases are notified on
/// (`idem_done`, written into the statements).
const LISTEN: &str = "LISTEN idem_done";

/// Keep one connection LISTENing on `idem_done`, waking the waiters of
/// each notified key. After every (re)connection all waiters re-read, since
/// notifications sent while disconnected are lost.
pub(super) async fn listen(
    config: Config,
    tls: RustlsConnector,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    listening: tokio::sync::oneshot::Sender<()>,
) {
    let mut listening = Some(listening);
    let mut failures = 0;
    loop {
        if let Ok(Ok((client, mut connection))) =
            tokio::time::timeout(connect_timeout, config.connect(tls.clone())).await
        {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let subscribe = client.batch_execute(LISTEN);
            tokio::pin!(subscribe);
            let mut subscribed = false;
            loop {
                tokio::select! {
                    done = &mut subscribe, if !subscribed => {
                        if done.is_err() {
                            break;
                        }
                        subscribed = true;
                        failures = 0;
                        if let Some(tx) = listening.take() {
                            let _ = tx.send(());
                        }
                        waiters.wake_all();
                    }
                    message = messages.next() => match message {
                        Some(Ok(AsyncMessage::Notification(n))) => waiters.wake(n.payload()),
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    },
                }
            }
        }
        waiters.wake_all();
        failures += 1;
        tokio::time::sleep(reconnect_pause(failures)).await;
    }
}
