//! idem's schema in PostgreSQL: its versions, the migrations and indexes
//! that create it, and the checks of a store connected read-only.

use std::sync::LazyLock;

use tokio_postgres::Client;

use crate::error::error;
use crate::statements::OPEN;
use idem_runtime::store::StoreError;

/// The schema version this build creates and understands. Version 2 (idem
/// 0.2) adds records awaiting approval (state 2), the call's details, the
/// worker and the operator audit; a version 1 schema is migrated on
/// connect (its records read unchanged), and a version 1 build refuses a
/// version 2 schema rather than misreading a record it does not know.
///
/// Version 3 (idem 0.3) records the tool's TTL with each call (`ttl_ms`),
/// what decisions about it are kept for; adds the audit log (table
/// `idem_audit`); and keeps completed records with an unknown outcome until
/// a person settles them: the migration gives those already stored the
/// longest retention the store writes.
///
/// Version 4 (idem 0.4) records why a call was made, in the caller's
/// words (`reason`, nullable: records written before read with none).
pub const SCHEMA_VERSION: u32 = 4;

// Every migration step moves the schema one version.
const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

/// The oldest schema version a store connected read-only
/// ([`PostgresStore::connect_read_only`]) reads without migrating it: the
/// statements every connection prepares name version 4's columns
/// (`ttl_ms`, `reason`, the audit table), so an older schema is refused
/// with [`StoreError::SchemaTooOld`] until a writer (or `idem migrate`)
/// migrates it.
///
/// [`PostgresStore::connect_read_only`]: crate::PostgresStore::connect_read_only
pub const OLDEST_READABLE: u32 = 4;

/// Migrations: entry `i` takes the schema from version `i` to `i + 1`, in
/// the transaction that records the new version. Indexes are not built
/// here but by [`build_indexes`], after the commit: see [`INDEXES`].
const MIGRATIONS: &[&str] = &[
    "CREATE SEQUENCE idem_fence;
     CREATE TABLE idem_records (
         key          text PRIMARY KEY,
         tool         text NOT NULL,
         fingerprint  text NOT NULL,
         created_at   bigint NOT NULL,
         fence        bigint NOT NULL,
         prev_fence   bigint,
         state        smallint NOT NULL CHECK (state IN (0, 1)),
         lease_until  bigint,
         outcome      text,
         completed_at bigint,
         expires_at   bigint,
         steps        jsonb NOT NULL DEFAULT '{}'
     );",
    // Adding nullable columns and a constant default rewrites nothing. The
    // new state check is a superset of the old one, which every row already
    // passed, so it is added NOT VALID instead of scanning the table under
    // the migration's exclusive lock. The expiry index now covers approval
    // requests too, which lapse and are swept like completed records:
    // version 1's is dropped here (a catalog change), the new one built
    // after the commit (see `INDEXES`).
    "ALTER TABLE idem_records
         ADD COLUMN requested_at bigint,
         ADD COLUMN message      text,
         ADD COLUMN namespace    text,
         ADD COLUMN call_id      text,
         ADD COLUMN run_id       text,
         ADD COLUMN step         bigint,
         ADD COLUMN args         text,
         ADD COLUMN worker       text,
         ADD COLUMN audit        jsonb NOT NULL DEFAULT '[]',
         DROP CONSTRAINT idem_records_state_check,
         ADD CONSTRAINT idem_records_state_check CHECK (state IN (0, 1, 2)) NOT VALID;
     DROP INDEX IF EXISTS idem_records_expiry;",
    // The tool's TTL, recorded at the first claim (what decisions about
    // the call are kept for); the audit log (its indexes in `INDEXES`);
    // and unknown outcomes kept until a person settles them: those stored
    // with a retention get the longest the store writes (`MAX_SPAN_MILLIS`,
    // 2^52 ms, from now).
    "ALTER TABLE idem_records ADD COLUMN ttl_ms bigint;
     CREATE TABLE idem_audit (
         seq   bigserial PRIMARY KEY,
         at    bigint NOT NULL,
         key   text NOT NULL,
         event text NOT NULL
     );
     UPDATE idem_records
     SET expires_at = 4503599627370496 + floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint
     WHERE state = 1 AND outcome::jsonb ->> 'status' = 'unknown';",
    // Why the call was made: a nullable column, which rewrites nothing;
    // the records already stored have none.
    "ALTER TABLE idem_records ADD COLUMN reason text;",
];

/// The indexes of [`SCHEMA_VERSION`]: name, and what follows `ON` in its
/// definition. Built with `CREATE INDEX CONCURRENTLY` after the migration
/// commits ([`build_indexes`]), since building an index in the migration's
/// transaction would hold every worker's claims for as long as the build
/// of a large table takes.
///
/// `idem_records_open` (idem 0.4, schema version 4 all the same) holds
/// the open records, newest first, for [`StoreExt::scan_open`]: its predicate
/// is `OPEN` (see the statements). A schema built by an earlier 0.4 build
/// lacks it until a store of this build connects and builds it; meanwhile
/// the open scan reads the table.
///
/// [`StoreExt::scan_open`]: idem_runtime::store::StoreExt::scan_open
static INDEXES: LazyLock<[(&str, String); 4]> = LazyLock::new(|| {
    [
        (
            "idem_records_expiry",
            "idem_records (expires_at) WHERE state IN (1, 2)".into(),
        ),
        ("idem_audit_key", "idem_audit (key, seq)".into()),
        ("idem_audit_at", "idem_audit (at)".into()),
        (
            "idem_records_open",
            format!("idem_records (created_at DESC, key DESC) WHERE {OPEN}"),
        ),
    ]
});

/// The advisory lock that serialises migrations of the default schema.
const MIGRATION_LOCK: i64 = 7283640051;

/// The advisory lock, taken without waiting, under which one worker builds
/// the default schema's [`INDEXES`]. Apart from [`MIGRATION_LOCK`], so
/// that a build in progress holds up nobody's migration check.
const INDEX_LOCK: i64 = 7283640052;

/// With a hash of the schema's name, [`INDEX_LOCK`] for a schema named in
/// the URL.
const SCHEMA_INDEX_LOCK: i32 = 728364006;

/// With a hash of its name, the advisory lock (two-key form, apart from
/// [`MIGRATION_LOCK`]) that serialises migrations of a schema named in the
/// URL.
const SCHEMA_MIGRATION_LOCK: i32 = 728364005;

/// Create the schema, or migrate it to [`SCHEMA_VERSION`], in one
/// transaction under an advisory lock so concurrent starts do it once;
/// first the PostgreSQL schema `schema` (already the connection's
/// `search_path`), if one is named and missing. Then, after the commit,
/// build any of [`INDEXES`] missing ([`build_indexes`]). Returns the
/// version found (`None`: created).
pub(super) async fn migrate(
    mut client: Client,
    name: &str,
    schema: Option<&str>,
) -> Result<Option<u32>, StoreError> {
    let fail = |e| error(name, e);
    let tx = client.transaction().await.map_err(fail)?;
    match schema {
        None => {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(fail)?;
        }
        Some(schema) => {
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                &[&SCHEMA_MIGRATION_LOCK, &schema],
            )
            .await
            .map_err(fail)?;
            // Looked up first: CREATE SCHEMA IF NOT EXISTS needs the right
            // to create schemas even when this one exists.
            let exists = tx
                .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
                .await
                .map_err(fail)?
                .is_some();
            if !exists {
                // A checked name: lower-case letters, digits and _.
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                    .await
                    .map_err(fail)?;
            }
        }
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS idem_meta (name text PRIMARY KEY, value bigint NOT NULL);",
    )
    .await
    .map_err(fail)?;
    let found: i64 = tx
        .query_opt(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(fail)?
        .map_or(0, |row| row.get(0));
    if found > i64::from(SCHEMA_VERSION) {
        return Err(StoreError::SchemaTooNew {
            store: name.to_owned(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: SCHEMA_VERSION,
        });
    }
    for migration in &MIGRATIONS[found.max(0) as usize..] {
        tx.batch_execute(migration).await.map_err(fail)?;
    }
    tx.execute(
        "INSERT INTO idem_meta (name, value) VALUES ('schema_version', $1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&i64::from(SCHEMA_VERSION)],
    )
    .await
    .map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    build_indexes(&client, schema).await.map_err(fail)?;
    Ok((found > 0).then_some(found as u32))
}

/// Build each of [`INDEXES`] that is missing, with `CREATE INDEX
/// CONCURRENTLY`, which blocks no claim or sweep meanwhile (it cannot run
/// in a transaction, so each statement is sent alone). One worker builds
/// at a time, the one that gets the index lock without waiting; the others
/// go on (a worker waiting for a lock inside a statement would hold a
/// snapshot the build waits for). An index left invalid by an interrupted
/// build is dropped and built again; a build that dies halfway is redone
/// by the next store that connects.
async fn build_indexes(client: &Client, schema: Option<&str>) -> Result<(), tokio_postgres::Error> {
    let locked: bool = match schema {
        None => {
            client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&INDEX_LOCK])
                .await?
        }
        Some(schema) => {
            client
                .query_one(
                    "SELECT pg_try_advisory_lock($1, hashtext($2))",
                    &[&SCHEMA_INDEX_LOCK, &schema],
                )
                .await?
        }
    }
    .get(0);
    if !locked {
        return Ok(());
    }
    for (index, definition) in INDEXES.iter() {
        let valid: Option<bool> = client
            .query_opt(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
                &[index],
            )
            .await?
            .map(|row| row.get(0));
        match valid {
            Some(true) => continue,
            Some(false) => {
                client
                    .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                    .await?
            }
            None => {}
        }
        client
            .batch_execute(&format!(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {definition}"
            ))
            .await?;
    }
    // The session ends with the connection, and the lock with it; released
    // now all the same.
    client
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .await
}

/// Check, for [`PostgresStore::connect_read_only`], that idem's schema is
/// where the connection's `search_path` points and that this build reads
/// its version, without writing anything; that version.
///
/// [`PostgresStore::connect_read_only`]: crate::PostgresStore::connect_read_only
pub(super) async fn check_read_only(
    client: &Client,
    name: &str,
    schema: Option<&str>,
) -> Result<u32, StoreError> {
    let fail = |e| error(name, e);
    let tables: i64 = client
        .query_one(
            "SELECT (to_regclass('idem_meta') IS NOT NULL)::int
                  + (to_regclass('idem_records') IS NOT NULL)::int",
            &[],
        )
        .await
        .map_err(fail)?
        .get::<_, i32>(0)
        .into();
    let not_idem = |what: String| StoreError::NotAnIdemStore {
        store: name.to_owned(),
        cause: match schema {
            Some(schema) => format!("{what} in schema {schema}"),
            None => format!("{what} in the search path"),
        }
        .into(),
    };
    if tables != 2 {
        return Err(not_idem("no idem_meta and idem_records tables".into()));
    }
    let found: Option<i64> = client
        .query_opt(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(fail)?
        .map(|row| row.get(0));
    let Some(found) = found else {
        return Err(not_idem("idem_meta records no schema version".into()));
    };
    let found = u32::try_from(found).unwrap_or(if found < 0 { 0 } else { u32::MAX });
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            store: name.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < OLDEST_READABLE {
        return Err(StoreError::SchemaTooOld {
            store: name.to_owned(),
            found,
            oldest_readable: OLDEST_READABLE,
        });
    }
    Ok(found)
}
