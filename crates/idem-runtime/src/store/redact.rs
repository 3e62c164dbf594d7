//! Hiding passwords in store URLs, for error messages and
//! [`Store::describe`](super::Store::describe). A leaf: it depends on no
//! store, so every store and the URL dispatcher can use it.

/// `url` with any password replaced by `***`, for error messages and
/// [`Store::describe`](super::Store::describe).
///
/// ```
/// use idem_runtime::store::url::redact;
/// assert_eq!(redact("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
/// assert_eq!(redact("postgres://app:pw@db/idem?password=pw&sslmode=disable"),
///            "postgres://app:***@db/idem?password=***&sslmode=disable");
/// // Passwords may contain `/`, `?` and `@`.
/// assert_eq!(redact("postgres://app:p/w?x@y@db/idem"), "postgres://app:***@db/idem");
/// assert_eq!(redact("sqlite:///var/lib/idem.db"), "sqlite:///var/lib/idem.db");
/// // libpq's key=value form, quoted values included, and no scheme at all.
/// assert_eq!(redact("host=db password=pw user=app"), "host=db password=*** user=app");
/// assert_eq!(redact("host=db password = 'p w\\'x' dbname=idem"), "host=db password = *** dbname=idem");
/// assert_eq!(redact("app:pw@db/idem"), "app:***@db/idem");
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
    // itself contain `/`, `?` or `@`, so the userinfo is cut off first and
    // the path and query are looked for only after it.
    let (prefix, rest) = match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, after)) => {
                let user = userinfo.split(':').next().unwrap_or_default();
                let hidden = if userinfo.contains(':') { ":***" } else { "" };
                (format!("{scheme}://{user}{hidden}@"), after)
            }
            None => (format!("{scheme}://"), rest),
        },
        None => (String::new(), url),
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = prefix + base;
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// A libpq key=value connection string with the value of every `password`
/// key replaced by `***` (`password=pw`, `password = 'quoted \' value'`).
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_password_key(rest) {
        let (before, from_key) = rest.split_at(at);
        out.push_str(before);
        let after_key = &from_key["password".len()..];
        let spaces = after_key.len() - after_key.trim_start().len();
        let after_eq = &after_key[spaces + 1..];
        let more = after_eq.len() - after_eq.trim_start().len();
        // `password`, the spaces around `=` and `=` itself stay.
        out.push_str(&from_key[.."password".len() + spaces + 1 + more]);
        out.push_str("***");
        let value = &after_eq[more..];
        rest = &value[value_len(value)..];
    }
    out.push_str(rest);
    out
}

/// Where the next `password` key (followed by `=`) starts in `text`.
fn find_password_key(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let at = from + found;
        let starts_word = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[at + "password".len()..].trim_start();
        if starts_word && after.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
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
