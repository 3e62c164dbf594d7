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
use idem_runtime::record::{CorruptRecord, Record};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ScanPage, StoreError};

/// The most records one scan page reads.
const MAX_SCAN_PAGE: usize = 10_000;

impl RedisStore {
    /// [`StoreExt::scan`]: see there.
    ///
    /// A page is read in three steps, each a batch of commands: which
    /// slots hold its keys (a window of slots a round trip), those keys in
    /// order, and their records with the server's time.
    pub(super) async fn scan_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN_PAGE);
        let (first, after) = self.scan_resumes_at(cursor)?;
        let mut conn = self.conn()?;
        let (slots, next) = self.slots_of_page(&mut conn, first, after, limit).await?;
        let keys = self.keys_of_page(&mut conn, &slots, after, limit).await?;
        let cursor = next_scan_cursor(&keys, limit, next);
        let (records, corrupt) = self.records_of_page(&mut conn, &keys).await?;
        Ok(ScanPage {
            records,
            corrupt,
            cursor,
        })
    }

    /// Where a scan from `cursor` starts ([`parse_cursor`]): from the first
    /// slot without one; refused when it is not a cursor of this store's.
    fn scan_resumes_at<'c>(
        &self,
        cursor: Option<&'c str>,
    ) -> Result<(u16, Option<&'c str>), StoreError> {
        match cursor {
            None => Ok((0, None)),
            Some(c) => parse_cursor(c).ok_or_else(|| StoreError::BadCursor {
                store: self.name.clone(),
                cursor: c.to_owned(),
                kind: "scan",
            }),
        }
    }

    /// The slots from `next` on that hold the page's keys, counted a window
    /// at a time until they hold `limit` keys or the slots end; and the slot
    /// after the last one counted, where the next page starts if this one
    /// reads every slot listed whole.
    async fn slots_of_page(
        &self,
        conn: &mut Connection,
        mut next: u16,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<u16>, u16), StoreError> {
        let mut slots = Vec::new();
        let mut counted = 0;
        while next < SLOTS && counted < limit {
            let window = next..(next + COUNT_WINDOW).min(SLOTS);
            let cmds = window.clone().map(|slot| {
                let mut cmd = redis::cmd("ZLEXCOUNT");
                cmd.arg(self.index_of(slot))
                    .arg(index_from(after, slot))
                    .arg("+");
                cmd
            });
            let counts: Vec<usize> = self.batch(conn, cmds.collect()).await?;
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
        Ok((slots, next))
    }

    /// The keys of `slots`, in order, at most `limit`. Every slot but the
    /// last holds fewer than `limit`, so the reply holds fewer than twice
    /// `limit` keys.
    async fn keys_of_page(
        &self,
        conn: &mut Connection,
        slots: &[u16],
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let cmds = slots.iter().map(|&slot| {
            let mut cmd = redis::cmd("ZRANGEBYLEX");
            cmd.arg(self.index_of(slot))
                .arg(index_from(after, slot))
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(limit);
            cmd
        });
        let ranges: Vec<Vec<String>> = self.batch(conn, cmds.collect()).await?;
        Ok(ranges.into_iter().flatten().take(limit).collect())
    }

    /// The live records of `keys`, read in one round trip with the server's
    /// time (which tells the expired ones, left out), and the corrupt ones:
    /// records that do not decode, and malformed keys. A key whose record
    /// lapsed, or was released since it was listed, reads as nothing and is
    /// left out.
    async fn records_of_page(
        &self,
        conn: &mut Connection,
        keys: &[String],
    ) -> Result<(Vec<Record>, Vec<CorruptRecord>), StoreError> {
        let mut corrupt = Vec::new();
        let keys = well_formed(keys, &mut corrupt);
        let mut cmds = vec![redis::cmd("TIME")];
        cmds.extend(keys.iter().map(|key| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(self.record_key(key));
            cmd
        }));
        let replies: Vec<RedisValue> = self.batch(conn, cmds).await?;
        let now = self.server_time(replies.first())?;
        let mut records = Vec::with_capacity(keys.len());
        for (key, reply) in keys.iter().zip(replies.into_iter().skip(1)) {
            let flat = self.hash_fields(reply)?;
            if flat.is_empty() {
                continue;
            }
            match decode(key, &flat) {
                Ok(record) if record.is_expired(now) => {}
                Ok(record) => records.push(record),
                Err(e) => corrupt.push(e),
            }
        }
        Ok((records, corrupt))
    }

    /// The index of `slot`'s keys.
    fn index_of(&self, slot: u16) -> String {
        index_key(&self.prefix, &format!("{slot:03x}"))
    }

    /// The time in a reply to `TIME` (seconds and microseconds).
    pub(super) fn server_time(&self, reply: Option<&RedisValue>) -> Result<Timestamp, StoreError> {
        let Some(RedisValue::Array(time)) = reply else {
            return Err(self.protocol("TIME"));
        };
        match (time.first().and_then(number), time.get(1).and_then(number)) {
            (Some(secs), Some(micros)) => Ok(Timestamp(secs * 1000 + micros / 1000)),
            _ => Err(self.protocol("TIME")),
        }
    }

    /// The fields and values of a reply to `HGETALL`, flat: RESP2 answers
    /// with an array, RESP3 with a map.
    pub(super) fn hash_fields(&self, reply: RedisValue) -> Result<Vec<RedisValue>, StoreError> {
        match reply {
            RedisValue::Array(flat) => Ok(flat),
            RedisValue::Map(pairs) => Ok(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()),
            _ => Err(self.protocol("HGETALL")),
        }
    }

    /// [`StoreExt::audit`]: see there. A query for one key reads its slot; a
    /// query of the whole log reads the streams the audit index names
    /// (`audit_index`), and every slot's only for a part of the log from
    /// before the index.
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
        let until = match query.until {
            Some(Timestamp(0)) => return Ok(AuditPage::default()),
            until => until.map(Timestamp::as_millis),
        };
        let mut conn = self.conn()?;
        let mut found: Vec<(StreamId, u16, AuditEvent)> = Vec::new();
        if let Some(key) = &query.key {
            let slot = u16::from_str_radix(slot(key), 16).expect("keys are hex");
            self.read_slots(
                &mut conn,
                query,
                after,
                &[slot],
                0,
                until,
                limit,
                &mut found,
            )
            .await?;
        } else {
            // Where the page starts: past the cursor, not before `since`.
            let from = after
                .map_or(0, |(id, _)| id.0)
                .max(query.since.map_or(0, Timestamp::as_millis));
            let indexed = self.indexed_since;
            if indexed.is_none_or(|since| from < since) {
                // Before the index: every slot's stream.
                let end = match (indexed, until) {
                    (Some(since), Some(until)) => Some(since.min(until)),
                    (since, until) => since.or(until),
                };
                let all: Vec<u16> = (0..SLOTS).collect();
                self.read_slots(&mut conn, query, after, &all, 0, end, limit, &mut found)
                    .await?;
            }
            if let Some(since) = indexed.filter(|_| found.len() <= limit) {
                let from = from.max(since);
                self.read_indexed(&mut conn, query, after, from, until, limit, &mut found)
                    .await?;
            }
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

    /// Read `slots`' streams, from where the page starts in each (not
    /// before `floor`, milliseconds) to `until` (exclusive), into `found`:
    /// from each, up to `limit + 1` of the query's events, or to its end.
    /// 512 slots a round trip.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn read_slots(
        &self,
        conn: &mut Connection,
        query: &AuditQuery,
        after: Option<(StreamId, u16)>,
        slots: &[u16],
        floor: u64,
        until: Option<u64>,
        limit: usize,
        found: &mut Vec<(StreamId, u16, AuditEvent)>,
    ) -> Result<(), StoreError> {
        let end = until.map_or("+".to_owned(), |u| format!("({u}-0"));
        let mut reading: Vec<(u16, String)> = slots
            .iter()
            .map(|&s| (s, audit_start(query, after, s, floor)))
            .collect();
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
                let replies: Vec<RedisValue> = self.batch(conn, cmds.collect()).await?;
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
        Ok(())
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
        self.sweep_audit_index(&mut conn, cutoff).await
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

/// Where `slot`'s index is read from: just past the key a scan resumes
/// after, when it is in this slot; otherwise from the slot's start.
fn index_from(after: Option<&str>, slot: u16) -> String {
    match after {
        Some(key) if key.starts_with(&format!("{slot:03x}")) => format!("({key}"),
        _ => "-".to_owned(),
    }
}

/// Where the page after this one starts. A full page ends at its last key
/// (its slot may hold more); otherwise every slot listed was read whole,
/// and the next page starts at slot `next`; `None` after the last slot.
fn next_scan_cursor(keys: &[String], limit: usize, next: u16) -> Option<String> {
    match keys.last() {
        Some(last) if keys.len() == limit => Some(last.clone()),
        _ if next < SLOTS => Some(format!("{next:03x}")),
        _ => None,
    }
}

/// The keys among `keys` that parse; each one that does not is reported in
/// `corrupt` (the index of its slot holds a malformed key).
fn well_formed(keys: &[String], corrupt: &mut Vec<CorruptRecord>) -> Vec<IdempotencyKey> {
    let mut parsed = Vec::with_capacity(keys.len());
    for key in keys {
        match IdempotencyKey::parse(key) {
            Ok(key) => parsed.push(key),
            Err(_) => corrupt.push(CorruptRecord {
                key: key.clone(),
                detail: "the index of its slot holds a malformed key".into(),
            }),
        }
    }
    parsed
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
/// at its id, the others just past it; never before `query.since`, nor
/// before `floor` (milliseconds).
fn audit_start(
    query: &AuditQuery,
    after: Option<(StreamId, u16)>,
    slot: u16,
    floor: u64,
) -> String {
    let since = (query.since.map_or(0, |t| t.as_millis()).max(floor), 0);
    match after {
        Some((id, s)) if id >= since => match slot > s {
            true => format!("{}-{}", id.0, id.1),
            false => format!("({}-{}", id.0, id.1),
        },
        _ => format!("{}-{}", since.0, since.1),
    }
}
