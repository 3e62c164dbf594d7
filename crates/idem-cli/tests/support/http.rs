//! A plain HTTP client (hyper's) to talk to `idem serve` as a bot would,
//! or as a browser would that keeps cookies and, like the inbox's script,
//! a browser key for its posts; and what its replies say.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// One HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, Vec<String>>,
    pub body: String,
}

impl Reply {
    /// Assert that the reply has `status` and its body says `text`.
    pub fn says(&self, status: u16, text: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(self.body.contains(text), "not “{text}”: {}", self.body);
    }

    /// Assert that the reply has `status` and is an API error whose message
    /// says `text`.
    pub fn error_says(&self, status: u16, text: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        let message = self.json()["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message: {}", self.body))
            .to_owned();
        assert!(message.contains(text), "not “{text}”: {}", self.body);
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The values of header `name` (lower case).
    pub fn header(&self, name: &str) -> Vec<String> {
        self.headers.get(name).cloned().unwrap_or_default()
    }
}

/// Plain TCP, or TLS for `https://` URLs.
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A connector for `http://` and `https://` URLs that trusts `roots` only.
fn connector(mut tcp: HttpConnector, roots: rustls::RootCertStore) -> Connector {
    tcp.enforce_http(false);
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp)
}

/// An HTTP/1.1 client that keeps cookies like a browser would.
pub struct Http {
    client: Client<Connector, Full<Bytes>>,
    /// Cookies set by the server: name → value.
    pub cookies: HashMap<String, String>,
    /// The browser key the inbox's script would keep: made at each
    /// sign-in (`log_in`), and sent with every form posted, as the script
    /// adds it. `None`: a browser without the script.
    pub browser: Option<String>,
}

impl Default for Http {
    fn default() -> Self {
        Http::with(HttpConnector::new(), rustls::RootCertStore::empty())
    }
}

impl Http {
    fn with(tcp: HttpConnector, roots: rustls::RootCertStore) -> Http {
        Http {
            client: Client::builder(TokioExecutor::new()).build(connector(tcp, roots)),
            cookies: HashMap::new(),
            browser: None,
        }
    }

    /// A client whose connections come from `address` (any of 127.0.0.0/8
    /// on loopback), as from another machine.
    pub fn from_address(address: std::net::IpAddr) -> Http {
        let mut tcp = HttpConnector::new();
        tcp.set_local_address(Some(address));
        Http::with(tcp, rustls::RootCertStore::empty())
    }

    /// A client of `https://` URLs that trusts the CA certificate in the
    /// PEM file `ca`, and nothing else.
    pub fn trusting(ca: &std::path::Path) -> Http {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        Http::with(HttpConnector::new(), roots)
    }

    /// Send a request and wait at most `limit` for its answer: the
    /// answer's status, or the error the client got (a refused
    /// certificate, a closed connection).
    pub async fn try_get(&mut self, url: &str, limit: Duration) -> Result<u16, String> {
        let request = hyper::Request::get(url)
            .body(Full::new(Bytes::new()))
            .unwrap();
        match tokio::time::timeout(limit, self.client.request(request)).await {
            Err(_) => Err(format!("no answer within {limit:?}")),
            Ok(Err(e)) => Err(format!("{e:?}")),
            Ok(Ok(response)) => Ok(response.status().as_u16()),
        }
    }

    /// Send a request; `headers` beside the cookies kept.
    pub async fn send(
        &mut self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut request = hyper::Request::builder().method(method).uri(url);
        if !self.cookies.is_empty() {
            let cookie: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            request = request.header("cookie", cookie.join("; "));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .expect("idem serve answers within 30 s")
            .expect("idem serve answers");
        let status = response.status().as_u16();
        let mut headers: HashMap<String, Vec<String>> = HashMap::new();
        for (name, value) in response.headers() {
            headers
                .entry(name.as_str().to_owned())
                .or_default()
                .push(value.to_str().unwrap_or("").to_owned());
        }
        for cookie in headers.get("set-cookie").into_iter().flatten() {
            let pair = cookie.split(';').next().unwrap_or("");
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() || cookie.contains("Max-Age=0") {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// GET.
    pub async fn get(&mut self, url: &str) -> Reply {
        self.send("GET", url, &[], "").await
    }

    /// POST a form, with this browser's key (when it has one and the
    /// fields do not name one), as the inbox's script sends it.
    pub async fn form(&mut self, url: &str, fields: &[(&str, &str)]) -> Reply {
        let key = self
            .browser
            .as_deref()
            .filter(|_| !fields.iter().any(|(k, _)| *k == "browser"));
        let body: Vec<String> = fields
            .iter()
            .chain(key.map(|key| ("browser", key)).iter())
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        self.send(
            "POST",
            url,
            &[("content-type", "application/x-www-form-urlencoded")],
            &body.join("&"),
        )
        .await
    }

    /// A JSON API call with a bearer token.
    pub async fn api(
        &mut self,
        method: &str,
        url: &str,
        token: &str,
        body: Option<&Value>,
    ) -> Reply {
        let auth = format!("Bearer {token}");
        let mut headers = vec![("authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let body = body.map(Value::to_string).unwrap_or_default();
        self.send(method, url, &headers, &body).await
    }
}

/// `text` form-encoded.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of the hidden field `name` in an HTML page (the first).
pub fn hidden(html: &str, name: &str) -> Option<String> {
    let needle = format!("name=\"{name}\" value=\"");
    let start = html.find(&needle)? + needle.len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].to_owned())
}
