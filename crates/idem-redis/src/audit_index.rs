//! Which slots' audit streams hold events of which millisecond: the index
//! a read of the whole audit log goes by, instead of all 4,096 streams.
//!
//! * `PREFIX:{audit}:slots` is a sorted set of `MS:SLOT` members scored by
//!   the millisecond: about one entry per event. It is told of an event
//!   *before* the event is appended (an entry for an append that then
//!   failed costs a reader one empty read, never an event), so it never
//!   misses one. An entry's id is in the millisecond of its event's time or
//!   of the stream's last id, which an earlier event's entry told the
//!   index of (`audit.lua`); when an append reports another millisecond
//!   than its event's (a stream written before this index), it is told
//!   that one too.
//! * `PREFIX:{audit}:indexed_since` is the time (milliseconds) from which
//!   the index is complete: 0 for a store this layout created, the moment
//!   of the migration for an older one. A read of the log before it merges
//!   every slot's stream, as before the index.
//! * A page of N events reads the index's next entries (one round trip),
//!   then the streams of the slots they name, each over the milliseconds
//!   named (one round trip for up to 512 slots).
//! * The sweep drops the entries older than the retention with the events.
//!
//! Both keys share the hash tag `{audit}`: on a cluster they live on one
//! node, and one round trip reads the index.

use std::collections::BTreeSet;

use crate::codec::StreamId;
use crate::connection::Connection;
use crate::schema::COUNT_WINDOW;
use crate::RedisStore;
use idem_runtime::audit::{AuditEvent, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::StoreError;

/// The fewest index entries one round trip reads.
const INDEX_PAGE: usize = 64;

/// The index's key.
pub(super) fn index_key(prefix: &str) -> String {
    format!("{prefix}:{{audit}}:slots")
}

/// The key of the time the index is complete from.
pub(super) fn since_key(prefix: &str) -> String {
    format!("{prefix}:{{audit}}:indexed_since")
}

/// The index entry of `slot` in millisecond `ms`.
fn member(ms: u64, slot: &str) -> String {
    format!("{ms}:{slot}")
}

impl RedisStore {
    /// Tell the index that `key`'s slot holds an event at `at`: before the
    /// event is appended.
    pub(super) async fn index_audit(
        &self,
        at: Timestamp,
        key: &IdempotencyKey,
    ) -> Result<(), StoreError> {
        // A store connected read-only writes nothing, not even this.
        self.writable()?;
        let ms = at.as_millis();
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(index_key(&self.prefix))
            .arg("NX")
            .arg(ms)
            .arg(member(ms, crate::schema::slot(key)));
        let _: u64 = self
            .conn()?
            .query(&cmd)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(())
    }

    /// After an append whose entry id is in millisecond `ms`: tell the
    /// index of that one too, when it is not the event's own.
    pub(super) async fn indexed_append(
        &self,
        event: &AuditEvent,
        ms: Option<u64>,
    ) -> Result<(), StoreError> {
        match ms {
            Some(ms) if ms != event.at.as_millis() => {
                self.index_audit(Timestamp(ms), &event.key).await
            }
            _ => Ok(()),
        }
    }

    /// When the index is complete from, as the store connects; `None`: it
    /// was never written (a store of an older layout, read read-only).
    pub(super) async fn read_indexed_since(
        conn: &mut Connection,
        prefix: &str,
    ) -> redis::RedisResult<Option<u64>> {
        conn.query(redis::cmd("GET").arg(since_key(prefix))).await
    }

    /// Read the events of the whole log from `from` (milliseconds, at or
    /// after the index is complete) until `until` (exclusive) into `found`,
    /// through the index, until more than `limit` are found.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn read_indexed(
        &self,
        conn: &mut Connection,
        query: &AuditQuery,
        after: Option<(StreamId, u16)>,
        mut from: u64,
        until: Option<u64>,
        limit: usize,
        found: &mut Vec<(StreamId, u16, AuditEvent)>,
    ) -> Result<(), StoreError> {
        let page = INDEX_PAGE.max(2 * (limit + 1));
        let last = until.map(|u| u.saturating_sub(1));
        while last.is_none_or(|l| from <= l) {
            let high = last.map_or("+inf".to_owned(), |l| l.to_string());
            let mut millis = self.index_page(conn, from, &high, Some(page)).await?;
            if millis.is_empty() {
                return Ok(());
            }
            // A page that is not full is the index's end.
            let full = millis.iter().map(|(_, s)| s.len()).sum::<usize>() == page;
            // A full page may end inside a millisecond: that one is read
            // next time, whole; alone on its page, it is read whole now.
            if full {
                if millis.len() > 1 {
                    millis.pop();
                } else {
                    let ms = millis[0].0;
                    millis = self.index_page(conn, ms, &ms.to_string(), None).await?;
                }
            }
            let mut i = 0;
            while i < millis.len() {
                // The next milliseconds, until they name as many entries
                // as events are still wanted, or as many slots as one
                // round trip reads.
                let mut wanted = limit + 1 - found.len();
                if after.is_some_and(|(id, _)| id.0 == millis[i].0) {
                    // The page starts inside this millisecond: its events
                    // up to the cursor were on the pages before.
                    wanted += millis[i].1.len();
                }
                let (mut slots, mut entries, mut j) = (BTreeSet::new(), 0, i);
                while j < millis.len()
                    && entries < wanted
                    && (j == i || slots.len() + millis[j].1.len() <= usize::from(COUNT_WINDOW))
                {
                    slots.extend(millis[j].1.iter().copied());
                    entries += millis[j].1.len();
                    j += 1;
                }
                let low = from.max(millis[i].0);
                let end = millis[j - 1].0 + 1;
                let slots: Vec<u16> = slots.into_iter().collect();
                self.read_slots(conn, query, after, &slots, low, Some(end), limit, found)
                    .await?;
                if found.len() > limit {
                    return Ok(());
                }
                from = end;
                i = j;
            }
            if !full {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The index's entries from millisecond `low` to `high` (inclusive),
    /// at most `count`, grouped by millisecond: one round trip.
    async fn index_page(
        &self,
        conn: &mut Connection,
        low: u64,
        high: &str,
        count: Option<usize>,
    ) -> Result<Vec<(u64, Vec<u16>)>, StoreError> {
        let mut cmd = redis::cmd("ZRANGEBYSCORE");
        cmd.arg(index_key(&self.prefix)).arg(low).arg(high);
        if let Some(count) = count {
            cmd.arg("LIMIT").arg(0).arg(count);
        }
        let entries: Vec<String> = conn.query(&cmd).await.map_err(|e| self.unavailable(e))?;
        group(&entries).map_err(|bad| self.protocol(&format!("audit index entry {bad}")))
    }

    /// Drop the index's entries before `cutoff`.
    pub(super) async fn sweep_audit_index(
        &self,
        conn: &mut Connection,
        cutoff: Timestamp,
    ) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("ZREMRANGEBYSCORE");
        cmd.arg(index_key(&self.prefix))
            .arg("-inf")
            .arg(format!("({}", cutoff.as_millis()));
        let _: u64 = conn.query(&cmd).await.map_err(|e| self.unavailable(e))?;
        Ok(())
    }
}

/// Index entries (`MS:SLOT`, in time order) grouped by millisecond; `Err`
/// names an entry that is not one.
fn group(entries: &[String]) -> Result<Vec<(u64, Vec<u16>)>, String> {
    let mut minutes: Vec<(u64, Vec<u16>)> = Vec::new();
    for entry in entries {
        let parsed = entry.split_once(':').and_then(|(minute, slot)| {
            let slot = u16::from_str_radix(slot, 16).ok()?;
            Some((minute.parse::<u64>().ok()?, slot))
        });
        let Some((minute, slot)) = parsed else {
            return Err(entry.clone());
        };
        match minutes.last_mut() {
            Some((m, slots)) if *m == minute => slots.push(slot),
            _ => minutes.push((minute, vec![slot])),
        }
    }
    Ok(minutes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_group_by_millisecond_in_order_and_a_stranger_is_named() {
        let entries: Vec<String> = ["5:00a", "5:fff", "7:001"].map(String::from).into();
        assert_eq!(
            group(&entries).unwrap(),
            vec![(5, vec![0x00a, 0xfff]), (7, vec![0x001])]
        );
        assert_eq!(group(&["5-00a".to_owned()]).unwrap_err(), "5-00a");
        assert_eq!(member(125_000, "0ab"), "125000:0ab");
    }
}
