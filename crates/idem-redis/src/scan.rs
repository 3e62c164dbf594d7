//! Paging across the 4,096 slots, on one server or many nodes: scans
//! through the slots' indexes, audit reads merging the slots' streams, and
//! the sweep trimming those streams.

use std::collections::BTreeMap;

use redis::Value as RedisValue;

use crate::codec::{decode, number, parse_stream_id, StreamId};
use crate::connection::Connection;
use crate::schema::{audit_key, index_key, slot, COUNT_WINDOW, SLOTS};
use crate::RedisStore;
use idem_runtime::audit::{self, AuditEvent, AuditPage, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::CorruptRecord;
use idem_runtime::store::{ScanPage, Store, StoreError};

/// The most records one scan page reads.
const MAX_SCAN_PAGE: usize = 10_000;

impl RedisStore {
    /// [`Store::scan`]: see there.
    pub(super) async fn scan_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN_PAGE);
        let (mut next, after) = match cursor {
            None => (0, None),
            Some(c) => parse_cursor(c).ok_or_else(|| StoreError::BadCursor {
                store: self.name.clone(),
                cursor: c.to_owned(),
                kind: "scan",
            })?,
        };
        let from = |slot: u16| match after {
            Some(key) if key.starts_with(&format!("{slot:03x}")) => format!("({key}"),
            _ => "-".to_owned(),
        };
        let index = |slot: u16| index_key(&self.prefix, &format!("{slot:03x}"));
        let mut conn = self.conn()?;

        // The slots that hold the page's keys, counted a window at a time.
        let mut slots = Vec::new();
        let mut counted = 0;
        while next < SLOTS && counted < limit {
            let window = next..(next + COUNT_WINDOW).min(SLOTS);
            let cmds = window.clone().map(|slot| {
                let mut cmd = redis::cmd("ZLEXCOUNT");
                cmd.arg(index(slot)).arg(from(slot)).arg("+");
                cmd
            });
            let counts: Vec<usize> = self.batch(&mut conn, cmds.collect()).await?;
            for (slot, count) in window.zip(counts) {
                next = slot + 1;
                if count > 0 {
                    slots.push(slot);
                    counted += count;
                    if counted >= limit {
                        break;
                    }
                }
            }
        }

        // Their keys, in order. Every slot but the last holds fewer than
        // `limit`, so the reply holds fewer than twice `limit` keys.
        let mut keys: Vec<String> = Vec::new();
        if !slots.is_empty() {
            let cmds = slots.iter().map(|&slot| {
                let mut cmd = redis::cmd("ZRANGEBYLEX");
                cmd.arg(index(slot))
                    .arg(from(slot))
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit);
                cmd
            });
            let ranges: Vec<Vec<String>> = self.batch(&mut conn, cmds.collect()).await?;
            keys = ranges.into_iter().flatten().take(limit).collect();
        }
        // A full page ends at its last key (its slot may hold more);
        // otherwise every slot listed was read whole.
        let cursor = match keys.last() {
            Some(last) if keys.len() == limit => Some(last.clone()),
            _ if next < SLOTS => Some(format!("{next:03x}")),
            _ => None,
        };

        // Their records; a key whose record lapsed, or was released since
        // it was listed, reads as nothing and is left out.
        let mut keys_read = Vec::with_capacity(keys.len());
        let mut corrupt = Vec::new();
        let mut cmds = vec![redis::cmd("TIME")];
        for key in &keys {
            let Ok(key) = IdempotencyKey::parse(key) else {
                corrupt.push(CorruptRecord {
                    key: key.clone(),
                    detail: "the index of its slot holds a malformed key".into(),
                });
                continue;
            };
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(self.record_key(&key));
            cmds.push(cmd);
            keys_read.push(key);
        }
        let replies: Vec<RedisValue> = self.batch(&mut conn, cmds).await?;
        let now = match replies.first() {
            Some(RedisValue::Array(time)) => {
                match (time.first().and_then(number), time.get(1).and_then(number)) {
                    (Some(secs), Some(micros)) => Timestamp(secs * 1000 + micros / 1000),
                    _ => return Err(self.protocol("TIME")),
                }
            }
            _ => return Err(self.protocol("TIME")),
        };
        let mut records = Vec::with_capacity(keys_read.len());
        for (key, reply) in keys_read.iter().zip(replies.into_iter().skip(1)) {
            let flat = match reply {
                RedisValue::Array(flat) => flat,
                // RESP3 answers HGETALL with a map.
                RedisValue::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => return Err(self.protocol("HGETALL")),
            };
            if flat.is_empty() {
                continue;
            }
            match decode(key, &flat) {
                Ok(record) if record.is_expired(now) => {}
                Ok(record) => records.push(record),
                Err(e) => corrupt.push(e),
            }
        }
        Ok(ScanPage {
            records,
            corrupt,
            cursor,
        })
    }

    /// [`Store::audit`]: see there.
    pub(super) async fn audit_page(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
        let after = match cursor {
            None => None,
            Some(c) => Some(parse_audit_cursor(c).ok_or_else(|| StoreError::BadCursor {
                store: self.name.clone(),
                cursor: c.to_owned(),
                kind: "audit",
            })?),
        };
        let mut conn = self.conn()?;
        let slots: Vec<u16> = match &query.key {
            Some(key) => vec![u16::from_str_radix(slot(key), 16).expect("keys are hex")],
            None => (0..SLOTS).collect(),
        };
        // Read each slot from where the page starts in it, until it has
        // `limit + 1` of the query's events or ends; the page is the first
        // of their merge.
        let mut found: Vec<(StreamId, u16, AuditEvent)> = Vec::new();
        let mut reading: Vec<(u16, String)> = slots
            .iter()
            .map(|&s| (s, audit_start(query, after, s)))
            .collect();
        let end = match query.until {
            Some(Timestamp(0)) => return Ok(AuditPage::default()),
            Some(until) => format!("({}-0", until.as_millis()),
            None => "+".to_owned(),
        };
        let mut wanted: BTreeMap<u16, usize> = slots.iter().map(|&s| (s, limit + 1)).collect();
        while !reading.is_empty() {
            let mut next = Vec::new();
            for window in reading.chunks(usize::from(COUNT_WINDOW)) {
                let cmds = window.iter().map(|(s, start)| {
                    let mut cmd = redis::cmd("XRANGE");
                    cmd.arg(audit_key(&self.prefix, *s))
                        .arg(start)
                        .arg(&end)
                        .arg("COUNT")
                        .arg(limit + 1);
                    cmd
                });
                let replies: Vec<RedisValue> = self.batch(&mut conn, cmds.collect()).await?;
                for ((s, _), reply) in window.iter().zip(replies) {
                    let entries = self.stream_entries(reply)?;
                    let full = entries.len() > limit;
                    let mut last = None;
                    for entry in entries {
                        last = Some(entry.id);
                        if query.key.as_ref().is_some_and(|k| k.as_str() != entry.key) {
                            continue;
                        }
                        let (id, event) = (entry.id, entry.decode()?);
                        if query.matches(&event) {
                            found.push((id, *s, event));
                            let left = wanted.get_mut(s).expect("every slot read is wanted");
                            *left -= 1;
                            if *left == 0 {
                                break;
                            }
                        }
                    }
                    if let (true, Some(last)) = (full && wanted[s] > 0, last) {
                        next.push((*s, format!("({}-{}", last.0, last.1)));
                    }
                }
            }
            reading = next;
        }
        found.sort_by_key(|(id, s, _)| (*id, *s));
        let more = found.len() > limit;
        found.truncate(limit);
        let cursor = more
            .then(|| found.last())
            .flatten()
            .map(|(id, s, _)| format!("{}-{}@{s:03x}", id.0, id.1));
        Ok(AuditPage {
            events: found.into_iter().map(|(_, _, event)| event).collect(),
            cursor,
        })
    }

    /// Trim every slot's audit stream to the events younger than the
    /// retention, 512 slots a round trip.
    pub(super) async fn sweep_audit(&self) -> Result<(), StoreError> {
        let now = self.now().await?;
        let Some(cutoff) = audit::retention_cutoff(now, self.audit_retention) else {
            return Ok(());
        };
        let mut conn = self.conn()?;
        let mut slot = 0;
        while slot < SLOTS {
            let window = slot..(slot + COUNT_WINDOW).min(SLOTS);
            slot = window.end;
            let cmds = window.map(|s| {
                let mut cmd = redis::cmd("XTRIM");
                cmd.arg(audit_key(&self.prefix, s))
                    .arg("MINID")
                    .arg(cutoff.as_millis());
                cmd
            });
            let _: Vec<u64> = self.batch(&mut conn, cmds.collect()).await?;
        }
        Ok(())
    }

    /// Run `cmds` (see [`Connection::batch`]), each reply read as a `T`.
    pub(super) async fn batch<T: redis::FromRedisValue>(
        &self,
        conn: &mut Connection,
        cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<T>, StoreError> {
        let replies = conn.batch(cmds).await.map_err(|e| self.unavailable(e))?;
        replies
            .into_iter()
            .map(redis::from_redis_value)
            .collect::<Result<_, _>>()
            .map_err(|e| self.unavailable(e.into()))
    }
}

/// Where a scan resumes: the slot to read first, and the last key returned
/// in it (`None`: from the slot's start). A cursor is that key, or the name
/// of the slot (three hex digits) when the previous page ended with a whole
/// slot.
fn parse_cursor(cursor: &str) -> Option<(u16, Option<&str>)> {
    let slot = cursor.get(..3)?;
    if !slot.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let slot = u16::from_str_radix(slot, 16).ok()?;
    match cursor.len() {
        3 => Some((slot, None)),
        _ => IdempotencyKey::parse(cursor)
            .ok()
            .map(|_| (slot, Some(cursor))),
    }
}

/// Where an audit page resumes: after the entry with this id in this slot
/// (`ID@SLOT`).
fn parse_audit_cursor(cursor: &str) -> Option<(StreamId, u16)> {
    let (id, slot) = cursor.split_once('@')?;
    let slot = u16::from_str_radix(slot, 16).ok().filter(|s| *s < SLOTS)?;
    Some((parse_stream_id(id)?, slot))
}

/// The `XRANGE` start of `slot` for a page of `query` after `after`:
/// entries merge in (id, slot) order, so a slot after the cursor's starts
/// at its id, the others just past it; never before `query.since`.
fn audit_start(query: &AuditQuery, after: Option<(StreamId, u16)>, slot: u16) -> String {
    let since = query.since.map_or((0, 0), |t| (t.as_millis(), 0));
    match after {
        Some((id, s)) if id >= since => match slot > s {
            true => format!("{}-{}", id.0, id.1),
            false => format!("({}-{}", id.0, id.1),
        },
        _ => format!("{}-{}", since.0, since.1),
    }
}
