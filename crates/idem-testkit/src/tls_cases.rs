//! TLS scenario pieces shared by the Redis and PostgreSQL stores' tests:
//! the refusal a connect must end in, a call that must go through, and a
//! CA file named by the environment, tried in a child process (the
//! environment is shared by every test of a process).

use std::path::Path;
use std::time::Duration;

use idem_runtime::store::{Store, StoreError, StoreExt, TlsFailure, TlsProblem};

use crate::servers::TestCertificates;
use crate::store_cases::{acquire, sent};

/// The environment variable that hands the child of
/// [`assert_a_ca_file_from_the_environment_is_trusted`] its URL.
pub const CHILD_URL: &str = "IDEM_TEST_TLS_URL";

/// The TLS failure `connected` (a connect to `url`) must have ended in,
/// and its message, printed: a message that never shows the password
/// `hunter2` the tests put in their URLs.
///
/// # Panics
///
/// When the connect succeeded or failed otherwise, or the message shows
/// the password.
pub fn refusal<S: std::fmt::Debug>(
    url: &str,
    connected: Result<S, StoreError>,
) -> (TlsFailure, String) {
    match connected {
        Err(e @ StoreError::Tls(_)) => {
            let message = e.to_string();
            let StoreError::Tls(failure) = e else {
                unreachable!()
            };
            assert!(!message.contains("hunter2"), "password leaked: {message}");
            println!("{message}");
            (*failure, message)
        }
        other => panic!("{url}: expected a TLS failure, got {other:?}"),
    }
}

/// A call goes through `store`: a fresh key is claimed, completed and read
/// back with its outcome.
///
/// # Panics
///
/// When any of it fails.
pub async fn a_call_goes_through<S: Store>(store: &S) {
    let key = idem_conformance::random_key();
    let fence = acquire(store, &key).await;
    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
}

/// The URL the parent of this child process named in [`CHILD_URL`].
///
/// # Panics
///
/// When this process was not started by
/// [`assert_a_ca_file_from_the_environment_is_trusted`].
pub fn child_url() -> String {
    std::env::var(CHILD_URL).expect("started by the parent test")
}

/// `IDEM_TLS_CA_FILE` names the CA when `url` names none: the ignored test
/// `entry` of this test binary (which connects to [`child_url`]), run in a
/// child process with the variable naming `certs.ca`, passes; naming
/// `certs.other_ca`, it fails saying the certificate is not trusted.
///
/// # Panics
///
/// When it does not.
pub fn assert_a_ca_file_from_the_environment_is_trusted(
    entry: &str,
    url: &str,
    certs: &TestCertificates,
) {
    let child = |ca: &Path| {
        std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--ignored", "--exact", entry])
            .env(idem_runtime::store::url::TLS_CA_FILE_ENV, ca)
            .env(CHILD_URL, url)
            .output()
            .expect("run the child")
    };
    let trusted = child(&certs.ca);
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stdout)
    );
    let other = child(&certs.other_ca);
    let out = String::from_utf8_lossy(&other.stdout);
    assert!(!other.status.success(), "trusted another CA: {out}");
    assert!(out.contains("not trusted"), "{out}");
}

/// Assert that `refused` (a [`refusal`]) is for `problem`, in a message
/// that says each of `says`.
///
/// # Panics
///
/// When it is not.
pub fn assert_refused_for(refused: &(TlsFailure, String), problem: TlsProblem, says: &[&str]) {
    let (failure, message) = refused;
    assert_eq!(failure.problem, problem, "{message}");
    for said in says {
        assert!(message.contains(said), "{said:?} not in {message}");
    }
}
