//! Pieces shared by the PostgreSQL store's test files
//! (`mod postgres_support;`, beside `mod support;`): the server of the test
//! binary, a fresh database of a test's own, and a plain client.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_conformance::random_key;
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_testkit::servers::ServerClockHarness;

/// The URL of the server of this test binary (the kit's, started on first
/// use), or `None` after a loud skip.
pub(crate) async fn server_url(test: &str) -> Option<String> {
    Some(idem_testkit::stores::postgres(test).await?.url().to_owned())
}

/// Numbers each conformance case's schema.
static CASES: AtomicU32 = AtomicU32::new(0);

/// The conformance harness of one case: the store at `url` in a schema of
/// its own (`{schema}N`), as if each case were its own application. The
/// cases run in parallel on one server, and a case that counts what its
/// sweep deleted must not have another case's sweep take its records.
///
/// The concurrency case sends 10,000 claims (and their waits) through a
/// pool of 16 connections; on a busy machine the last of them waited more
/// than the default 5 s for a connection and failed closed, which is right
/// under overload but not what the case is about: hence a long connect
/// timeout. And a short audit retention, for the retention case to wait
/// out.
pub(crate) async fn conformance_harness(
    url: &str,
    schema: &str,
) -> ServerClockHarness<PostgresStore> {
    let url = format!(
        "{url}{}schema={schema}{}",
        if url.contains('?') { '&' } else { '?' },
        CASES.fetch_add(1, Ordering::Relaxed)
    );
    let audit_retention = Duration::from_secs(3);
    let options = PostgresOptions::default()
        .connect_timeout(Duration::from_secs(60))
        .audit_retention(audit_retention);
    let store = PostgresStore::connect_with(&url, options.clone())
        .await
        .unwrap();
    ServerClockHarness::new(store)
        .with_audit_retention(audit_retention)
        .reopening(move || {
            let (url, options) = (url.clone(), options.clone());
            async move { PostgresStore::connect_with(&url, options).await.unwrap() }
        })
}

/// The URL of [`fresh_database`] on the shared server, or `None` after a
/// loud skip.
pub(crate) async fn own_database(test: &str) -> Option<String> {
    Some(fresh_database(&server_url(test).await?).await)
}

/// A fresh database on the shared server, so a test that counts
/// statements or rewrites the schema sees only its own.
pub(crate) async fn fresh_database(url: &str) -> String {
    let admin = connect_raw(url).await;
    let name = format!("idem_{}", &random_key().as_str()[..12]);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    url.replace("/postgres", &format!("/{name}"))
}

/// What most tests start with: a store of a database, and a plain client
/// for looking at what the store wrote.
pub(crate) type Opened = (PostgresStore, tokio_postgres::Client);

/// [`Opened`] on the shared server's database, or `None` after a loud skip.
pub(crate) async fn open_shared(test: &str) -> Option<Opened> {
    Some(opened(server_url(test).await?).await)
}

/// [`Opened`] on a [`fresh_database`] of the test's own, or `None` after a
/// loud skip.
pub(crate) async fn open_own(test: &str) -> Option<Opened> {
    Some(opened(own_database(test).await?).await)
}

async fn opened(url: String) -> Opened {
    let store = PostgresStore::connect(&url).await.unwrap();
    let raw = connect_raw(&url).await;
    (store, raw)
}

/// A plain client of `url`, for looking at what the store wrote.
pub(crate) async fn connect_raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A table of this one backend, as a program's table holds it: what
/// `idem::store::connect` and `migrate` do with a URL of this scheme.
pub static BACKENDS: idem_runtime::store::backend::Backends =
    idem_runtime::store::backend::Backends::new(&[&idem_postgres::BACKEND]);
