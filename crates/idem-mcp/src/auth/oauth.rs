//! A server as an OAuth 2.1 resource server, as MCP's authorization rules
//! describe one (`idem proxy --listen --oauth-issuer URL --oauth-resource
//! URL`, or [`Authenticator`](super::Authenticator) with [`OAuthOptions`]).
//! A request's `Authorization: Bearer JWT` is an access token the issuer
//! signed: its signature is checked against the issuer's
//! published keys (JWKS), its `iss` must be the issuer, its `aud` this
//! resource (RFC 8707), and it must not have expired. The token's subject
//! (`sub`) is the caller, recorded as the principal `oauth/SUB`, so its
//! calls keep to records of their own, apart from every other subject's and
//! from every principal of a principals file (whose names have no `/`).
//!
//! The server publishes its protected-resource metadata (RFC 9728) at
//! `/.well-known/oauth-protected-resource` (and under the resource's path,
//! [`Authenticator::metadata_router`](super::Authenticator::metadata_router)),
//! and a refusal's `WWW-Authenticate` points a client to it, which is how an
//! MCP client finds where to sign in.
//!
//! The issuer's keys are found at start (RFC 8414's authorization-server
//! metadata, else OpenID Connect discovery, unless `--oauth-jwks` names
//! them) and fetched again when a token names a key not seen yet or once
//! they are an hour old: one fetch at a time, and at most every 30 s
//! whether it succeeded or failed. A token naming an unknown key while a
//! fetch is under way, or within 30 s of the last attempt, is refused at
//! once (401); it never waits behind a slow issuer, nor starts a fetch of
//! its own. Only asymmetric algorithms are
//! accepted: a token signed with a shared secret, or not signed, is refused.

use std::time::{Duration, Instant};

use http::Uri;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};

use super::AuthError;
use idem_net::client::{client_config as tls_config, HttpClient};
use idem_net::destination::{self, Refused};

/// The algorithms a token may be signed with: the issuer's private key,
/// never a secret it shares (HS*), never none.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How long clocks may disagree about a token's `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 60;
/// A token naming a key not in the set fetches it again, at most this often.
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(30);
/// Keys older than this are fetched again (a key the issuer withdrew stops
/// verifying within the hour).
const KEYS_MAX_AGE: Duration = Duration::from_secs(3600);
/// The most of a metadata document or key set the proxy reads.
const MAX_DOCUMENT: usize = 256 * 1024;
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The prefix of the principals tokens name: `oauth/SUB`.
const PRINCIPAL_PREFIX: &str = "oauth/";

/// Which OAuth issuer's access tokens a server accepts, and for which
/// resource (`--oauth-issuer`, `--oauth-resource`, `--oauth-jwks`).
///
/// ```
/// use idem::mcp::auth::OAuthOptions;
///
/// let options = OAuthOptions::new("https://login.example.com", "https://mcp.example.com/mcp")
///     // Only when the issuer's metadata does not name its key set.
///     .jwks("https://login.example.com/keys");
/// ```
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    issuer: String,
    resource: String,
    jwks: Option<String>,
}

impl OAuthOptions {
    /// Tokens from `issuer` (their `iss`, an `https://` URL, or `http://`
    /// to this machine) for `resource` (their `aud`, RFC 8707): the URL
    /// clients reach this server at, such as `https://mcp.example.com/mcp`.
    /// The issuer's keys are discovered from its metadata (RFC 8414, else
    /// OpenID Connect discovery).
    pub fn new(issuer: impl Into<String>, resource: impl Into<String>) -> Self {
        OAuthOptions {
            issuer: issuer.into(),
            resource: resource.into(),
            jwks: None,
        }
    }

    /// The issuer's key set (JWKS) is at `url`, rather than where its
    /// metadata says (the example of [`OAuthOptions`]).
    pub fn jwks(mut self, url: impl Into<String>) -> Self {
        self.jwks = Some(url.into());
        self
    }

    /// The options a command line's `--oauth-issuer`, `--oauth-resource`
    /// and `--oauth-jwks` give: `None` when none is given; refused when
    /// the issuer comes without the resource or the other way round, or
    /// the key set without them.
    ///
    /// ```
    /// use idem_mcp::auth::OAuthOptions;
    ///
    /// assert!(OAuthOptions::from_flags(None, None, None).unwrap().is_none());
    /// let options = OAuthOptions::from_flags(
    ///     Some("https://login.example.com"),
    ///     Some("https://mcp.example.com/mcp"),
    ///     None,
    /// );
    /// assert!(options.unwrap().is_some());
    /// assert!(OAuthOptions::from_flags(Some("https://login.example.com"), None, None).is_err());
    /// ```
    pub fn from_flags(
        issuer: Option<&str>,
        resource: Option<&str>,
        jwks: Option<&str>,
    ) -> Result<Option<OAuthOptions>, AuthError> {
        match (issuer, resource, jwks) {
            (None, None, None) => Ok(None),
            (Some(issuer), Some(resource), jwks) => {
                let options = OAuthOptions::new(issuer, resource);
                Ok(Some(match jwks {
                    Some(jwks) => options.jwks(jwks),
                    None => options,
                }))
            }
            _ => Err(AuthError::OAuth(
                "--oauth-issuer and --oauth-resource go together (and --oauth-jwks needs them)"
                    .to_owned(),
            )),
        }
    }
}

/// A resource server: the issuer's keys and what a token must
/// say.
pub(super) struct OAuth {
    issuer: String,
    resource: String,
    jwks_uri: String,
    client: HttpClient,
    keys: tokio::sync::RwLock<Keys>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// Fetches start at most this often ([`REFETCH_AT_MOST_EVERY`]).
    refetch_every: Duration,
}

struct Keys {
    set: JwkSet,
    /// When `set` was fetched.
    fetched: Instant,
    /// When a fetch was last tried, whatever came of it.
    attempted: Instant,
    /// Why the last attempt failed, if it did.
    failed: Option<String>,
}

impl Keys {
    /// The answer for `kid` from the keys held, without fetching.
    fn answer(&self, kid: Option<&str>) -> Result<DecodingKey, Refusal> {
        match (&self.failed, self.fetched.elapsed() < KEYS_MAX_AGE) {
            (_, true) => pick(&self.set, kid).unwrap_or(Err(Refusal::UnknownKey)),
            (Some(failed), false) => Err(Refusal::Keys(failed.clone())),
            (None, false) => Err(Refusal::Keys("they are over an hour old".into())),
        }
    }
}

/// Why a token was refused: said in the server's log and, briefly, in
/// the `WWW-Authenticate` header (RFC 6750's `error_description`); never
/// the token itself.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// Not a signed JWT: opaque, malformed, or `alg: none`.
    #[error("the token is not a signed JWT")]
    NotJwt,
    /// Signed with an algorithm the server does not accept.
    #[error("the token is signed with {0:?}, not with an asymmetric algorithm")]
    Algorithm(Algorithm),
    /// Names a key the issuer does not publish.
    #[error("the token names a key the issuer does not publish")]
    UnknownKey,
    /// The issuer's keys could not be fetched again.
    #[error("the issuer's keys cannot be fetched: {0}")]
    Keys(String),
    /// Checked and found wanting: signature, issuer, audience, times.
    #[error("the token {0}")]
    Invalid(&'static str),
    /// Its subject cannot name a record space.
    #[error("the token's subject cannot name a namespace")]
    Subject,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

impl OAuth {
    /// Check the options, find the issuer's keys and fetch them: before
    /// any upstream starts, so that a wrong issuer stops the proxy at once.
    pub(super) async fn start(options: &OAuthOptions) -> Result<OAuth, AuthError> {
        let failed = AuthError::OAuth;
        for (option, url) in [
            ("--oauth-issuer", Some(&options.issuer)),
            ("--oauth-resource", Some(&options.resource)),
            ("--oauth-jwks", options.jwks.as_ref()),
        ] {
            if let Some(url) = url {
                secure_url(option, url).map_err(failed)?;
            }
        }
        let issuer = options.issuer.clone();
        let client = HttpClient::new(
            tls_config().map_err(|e| failed(format!("--oauth-issuer {issuer}: {e}")))?,
        );
        let jwks_uri = match &options.jwks {
            Some(jwks) => jwks.clone(),
            None => discover(&client, &issuer).await.map_err(failed)?,
        };
        secure_url("the issuer's jwks_uri", &jwks_uri).map_err(failed)?;
        let set = fetch_keys(&client, &jwks_uri)
            .await
            .map_err(|e| failed(format!("--oauth-issuer {issuer}: {e}")))?;
        Ok(OAuth {
            issuer,
            resource: options.resource.clone(),
            jwks_uri,
            client,
            keys: tokio::sync::RwLock::new(Keys {
                set,
                fetched: Instant::now(),
                attempted: Instant::now(),
                failed: None,
            }),
            fetching: tokio::sync::Mutex::new(()),
            refetch_every: REFETCH_AT_MOST_EVERY,
        })
    }

    /// The principal `token` names (`oauth/SUB`), or why it is refused.
    pub(super) async fn principal(&self, token: &str) -> Result<String, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refusal::NotJwt)?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Refusal::Algorithm(header.alg));
        }
        let key = self.key(header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Refusal::Invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "has expired",
                ErrorKind::ImmatureSignature => "is not valid yet (nbf)",
                ErrorKind::InvalidAudience => "is for another resource (aud)",
                ErrorKind::InvalidIssuer => "is from another issuer (iss)",
                ErrorKind::InvalidSignature => "has a signature that does not verify",
                ErrorKind::MissingRequiredClaim(_) => "lacks exp, iss, aud or sub",
                ErrorKind::InvalidAlgorithm => "is signed with an algorithm its key is not for",
                _ => "is malformed",
            })
        })?;
        let principal = format!("{PRINCIPAL_PREFIX}{}", data.claims.sub);
        if data.claims.sub.is_empty()
            || data.claims.sub.contains(char::is_control)
            || idem_runtime::Namespace::new(format!("mcp/x/{principal}")).is_err()
        {
            return Err(Refusal::Subject);
        }
        Ok(principal)
    }

    /// The key a token names (`kid`), or the issuer's only key when it
    /// names none; fetched again when it is not known yet or the keys are
    /// old, by one request at a time, at most every `refetch_every`.
    async fn key(&self, kid: Option<&str>) -> Result<DecodingKey, Refusal> {
        let fresh = {
            let keys = self.keys.read().await;
            let fresh = keys.fetched.elapsed() < KEYS_MAX_AGE;
            if fresh {
                if let Some(key) = pick(&keys.set, kid) {
                    return key;
                }
            }
            if keys.attempted.elapsed() < self.refetch_every {
                return keys.answer(kid);
            }
            fresh
        };
        // A key not seen yet does not wait for a fetch under way: the
        // keys held answer it. Old keys are waited for (at most one
        // fetch's time), as none may be used.
        let _one = match fresh {
            true => match self.fetching.try_lock() {
                Ok(one) => one,
                Err(_) => return Err(Refusal::UnknownKey),
            },
            false => self.fetching.lock().await,
        };
        if self.keys.read().await.attempted.elapsed() < self.refetch_every {
            // Another request tried meanwhile.
            return self.keys.read().await.answer(kid);
        }
        let fetched = fetch_keys(&self.client, &self.jwks_uri).await;
        let mut keys = self.keys.write().await;
        keys.attempted = Instant::now();
        match fetched {
            Ok(set) => {
                tracing::info!(
                    keys = set.keys.len(),
                    "fetched the OAuth issuer's keys again"
                );
                keys.set = set;
                keys.fetched = Instant::now();
                keys.failed = None;
                keys.answer(kid)
            }
            Err(e) => {
                tracing::warn!("the OAuth issuer's keys cannot be fetched again: {e}");
                keys.failed = Some(e.clone());
                Err(Refusal::Keys(e))
            }
        }
    }

    /// The protected-resource metadata (RFC 9728).
    pub(super) fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        })
    }

    /// Where the metadata is published for the resource, as
    /// `WWW-Authenticate` names it: the well-known path between the
    /// resource's host and its path (RFC 9728 §3.1).
    pub(super) fn metadata_url(&self) -> String {
        metadata_url(&self.resource)
    }

    /// The paths this server answers the metadata at: the root's
    /// well-known path and, when the resource has a path, the one under it.
    pub(super) fn metadata_paths(&self) -> Vec<String> {
        OAuth::paths_of(&self.resource)
    }

    fn paths_of(resource: &str) -> Vec<String> {
        let root = format!("/.well-known/{METADATA}");
        let (_, at_path) = split_url(resource);
        match at_path.trim_end_matches('/') {
            "" => vec![root],
            path => vec![root.clone(), format!("{root}{path}")],
        }
    }
}

/// The well-known name of a protected resource's metadata (RFC 9728).
const METADATA: &str = "oauth-protected-resource";

/// The well-known URL of `resource`'s metadata.
fn metadata_url(resource: &str) -> String {
    well_known(resource, METADATA)
}

/// A URL's `scheme://authority` and its path, as `http` reads them (the
/// URLs were checked by [`secure_url`] first).
fn split_url(url: &str) -> (String, String) {
    let uri: Uri = url.parse().unwrap_or_default();
    let origin = match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => format!("{scheme}://{authority}"),
        _ => String::new(),
    };
    (origin, uri.path().to_owned())
}

/// RFC 8414 / RFC 9728: `https://host/.well-known/NAME/path`.
fn well_known(url: &str, name: &str) -> String {
    let (origin, path) = split_url(url);
    let path = path.trim_end_matches('/');
    format!("{origin}/.well-known/{name}{path}")
}

/// `url` is `https://`, or `http://` to this machine (a test's issuer, an
/// issuer on the same host).
fn secure_url(option: &str, url: &str) -> Result<(), String> {
    match destination::check(url) {
        Ok(_) => Ok(()),
        Err(Refused::NotUrl(e)) => Err(format!("{option} {url}: not a URL ({e})")),
        Err(_) => Err(format!(
            "{option} {url}: write an https:// URL (plain http:// only to this machine)"
        )),
    }
}

/// The key of `kid` in `set` (or its only key), as a verifying key:
/// `None` when the set has no such key.
fn pick(set: &JwkSet, kid: Option<&str>) -> Option<Result<DecodingKey, Refusal>> {
    let jwk = match kid {
        Some(kid) => set.find(kid)?,
        None if set.keys.len() == 1 => &set.keys[0],
        None => {
            return Some(Err(Refusal::Invalid(
                "names no key (kid), and the issuer has several",
            )))
        }
    };
    Some(DecodingKey::from_jwk(jwk).map_err(|_| Refusal::UnknownKey))
}

/// The issuer's `jwks_uri`, from its authorization-server metadata
/// (RFC 8414), else its OpenID Connect configuration.
async fn discover(client: &HttpClient, issuer: &str) -> Result<String, String> {
    let places = [
        well_known(issuer, "oauth-authorization-server"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    let mut said = Vec::new();
    for place in &places {
        match fetch_json(client, place).await {
            Ok(document) => {
                // RFC 8414 §3.3: the document must be the issuer's own.
                if document.get("issuer").and_then(Value::as_str) != Some(issuer) {
                    said.push(format!("{place} is not for issuer {issuer}"));
                    continue;
                }
                return match document.get("jwks_uri").and_then(Value::as_str) {
                    Some(jwks) => Ok(jwks.to_owned()),
                    None => Err(format!("--oauth-issuer {issuer}: {place} names no jwks_uri; name the key set with --oauth-jwks URL")),
                };
            }
            Err(e) => said.push(format!("{place}: {e}")),
        }
    }
    Err(format!(
        "--oauth-issuer {issuer}: its metadata cannot be read ({}); name its key set with --oauth-jwks URL",
        said.join("; ")
    ))
}

async fn fetch_keys(client: &HttpClient, url: &str) -> Result<JwkSet, String> {
    let document = fetch_json(client, url).await?;
    let set: JwkSet =
        serde_json::from_value(document).map_err(|e| format!("{url} is not a JWK set ({e})"))?;
    if set.keys.is_empty() {
        return Err(format!("{url} holds no key"));
    }
    Ok(set)
}

async fn fetch_json(client: &HttpClient, url: &str) -> Result<Value, String> {
    let fetched = tokio::time::timeout(
        FETCH_TIMEOUT,
        client.get(url, "application/json", MAX_DOCUMENT),
    )
    .await
    .map_err(|_| format!("no answer within {} s", FETCH_TIMEOUT.as_secs()))??;
    match fetched {
        (status, body) if status.is_success() => {
            serde_json::from_slice(&body).map_err(|e| format!("not JSON ({e})"))
        }
        (status, _) => Err(format!("HTTP {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls_go_between_the_host_and_the_path() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("https://mcp.example.com"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            well_known(
                "https://login.example.com/tenant/",
                "oauth-authorization-server"
            ),
            "https://login.example.com/.well-known/oauth-authorization-server/tenant"
        );
    }

    #[test]
    fn the_metadata_is_served_at_the_root_and_under_the_resource_path() {
        let at = |resource: &str| OAuth::paths_of(resource);
        assert_eq!(
            at("https://mcp.example.com/mcp"),
            [
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp"
            ]
        );
        assert_eq!(
            at("https://mcp.example.com/"),
            ["/.well-known/oauth-protected-resource"]
        );
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp?tenant=1"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn plain_http_is_for_this_machine_only() {
        assert!(secure_url("--oauth-issuer", "https://login.example.com").is_ok());
        assert!(secure_url("--oauth-issuer", "http://127.0.0.1:8080").is_ok());
        assert!(secure_url("--oauth-issuer", "http://[::1]:8080/x").is_ok());
        assert!(secure_url("--oauth-issuer", "http://localhost:8080").is_ok());
        let refused = secure_url("--oauth-issuer", "http://login.example.com").unwrap_err();
        assert!(refused.contains("https://"), "{refused}");
        assert!(secure_url("--oauth-issuer", "login.example.com").is_err());
    }

    /// An issuer's key set on loopback that answers as `mode` says (0:
    /// the set, 1: HTTP 500, 2: the set after 2 s), counting its fetches.
    async fn issuer() -> (String, std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>) {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let state = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let set = json!({"keys": [{"kty": "EC", "crv": "P-256", "use": "sig", "kid": "k1",
            "x": "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
            "y": "4Etl6SRW2YilurN5XfgDQn3jXeUGfKRcFVdHrIWZD1M"}]});
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (state, set) = (shared.clone(), set.clone());
                async move {
                    state[1].fetch_add(1, SeqCst);
                    match state[0].load(SeqCst) {
                        1 => Err(http::StatusCode::INTERNAL_SERVER_ERROR),
                        mode => {
                            if mode == 2 {
                                tokio::time::sleep(Duration::from_secs(2)).await;
                            }
                            Ok((
                                [(http::header::CONTENT_TYPE, "application/json")],
                                set.to_string(),
                            ))
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, state)
    }

    /// A token whose header names key `kid` (its signature is never
    /// reached: the key is looked up first).
    fn naming(kid: &str) -> String {
        use base64::Engine;
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": kid}).to_string();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.e30.c2ln", b64.encode(header))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_keys_fetch_the_set_once_per_interval_and_never_queue() {
        use std::sync::atomic::Ordering::SeqCst;
        let (url, state) = issuer().await;
        let options = OAuthOptions::new("http://127.0.0.1:1/", "http://127.0.0.1:2/mcp").jwks(url);
        let mut oauth = OAuth::start(&options).await.unwrap();
        oauth.refetch_every = Duration::from_millis(300);
        let oauth = std::sync::Arc::new(oauth);
        assert_eq!(state[1].load(SeqCst), 1, "fetched at start");
        let press = |from: usize| {
            let oauth = oauth.clone();
            async move {
                let tokens = (from..from + 60).map(|i| {
                    let oauth = oauth.clone();
                    tokio::spawn(async move {
                        let started = Instant::now();
                        let refused = oauth.principal(&naming(&format!("k-{i}"))).await;
                        (refused.is_err(), started.elapsed())
                    })
                });
                let mut took = Vec::new();
                for token in tokens.collect::<Vec<_>>() {
                    let (refused, elapsed) = token.await.unwrap();
                    assert!(refused);
                    took.push(elapsed);
                }
                took.sort();
                took
            }
        };

        // The issuer fails: 60 unknown keys at once cause one fetch.
        state[0].store(1, SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        press(0).await;
        assert_eq!(state[1].load(SeqCst), 2, "one fetch for 60 unknown keys");
        press(100).await;
        assert_eq!(state[1].load(SeqCst), 2, "none again within the interval");

        // The issuer is slow: one waits for the fetch, the rest are
        // answered at once rather than queued behind it.
        state[0].store(2, SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        let took = press(200).await;
        assert_eq!(state[1].load(SeqCst), 3, "one fetch");
        assert!(took[58] < Duration::from_millis(500), "{took:?}");
        assert!(took[59] >= Duration::from_secs(2), "{took:?}");
    }
}
