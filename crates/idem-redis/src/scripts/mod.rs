//! The Lua scripts (`src/scripts/*.lua`), one a transition, and how they
//! are sent: `EVALSHA`, with `WAIT` for replicas when asked.

use redis::{Script, Value as RedisValue};

use crate::codec::{decode, number};
use crate::RedisStore;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Record;
use idem_runtime::store::StoreError;

macro_rules! script {
    ($file:literal) => {
        concat!(include_str!("common.lua"), include_str!($file))
    };
}

/// A script that appends to the audit log: [`script!`] with
/// `scripts/audit.lua` between the shared part and the script's own.
macro_rules! audited_script {
    ($file:literal) => {
        concat!(
            include_str!("common.lua"),
            include_str!("audit.lua"),
            include_str!($file)
        )
    };
}

/// A script that checks the open sets against the records: [`script!`]
/// with `scripts/open.lua` between the shared part and the script's own.
macro_rules! open_script {
    ($file:literal) => {
        concat!(
            include_str!("common.lua"),
            include_str!("open.lua"),
            include_str!($file)
        )
    };
}

pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) checkpoint: Script,
    pub(super) renew: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) replace: Script,
    pub(super) get: Script,
    pub(super) append_audit: Script,
    /// Builds a slot's open set from its records (the migration from
    /// layout version 3).
    pub(super) index_open: Script,
    /// Drops keys of records that are no longer open from a slot's open
    /// set.
    pub(super) prune_open: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            claim: Script::new(script!("claim.lua")),
            checkpoint: Script::new(script!("checkpoint.lua")),
            renew: Script::new(script!("renew.lua")),
            complete: Script::new(script!("complete.lua")),
            release: Script::new(script!("release.lua")),
            replace: Script::new(audited_script!("replace.lua")),
            get: Script::new(script!("get.lua")),
            append_audit: Script::new(audited_script!("append_audit.lua")),
            index_open: Script::new(concat!(
                include_str!("common.lua"),
                include_str!("open.lua"),
                include_str!("walk.lua"),
                include_str!("index_open.lua")
            )),
            prune_open: Script::new(open_script!("prune_open.lua")),
        }
    }

    pub(super) fn all(&self) -> [&Script; 10] {
        [
            &self.claim,
            &self.checkpoint,
            &self.renew,
            &self.complete,
            &self.release,
            &self.replace,
            &self.get,
            &self.append_audit,
            &self.index_open,
            &self.prune_open,
        ]
    }
}

impl RedisStore {
    pub(super) async fn run(
        &self,
        script: &Script,
        key: &IdempotencyKey,
        extra_keys: &[String],
        args: &[&[u8]],
    ) -> Result<Vec<RedisValue>, StoreError> {
        let writes = !std::ptr::eq(script, &self.scripts.get);
        if writes {
            self.writable()?;
        }
        let mut conn = self.conn()?;
        let replicas = self.replicas.filter(|_| writes);
        let Some((replicas, timeout)) = replicas else {
            let mut invocation = script.key(self.record_key(key));
            for k in extra_keys {
                invocation.key(k);
            }
            for a in args {
                invocation.arg(*a);
            }
            return match conn.invoke(&invocation).await {
                Err(e) if e.is_connection_dropped() && self.resent_safely(script) => {
                    conn.invoke(&invocation).await
                }
                answered => answered,
            }
            .map_err(|e| self.unavailable(e));
        };
        // The script and WAIT in one pipeline: on a cluster it goes whole
        // to the primary of the record's slot, on one connection, so WAIT
        // covers the script's writes.
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1 + extra_keys.len())
            .arg(self.record_key(key))
            .arg(extra_keys)
            .arg(args)
            .cmd("WAIT")
            .arg(replicas)
            .arg(idem_runtime::store::backend::span_millis(timeout));
        let mut sent = conn.pipeline(&pipe).await;
        if matches!(&sent, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            // A node that never saw the script (a replica promoted since
            // it was loaded, say): load it there and send again.
            conn.load(script).await.map_err(|e| self.unavailable(e))?;
            sent = conn.pipeline(&pipe).await;
        }
        let (reply, acknowledged): (Vec<RedisValue>, u32) =
            sent.map_err(|e| self.unavailable(e))?;
        if acknowledged < replicas {
            return Err(StoreError::Unavailable {
                store: self.name.clone(),
                cause: format!(
                    "{acknowledged} of the {replicas} replicas required acknowledged the write within {timeout:?}; \
                     it may be lost in a failover, so it does not count"
                )
                .into(),
            });
        }
        Ok(reply)
    }

    /// Whether `script` is sent again when its connection dropped with it
    /// on the way (it may have run). A request that never reached the
    /// server is sent again whatever it is (`connection::never_sent`);
    /// one that may have run, only when running it twice is running it
    /// once: the read (`get`), and the fenced renewal and checkpoint,
    /// which set the same lease end or step value again (if the fence
    /// moved on in between, the second says so, as the first would have).
    /// A claim run twice finds its own record in flight (its call would
    /// wait out its own lease), a completion, release or replacement run
    /// twice is refused as a stale fence (and a recorded outcome would be
    /// told superseded), an audit append would append twice: those keep
    /// the store's error, and the call is in doubt.
    fn resent_safely(&self, script: &Script) -> bool {
        let scripts = &self.scripts;
        [&scripts.get, &scripts.renew, &scripts.checkpoint]
            .iter()
            .any(|safe| std::ptr::eq(script, *safe))
    }

    pub(super) async fn read(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Option<Record>, Timestamp), StoreError> {
        let reply = self.run(&self.scripts.get, key, &[], &[]).await?;
        let now = reply
            .first()
            .and_then(number)
            .map(Timestamp)
            .ok_or_else(|| self.protocol("get without a time"))?;
        let record = match reply.get(1) {
            Some(RedisValue::Array(flat)) if flat.is_empty() => None,
            Some(RedisValue::Array(flat)) => Some(decode(key, flat)?),
            _ => return Err(self.protocol("get without fields")),
        };
        Ok((record.filter(|r| !r.is_expired(now)), now))
    }
}
