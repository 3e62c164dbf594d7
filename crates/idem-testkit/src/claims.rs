//! One key claimed from many processes at once: each child process is the
//! test binary itself, started again with [`CHILD_ENV`], connecting to the
//! same store and contending for the key; the parent reads what each did.
//! Above [`servers`](crate::servers) and [`stores`](crate::stores): it
//! opens the store by its URL.

/// The environment variable that makes a test binary a child of
/// [`claim_from_processes`]: `URL KEY TASKS TAG START_AT_MILLIS`.
pub const CHILD_ENV: &str = "IDEM_MULTI_PROCESS_CHILD";

/// What the children of [`claim_from_processes`] did together.
#[derive(Debug)]
pub struct ProcessesReport {
    /// How many tasks, over all processes, ran the tool.
    pub runs: usize,
    /// How many tasks, over all processes, ended with an outcome.
    pub finished: usize,
    /// The distinct outcomes the tasks ended with (one when they agree).
    pub outcomes: Vec<idem_runtime::record::Outcome>,
}

/// Claim a fresh key in the store at `url` from 4 processes of
/// `tasks_each` tasks ([`claim_from_processes`], the children running the
/// ignored test that [`multi_process_child!`](crate::multi_process_child)
/// declares in the binary's module `processes`), off the async runtime, and
/// assert that exactly one task ran the tool, every task finished, and all
/// saw one outcome.
///
/// # Panics
///
/// When they did not, or as [`claim_from_processes`] does.
pub async fn assert_one_owner_across_processes(url: String, tasks_each: usize) {
    let key = idem_conformance::random_key();
    let report = tokio::task::spawn_blocking(move || {
        claim_from_processes("processes::multi_process_child", &url, &key, 4, tasks_each)
    })
    .await
    .unwrap();
    assert_eq!(report.runs, 1, "more than one process ran the tool");
    assert_eq!(report.finished, 4 * tasks_each);
    assert_eq!(report.outcomes.len(), 1, "claimants saw different outcomes");
}

/// Start `processes` copies of the current test binary, each running only
/// the (ignored) test `entry` — which must call [`run_child`] — so that
/// every copy has `tasks` tasks claim `key` in the store at `url` at the
/// same instant, through
/// [`conformance::contend_for_key`](idem_conformance::contend_for_key).
/// Child `i` tags its outcome with `i + 1`.
///
/// # Panics
///
/// When a child fails or reports nothing.
pub fn claim_from_processes(
    entry: &str,
    url: &str,
    key: &idem_runtime::key::IdempotencyKey,
    processes: usize,
    tasks: usize,
) -> ProcessesReport {
    let exe = std::env::current_exe().expect("the test binary");
    let start_at =
        idem_runtime::clock::Clock::now(&idem_runtime::clock::SystemClock).as_millis() + 1_500;
    let children: Vec<_> = (0..processes)
        .map(|i| {
            std::process::Command::new(&exe)
                .args(["--ignored", "--exact", entry, "--nocapture"])
                .args(["--test-threads", "1"])
                .env(
                    CHILD_ENV,
                    format!("{url} {key} {tasks} {} {start_at}", i + 1),
                )
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let mut report = ProcessesReport {
        runs: 0,
        finished: 0,
        outcomes: Vec::new(),
    };
    for child in children {
        let out = child.wait_with_output().expect("child output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("IDEM-CHILD ").map(|(_, report)| report))
            .unwrap_or_else(|| panic!("child reported nothing: {stdout}"));
        let (runs, finished, outcomes): (usize, usize, Vec<idem_runtime::record::Outcome>) =
            serde_json::from_str(line).expect("child report");
        report.runs += runs;
        report.finished += finished;
        for outcome in outcomes {
            if !report.outcomes.contains(&outcome) {
                report.outcomes.push(outcome);
            }
        }
    }
    report
}

/// The `entry` test of [`claim_from_processes`] for a test binary whose
/// module `processes` calls it: the ignored test
/// `processes::multi_process_child`, which runs [`run_child`].
#[macro_export]
macro_rules! multi_process_child {
    () => {
        // The entry point of the child processes of the multi-process tests.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "entry point of the child processes started by the multi-process tests"]
        async fn multi_process_child() {
            $crate::claims::run_child().await;
        }
    };
}

/// The body of the `entry` test of [`claim_from_processes`]: in a child,
/// connect to the store, wait for the common start instant, contend, and
/// print the report; outside a child, do nothing.
pub async fn run_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [url, key, tasks, tag, start_at] = parts[..] else {
        panic!("malformed {CHILD_ENV}: {spec}");
    };
    let store = crate::stores::connect(url).await.expect("connect");
    let key = idem_runtime::key::IdempotencyKey::parse(key).expect("key");
    let start_at: u64 = start_at.parse().expect("start time");
    let now = idem_runtime::clock::Clock::now(&idem_runtime::clock::SystemClock).as_millis();
    tokio::time::sleep(std::time::Duration::from_millis(
        start_at.saturating_sub(now),
    ))
    .await;
    let (runs, outcomes) = idem_conformance::contend_for_key(
        store,
        &key,
        tasks.parse().expect("tasks"),
        tag.parse().expect("tag"),
        std::time::Duration::from_secs(60),
    )
    .await;
    let finished = outcomes.len();
    let mut distinct = Vec::new();
    for outcome in outcomes {
        if !distinct.contains(&outcome) {
            distinct.push(outcome);
        }
    }
    println!(
        "IDEM-CHILD {}",
        serde_json::to_string(&(runs, finished, distinct)).expect("report")
    );
}
