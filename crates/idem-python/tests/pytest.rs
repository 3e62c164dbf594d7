//! The Python package's tests (`tests/*.py`, pytest) against the module
//! built from this workspace.
//!
//! Builds the module with `maturin develop` into the virtual environment
//! `.ci/run` makes (`target/python-idem`: maturin, pytest, mypy,
//! pydantic), starts Redis and PostgreSQL with the test kit (and over
//! TLS, with certificates it makes) and names them to pytest, and gives it the `idem` program built beside this test. It
//! also makes the same call from Rust, before and after, on the SQLite
//! file the Python tests share: a call made in one language is answered
//! from its record in the other.
//!
//! Without the virtual environment the test is skipped loudly, and fails
//! under `IDEM_REQUIRE_SERVERS=1` (CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use idem::{tool, Executor, ToolError};
use idem_testkit::servers::{
    skip, workspace_root, PostgresServer, RedisServer, TempDir, TestCertificates,
};
use serde::{Deserialize, Serialize};

/// What `create_ticket` takes, in Rust and in Python alike.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Ticket {
    customer: String,
    subject: String,
}

/// The same tool as tests/test_cli.py's `create_ticket`.
#[tool(class = "non_idempotent_write")]
async fn create_ticket(args: Ticket) -> Result<serde_json::Value, ToolError> {
    Ok(serde_json::json!({ "ticket": format!("rust-{}", args.customer) }))
}

/// The call both languages make under call id `id`.
async fn call_from_rust(db: &Path, id: &str) -> idem::CallOutput<serde_json::Value> {
    let store = idem::store::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("the shared SQLite store opens");
    let executor = Executor::builder_shared(store).build();
    let args = Ticket {
        customer: "c-7".into(),
        subject: "refund".into(),
    };
    executor
        .call(create_ticket, args)
        .call_id(id)
        .await
        .expect("the call succeeds")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_relative() {
                workspace_root().join(p)
            } else {
                p
            }
        })
        .unwrap_or_else(|| workspace_root().join("target"))
}

#[test]
fn the_python_package_passes_its_tests_against_this_build() {
    let venv = workspace_root().join("target/python-idem");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import maturin, pytest, mypy, pydantic"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !ready {
        skip(
            "the Python package's tests",
            "target/python-idem (a venv with maturin, pytest, mypy and pydantic; .ci/run makes it)",
        );
        return;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = Command::new(venv.join("bin/maturin"))
        .args(["develop", "--quiet"])
        .current_dir(crate_dir)
        .env("VIRTUAL_ENV", &venv)
        .env("CARGO_TARGET_DIR", target_dir())
        .status()
        .expect("maturin runs");
    assert!(built.success(), "maturin develop failed");

    // One PostgreSQL for both: TLS offered beside plain text (the plain
    // tests ask for none), a certificate for 127.0.0.1 signed by `certs.ca`.
    let certs = TestCertificates::new();
    let redis = RedisServer::start();
    let redis_tls = RedisServer::start_tls(&certs.server, &certs.ca, false);
    let postgres = PostgresServer::start_tls(&certs.server, &certs.ca, false);
    if redis.is_none() {
        skip("the Python tests on Redis", "redis-server");
    }
    if postgres.is_none() {
        skip("the Python tests on PostgreSQL", "PostgreSQL");
    }
    let idem_bin = target_dir().join("debug/idem");
    if !idem_bin.exists() {
        skip(
            "the Python tests of `idem ls`, `idem show` and `idem approve`",
            "target/debug/idem (built by `cargo test --workspace`)",
        );
    }

    let dir = TempDir::new("idem-python").expect("a temporary directory");
    let shared = dir.path().join("shared.db");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let from_rust = runtime.block_on(call_from_rust(&shared, "rust-1"));
    assert!(!from_rust.meta.deduplicated);

    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(crate_dir)
        .env("IDEM_TEST_SHARED_DB", &shared)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if let Some(redis) = &redis {
        pytest.env("IDEM_TEST_REDIS_URL", redis.url());
    }
    if let Some(redis) = &redis_tls {
        let ca = certs.ca.display();
        pytest.env("IDEM_TEST_REDISS_URL", format!("{}?ca={ca}", redis.url()));
    }
    if let Some(postgres) = &postgres {
        let (url, ca) = (postgres.url(), certs.ca.display());
        pytest.env("IDEM_TEST_POSTGRES_URL", format!("{url}?sslmode=disable"));
        let tls = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
        pytest.env("IDEM_TEST_POSTGRES_TLS_URL", tls);
    }
    pytest.env("IDEM_TEST_OTHER_CA", &certs.other_ca);
    if idem_bin.exists() {
        pytest.env("IDEM_BIN", &idem_bin);
    }
    let status = pytest.status().expect("pytest runs");
    assert!(status.success(), "pytest failed: {status}");

    // The call tests/test_cli.py made from Python, made again from Rust.
    let again = runtime.block_on(call_from_rust(&shared, "python-1"));
    assert!(
        again.meta.deduplicated,
        "the Python call's record answers Rust"
    );
    assert_eq!(again.output, serde_json::json!({ "ticket": "python-c-7" }));
}
