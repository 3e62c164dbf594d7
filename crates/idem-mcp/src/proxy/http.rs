//! The upstream over streamable HTTP (`idem proxy --upstream URL`): rmcp's
//! client transport, which knows the protocol (sessions, event streams,
//! re-initializing an expired session), on idem's own HTTP client
//! (`crate::https`: hyper's, over `http://` or `https://`, rustls on ring,
//! the platform's roots and `IDEM_TLS_CA_FILE`, every certificate
//! verified).
//!
//! What this client adds is the line the executor needs: whether a request
//! left. A connection that could not be made sent nothing
//! ([`HttpError::Unsent`]); anything that goes wrong once a connection took
//! the request may have let the upstream act ([`HttpError::Sent`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use http::{header, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

use idem_net::client::chain;
use idem_runtime::store::url::TLS_CA_FILE_ENV as CA_FILE_ENV;

/// The upstream's HTTP client: idem's own ([`idem_net::client`]), as
/// rmcp's streamable HTTP transport takes one.
#[derive(Clone, Debug)]
pub(super) struct HttpClient(idem_net::client::HttpClient);

/// The session header of streamable HTTP.
const SESSION: &str = "mcp-session-id";
/// Where an event stream resumes.
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// An `--upstream` URL the proxy cannot use.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamUrlError {
    /// Not an `http(s)://host[:port]/path` URL.
    #[error("--upstream {url}: {reason}; give the server's https://HOST[:PORT]/PATH address")]
    Invalid {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS trust for an `https://` upstream cannot be set up (the CA
    /// file of `IDEM_TLS_CA_FILE` cannot be read).
    #[error("--upstream {url}: {reason}")]
    Tls {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
}

/// Check an `--upstream` URL: `http://` or `https://` with a host.
pub(super) fn check_url(url: &str) -> Result<(), UpstreamUrlError> {
    let invalid = |reason: String| UpstreamUrlError::Invalid {
        url: url.to_owned(),
        reason,
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| invalid(format!("not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(invalid(format!(
                "the scheme `{other}` is not http or https"
            )))
        }
        None => return Err(invalid("no scheme".to_owned())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".to_owned()));
    }
    Ok(())
}

/// rustls's client configuration for `https://` upstreams: the platform's
/// roots, and the CAs of `IDEM_TLS_CA_FILE` when it is set.
pub(super) fn tls_config(url: &str) -> Result<rustls::ClientConfig, UpstreamUrlError> {
    idem_net::client::client_config().map_err(|reason| UpstreamUrlError::Tls {
        url: url.to_owned(),
        reason,
    })
}

/// Why an HTTP exchange with the upstream failed, split by whether the
/// request may have reached it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// No connection could be made (refused, unreachable, no such host):
    /// the request was not sent.
    #[error("cannot connect to the upstream server: {0}")]
    Unsent(String),
    /// The request was sent (or may have been), then the exchange failed:
    /// the connection dropped, a body could not be read.
    #[error("the connection to the upstream server failed after the request was sent: {0}")]
    Sent(String),
    /// The request could not be built (a header value): nothing was sent.
    #[error("cannot build the request: {0}")]
    Request(String),
}

type Failure = StreamableHttpError<HttpError>;

impl HttpClient {
    /// A client with no connection yet, for `http://` and `https://`
    /// (with `tls`).
    pub(super) fn new(tls: rustls::ClientConfig) -> Self {
        HttpClient(idem_net::client::HttpClient::new(tls))
    }

    /// Send `request`; the response's head, its body still to read.
    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, Failure> {
        self.0.request(request).await.map_err(|e| {
            // hyper-util's own test: the connector failed (the TCP
            // connection or the TLS handshake, before any byte of the
            // request), so nothing went out. Otherwise the request may have.
            let error = if e.is_connect() {
                let mut said = chain(&e);
                if said.contains("invalid peer certificate") {
                    said.push_str(&format!(
                        "; the upstream's certificate does not verify: if a private CA signed \
                         it, name the CA's certificate file with {CA_FILE_ENV}"
                    ));
                }
                HttpError::Unsent(said)
            } else {
                HttpError::Sent(chain(&e))
            };
            StreamableHttpError::Client(error)
        })
    }
}

/// A request to the upstream with the headers every one carries.
fn request(
    method: Method,
    uri: &str,
    session: Option<&str>,
    auth: Option<String>,
    custom: HashMap<HeaderName, HeaderValue>,
) -> http::request::Builder {
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in custom {
        builder = builder.header(name, value);
    }
    if let Some(session) = session {
        builder = builder.header(SESSION, session);
    }
    if let Some(token) = auth {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    builder
}

fn built(builder: http::request::Builder, body: Bytes) -> Result<Request<Full<Bytes>>, Failure> {
    builder
        .body(Full::new(body))
        .map_err(|e| StreamableHttpError::Client(HttpError::Request(e.to_string())))
}

/// Whether the response's content type is `expected` (parameters aside).
fn is_type(response: &Response<Incoming>, expected: &str) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(expected))
}

/// The response's body, at most `limit` bytes of it.
async fn body(response: Response<Incoming>, limit: usize) -> Result<Bytes, Failure> {
    Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                StreamableHttpError::ResponseBodyTooLarge { max_size: limit }
            } else {
                StreamableHttpError::Client(HttpError::Sent(format!(
                    "the response could not be read: {}",
                    chain(e.as_ref())
                )))
            }
        })
}

/// The response's event stream, each event at most `limit` bytes.
fn events(response: Response<Incoming>, limit: usize) -> BoxStream<'static, Result<Sse, SseError>> {
    // Bytes since the last blank line (the end of an event), and the
    // length of the current line, counted before the parser buffers them.
    let mut in_event = 0usize;
    let mut line = 0usize;
    let bytes = response.into_body().into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(chain(&e)))?;
        for &byte in chunk.iter() {
            match byte {
                b'\n' if line == 0 => in_event = 0,
                b'\n' => line = 0,
                b'\r' => {}
                _ => {
                    line += 1;
                    in_event += 1;
                }
            }
            if in_event > limit {
                return Err(std::io::Error::other(format!(
                    "an event of the upstream's stream is larger than {limit} bytes"
                )));
            }
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// A non-success response as an error, with the start of its body.
async fn status_error(
    response: Response<Incoming>,
    limits: &StreamableHttpResponseLimits,
) -> Failure {
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        return StreamableHttpError::HttpStatus(HttpStatusError::new(status.as_u16(), retry_after));
    }
    let text = match body(response, limits.max_error_response_size).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::from("(the body could not be read)"),
    };
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}: {text}")))
}

// rmcp's transport calls the `…_with_response_limits` and
// `…_with_max_sse_event_size` methods, which apply its limits; the others
// are the trait's required entry points, with the default limits.
impl StreamableHttpClient for HttpClient {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let json = serde_json::to_vec(&message)?;
        let builder = request(
            Method::POST,
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
        )
        .header(header::CONTENT_TYPE, JSON)
        .header(header::ACCEPT, format!("{JSON}, {EVENT_STREAM}"));
        let response = self.send(built(builder, Bytes::from(json))?).await?;
        let status = response.status();
        // A notification or a response taken in: nothing comes back.
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        // The server no longer knows the session (it restarted): it did
        // not act on the request. rmcp initializes a new session and sends
        // the request again once.
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        // Some servers (server-everything's streamable HTTP) answer a
        // session they do not know with 400 and a JSON-RPC error that
        // answers no request. A 400 is a refusal to act, so this too is a
        // session to begin again; an error answering our request is the
        // answer.
        if status == StatusCode::BAD_REQUEST && session_id.is_some() {
            let bytes = body(response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&bytes) {
                Ok(error @ ServerJsonRpcMessage::Error(_)) if answers(&error) => {
                    Ok(StreamableHttpPostResponse::Json(error, None))
                }
                _ => Err(StreamableHttpError::SessionExpired),
            };
        }
        let session = response
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answers_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            // A JSON-RPC error in an HTTP error's body is the answer.
            if is_type(&response, JSON) {
                let bytes = body(response, limits.max_json_response_size).await?;
                return match serde_json::from_slice::<ServerJsonRpcMessage>(&bytes) {
                    Ok(error @ ServerJsonRpcMessage::Error(_)) => {
                        Ok(StreamableHttpPostResponse::Json(error, session))
                    }
                    _ => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                        format!(
                            "HTTP {status}: {}",
                            String::from_utf8_lossy(
                                &bytes[..bytes.len().min(limits.max_error_response_size)]
                            )
                        ),
                    ))),
                };
            }
            return Err(status_error(response, &limits).await);
        }
        if is_type(&response, EVENT_STREAM) {
            return Ok(StreamableHttpPostResponse::Sse(
                events(response, limits.max_sse_event_size),
                session,
            ));
        }
        if is_type(&response, JSON) {
            let bytes = body(response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&bytes) {
                Ok(answer) => Ok(StreamableHttpPostResponse::Json(answer, session)),
                // Some servers answer a notification with an empty 200.
                Err(_) if answers_nothing => Ok(StreamableHttpPostResponse::Accepted),
                Err(e) => Err(StreamableHttpError::Deserialize(e)),
            };
        }
        if answers_nothing {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        let builder = request(
            Method::DELETE,
            &uri,
            Some(&session_id),
            auth_header,
            custom_headers,
        );
        let response = self.send(built(builder, Bytes::new())?).await?;
        match response.status() {
            // A server that keeps no sessions, or has already forgotten it.
            StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_FOUND => Ok(()),
            status if status.is_success() => Ok(()),
            status => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("ending the session: HTTP {status}"),
            ))),
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let mut builder = request(
            Method::GET,
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
        )
        .header(header::ACCEPT, EVENT_STREAM);
        if let Some(id) = last_event_id {
            builder = builder.header(LAST_EVENT_ID, id);
        }
        let response = self.send(built(builder, Bytes::new())?).await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        // 404, or 400 from servers that answer an unknown session so.
        if matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST) && session_id.is_some()
        {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(status_error(response, &StreamableHttpResponseLimits::default()).await);
        }
        if !is_type(&response, EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(
                response
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            ));
        }
        Ok(events(response, max_sse_event_size))
    }
}

/// Whether a JSON-RPC error answers a request (it has an id).
fn answers(error: &ServerJsonRpcMessage) -> bool {
    matches!(error, ServerJsonRpcMessage::Error(error) if error.id.is_some())
}

/// Whether a failed exchange certainly left the upstream untouched: no
/// connection, or a session the server no longer knew.
pub(super) fn unsent(error: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        error.downcast_ref::<Failure>(),
        Some(
            StreamableHttpError::Client(HttpError::Unsent(_) | HttpError::Request(_))
                | StreamableHttpError::SessionExpired
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_https_urls_with_a_host_are_accepted() {
        assert!(check_url("https://mcp.example.com/mcp").is_ok());
        assert!(check_url("http://127.0.0.1:3001/mcp").is_ok());
    }

    #[test]
    fn other_bad_urls_are_named() {
        for url in [
            "ftp://host/mcp",
            "127.0.0.1:3001/mcp",
            "http:///mcp",
            "not a url",
        ] {
            let error = check_url(url).unwrap_err();
            assert!(matches!(error, UpstreamUrlError::Invalid { .. }), "{url}");
            assert!(error.to_string().contains(url), "{error}");
        }
        check_url("http://127.0.0.1:3001/mcp").unwrap();
        check_url("http://localhost/mcp").unwrap();
    }

    #[test]
    fn only_a_refused_connection_or_an_unknown_session_counts_as_unsent() {
        let refused: Failure = StreamableHttpError::Client(HttpError::Unsent("refused".into()));
        let dropped: Failure = StreamableHttpError::Client(HttpError::Sent("reset".into()));
        assert!(unsent(&refused));
        assert!(unsent(&StreamableHttpError::<HttpError>::SessionExpired));
        assert!(!unsent(&dropped));
        assert!(!unsent(
            &StreamableHttpError::<HttpError>::UnexpectedEndOfStream
        ));
    }
}
