//! Pieces shared by the PostgreSQL store's test files
//! (`mod postgres_support;`, beside `mod support;`): the server of the test
//! binary, a fresh database of a test's own, and a plain client.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::LazyLock;

use idem_conformance::random_key;
use idem_testkit::PostgresServer;

/// The server of this test binary, started on first use.
pub(crate) static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

/// The URL of [`SERVER`], or `None` after a loud skip.
pub(crate) async fn server_url(test: &str) -> Option<String> {
    idem_testkit::store_cases::server_url(test, "PostgreSQL", || {
        SERVER.as_ref().map(PostgresServer::url)
    })
    .await
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
