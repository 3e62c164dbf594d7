//! Running the real `idem` binary against a store, and a SQLite file per
//! test (`idem_testkit::on_every_store!` runs a test on SQLite, and on the
//! kit's Redis and PostgreSQL servers, skipped loudly when not installed, a
//! failure under `IDEM_REQUIRE_SERVERS=1`); and a headless Chromium to
//! drive pages with (`browser`, skipped and required the same way).
#![allow(dead_code)]

pub mod browser;
pub mod http;
pub mod mcp_http;
pub mod schema;
pub mod serve;
pub mod tools;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem::store::StoreExt;
use idem_testkit::TempDir;
use serde_json::Value;

/// The binary under test.
pub const IDEM: &str = env!("CARGO_BIN_EXE_idem");

/// The `idem` program on one store.
#[derive(Debug, Clone)]
pub struct Idem {
    pub url: String,
}

/// What one run of `idem` did.
#[derive(Debug)]
pub struct Run {
    pub command: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Idem {
    pub fn new(url: &str) -> Self {
        Idem {
            url: url.to_owned(),
        }
    }

    /// The page `idem ls --state STATE --namespace NS --json` prints.
    pub async fn ls_json(&self, state: &str, namespace: &str) -> Value {
        self.run(&["ls", "--state", state, "--namespace", namespace, "--json"])
            .await
            .json()
    }

    /// `idem --store URL ARGS…`, with no colour or store from the
    /// environment.
    pub async fn run(&self, args: &[&str]) -> Run {
        let mut all = vec!["--store", self.url.as_str()];
        all.extend_from_slice(args);
        run(&all, &[]).await
    }
}

/// `idem ARGS…` with `env` set and nothing else from the environment that
/// `idem` reads.
pub async fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_in(args, env, None).await
}

/// [`run`] in directory `dir`.
pub async fn run_in(args: &[&str], env: &[(&str, &str)], dir: Option<&std::path::Path>) -> Run {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let dir = dir.map(|d| d.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(IDEM);
        command.args(&args);
        for var in ["IDEM_STORE", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"] {
            command.env_remove(var);
        }
        command.envs(env);
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let out = command.output().expect("run the idem binary");
        Run {
            command: format!("idem {}", args.join(" ")),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
        }
    })
    .await
    .unwrap()
}

impl Run {
    /// Succeeded: its stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(
            self.code, 0,
            "`{}` failed with {}: {}{}",
            self.command, self.code, self.stdout, self.stderr
        );
        &self.stdout
    }

    /// Succeeded, printing `text` among what it printed.
    pub fn says(&self, text: &str) {
        assert!(self.ok().contains(text), "no {text:?} in: {}", self.stdout);
    }

    /// Succeeded, printing JSON: the JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|e| panic!("`{}` printed no JSON ({e}): {}", self.command, self.stdout))
    }

    /// Failed with exit code `code` and one line on stderr containing
    /// `needle`, printing nothing on stdout. Returns the line.
    pub fn fails(&self, code: i32, needle: &str) -> &str {
        assert_eq!(
            self.code, code,
            "`{}` exited with {}, not {code}: {}{}",
            self.command, self.code, self.stdout, self.stderr
        );
        assert_eq!(self.stdout, "", "`{}` printed on stdout", self.command);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "`{}` should say what is wrong on one line: {}",
            self.command,
            self.stderr
        );
        assert!(
            lines[0].starts_with("error: "),
            "`{}`: {}",
            self.command,
            lines[0]
        );
        assert!(
            lines[0].contains(needle),
            "`{}` should name {needle:?}: {}",
            self.command,
            lines[0]
        );
        lines[0]
    }
}

impl Run {
    /// Refused by clap's value parser of `option` (exit code 2, nothing on
    /// stdout): its message names the option and the value's trouble,
    /// `needle`. Returns the message's first line.
    pub fn bad_value(&self, option: &str, needle: &str) -> &str {
        assert_eq!(
            self.code, 2,
            "`{}` exited with {}, not 2: {}{}",
            self.command, self.code, self.stdout, self.stderr
        );
        assert_eq!(self.stdout, "", "`{}` printed on stdout", self.command);
        let line = self.stderr.lines().next().unwrap_or_default();
        assert!(
            line.starts_with("error: invalid value ")
                && line.contains(&format!(" for '{option} "))
                && line.contains(needle),
            "`{}` should name {option} and say {needle:?}: {}",
            self.command,
            self.stderr
        );
        line
    }
}

/// A name no other test (or earlier run on the same server) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{:x}-{:x}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// Run each scenario (an `async fn(url: &str)`) on a SQLite file and on
/// the kit's Redis and PostgreSQL servers, as `sqlite::name`,
/// `redis::name` and `postgres::name`
/// ([`idem_testkit::on_every_store!`]).
#[allow(unused_macros)]
macro_rules! on_every_store_url {
    ($($test:ident),+ $(,)?) => {
        idem_testkit::on_every_store! {
            stores: [sqlite, redis, postgres],
            run: |scenario, store| scenario(&crate::support::own_store(store.url())).await,
            tests: [$($test),+],
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_store_url;

/// A store of the scenario's own on the server at `url` (a Redis key
/// prefix, a PostgreSQL schema; a SQLite file is the scenario's already):
/// what is kept store-wide — the approval rules `idem serve` publishes —
/// is then the scenario's alone, as it is a team's on its store.
pub fn own_store(url: &str) -> String {
    let name = unique("t").replace('-', "_");
    let joint = if url.contains('?') { '&' } else { '?' };
    if url.starts_with("redis") {
        format!("{url}{joint}prefix={name}")
    } else if url.starts_with("postgres") {
        format!("{url}{joint}schema={name}")
    } else {
        url.to_owned()
    }
}

/// What a scenario on one store starts with: the `idem` program on the
/// store at `url`, a namespace of its own (`tenant-…`: the server stores
/// are shared by the binary's tests) and the app its tools act on.
pub fn operator(url: &str) -> (Idem, String, tools::App) {
    (Idem::new(url), unique("tenant"), tools::App::default())
}

/// A fresh SQLite store file (the directory goes with the guard).
pub fn sqlite() -> (TempDir, String) {
    let dir = TempDir::new("idem-cli").unwrap();
    let url = format!("sqlite://{}", dir.path().join("idem.db").display());
    (dir, url)
}

/// Poll `idem ls --state STATE --namespace NS` until one record is listed;
/// its key.
pub async fn listed(idem: &Idem, namespace: &str, state: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = idem.ls_json(state, namespace).await;
        if let Some(record) = page["records"].as_array().and_then(|r| r.first()) {
            return record["key"].as_str().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no {state} record in namespace {namespace} after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Claim `call_id` of `charge_card` straight through the store, holding a lease
/// of `lease`: a call in flight in a worker elsewhere.
pub async fn claim_directly(
    url: &str,
    namespace: &str,
    call_id: &str,
    args: Option<&str>,
    lease: Duration,
) -> idem::key::IdempotencyKey {
    let store = idem::store::connect(url).await.unwrap();
    let tenant = tools::ns(namespace);
    let key = idem::key::derive_key(&idem::key::KeyInput {
        version: 1,
        namespace: &tenant,
        tool: "charge_card",
        source: idem::key::KeySource::CallId(call_id),
    })
    .unwrap();
    let info = idem::record::CallInfoRef {
        namespace: Some(namespace),
        call_id: Some(call_id),
        args,
        ..idem::record::CallInfoRef::default()
    };
    let fingerprint = idem::key::Fingerprint::new("f".repeat(64));
    let claimed = store
        .claim(&idem::store::ClaimRequest {
            key: &key,
            tool: "charge_card",
            fingerprint: &fingerprint,
            check_fingerprint: true,
            lease,
            info,
            worker: Some("worker-elsewhere:9"),
            durable: true,
        })
        .await
        .unwrap();
    assert!(
        matches!(claimed, idem::store::ClaimOutcome::Acquired { .. }),
        "a fresh key is acquired: {claimed:?}"
    );
    key
}

/// A process's resident memory, in MiB (`VmRSS` of /proc/PID/status).
pub fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}
