//! One delivery: the signed post, tried again with exponential backoff
//! while the endpoint is down or busy, for a bounded number of attempts,
//! the lease on the delivery's record renewed before each.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::{self, HeaderName};
use idem_net::client::HttpClient;
use idem_runtime::record::Fence;
use idem_runtime::retry::RetryPolicy;
use idem_runtime::store::{Store, StoreError};

use super::body::{self, SIGNATURE};
use super::endpoint::Endpoint;
use super::event::Event;
use super::log::{Happened, Line, Log};
use super::outbox::{self, Ended};

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an endpoint's answer read.
const ANSWER_LIMIT: usize = 64 * 1024;

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How deliveries are tried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retries {
    /// Attempts before a delivery is given up on (at least 1).
    pub attempts: u32,
    /// The wait after the first failed attempt; each next one doubles, up
    /// to five minutes, each between half and all of it (jitter).
    pub backoff: Duration,
}

/// What one attempt came to.
enum Attempt {
    Delivered(u16),
    /// Worth trying again: no answer, 5xx, 408, 429.
    Again {
        error: String,
    },
    /// The endpoint refused it (another 4xx, a redirect): trying again
    /// would get the same answer.
    Refused(String),
}

/// Everything a delivery needs.
pub(crate) struct Delivery<'a> {
    /// The client.
    pub client: &'a HttpClient,
    /// The store of the outbox.
    pub store: &'a dyn Store,
    /// Where to.
    pub endpoint: &'a Endpoint,
    /// What.
    pub event: &'a Event,
    /// The inbox's origin, for the link.
    pub inbox: &'a str,
    /// Whether Slack messages carry Approve and Deny.
    pub buttons: bool,
    /// How it is tried.
    pub retries: Retries,
    /// The log.
    pub log: &'a Log,
    /// Becomes `true` when the server stops.
    pub stopping: &'a tokio::sync::watch::Receiver<bool>,
}

impl Delivery<'_> {
    /// Deliver under `fence` (`again`: taken over from a dead instance)
    /// and record how it ended; `Err` when the store failed, or another
    /// instance took the delivery over (this one then stops, recording
    /// nothing). `Ok(None)`: the server stopped while the delivery waited
    /// to be tried again; it stays claimed, and the next instance takes it
    /// over once its lease has run out.
    pub(crate) async fn run(&self, fence: Fence, again: bool) -> Result<Option<Ended>, StoreError> {
        let body = Bytes::from(body::body(
            self.event,
            self.endpoint.format,
            self.inbox,
            self.buttons,
        ));
        let mut attempt = 1;
        let ended = loop {
            if attempt > 1 {
                outbox::renew(self.store, &self.endpoint.id, &self.event.id, fence).await?;
            }
            let happened = match self.attempt(&body, attempt).await {
                Attempt::Delivered(status) => {
                    self.line(Happened::Delivered { status, attempt }, again);
                    break Ended::Delivered {
                        status,
                        attempts: attempt,
                    };
                }
                Attempt::Refused(error) => {
                    self.line(
                        Happened::Failed {
                            attempt,
                            error: error.clone(),
                        },
                        again,
                    );
                    break Ended::Failed {
                        error,
                        attempts: attempt,
                    };
                }
                Attempt::Again { error } => error,
            };
            if attempt >= self.retries.attempts.max(1) {
                self.line(
                    Happened::Failed {
                        attempt,
                        error: happened.clone(),
                    },
                    again,
                );
                break Ended::Failed {
                    error: happened,
                    attempts: attempt,
                };
            }
            self.line(
                Happened::Retrying {
                    attempt,
                    error: happened,
                },
                again,
            );
            let mut stopping = self.stopping.clone();
            tokio::select! {
                () = tokio::time::sleep(self.backoff(attempt)) => {}
                _ = stopping.wait_for(|stop| *stop) => return Ok(None),
            }
            attempt += 1;
        };
        if let Ended::Failed { error, attempts } = &ended {
            tracing::warn!(
                endpoint = %self.endpoint.name,
                event = %self.event.id,
                kind = self.event.kind.as_str(),
                key = %self.event.key,
                attempts,
                "gave up on a notification: {error}"
            );
        }
        outbox::finish(self.store, &self.endpoint.id, &self.event.id, fence, &ended).await?;
        Ok(Some(ended))
    }

    /// The wait after failed attempt `attempt`: the runtime's retry
    /// policy's exponential backoff with jitter.
    fn backoff(&self, attempt: u32) -> Duration {
        RetryPolicy::exponential()
            .initial_delay(self.retries.backoff)
            .max_delay(MAX_BACKOFF)
            .delay(attempt, None)
    }

    async fn attempt(&self, body: &Bytes, attempt: u32) -> Attempt {
        let mut headers = vec![
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::USER_AGENT,
                format!("idem/{}", env!("CARGO_PKG_VERSION")),
            ),
            (
                HeaderName::from_static("idem-event-id"),
                self.event.id.clone(),
            ),
            (
                HeaderName::from_static("idem-event"),
                self.event.kind.as_str().to_owned(),
            ),
            (
                HeaderName::from_static("idem-delivery-attempt"),
                attempt.to_string(),
            ),
        ];
        if let Some(secret) = &self.endpoint.secret {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            headers.push((
                HeaderName::from_static(SIGNATURE),
                body::signature(secret, t, body),
            ));
        }
        let posted = tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            self.client
                .post(self.endpoint.url(), &headers, body.clone(), ANSWER_LIMIT),
        )
        .await;
        match posted {
            Err(_) => Attempt::Again {
                error: format!("no answer within {}s", ATTEMPT_TIMEOUT.as_secs()),
            },
            Ok(Err(error)) => Attempt::Again {
                error: crate::view::shown(&error),
            },
            Ok(Ok((status, _))) if status.is_success() => Attempt::Delivered(status.as_u16()),
            Ok(Ok((status, _)))
                if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 =>
            {
                Attempt::Again {
                    error: format!("answered {status}"),
                }
            }
            Ok(Ok((status, _))) => Attempt::Refused(format!("answered {status}")),
        }
    }

    fn line(&self, happened: Happened, again: bool) {
        self.log.push(Line {
            at: idem_runtime::clock::Timestamp(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            ),
            endpoint: self.endpoint.name.clone(),
            event: self.event.id.clone(),
            kind: self.event.kind.as_str(),
            key: self.event.key.clone(),
            tool: self.event.tool.clone(),
            happened,
            again,
        });
    }
}
