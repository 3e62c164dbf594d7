//! The open sets: which records of a slot are open, newest first, so that
//! [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) reads a page
//! of them without reading the store.
//!
//! * `PREFIX:{SLOT}:open` is a sorted set of the keys of the slot's open
//!   records (in flight, awaiting approval, completed with an unknown
//!   outcome), each scored by its record's creation (milliseconds). It
//!   shares the slot's hash tag, so the scripts that change a record keep it
//!   in the same script (see `scripts/common.lua`): the claim and the
//!   completion cost the round trip they cost before.
//! * `ZRANGE … BYSCORE REV` lists a set newest first, members of one
//!   millisecond in descending order: the order of the scan, by creation,
//!   then key, descending.
//! * A page of N is read in three round trips: the newest open key after
//!   the cursor of every slot (4,096 commands of one reply each, pipelined
//!   in one round trip; a cluster gets them 512 at a time, each on its
//!   node: eight round trips); then, of
//!   the slots whose newest is among the N + 1 newest of those, the keys
//!   down to the (N + 1)-th (at most N + 1 slots, one round trip); and the
//!   records of the page's keys with the server's time (one round trip).
//!   What is merged is exact down to the newest key any slot may still hide
//!   (see [`RedisStore::select_open`]), so a page never skips a key.
//! * A record Redis deletes itself (an approval request, or an unknown
//!   outcome kept for less than forever, that lapsed) leaves its key in the
//!   set. A reader that meets such a key, or a record that settled since
//!   the set was read, leaves it out of the page and has a script drop it
//!   (one more round trip, only then; a store connected read-only leaves it);
//!   the page is then topped up from where it stopped. The sweep walks every
//!   set and drops them all.
//! * Data of layout version 3 gets its open sets when a version 4 store
//!   connects ([`index_open_records`]).

use redis::{Script, Value as RedisValue};

use crate::codec::{decode, number, text};
use crate::connection::{walk_slots, Connection, Link};
use crate::schema::{index_key, open_key, COUNT_WINDOW, SLOTS};
use crate::scripts::Scripts;
use crate::RedisStore;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{CorruptRecord, Record};
use idem_runtime::store::{OpenCursor, ScanPage, StoreError};

/// The most records one page of open records holds.
const MAX_OPEN_PAGE: usize = 10_000;

/// How many times a page short of records (keys dropped as stale) is
/// topped up before it is returned as it is.
const FILL_ROUNDS: usize = 4;

/// How many keys of a slot one script looks at, building or sweeping its
/// open set.
const BATCH: usize = 1000;

/// A key of an open set, in the order of the scan reversed: creation time,
/// then key; and the slot whose set holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    ms: u64,
    key: String,
    slot: u16,
}

impl Entry {
    /// The point just below every key created in millisecond `ms`.
    fn below(ms: u64) -> Entry {
        Entry {
            ms,
            key: String::new(),
            slot: 0,
        }
    }

    /// The cursor after this key: [`OpenCursor`]'s text.
    fn cursor(&self) -> String {
        format!("{}:{}", self.ms, self.key)
    }
}

/// Where each slot's set is read from, for the keys after `after`: every
/// key of a slot before the cursor's in the cursor's millisecond has a
/// smaller key, of a slot after it a greater one. The cursor's own slot is
/// read from below that millisecond, plus its keys in it
/// ([`RedisStore::select_open`]).
fn start(after: Option<&Entry>, slot: u16) -> String {
    match after {
        None => "+inf".to_owned(),
        Some(a) if slot < a.slot => a.ms.to_string(),
        Some(a) => format!("({}", a.ms),
    }
}

/// `ZRANGE set start stop BYSCORE REV LIMIT 0 count WITHSCORES`.
fn newest(set: String, start: &str, stop: &str, count: Option<usize>) -> redis::Cmd {
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(set).arg(start).arg(stop).arg("BYSCORE").arg("REV");
    if let Some(count) = count {
        cmd.arg("LIMIT").arg(0).arg(count);
    }
    cmd.arg("WITHSCORES");
    cmd
}

/// A score as the milliseconds it holds: text in RESP2, a double in RESP3.
fn score(value: &RedisValue) -> Option<u64> {
    let score = match value {
        RedisValue::Double(d) => *d,
        other => text(other)?.parse().ok()?,
    };
    (score >= 0.0 && score.fract() == 0.0).then_some(score as u64)
}

impl RedisStore {
    /// [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) from the
    /// open sets: see the [module docs](self).
    pub(super) async fn open_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, MAX_OPEN_PAGE);
        let mut after = match cursor {
            Some(c) => {
                let c = OpenCursor::parse_for(&self.name, c)?;
                let key = c.key.as_str().to_owned();
                Some(Entry {
                    ms: c.created_at.as_millis(),
                    slot: u16::from_str_radix(&key[..3], 16).expect("keys are hex"),
                    key,
                })
            }
            None => None,
        };
        let mut conn = self.conn()?;
        let (mut records, mut corrupt) = (Vec::new(), Vec::new());
        for round in 1.. {
            let want = limit - records.len();
            let (mut chosen, exhausted) = self
                .select_open(&mut conn, after.as_ref(), want + 1)
                .await?;
            let more = !exhausted || chosen.len() > want;
            chosen.truncate(want);
            if let Some(last) = chosen.last() {
                after = Some(last.clone());
            }
            self.read_open(&mut conn, &chosen, &mut records, &mut corrupt)
                .await?;
            if !more {
                return Ok(ScanPage {
                    records,
                    corrupt,
                    cursor: None,
                });
            }
            if let Some(at) = after.as_ref() {
                if records.len() == limit || round >= FILL_ROUNDS {
                    return Ok(ScanPage {
                        records,
                        corrupt,
                        cursor: Some(at.cursor()),
                    });
                }
            }
        }
        unreachable!("the rounds do not end")
    }

    /// The first `n` keys of the open sets after `after`, newest first, and
    /// whether no key follows them.
    ///
    /// First the newest key of every slot (the cursor's slot: and all its
    /// keys in the cursor's millisecond). Let V be the `n`-th newest of
    /// those: a slot whose newest is older than V holds none of the `n`
    /// first, and hides keys only older than its newest. Every slot whose
    /// newest is V or newer is read again down to V, at most `n` keys. Of
    /// what was read, the keys at or above the newest point below which a
    /// slot may hold keys not read are exact: the first `n` of them are the
    /// answer. Read at one moment, that point is V or a key with `n` newer
    /// ones above it; a key dropped between the two round trips may leave
    /// fewer than `n`, and the caller asks again.
    async fn select_open(
        &self,
        conn: &mut Connection,
        after: Option<&Entry>,
        n: usize,
    ) -> Result<(Vec<Entry>, bool), StoreError> {
        let mut cmds: Vec<redis::Cmd> = (0..SLOTS)
            .map(|slot| newest(self.open_of(slot), &start(after, slot), "-inf", Some(1)))
            .collect();
        if let Some(a) = after {
            let ms = a.ms.to_string();
            cmds.push(newest(self.open_of(a.slot), &ms, &ms, None));
        }
        let mut replies: Vec<RedisValue> = Vec::with_capacity(cmds.len());
        // One pipeline to one server; a cluster gets 512 commands at once
        // (redis-rs's cluster client answers 4,096 requests sent at once
        // more slowly than eight rounds of 512: 200 ms against 100 in a
        // debug build).
        let window = match conn.link {
            Link::Node(_) => cmds.len(),
            Link::Cluster(_) => usize::from(COUNT_WINDOW),
        };
        for window in cmds.chunks(window) {
            replies.extend(self.batch::<RedisValue>(conn, window.to_vec()).await?);
        }
        let mut known: Vec<Entry> = Vec::new();
        let mut tops: Vec<Entry> = Vec::new();
        for (slot, reply) in (0..SLOTS).zip(&replies) {
            tops.extend(self.entries(reply, slot)?.into_iter().next());
        }
        if let (Some(a), Some(reply)) = (after, replies.get(usize::from(SLOTS))) {
            known.extend(
                self.entries(reply, a.slot)?
                    .into_iter()
                    .filter(|e| e.key < a.key),
            );
        }
        let mut heads: Vec<&Entry> = known.iter().chain(&tops).collect();
        heads.sort_unstable_by(|x, y| y.cmp(x));
        let v = heads.get(n - 1).map(|e| (*e).clone());
        // The newest point below which some slot may hold keys not read.
        let mut floor: Option<Entry> = None;
        let mut raise = |point: Entry| {
            if floor.as_ref().is_none_or(|f| point > *f) {
                floor = Some(point);
            }
        };
        let (further, older): (Vec<Entry>, Vec<Entry>) = tops
            .into_iter()
            .partition(|top| v.as_ref().is_none_or(|v| top >= v));
        for top in older {
            raise(top.clone());
            known.push(top);
        }
        if !further.is_empty() {
            let stop = v.as_ref().map_or("-inf".to_owned(), |v| v.ms.to_string());
            let cmds = further
                .iter()
                .map(|top| {
                    newest(
                        self.open_of(top.slot),
                        &start(after, top.slot),
                        &stop,
                        Some(n),
                    )
                })
                .collect();
            let replies: Vec<RedisValue> = self.batch(conn, cmds).await?;
            for (top, reply) in further.iter().zip(&replies) {
                let entries = self.entries(reply, top.slot)?;
                match (entries.len() == n, &v) {
                    (true, _) => raise(entries[n - 1].clone()),
                    (false, Some(v)) => raise(Entry::below(v.ms)),
                    (false, None) => {}
                }
                known.extend(entries);
            }
        }
        known.sort_unstable_by(|x, y| y.cmp(x));
        if let Some(floor) = &floor {
            known.retain(|e| e >= floor);
        }
        let exhausted = floor.is_none() && known.len() <= n;
        known.truncate(n);
        Ok((known, exhausted))
    }

    /// Read the records of `chosen` (one round trip, with the server's
    /// time) into `records`, in order, and the ones that do not decode, or
    /// whose key is malformed, into `corrupt`. Keys whose records are gone,
    /// lapsed, settled or not created when their score says are left out
    /// and dropped from their sets (or set right) by a script.
    async fn read_open(
        &self,
        conn: &mut Connection,
        chosen: &[Entry],
        records: &mut Vec<Record>,
        corrupt: &mut Vec<CorruptRecord>,
    ) -> Result<(), StoreError> {
        if chosen.is_empty() {
            return Ok(());
        }
        let mut stale: Vec<&Entry> = Vec::new();
        let mut keys = Vec::with_capacity(chosen.len());
        for entry in chosen {
            match IdempotencyKey::parse(&entry.key) {
                Ok(key) => keys.push((entry, key)),
                Err(_) => {
                    corrupt.push(CorruptRecord {
                        key: entry.key.clone(),
                        detail: "the open set of its slot holds a malformed key".into(),
                    });
                    stale.push(entry);
                }
            }
        }
        let mut cmds = vec![redis::cmd("TIME")];
        cmds.extend(keys.iter().map(|(_, key)| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(self.record_key(key));
            cmd
        }));
        let replies: Vec<RedisValue> = self.batch(conn, cmds).await?;
        let now = self.server_time(replies.first())?;
        for ((entry, key), reply) in keys.iter().zip(replies.into_iter().skip(1)) {
            let flat = self.hash_fields(reply)?;
            if flat.is_empty() {
                stale.push(entry);
                continue;
            }
            match decode(key, &flat) {
                Ok(record)
                    if record.is_open()
                        && !record.is_expired(now)
                        && record.created_at.as_millis() == entry.ms =>
                {
                    records.push(record)
                }
                Ok(_) => stale.push(entry),
                Err(e) => corrupt.push(e),
            }
        }
        if !stale.is_empty() && !self.read_only {
            self.prune_open(conn, &stale).await?;
        }
        Ok(())
    }

    /// Check the keys `stale` against their records, each slot's in one
    /// script (one round trip): dropped from their sets unless open.
    async fn prune_open(&self, conn: &mut Connection, stale: &[&Entry]) -> Result<(), StoreError> {
        let mut by_slot: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
        for entry in stale {
            by_slot.entry(entry.slot).or_default().push(&entry.key);
        }
        let calls = by_slot
            .into_iter()
            .map(|(slot, members)| {
                let mut args = vec![self.records_of(slot), "keys".to_owned()];
                args.extend(members.into_iter().map(str::to_owned));
                (self.open_of(slot), args)
            })
            .collect();
        eval_batch(conn, &self.scripts.prune_open, calls)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(())
    }

    /// Drop from every slot's open set the keys whose records are gone,
    /// lapsed or settled: a script for each 1,000 keys of a slot, 512 slots
    /// a round trip.
    pub(super) async fn sweep_open(&self) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let mut pending: Vec<(u16, u64)> = (0..SLOTS).map(|slot| (slot, 0)).collect();
        while !pending.is_empty() {
            let mut next = Vec::new();
            for window in pending.chunks(usize::from(COUNT_WINDOW)) {
                let calls = window
                    .iter()
                    .map(|&(slot, from)| {
                        let args = vec![
                            self.records_of(slot),
                            "walk".to_owned(),
                            from.to_string(),
                            BATCH.to_string(),
                        ];
                        (self.open_of(slot), args)
                    })
                    .collect();
                let replies = eval_batch(&mut conn, &self.scripts.prune_open, calls)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                for (&(slot, _), reply) in window.iter().zip(replies) {
                    let goes_on = match &reply {
                        RedisValue::Array(parts) => parts.get(1).and_then(number),
                        _ => None,
                    };
                    if let Some(from) = goes_on {
                        next.push((slot, from));
                    }
                }
            }
            pending = next;
        }
        Ok(())
    }

    /// The open set of `slot`.
    fn open_of(&self, slot: u16) -> String {
        open_key(&self.prefix, slot)
    }

    /// The prefix of the record keys of `slot`.
    fn records_of(&self, slot: u16) -> String {
        records_of(&self.prefix, slot)
    }

    /// The keys and scores of a reply to `ZRANGE … WITHSCORES` from the set
    /// of `slot`: flat in RESP2, pairs in RESP3.
    fn entries(&self, reply: &RedisValue, slot: u16) -> Result<Vec<Entry>, StoreError> {
        let RedisValue::Array(items) = reply else {
            return Err(self.protocol("ZRANGE of an open set"));
        };
        let mut flat: Vec<&RedisValue> = Vec::with_capacity(items.len() * 2);
        for item in items {
            match item {
                RedisValue::Array(pair) => flat.extend(pair),
                other => flat.push(other),
            }
        }
        flat.chunks(2)
            .map(|pair| match pair {
                [key, ms] => match (text(key), score(ms)) {
                    (Some(key), Some(ms)) => Ok(Entry { ms, key, slot }),
                    _ => Err(self.protocol("an open set's entry")),
                },
                _ => Err(self.protocol("an open set's entry")),
            })
            .collect()
    }
}

/// The prefix of the record keys of `slot`: `PREFIX:{SLOT}:r:`.
fn records_of(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{slot:03x}}}:r:")
}

/// Run `script` once per call, each on its key with its arguments
/// (`EVALSHA`, all in one batch; the script is loaded and the batch sent
/// again when a node lacks it). The scripts run here may run twice.
async fn eval_batch(
    conn: &mut Connection,
    script: &Script,
    calls: Vec<(String, Vec<String>)>,
) -> redis::RedisResult<Vec<RedisValue>> {
    let cmds: Vec<redis::Cmd> = calls
        .iter()
        .map(|(key, args)| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash()).arg(1).arg(key).arg(args);
            cmd
        })
        .collect();
    match conn.batch(cmds.clone()).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            conn.load(script).await?;
            conn.batch(cmds).await
        }
        sent => sent,
    }
}

/// Migrate data of layout version 3 (no open sets): put every open record
/// of every slot in its slot's open set, a script for each 1,000 keys of a
/// slot's index, 512 slots a round trip. Several stores may do it at once:
/// each script sets a key as its record is at that moment, as the other
/// scripts do.
pub(super) async fn index_open_records(
    conn: &mut Connection,
    prefix: &str,
) -> redis::RedisResult<()> {
    let script = Scripts::new().index_open;
    conn.load(&script).await?;
    walk_slots(conn, |slot, after| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(2)
            .arg(index_key(prefix, &format!("{slot:03x}")))
            .arg(open_key(prefix, slot))
            .arg(records_of(prefix, slot))
            .arg(after)
            .arg(BATCH);
        cmd
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_read_from_the_cursor_on_in_the_scan_order() {
        let after = Entry {
            ms: 500,
            key: format!("0a0{}", "1".repeat(61)),
            slot: 0x0a0,
        };
        assert_eq!(start(None, 7), "+inf");
        // Keys of an earlier slot are smaller: its keys of millisecond 500
        // come after the cursor; of a later slot, before it.
        assert_eq!(start(Some(&after), 0x09f), "500");
        assert_eq!(start(Some(&after), 0x0a0), "(500");
        assert_eq!(start(Some(&after), 0x0a1), "(500");
        assert!(Entry::below(500) < after && Entry::below(501) > after);
        assert_eq!(after.cursor(), format!("500:{}", after.key));
        assert_eq!(score(&RedisValue::Double(1.7e12)), Some(1_700_000_000_000));
        assert_eq!(
            score(&RedisValue::BulkString(b"1700000000001".to_vec())),
            Some(1_700_000_000_001)
        );
        assert_eq!(score(&RedisValue::Double(-1.0)), None);
    }
}
