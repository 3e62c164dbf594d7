//! Redis failures and script rejections as [`StoreError`]s.

use redis::Value as RedisValue;

use crate::codec::text;
use crate::RedisStore;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{CorruptRecord, Fence};
use idem_runtime::store::{Cause, FenceHolder, StoreError};

impl RedisStore {
    /// The typed error for a Redis failure; `e` stays its source.
    pub(super) fn unavailable(&self, e: redis::RedisError) -> StoreError {
        let store = self.name.clone();
        let read_only = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        let cause = Cause::from_error(e);
        if read_only {
            StoreError::ReadOnly { store, cause }
        } else if cause.contains("OOM") {
            StoreError::Full { store, cause }
        } else {
            StoreError::Unavailable { store, cause }
        }
    }

    /// Turn a script's rejection (`stale …`, `corrupt …`) into an error.
    pub(super) fn rejection(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        reply: &[RedisValue],
    ) -> StoreError {
        let word = |i: usize| reply.get(i).and_then(text).unwrap_or_default();
        match word(0).as_str() {
            "stale" => {
                let holder = word(2).parse().map(Fence);
                let current = match (word(1).as_str(), holder) {
                    ("in_flight", Ok(f)) => FenceHolder::InFlight(f),
                    ("awaiting_approval", Ok(f)) => FenceHolder::AwaitingApproval(f),
                    ("completed", Ok(f)) => FenceHolder::Completed(f),
                    _ => FenceHolder::Nobody,
                };
                StoreError::StaleFence {
                    key: key.clone(),
                    given: fence,
                    current,
                }
            }
            "corrupt" => StoreError::Corrupt(CorruptRecord {
                key: key.as_str().to_owned(),
                detail: word(1),
            }),
            other => self.protocol(other),
        }
    }

    pub(super) fn protocol(&self, what: &str) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: format!("unexpected reply from an idem script: {what:?}").into(),
        }
    }

    pub(super) fn ok(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        reply: &[RedisValue],
    ) -> Result<(), StoreError> {
        match reply.first().and_then(text).as_deref() {
            Some("ok") => Ok(()),
            _ => Err(self.rejection(key, fence, reply)),
        }
    }
}
