//! MCP over stdio with an answer for every request line, however broken.
//!
//! rmcp's stdio transport drops a line it cannot read: malformed JSON,
//! JSON nested deeper than the parser follows, or a request whose fields
//! do not have their types (`"_meta": "x"`) get no answer, or one without
//! the request's id, and the client waits for ever. This transport reads
//! each line itself and answers what cannot be served as JSON-RPC says:
//! `-32700` (parse error, id `null`) for text that is not JSON, `-32600`
//! (invalid request) for JSON that is not a request, `-32602` (invalid
//! params) for a request whose parameters do not fit, each with the
//! request's id when it can be read. Everything else goes to rmcp as it
//! came; rmcp's own messages go out one per line.
//!
//! ```no_run
//! # async fn f(server: idem::mcp::McpServer) -> Result<(), Box<dyn std::error::Error>> {
//! use rmcp::ServiceExt;
//! let running = server.serve(idem::mcp::stdio()).await?;
//! running.waiting().await?;
//! # Ok(()) }
//! ```

use std::io;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Sink, Stream};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::RoleServer;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The sending half of [`stdio`]: rmcp's messages, one JSON line each.
pub type LineSink = Pin<Box<dyn Sink<TxJsonRpcMessage<RoleServer>, Error = io::Error> + Send>>;

/// The receiving half of [`stdio`]: the requests that can be served.
pub type LineStream = Pin<Box<dyn Stream<Item = RxJsonRpcMessage<RoleServer>> + Send>>;

/// The server's transport over this process's stdin and stdout, for
/// `server.serve(stdio())`.
///
/// When they are pipes, as a client that starts the server makes them,
/// they are read and written on the runtime's own event loop; tokio's
/// `stdin()` and `stdout()` hand every read and write to a thread of its
/// blocking pool and back, a wake-up each way on every message. The pipes
/// are then non-blocking, so nothing else may read stdin or write stdout
/// (`println!`) while the server runs: stdout carries the protocol anyway.
pub fn stdio() -> (LineSink, LineStream) {
    #[cfg(unix)]
    if let Some((read, write)) = pipes() {
        return lines(read, write);
    }
    lines(tokio::io::stdin(), tokio::io::stdout())
}

/// Stdin and stdout as non-blocking pipes on the event loop (the runtime's
/// I/O driver, which `#[tokio::main]` enables); `None` when either is not a
/// pipe (a terminal, a file), or outside a runtime. Both are checked before
/// either is made non-blocking, so that a fallback never reads or writes a
/// non-blocking descriptor the blocking way.
#[cfg(unix)]
fn pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    tokio::runtime::Handle::try_current().ok()?;
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let fifo = |fd: &std::os::fd::OwnedFd| {
        let file = std::fs::File::from(fd.try_clone().ok()?);
        Some(file.metadata().ok()?.file_type().is_fifo())
    };
    if fifo(&input) != Some(true) || fifo(&output) != Some(true) {
        return None;
    }
    let read = tokio::net::unix::pipe::Receiver::from_owned_fd(input).ok()?;
    let write = tokio::net::unix::pipe::Sender::from_owned_fd(output).ok()?;
    Some((read, write))
}

/// The same over any reader and writer (a pipe, a socket, a test's
/// buffers).
pub fn lines<R, W>(read: R, write: W) -> (LineSink, LineStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let out = Arc::new(Mutex::new(write));
    let sink = futures_util::sink::unfold(out.clone(), |out, message| async move {
        let line = serde_json::to_string(&message).map_err(io::Error::other)?;
        write_line(&out, &line).await?;
        Ok::<_, io::Error>(out)
    });
    let reader = BufReader::new(read);
    let stream = futures_util::stream::unfold((reader, out), |(mut reader, out)| async move {
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let text = match std::str::from_utf8(&line) {
                Ok(text) => text.trim(),
                Err(_) => {
                    let answer = error(Value::Null, -32700, "Parse error: the line is not UTF-8");
                    // Stdout gone: the client is too.
                    write_line(&out, &answer).await.ok()?;
                    continue;
                }
            };
            if text.is_empty() {
                continue;
            }
            match read_message(text) {
                Ok(message) => return Some((message, (reader, out))),
                Err(Some(answer)) => write_line(&out, &answer).await.ok()?,
                Err(None) => {}
            }
        }
    });
    (Box::pin(sink), Box::pin(stream))
}

/// Write one line and flush it: one write, so that the reader is woken
/// once, with the whole line.
async fn write_line<W: AsyncWrite + Unpin>(out: &Mutex<W>, line: &str) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    let mut out = out.lock().await;
    out.write_all(&bytes).await?;
    out.flush().await
}

/// A message rmcp can serve, or the answer to a line that is none (`None`:
/// a broken notification, which JSON-RPC never answers).
fn read_message(text: &str) -> Result<RxJsonRpcMessage<RoleServer>, Option<String>> {
    // A line that reads is read once; only one that does not is looked at
    // again, for the answer it gets.
    if let Ok(message) = serde_json::from_str(text) {
        return Ok(message);
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) if e.to_string().contains("recursion limit") => {
            return Err(Some(error(
                top_level_id(text),
                -32600,
                "Invalid request: JSON nested deeper than 128 levels",
            )));
        }
        Err(e) => {
            return Err(Some(error(
                Value::Null,
                -32700,
                &format!("Parse error: {e}"),
            )))
        }
    };
    let problem = match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
        Ok(message) => return Ok(message),
        Err(e) => e.to_string(),
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let request = value.get("jsonrpc") == Some(&json!("2.0"))
        && value.get("method").is_some_and(Value::is_string);
    match (request, id) {
        (true, None) => {
            tracing::warn!(%problem, "dropped a notification that cannot be read");
            Err(None)
        }
        (true, Some(id)) => Err(Some(error(
            id,
            -32602,
            &format!("Invalid params: {problem}"),
        ))),
        (false, id) => Err(Some(error(
            id.unwrap_or(Value::Null),
            -32600,
            &format!("Invalid request: {problem}"),
        ))),
    }
}

/// A JSON-RPC error answer, as its line.
fn error(id: Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// The `id` of a request too deeply nested to parse: the value of the
/// top-level object's `id` key, found by walking the text outside strings;
/// `null` when there is none that is a string or a number.
fn top_level_id(text: &str) -> Value {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                let start = at;
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                let end = at.min(bytes.len());
                if depth == 1 && text.get(start..end) == Some("\"id") {
                    let rest = text.get(end + 1..).unwrap_or("").trim_start();
                    if let Some(value) = rest.strip_prefix(':') {
                        return leading_id(value.trim_start());
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    Value::Null
}

/// The string or number at the start of `text`.
fn leading_id(text: &str) -> Value {
    let end = if text.starts_with('"') {
        let bytes = text.as_bytes();
        let mut at = 1;
        while at < bytes.len() && bytes[at] != b'"' {
            at += if bytes[at] == b'\\' { 2 } else { 1 };
        }
        (at + 1).min(text.len())
    } else {
        text.find([',', '}', ' ', '\t', '\r', '\n'])
            .unwrap_or(text.len())
    };
    match serde_json::from_str::<Value>(text.get(..end).unwrap_or("")) {
        Ok(id @ (Value::String(_) | Value::Number(_))) => id,
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match read_message(line) {
            Ok(_) => panic!("served: {line}"),
            Err(Some(answer)) => serde_json::from_str(&answer).unwrap(),
            Err(None) => Value::Null,
        }
    }

    #[test]
    fn every_broken_request_gets_an_answer_with_its_id_when_it_has_one() {
        let parse = answer(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#);
        assert_eq!(parse["error"]["code"], -32700);
        assert_eq!(parse["id"], Value::Null);

        let meta = answer(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{},"_meta":"x"}}"#,
        );
        assert_eq!(meta["error"]["code"], -32602);
        assert_eq!(meta["id"], 3);

        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"req-4","method":"tools/call","params":{{"name":"t","arguments":{{"a":{}{}}}}}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        );
        let deep = answer(&deep);
        assert_eq!(deep["error"]["code"], -32600);
        assert_eq!(deep["id"], "req-4");

        let not_a_request = answer(r#"[1, 2]"#);
        assert_eq!(not_a_request["error"]["code"], -32600);

        // A broken notification is never answered.
        assert_eq!(
            answer(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}"#),
            Value::Null
        );
    }

    #[test]
    fn a_request_that_fits_goes_to_rmcp() {
        assert!(read_message(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).is_ok());
    }

    #[test]
    fn the_id_of_a_deep_request_is_read_whatever_its_place() {
        assert_eq!(
            top_level_id(r#"{"method":"x","params":{"id":9},"id":12}"#),
            12
        );
        assert_eq!(top_level_id(r#"{"a":"\"id\":1","id":"k\"q"}"#), "k\"q");
        assert_eq!(top_level_id(r#"{"id":null}"#), Value::Null);
        assert_eq!(top_level_id(r#"[{"id":1}]"#), Value::Null);
    }
}
