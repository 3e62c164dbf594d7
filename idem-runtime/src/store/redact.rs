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
/// ```
pub fn redact(url: &str) -> String {
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
