//! Real PostgreSQL servers for tests, on free loopback ports, in
//! temporary directories, each with a [`Watchdog`](super::Watchdog) (see
//! [`daemons`](super::daemons)).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::daemons::{find_binary, free_port, read_log, wait_until, Process};
use super::{CertifiedKeyFiles, TempDir};

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
    /// How it was started, to start it again ([`PostgresServer::restart`]).
    launch: Launch,
    _dir: TempDir,
}

/// The command that starts a server on its data directory.
#[derive(Debug)]
struct Launch {
    postgres: PathBuf,
    pg_isready: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    account: Option<(u32, u32)>,
    /// Every `-c` setting, in order.
    settings: Vec<String>,
    log: PathBuf,
}

impl Launch {
    /// Start the server on `port` and wait until it takes connections.
    fn start(&self, port: u16) -> Result<Process, String> {
        let log = File::create(&self.log).expect("create the log");
        let child = as_account(self.account, &self.postgres)
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &port.to_string()])
            .args(self.settings.iter().flat_map(|setting| ["-c", setting]))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        // SIGQUIT: immediate shutdown, which also removes shared memory.
        let mut process = Process::new(child, "QUIT", &self.dir);
        let ready = || {
            Command::new(&self.pg_isready)
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "idem"])
                .args(["-d", "postgres", "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        match wait_until(Duration::from_secs(30), &mut process, ready) {
            Ok(()) => Ok(process),
            Err(e) => Err(format!("{e}; log: {}", read_log(&self.log))),
        }
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
        let mut all_settings = vec![
            "listen_addresses=127.0.0.1".to_owned(),
            format!("unix_socket_directories={}", dir.path().display()),
            "fsync=off".to_owned(),
            "max_connections=200".to_owned(),
            "shared_preload_libraries=pg_stat_statements".to_owned(),
        ];
        all_settings.extend(tls_settings);
        all_settings.extend(settings.iter().map(|s| (*s).to_owned()));
        let launch = Launch {
            postgres,
            pg_isready,
            data,
            dir: dir.path().to_path_buf(),
            account,
            settings: all_settings,
            log: dir.path().join("postgres.log"),
        };
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port();
            match launch.start(port) {
                Ok(process) => {
                    if tls.is_some() {
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
                    }
                    return Some(PostgresServer {
                        process,
                        port,
                        launch,
                        _dir: dir,
                    });
                }
                Err(e) => last_error = e,
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

    /// Stop the server (immediately: `SIGQUIT`, as a crash would) and
    /// start it again on the same port and data directory, returning once
    /// it takes connections again. Clients connected before it see their
    /// connections closed.
    ///
    /// # Panics
    ///
    /// When the server does not come back.
    pub fn restart(&mut self) {
        self.process.stop();
        match self.launch.start(self.port) {
            Ok(process) => self.process = process,
            Err(e) => panic!("postgres did not come back: {e}"),
        }
    }
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
