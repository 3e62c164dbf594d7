//! Real `redis-server` processes for tests (PostgreSQL's are in
//! [`postgres`](super::postgres)), on free loopback
//! ports, in temporary directories.
//!
//! Each server has a [`Watchdog`] that kills it and deletes its directory
//! once the test process is gone, so a server kept in a `static` (whose
//! `Drop` never runs) does not outlive the tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
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
    /// The program and its extra arguments, to start it again
    /// ([`RedisServer::restart`]).
    binary: PathBuf,
    extra: Vec<String>,
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

/// A child server process and its watchdog.
#[derive(Debug)]
pub(super) struct Process {
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
        let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let process = Self::launch(binary, &extra, tls, port, dir.path())?;
        Ok(RedisServer {
            process,
            port,
            tls,
            binary: binary.to_path_buf(),
            extra,
            _dir: dir,
        })
    }

    /// Run `binary` on `port` in `dir` and wait until it answers.
    fn launch(
        binary: &Path,
        extra: &[String],
        tls: bool,
        port: u16,
        dir: &Path,
    ) -> Result<Process, String> {
        let log = dir.join("redis.log");
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
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut process = Process::new(child, "TERM", dir);
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
            Ok(()) => Ok(process),
            Err(e) => Err(format!("{e}; log: {}", read_log(&log))),
        }
    }

    /// Stop the server and start it again on the same port, returning once
    /// it answers. It keeps no data (`--save ""`, no AOF): it comes back
    /// empty. Clients connected before it see their connections closed.
    ///
    /// # Panics
    ///
    /// When the server does not come back.
    pub fn restart(&mut self) {
        self.process.stop();
        // A new log: the TLS readiness check reads it.
        let _ = std::fs::remove_file(self._dir.path().join("redis.log"));
        match Self::launch(
            &self.binary,
            &self.extra,
            self.tls,
            self.port,
            self._dir.path(),
        ) {
            Ok(process) => self.process = process,
            Err(e) => panic!("redis-server did not come back: {e}"),
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

impl Process {
    pub(super) fn new(child: Child, stop_signal: &'static str, dir: &Path) -> Process {
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

    pub(super) fn stop(&mut self) {
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
pub(super) fn wait_until(
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
pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// `path` as an argument of a server's command line.
pub(super) fn path(path: &Path) -> String {
    path.display().to_string()
}

pub(super) fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// `name` in `extra` directories, then in `PATH` and the usual places.
pub(super) fn find_binary(name: &str, extra: &[&Path]) -> Option<PathBuf> {
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
