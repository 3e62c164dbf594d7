//! Hiding passwords in store URLs, for error messages and
//! [`Store::describe`](super::Store::describe). A leaf: it depends on no
//! store, so every store and the URL dispatcher can use it.

use super::url::split_query;

/// `url` with any password replaced by `***`, for error messages and
/// [`Store::describe`](super::Store::describe).
///
/// Hidden: the password of the user, the `password` and `sslpassword`
/// (libpq's, for an encrypted client key) parameters, and any parameter
/// whose value is a PEM block (a key or certificate pasted into the URL
/// rather than named by its file). The TLS file names (`ca`, `cert`,
/// `key`, `sslrootcert`, `sslcert`, `sslkey`) stay: a path is no secret,
/// and a message naming the file helps.
///
/// ```
/// use idem_runtime::store::url::redact;
/// assert_eq!(redact("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
/// assert_eq!(redact("postgres://app:pw@db/idem?password=pw&sslmode=disable"),
///            "postgres://app:***@db/idem?password=***&sslmode=disable");
/// // Passwords may contain `/`, `?` and `@`.
/// assert_eq!(redact("postgres://app:p/w?x@y@db/idem"), "postgres://app:***@db/idem");
/// // A secret in the query is hidden even when it holds an `@`.
/// assert_eq!(redact("postgres://app@db/idem?password=p@ss"), "postgres://app@db/idem?password=***");
/// assert_eq!(redact("postgres://app@db/idem?sslmode=require&password=p@ss&x=1"),
///            "postgres://app@db/idem?sslmode=require&password=***&x=1");
/// assert_eq!(redact("sqlite:///var/lib/idem.db"), "sqlite:///var/lib/idem.db");
/// // libpq's key=value form, quoted values included, and no scheme at all.
/// assert_eq!(redact("host=db password=pw user=app"), "host=db password=*** user=app");
/// assert_eq!(redact("host=db password = 'p w\\'x' dbname=idem"), "host=db password = *** dbname=idem");
/// assert_eq!(redact("app:pw@db/idem"), "app:***@db/idem");
/// // TLS parameters: file names stay, a key's password and PEM do not.
/// assert_eq!(redact("postgres://app@db/idem?sslmode=verify-full&sslkey=/k.pem&sslpassword=pw"),
///            "postgres://app@db/idem?sslmode=verify-full&sslkey=/k.pem&sslpassword=***");
/// assert_eq!(redact("rediss://:pw@cache/?ca=/ca.pem&key=-----BEGIN%20PRIVATE%20KEY-----x"),
///            "rediss://:***@cache/?ca=/ca.pem&key=***");
/// assert_eq!(redact("host=db sslpassword=pw sslkey=/k.pem"), "host=db sslpassword=*** sslkey=/k.pem");
/// ```
pub fn redact(url: &str) -> String {
    if !url.contains("://") {
        if url.contains('=') && !url.contains('?') {
            return redact_key_values(url);
        }
        if let Some((userinfo, after)) = url.rsplit_once('@') {
            if let Some((user, _)) = userinfo.split_once(':') {
                return format!("{user}:***@{after}");
            }
        }
    }
    // The credentials end at the last `@` before the host: a password may
    // itself contain `/`, `?` or `@`, so the query is looked for only
    // after it, as PostgreSQL's options look for it.
    let (base, query) = match url.contains("://") {
        true => split_query(url),
        false => url.split_once('?'),
    }
    .map_or((url, None), |(base, query)| (base, Some(query)));
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, host)) => {
                let user = userinfo.split(':').next().unwrap_or_default();
                let hidden = if userinfo.contains(':') { ":***" } else { "" };
                format!("{scheme}://{user}{hidden}@{host}")
            }
            None => base.to_owned(),
        },
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, v)) if is_secret(k, v) => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    mask_stray_parameters(&out)
}

/// `text` with the value of every `?key=value` or `&key=value` that
/// [`is_secret`] replaced by `***`, wherever it stands: a query whose
/// value holds an `@` (`?password=p@ss`) is read as part of the
/// credentials above, and must not show either.
fn mask_stray_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['?', '&']) {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let end = rest.find(['&', '?']).unwrap_or(rest.len());
        match rest[..end].split_once('=') {
            Some((key, value)) if is_secret(key, value) => {
                out.push_str(key);
                out.push_str("=***");
                rest = &rest[end..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

/// Whether the query parameter `key=value` holds a secret: a password,
/// or a PEM block (`-----BEGIN`, `%`-escaped or not) pasted as a value.
fn is_secret(key: &str, value: &str) -> bool {
    SECRET_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k)) || value.contains("-----BEGIN")
}

/// The parameters whose values are secrets, in URLs and libpq's key=value
/// strings.
const SECRET_KEYS: [&str; 2] = ["password", "sslpassword"];

/// A libpq key=value connection string with the value of every `password`
/// and `sslpassword` key replaced by `***` (`password=pw`,
/// `password = 'quoted \' value'`).
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, key_len)) = find_password_key(rest) {
        let (before, from_key) = rest.split_at(at);
        out.push_str(before);
        let after_key = &from_key[key_len..];
        let spaces = after_key.len() - after_key.trim_start().len();
        let after_eq = &after_key[spaces + 1..];
        let more = after_eq.len() - after_eq.trim_start().len();
        // The key, the spaces around `=` and `=` itself stay.
        out.push_str(&from_key[..key_len + spaces + 1 + more]);
        out.push_str("***");
        let value = &after_eq[more..];
        rest = &value[value_len(value)..];
    }
    out.push_str(rest);
    out
}

/// Where the next `password` or `sslpassword` key (followed by `=`)
/// starts in `text`, and its length.
fn find_password_key(text: &str) -> Option<(usize, usize)> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let mut at = from + found;
        let mut len = "password".len();
        if lower[..at].ends_with("ssl") {
            at -= "ssl".len();
            len += "ssl".len();
        }
        let starts_word = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[at + len..].trim_start();
        if starts_word && after.starts_with('=') {
            return Some((at, len));
        }
        from = at + len;
    }
    None
}

/// The length of the value at the start of `text`: up to the closing quote
/// of a quoted value (`\'` escapes a quote), else up to whitespace.
fn value_len(text: &str) -> usize {
    let Some(quoted) = text.strip_prefix('\'') else {
        return text.find(char::is_whitespace).unwrap_or(text.len());
    };
    let mut escaped = false;
    for (i, c) in quoted.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' => return i + 2,
            _ => {}
        }
    }
    text.len()
}
