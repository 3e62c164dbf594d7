//! The migrations of data an older idem wrote (Redis has no schema; these
//! play its part): the layout version under `PREFIX:schema` checked and
//! claimed as a store connects, and each older version's data taken one
//! version further.

use redis::Script;

use crate::connection::{walk_slots, Connection, Link};
use crate::schema::{index_key, OLDEST_READABLE, SCHEMA_VERSION};
use crate::RedisStore;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{Cause, StoreError};

impl RedisStore {
    /// Check the data layout version under `PREFIX:schema` as the store
    /// connects: read-only, read it; read-write, write
    /// it if the store is new and migrate older data first. Returns the
    /// version found (`None`: this store wrote the first).
    pub(super) async fn check_layout(
        conn: &mut Connection,
        prefix: &str,
        read_only: bool,
        name: &str,
    ) -> Result<Option<u32>, StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable {
            store: name.to_owned(),
            cause: Cause::from_error(e),
        };
        let schema_key = format!("{}:schema", prefix);
        let (found, schema_found) = match read_only {
            true => {
                let found: Option<String> = conn
                    .query(redis::cmd("GET").arg(&schema_key))
                    .await
                    .map_err(unavailable)?;
                let Some(found) = found else {
                    return Err(StoreError::NotAnIdemStore {
                        store: name.to_owned(),
                        cause: format!("there is no {schema_key} key").into(),
                    });
                };
                let version = found.parse::<u32>().ok();
                if let Some(v) = version.filter(|&v| v < OLDEST_READABLE) {
                    return Err(StoreError::SchemaTooOld {
                        store: name.to_owned(),
                        found: v,
                        oldest_readable: OLDEST_READABLE,
                    });
                }
                (found, version)
            }
            false => {
                let claimed = Self::claim_layout(conn, prefix, &schema_key, name).await?;
                // A store that existed before this build may hold unknown
                // outcomes written with a key TTL.
                keep_unknown_outcomes(conn, prefix, claimed.1.is_none())
                    .await
                    .map_err(unavailable)?;
                claimed
            }
        };
        match found.parse::<u32>() {
            // A store connected read-only reads older layouts it can.
            Ok(v) if v == SCHEMA_VERSION || (read_only && (OLDEST_READABLE..SCHEMA_VERSION).contains(&v)) => {}
            Ok(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::SchemaTooNew {
                    store: name.to_owned(),
                    found: v,
                    supported: SCHEMA_VERSION,
                })
            }
            _ => {
                return Err(StoreError::Unavailable {
                    store: name.to_owned(),
                    cause: format!(
                        "{schema_key} holds {found:?}, not a schema version this idem knows ({SCHEMA_VERSION})"
                    )
                    .into(),
                })
            }
        }
        Ok(schema_found)
    }

    /// Write this build's layout version if the store is new, migrate data
    /// of version 1, and return the version then there (checked by the
    /// caller) with the one found first (`None`: written now).
    async fn claim_layout(
        conn: &mut Connection,
        prefix: &str,
        schema_key: &str,
        name: &str,
    ) -> Result<(String, Option<u32>), StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable {
            store: name.to_owned(),
            cause: Cause::from_error(e),
        };
        // Claim the layout for this version if the store is new, then read
        // what was and what is there: one round trip.
        let (before, mut found): (Option<String>, String) = conn
            .pipeline(
                redis::pipe()
                    .cmd("GET")
                    .arg(schema_key)
                    .cmd("SET")
                    .arg(schema_key)
                    .arg(SCHEMA_VERSION)
                    .arg("NX")
                    .ignore()
                    .cmd("GET")
                    .arg(schema_key),
            )
            .await
            .map_err(unavailable)?;
        // From when the audit index is complete: from the start for a store
        // created now, else from now (before the layout says version 3).
        let since = match before {
            None => 0,
            Some(_) => {
                let (secs, micros): (u64, u64) =
                    conn.query(&redis::cmd("TIME")).await.map_err(unavailable)?;
                secs * 1000 + micros / 1000
            }
        };
        let _: Option<String> = conn
            .query(
                redis::cmd("SET")
                    .arg(crate::audit_index::since_key(prefix))
                    .arg(since)
                    .arg("NX"),
            )
            .await
            .map_err(unavailable)?;
        // Each migration takes the data one version further; another store
        // may be doing the same meanwhile.
        if found == "1" {
            found = match &mut conn.link {
                Link::Node(node) => migrate_from_1(node, prefix, schema_key)
                    .await
                    .map_err(unavailable)?,
                // Version 1 never ran on a cluster (it could not connect
                // to one), so its data is there only if copied in.
                Link::Cluster(_) => {
                    return Err(StoreError::Unavailable {
                        store: name.to_owned(),
                        cause: format!(
                            "{schema_key} says schema version 1, which idem migrates on a single server only; \
                             migrate it there (connect once to a server holding a copy) before moving the data to a cluster"
                        )
                        .into(),
                    })
                }
            };
        }
        if found == "2" {
            // Nothing to rewrite: the audit index is complete from `since`.
            found = bump(conn, schema_key, 2).await.map_err(unavailable)?;
        }
        if found == "3" {
            crate::open_index::index_open_records(conn, prefix)
                .await
                .map_err(unavailable)?;
            found = bump(conn, schema_key, 3).await.map_err(unavailable)?;
        }
        Ok((found, before.and_then(|v| v.parse().ok())))
    }
}

/// `text` as a literal in a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The slot and key of a record's Redis key `PREFIX:{SLOT}:r:KEY`, or
/// `None` for any other key.
fn parse_record_key<'a>(prefix: &str, redis_key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = redis_key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let (slot, key) = rest.split_once("}:r:")?;
    (slot.len() == 3 && key.starts_with(slot) && IdempotencyKey::parse(key).is_ok())
        .then_some((slot, key))
}

/// Set the layout version under `schema_key` from `from` to the next, unless
/// another store did it meanwhile; returns the version then found.
async fn bump(conn: &mut Connection, schema_key: &str, from: u32) -> redis::RedisResult<String> {
    let bump = Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end \
         return redis.call('GET', KEYS[1])",
    );
    let mut bump = bump.prepare_invoke();
    bump.key(schema_key).arg(from).arg(from + 1);
    conn.invoke(&bump).await
}

/// Migrate data of schema version 1 to 2: index every record (version 1
/// kept no indexes), then set the version to 2, unless another store did it
/// meanwhile. Returns the version then found. Several stores connecting at
/// once may all do it; indexing a key twice changes nothing.
async fn migrate_from_1(
    conn: &mut redis::aio::ConnectionManager,
    prefix: &str,
    schema_key: &str,
) -> redis::RedisResult<String> {
    let pattern = format!("{}:{{???}}:r:*", glob_escape(prefix));
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        let mut pipe = redis::pipe();
        for redis_key in &keys {
            if let Some((slot, key)) = parse_record_key(prefix, redis_key) {
                pipe.cmd("ZADD")
                    .arg(index_key(prefix, slot))
                    .arg(0)
                    .arg(key)
                    .ignore();
            }
        }
        if !keys.is_empty() {
            pipe.query_async::<()>(conn).await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Script::new(
        "if redis.call('GET', KEYS[1]) == '1' then redis.call('SET', KEYS[1], ARGV[1]) end \
         return redis.call('GET', KEYS[1])",
    )
    .key(schema_key)
    .arg(2)
    .invoke_async(conn)
    .await
}

/// Once per store: give every unknown outcome stored before idem 0.3 (with
/// its record's retention as the key's TTL, so that Redis would delete it
/// and let the call run again) the form unknown outcomes have now, kept
/// until a person settles them (`keep_unknown.lua`). `PREFIX:unknown_kept`
/// says it was done; a worker that finds another doing it (its lock,
/// `PREFIX:unknown_kept:lock`, held for at most a minute) leaves it to
/// that one; `created` (this connect created the store) only marks it
/// done. Each script looks at one slot's next 1,000 records, so no call
/// waits long behind it.
async fn keep_unknown_outcomes(
    conn: &mut Connection,
    prefix: &str,
    created: bool,
) -> redis::RedisResult<()> {
    const BATCH: usize = 1000;
    let done = format!("{prefix}:unknown_kept");
    let lock = format!("{done}:lock");
    if created {
        // A store this build created holds nothing to fix.
        return conn.query(redis::cmd("SET").arg(&done).arg(1)).await;
    }
    let already: Option<String> = conn.query(redis::cmd("GET").arg(&done)).await?;
    if already.is_some() {
        return Ok(());
    }
    let locked: Option<String> = conn
        .query(
            redis::cmd("SET")
                .arg(&lock)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(60_000),
        )
        .await?;
    if locked.is_none() {
        return Ok(());
    }
    let script = concat!(
        include_str!("scripts/walk.lua"),
        include_str!("scripts/keep_unknown.lua")
    );
    walk_slots(conn, |slot, after| {
        let slot = format!("{slot:03x}");
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script)
            .arg(1)
            .arg(index_key(prefix, &slot))
            .arg(format!("{prefix}:{{{slot}}}:r:"))
            .arg(after)
            .arg(BATCH);
        cmd
    })
    .await?;
    conn.query::<()>(redis::cmd("SET").arg(&done).arg(1))
        .await?;
    conn.query::<()>(redis::cmd("DEL").arg(&lock)).await?;
    Ok(())
}
