//! Real `redis-server` and PostgreSQL processes for tests, on free loopback
//! ports, in temporary directories.
//!
//! Each server has a [`Watchdog`] that kills it and deletes its directory
//! once the test process is gone, so a server kept in a `static` (whose
//! `Drop` never runs) does not outlive the tests.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{CertifiedKeyFiles, TempDir, Watchdog};

/// A `redis-server` on 127.0.0.1, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    // Declared before the directory: the server stops before it is deleted.
    process: Process,
    port: u16,
    /// Whether it listens with TLS only ([`RedisServer::start_tls`]).
    tls: bool,
    _dir: TempDir,
}

/// A Redis Cluster on 127.0.0.1: three primaries sharing the 16,384 slots,
/// each with `replicas` replicas, every node a `redis-server` of its own
/// (`--cluster-node-timeout 1000`, so a lost primary is failed over within
/// a few seconds). Killed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// The primaries first, in the order they were given the slots; then
    /// the replicas.
    nodes: Vec<RedisServer>,
    primaries: usize,
    /// What `redis-cli` needs to reach the nodes: `--tls --cacert CA` for
    /// a cluster over TLS, nothing otherwise.
    cli_tls: Vec<String>,
}

/// A PostgreSQL server on 127.0.0.1 with a trusted superuser `idem`,
/// `fsync=off` (a test server; its durability is not what is tested) and
/// `pg_stat_statements` loaded. Stopped when dropped.
///
/// [`PostgresServer::start_with`] starts one with other settings, such as
/// `fsync=on` for a benchmark whose commits must pay their WAL flush.
#[derive(Debug)]
pub struct PostgresServer {
    // Declared before the directory: the server stops before it is deleted.
    process: Process,
    port: u16,
    _dir: TempDir,
}

/// A child server process and its watchdog.
#[derive(Debug)]
struct Process {
    child: Child,
    _watchdog: Watchdog,
    /// The signal that stops the server cleanly and at once.
    stop_signal: &'static str,
}

impl RedisServer {
    /// Start a server, or `None` when `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// When the binary exists but the server does not come up.
    pub fn start() -> Option<RedisServer> {
        let binary = find_binary("redis-server", &[])?;
        let mut last_error = String::new();
        for _ in 0..3 {
            match RedisServer::spawn(&binary, &[], false) {
                Ok(server) => return Some(server),
                Err(e) => last_error = e,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// Start a server that accepts TLS connections only (`--port 0`, its
    /// one port a `--tls-port`), presenting `certificate`; with
    /// `auth_clients`, it asks for a client certificate signed by the CA
    /// `ca` (`--tls-auth-clients yes`) and refuses connections without
    /// one. `None` when `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// When the binary exists but the server does not come up (one built
    /// without TLS refuses `--tls-port`).
    pub fn start_tls(
        certificate: &CertifiedKeyFiles,
        ca: &Path,
        auth_clients: bool,
    ) -> Option<RedisServer> {
        let binary = find_binary("redis-server", &[])?;
        let (cert, key, ca) = (path(&certificate.cert), path(&certificate.key), path(ca));
        let auth = if auth_clients { "yes" } else { "no" };
        let extra = [
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            auth,
        ];
        let mut last_error = String::new();
        for _ in 0..3 {
            match RedisServer::spawn(&binary, &extra, true) {
                Ok(server) => return Some(server),
                Err(e) => last_error = e,
            }
        }
        panic!("redis-server with TLS did not start: {last_error}");
    }

    /// Start `binary` on a free port with `extra` arguments (the port a TLS
    /// one when `tls`), and wait until it answers.
    fn spawn(binary: &Path, extra: &[&str], tls: bool) -> Result<RedisServer, String> {
        let dir = TempDir::new("idem-redis").expect("create a temporary directory");
        let port = free_port();
        let log = dir.path().join("redis.log");
        let ports = match tls {
            false => ["--port".to_owned(), port.to_string()],
            true => ["--port".to_owned(), "0".to_owned()],
        };
        let tls_port = match tls {
            false => vec![],
            true => vec!["--tls-port".to_owned(), port.to_string()],
        };
        let child = Command::new(binary)
            .args(ports)
            .args(tls_port)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut process = Process::new(child, "TERM", dir.path());
        // A TLS server cannot be pinged in plain text: it is ready once it
        // says so and its port takes connections.
        let ready = || match tls {
            false => redis_ping(port),
            true => {
                read_log(&log).contains("Ready to accept connections")
                    && TcpStream::connect(("127.0.0.1", port)).is_ok()
            }
        };
        match wait_until(Duration::from_secs(10), &mut process, ready) {
            Ok(()) => Ok(RedisServer {
                process,
                port,
                tls,
                _dir: dir,
            }),
            Err(e) => Err(format!("{e}; log: {}", read_log(&log))),
        }
    }

    /// The server's URL, `redis://127.0.0.1:PORT/`, or for a server
    /// started with [`RedisServer::start_tls`] `rediss://127.0.0.1:PORT/`
    /// (the URL names no CA: add `?ca=PATH`).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stop the server now (to test what happens when it goes away).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

impl RedisCluster {
    /// Start a cluster of three primaries, or `None` when `redis-server`
    /// or `redis-cli` (which joins the nodes) is not installed.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the cluster does not come up.
    pub fn start() -> Option<RedisCluster> {
        Self::start_with_replicas(0)
    }

    /// Start a cluster of three primaries with `replicas` replicas each,
    /// returning once every node sees the cluster healthy and every replica
    /// is in sync with its primary.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the cluster does not come up.
    pub fn start_with_replicas(replicas: usize) -> Option<RedisCluster> {
        let server = find_binary("redis-server", &[])?;
        let cli = find_binary("redis-cli", &[])?;
        let mut last_error = String::new();
        for _ in 0..3 {
            match Self::try_start(&server, &cli, 3, replicas, None) {
                Ok(cluster) => return Some(cluster),
                Err(e) => last_error = e,
            }
        }
        panic!("the Redis Cluster did not start: {last_error}");
    }

    /// Start a cluster of three primaries that speak TLS only, to clients
    /// and to one another (`--tls-cluster yes`), each presenting
    /// `certificate`, signed by the CA `ca`; its [`url`](Self::url) is
    /// `rediss+cluster://…`. `None` when `redis-server` or `redis-cli` is
    /// not installed.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the cluster does not come up.
    pub fn start_tls(certificate: &CertifiedKeyFiles, ca: &Path) -> Option<RedisCluster> {
        let server = find_binary("redis-server", &[])?;
        let cli = find_binary("redis-cli", &[])?;
        let mut last_error = String::new();
        for _ in 0..3 {
            match Self::try_start(&server, &cli, 3, 0, Some((certificate, ca))) {
                Ok(cluster) => return Some(cluster),
                Err(e) => last_error = e,
            }
        }
        panic!("the Redis Cluster over TLS did not start: {last_error}");
    }

    fn try_start(
        server: &Path,
        cli: &Path,
        primaries: usize,
        replicas: usize,
        tls: Option<(&CertifiedKeyFiles, &Path)>,
    ) -> Result<RedisCluster, String> {
        let mut tls_args = Vec::new();
        let mut cli_tls = Vec::new();
        if let Some((certificate, ca)) = tls {
            let files = [
                ("--tls-cert-file", &certificate.cert),
                ("--tls-key-file", &certificate.key),
            ];
            for (option, file) in files {
                tls_args.extend([option.to_owned(), path(file)]);
            }
            tls_args.extend(["--tls-ca-cert-file".to_owned(), path(ca)]);
            tls_args.extend(["--tls-auth-clients", "no", "--tls-cluster", "yes"].map(String::from));
            tls_args.extend(["--tls-replication", "yes"].map(String::from));
            cli_tls = vec!["--tls".to_owned(), "--cacert".to_owned(), path(ca)];
        }
        let mut nodes = Vec::new();
        for _ in 0..primaries * (1 + replicas) {
            let bus_port = free_port().to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_port,
                "--cluster-node-timeout",
                "1000",
            ];
            args.extend(tls_args.iter().map(String::as_str));
            let node = RedisServer::spawn(server, &args, tls.is_some())?;
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut create = Command::new(cli)
            .args(&cli_tls)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("run redis-cli --cluster create: {e}"))?;
        // It waits for the nodes to join for as long as it takes: a node
        // that never does (a TLS bus whose certificates do not verify)
        // would hang the tests.
        let deadline = Instant::now() + Duration::from_secs(30);
        while create.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                let _ = create.kill();
                let out = create.wait_with_output().map_err(|e| e.to_string())?;
                return Err(format!(
                    "redis-cli --cluster create did not finish within 30 s: {}",
                    String::from_utf8_lossy(&out.stdout)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = create
            .wait_with_output()
            .map_err(|e| format!("run redis-cli --cluster create: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = RedisCluster {
            nodes,
            primaries,
            cli_tls,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.healthy(cli) {
            if Instant::now() > deadline {
                return Err("the cluster was not healthy after 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(cluster)
    }

    /// Every node sees all slots served, and every replica is in sync.
    fn healthy(&self, cli: &Path) -> bool {
        let ask = |port: u16, words: &[&str]| {
            Command::new(cli)
                .args(&self.cli_tls)
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args(words)
                .stdin(Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        self.nodes.iter().enumerate().all(|(i, node)| {
            ask(node.port, &["cluster", "info"]).contains("cluster_state:ok")
                && (i < self.primaries
                    || ask(node.port, &["info", "replication"]).contains("master_link_status:up"))
        })
    }

    /// The cluster's URL, `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`
    /// (over TLS `rediss+cluster://…`, naming no CA: add `?ca=PATH`),
    /// listing every primary as a seed node.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..self.primaries]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let scheme = match self.cli_tls.is_empty() {
            true => "redis+cluster",
            false => "rediss+cluster",
        };
        format!("{scheme}://{}", seeds.join(","))
    }

    /// The ports of the primaries the cluster started with.
    pub fn primary_ports(&self) -> Vec<u16> {
        self.nodes[..self.primaries]
            .iter()
            .map(|n| n.port)
            .collect()
    }

    /// Kill the node listening on `port` with `SIGKILL`, as a crash would:
    /// no last write is flushed, no client is told.
    ///
    /// # Panics
    ///
    /// When no node of the cluster listens on `port`.
    pub fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster");
        node.process.kill();
    }
}

impl PostgresServer {
    /// Initialise a cluster in a temporary directory and start it, or
    /// `None` when the PostgreSQL binaries are not installed. As root (where
    /// PostgreSQL refuses to run) the cluster belongs to the `postgres`
    /// account, or `nobody`, and runs as that account through `setpriv`.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the server does not come up.
    pub fn start() -> Option<PostgresServer> {
        Self::start_with(&[])
    }

    /// As [`PostgresServer::start`], with `settings` (`"name=value"`, each
    /// passed as `-c name=value` after the defaults, so that they override
    /// them): `PostgresServer::start_with(&["fsync=on"])` starts a server
    /// whose commits wait for their WAL to reach the disk, as a production
    /// server's do.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the server does not come up (a setting
    /// the server rejects stops it from starting).
    pub fn start_with(settings: &[&str]) -> Option<PostgresServer> {
        Self::start_configured(settings, None)
    }

    /// As [`PostgresServer::start`], with TLS on (`ssl=on`), presenting
    /// `certificate`; with `tls_only`, `pg_hba.conf` has `hostssl` lines
    /// only, so a connection without TLS is refused. The account
    /// `idem_scram`, password `hunter2`, signs in with SCRAM-SHA-256 (so
    /// that SCRAM's channel binding can be tested), and
    /// `idem-client` with a client certificate signed by `client_ca` whose
    /// common name is `idem-client` (`cert`, over TLS); every other account
    /// is trusted.
    ///
    /// # Panics
    ///
    /// When the binaries exist but the server does not come up.
    pub fn start_tls(
        certificate: &CertifiedKeyFiles,
        client_ca: &Path,
        tls_only: bool,
    ) -> Option<PostgresServer> {
        Self::start_configured(&[], Some((certificate, client_ca, tls_only)))
    }

    fn start_configured(
        settings: &[&str],
        tls: Option<(&CertifiedKeyFiles, &Path, bool)>,
    ) -> Option<PostgresServer> {
        let pg_dirs = postgres_bin_dirs();
        let extra: Vec<&Path> = pg_dirs.iter().map(PathBuf::as_path).collect();
        let initdb = find_binary("initdb", &extra)?;
        let bin = initdb.parent().expect("a directory").to_path_buf();
        let postgres = bin.join("postgres");
        let pg_isready = bin.join("pg_isready");
        if !postgres.exists() || !pg_isready.exists() {
            return None;
        }
        let account = unprivileged_account();
        let dir = TempDir::new("idem-postgres").expect("create a temporary directory");
        if let Some((uid, gid)) = account {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("give the PostgreSQL directory to the unprivileged account");
        }
        let data = dir.path().join("data");
        let out = as_account(account, &initdb)
            .arg("-D")
            .arg(&data)
            .args(["-U", "idem", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"])
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut tls_settings = Vec::new();
        if let Some((certificate, client_ca_file, tls_only)) = tls {
            // The server reads its key as its own account, and refuses a
            // key others may read.
            let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
            let client_ca = dir.path().join("client-ca.crt");
            std::fs::copy(&certificate.cert, &cert).expect("copy the server certificate");
            std::fs::copy(&certificate.key, &key).expect("copy the server key");
            std::fs::copy(client_ca_file, &client_ca).expect("copy the clients' CA");
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("make the key private");
            if let Some((uid, gid)) = account {
                for file in [&cert, &key, &client_ca] {
                    std::os::unix::fs::chown(file, Some(uid), Some(gid))
                        .expect("give the certificate to the unprivileged account");
                }
            }
            tls_settings.push("ssl=on".to_owned());
            tls_settings.push(format!("ssl_cert_file={}", cert.display()));
            tls_settings.push(format!("ssl_key_file={}", key.display()));
            tls_settings.push(format!("ssl_ca_file={}", client_ca.display()));
            // Every account is trusted but `idem_scram`, which signs in
            // with SCRAM (for channel binding), and `idem-client`, which
            // signs in with its client certificate; with `tls_only`, over
            // TLS only.
            let host = if tls_only { "hostssl" } else { "host" };
            let hba: String = ["127.0.0.1/32", "::1/128"]
                .iter()
                .map(|net| {
                    format!(
                        "{host} all idem_scram {net} scram-sha-256\n\
                         hostssl all idem-client {net} cert\n\
                         {host} all all {net} trust\n"
                    )
                })
                .collect();
            std::fs::write(
                data.join("pg_hba.conf"),
                format!("local all all trust\n{hba}"),
            )
            .expect("write pg_hba.conf");
        }
        let log_path = dir.path().join("postgres.log");
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log = File::create(&log_path).expect("create the log");
            let child = as_account(account, &postgres)
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .arg("-c")
                .arg(format!("unix_socket_directories={}", dir.path().display()))
                .args(["-c", "fsync=off", "-c", "max_connections=200"])
                .args(["-c", "shared_preload_libraries=pg_stat_statements"])
                .args(tls_settings.iter().flat_map(|setting| ["-c", setting]))
                .args(settings.iter().flat_map(|setting| ["-c", setting]))
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn postgres");
            // SIGQUIT: immediate shutdown, which also removes shared memory.
            let mut process = Process::new(child, "QUIT", dir.path());
            let ready = || {
                Command::new(&pg_isready)
                    .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "idem"])
                    .args(["-d", "postgres", "-t", "1"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            match wait_until(Duration::from_secs(30), &mut process, ready) {
                Ok(()) if tls.is_some() => {
                    // The accounts `pg_hba.conf` names, created over the
                    // Unix socket (trusted).
                    let out = Command::new(bin.join("psql"))
                        .arg("-h")
                        .arg(dir.path())
                        .args(["-p", &port.to_string(), "-U", "idem", "-d", "postgres"])
                        .args(["-v", "ON_ERROR_STOP=1", "-q"])
                        .args([
                            "-c",
                            "CREATE ROLE idem_scram LOGIN SUPERUSER PASSWORD 'hunter2'",
                        ])
                        .args(["-c", "CREATE ROLE \"idem-client\" LOGIN SUPERUSER"])
                        .env("HOME", dir.path())
                        .output()
                        .expect("run psql");
                    assert!(
                        out.status.success(),
                        "creating the TLS test accounts failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    return Some(PostgresServer {
                        process,
                        port,
                        _dir: dir,
                    });
                }
                Ok(()) => {
                    return Some(PostgresServer {
                        process,
                        port,
                        _dir: dir,
                    })
                }
                Err(e) => last_error = format!("{e}; log: {}", read_log(&log_path)),
            }
        }
        panic!("postgres did not start: {last_error}");
    }

    /// The server's URL, `postgres://idem@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://idem@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stop the server now (to test what happens when it goes away).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

impl Process {
    fn new(child: Child, stop_signal: &'static str, dir: &Path) -> Process {
        let watchdog = Watchdog::new(&child.id().to_string(), stop_signal, dir);
        Process {
            child,
            _watchdog: watchdog,
            stop_signal,
        }
    }

    /// Kill the server with `SIGKILL` and reap it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .arg(format!("-{}", self.stop_signal))
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    /// Stop the server; the watchdog, dropped next, ends with it.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait until `ready` holds, failing early if the server exits.
fn wait_until(
    limit: Duration,
    process: &mut Process,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        if ready() {
            return Ok(());
        }
        if let Ok(Some(status)) = process.child.try_wait() {
            return Err(format!("the server exited with {status}"));
        }
        if Instant::now() > deadline {
            process.stop();
            return Err(format!("the server was not ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn redis_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// A port nobody listens on right now (the server binds it a moment later;
/// a lost race is retried by the callers).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// `path` as an argument of a server's command line.
fn path(path: &Path) -> String {
    path.display().to_string()
}

fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// `name` in `extra` directories, then in `PATH` and the usual places.
fn find_binary(name: &str, extra: &[&Path]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    extra
        .iter()
        .map(|d| d.to_path_buf())
        .chain(std::env::split_paths(&path))
        .chain(
            ["/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin"]
                .iter()
                .map(PathBuf::from),
        )
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `/usr/lib/postgresql/*/bin`, newest version first.
fn postgres_bin_dirs() -> Vec<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.0));
    versions.into_iter().map(|(_, p)| p).collect()
}

/// When running as root: the uid and gid of `postgres`, else `nobody`.
fn unprivileged_account() -> Option<(u32, u32)> {
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if me != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let find = |name: &str| {
        passwd.lines().find_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    };
    Some(
        find("postgres")
            .or_else(|| find("nobody"))
            .expect("an unprivileged account (postgres or nobody) to run PostgreSQL as"),
    )
}

/// A command for `program`, run as `account` through `setpriv` when given.
fn as_account(account: Option<(u32, u32)>, program: &Path) -> Command {
    match account {
        None => Command::new(program),
        Some((uid, gid)) => {
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            cmd
        }
    }
}
