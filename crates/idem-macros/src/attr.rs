//! The grammar of `#[tool(…)]`: every option is `name = value`.
//!
//! Parsing is two-level so that one bad option does not hide the others:
//! the attribute is first split into `name = value` pairs at top-level
//! commas, then each value is parsed by its option's own grammar, and every
//! error is recorded in the [`Ctxt`].
//!
//! An option whose value is rejected is left out (at its default) and named
//! in [`Attrs::rejected`], so that validation can tell an option that was
//! never written from one that was written wrong: the tool can still be
//! generated without a bad `timeout`, but not without a bad `class`.

use proc_macro2::{TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Ident, LitInt, LitStr, Path, Token};

use crate::ctxt::Ctxt;
use crate::suggest::{did_you_mean, one_of};

/// The options of `#[tool(…)]`, in the order the docs list them.
pub(crate) const OPTIONS: &[&str] = &[
    "class",
    "name",
    "description",
    "key",
    "ttl",
    "timeout",
    "max_attempts",
    "reconcile",
    "key_version",
    "store_args",
    "crate",
];

/// A tool class, as spelled in `class = "…"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Read,
    IdempotentWrite,
    NonIdempotentWrite,
    Irreversible,
}

impl Class {
    pub(crate) const NAMES: &'static [&'static str] = &[
        "read",
        "idempotent_write",
        "non_idempotent_write",
        "irreversible",
    ];

    fn from_name(name: &str) -> Option<Class> {
        Some(match name {
            "read" => Class::Read,
            "idempotent_write" => Class::IdempotentWrite,
            "non_idempotent_write" => Class::NonIdempotentWrite,
            "irreversible" => Class::Irreversible,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::IdempotentWrite => "idempotent_write",
            Class::NonIdempotentWrite => "non_idempotent_write",
            Class::Irreversible => "irreversible",
        }
    }

    /// The runtime's marker type for this class.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Class::Read => "Read",
            Class::IdempotentWrite => "IdempotentWrite",
            Class::NonIdempotentWrite => "NonIdempotentWrite",
            Class::Irreversible => "Irreversible",
        }
    }

    /// Calls carry an idempotency key and are recorded.
    pub(crate) fn is_keyed(self) -> bool {
        self != Class::Read
    }

    /// Calls may be retried automatically.
    pub(crate) fn is_retry_safe(self) -> bool {
        matches!(self, Class::Read | Class::IdempotentWrite)
    }
}

/// An option's value together with the option's name token, so validation
/// errors can point at the option the user wrote.
pub(crate) struct Opt<T> {
    pub(crate) name: Ident,
    pub(crate) value: T,
}

/// A duration written as `"250ms"`, `"30s"`, `"5m"`, `"24h"` or `"7d"`.
pub(crate) struct Duration {
    pub(crate) millis: u64,
}

/// How the key is derived.
pub(crate) enum KeyOpt {
    /// `key = default`.
    Default,
    /// `key = natural(fields(a, b = normalise), window = "24h")`.
    Natural {
        fields: Vec<NaturalField>,
        window: Option<Opt<Duration>>,
    },
    /// `key = custom(path::to::function)`.
    Custom(Path),
}

/// One field of a natural key and its optional normaliser.
pub(crate) struct NaturalField {
    pub(crate) ident: Ident,
    pub(crate) normalize: Option<Path>,
}

/// Everything `#[tool(…)]` said.
#[derive(Default)]
pub(crate) struct Attrs {
    /// `class = "…"`, when it was given once (or each time the same).
    pub(crate) class: Option<Opt<Class>>,
    /// The other options that were understood.
    pub(crate) options: Options,
    /// The names of options that were written but rejected (a value that
    /// does not parse, a second occurrence): each already reported where it
    /// was written.
    pub(crate) rejected: Vec<String>,
    /// The attribute is not a `name = value, …` list (already reported), so
    /// nothing in it was read.
    pub(crate) unreadable: bool,
}

impl Attrs {
    pub(crate) fn rejected(&self, option: &str) -> bool {
        self.rejected.iter().any(|o| o == option)
    }
}

/// The options other than `class`; absent or rejected options are `None`.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) name: Option<Opt<LitStr>>,
    pub(crate) description: Option<Opt<LitStr>>,
    pub(crate) key: Option<Opt<KeyOpt>>,
    pub(crate) ttl: Option<Opt<Duration>>,
    pub(crate) timeout: Option<Opt<Duration>>,
    pub(crate) max_attempts: Option<Opt<u32>>,
    pub(crate) reconcile: Option<Opt<Path>>,
    pub(crate) key_version: Option<Opt<u32>>,
    pub(crate) store_args: Option<Opt<bool>>,
    pub(crate) krate: Option<Opt<Path>>,
}

/// `name = value` before the value is understood.
struct RawOpt {
    name: Ident,
    eq: Option<Token![=]>,
    value: TokenStream,
}

/// Parse the attribute's arguments. Syntax errors in the overall shape
/// (`name = value, …`) stop parsing; errors inside one option's value are
/// recorded and the other options are still read.
pub(crate) fn parse(cx: &mut Ctxt, args: TokenStream) -> Attrs {
    let mut attrs = Attrs::default();
    let raw = match split_options.parse2(args) {
        Ok(raw) => raw,
        Err(e) => {
            cx.syn_error(e);
            attrs.unreadable = true;
            return attrs;
        }
    };
    for opt in raw {
        parse_option(cx, &mut attrs, opt);
    }
    attrs
}

fn split_options(input: ParseStream) -> syn::Result<Vec<RawOpt>> {
    let mut options = Vec::new();
    while !input.is_empty() {
        let name = Ident::parse_any(input)?;
        let eq: Option<Token![=]> = input.parse()?;
        let value = if eq.is_some() {
            tokens_until_comma(input)?
        } else {
            TokenStream::new()
        };
        options.push(RawOpt { name, eq, value });
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
        }
    }
    Ok(options)
}

fn tokens_until_comma(input: ParseStream) -> syn::Result<TokenStream> {
    input.step(|cursor| {
        let mut rest = *cursor;
        let mut tokens = TokenStream::new();
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
            tokens.extend([tt]);
            rest = next;
        }
        Ok((tokens, rest))
    })
}

fn parse_option(cx: &mut Ctxt, attrs: &mut Attrs, raw: RawOpt) {
    let option = raw.name.unraw().to_string();
    let Some(eq) = raw.eq else {
        if let Some(class) = Class::from_name(&option) {
            // `#[tool(read)]` is the most likely slip of all. The class is
            // the one the user named, so it is kept: the tool is still
            // generated and this is the only error.
            cx.error_spanned_by(
                &raw.name,
                format!("write the class as `class = \"{option}\"`: every tool option is written `name = value`"),
            );
            set_class(cx, attrs, raw.name, Ok(class));
        } else if OPTIONS.contains(&option.as_str()) {
            cx.error_spanned_by(
                &raw.name,
                format!("expected `{option} = …`: every tool option is written `name = value`"),
            );
            attrs.rejected.push(option);
        } else {
            unknown_option(cx, &raw.name, &option);
        }
        return;
    };
    if raw.value.is_empty() {
        cx.error_spanned_by(eq, format!("expected a value for `{option}` after `=`"));
        if OPTIONS.contains(&option.as_str()) {
            attrs.rejected.push(option);
        }
        return;
    }
    let name = raw.name.clone();
    let value = raw.value;
    // An option that fills its field of `attrs.options` with what its
    // parser reads of the value.
    macro_rules! set_option {
        ($field:ident, $parser:expr) => {
            set(
                cx,
                &mut attrs.rejected,
                &mut attrs.options.$field,
                name,
                $parser.parse2(value),
            )
        };
    }
    match option.as_str() {
        "class" => {
            let class =
                class_written_as_ident(cx, &value).map_or_else(|| parse_class.parse2(value), Ok);
            set_class(cx, attrs, name, class);
        }
        "name" => set_option!(name, parse_tool_name),
        "description" => set_option!(description, parse_description),
        "key" => set_option!(key, parse_key),
        "ttl" => set_option!(ttl, parse_duration),
        "timeout" => set_option!(timeout, parse_duration),
        "max_attempts" => set_option!(max_attempts, parse_positive),
        "reconcile" => set_option!(reconcile, parse_path("reconcile")),
        "key_version" => set_option!(key_version, parse_positive),
        "store_args" => set_option!(store_args, parse_bool),
        "crate" => set_option!(krate, parse_path("crate")),
        _ => unknown_option(cx, &raw.name, &option),
    }
}

fn unknown_option(cx: &mut Ctxt, name: &Ident, option: &str) {
    cx.error_spanned_by(
        name,
        format!(
            "unknown tool option `{option}`{} (the options are {})",
            did_you_mean(option, OPTIONS),
            one_of(OPTIONS)
        ),
    );
}

/// Store an option's value, rejecting a second occurrence (the first one
/// is kept).
fn set<T>(
    cx: &mut Ctxt,
    rejected: &mut Vec<String>,
    slot: &mut Option<Opt<T>>,
    name: Ident,
    value: syn::Result<T>,
) {
    match value {
        Err(e) => {
            cx.syn_error(e);
            rejected.push(name.unraw().to_string());
        }
        Ok(_) if slot.is_some() => {
            duplicate(cx, &name);
            rejected.push(name.unraw().to_string());
        }
        Ok(value) => *slot = Some(Opt { name, value }),
    }
}

/// Store the class. Giving the same class twice is reported but harmless;
/// two different classes (or one that does not parse) leave no class the
/// expansion could trust, so `class` is marked rejected.
fn set_class(cx: &mut Ctxt, attrs: &mut Attrs, name: Ident, class: syn::Result<Class>) {
    match (class, &attrs.class) {
        (Ok(class), Some(first)) if class == first.value => duplicate(cx, &name),
        (class, _) => set(cx, &mut attrs.rejected, &mut attrs.class, name, class),
    }
}

fn duplicate(cx: &mut Ctxt, name: &Ident) {
    cx.error_spanned_by(
        name,
        format!(
            "duplicate tool option `{}`: give each option once",
            name.unraw()
        ),
    );
}

/// `class = read`: a known class written without quotes. It is reported,
/// and the class is kept, since there is no doubt which one was meant.
fn class_written_as_ident(cx: &mut Ctxt, value: &TokenStream) -> Option<Class> {
    let ident = Ident::parse_any.parse2(value.clone()).ok()?;
    let class = Class::from_name(&ident.to_string())?;
    cx.error_spanned_by(
        &ident,
        format!("write the class as a string: `class = \"{ident}\"`"),
    );
    Some(class)
}

fn parse_class(input: ParseStream) -> syn::Result<Class> {
    if input.peek(Ident::peek_any) {
        let ident = Ident::parse_any(input)?;
        return Err(syn::Error::new_spanned(
            &ident,
            format!("write the class as a string: `class = \"{ident}\"`"),
        ));
    }
    let lit: LitStr = input.parse()?;
    let given = lit.value();
    Class::from_name(&given).ok_or_else(|| {
        syn::Error::new_spanned(
            &lit,
            format!(
                "unknown tool class `{given}`{} (the classes are {})",
                did_you_mean(&given, Class::NAMES),
                one_of(Class::NAMES)
            ),
        )
    })
}

fn parse_tool_name(input: ParseStream) -> syn::Result<LitStr> {
    let lit: LitStr = input.parse()?;
    let name = lit.value();
    // The rule OpenAI, Anthropic and MCP clients all accept.
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(lit)
    } else {
        Err(syn::Error::new_spanned(
            &lit,
            "a tool name is 1 to 64 characters from `a-z`, `A-Z`, `0-9`, `_` and `-` (what model providers accept)",
        ))
    }
}

fn parse_description(input: ParseStream) -> syn::Result<LitStr> {
    let lit: LitStr = input.parse()?;
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new_spanned(
            &lit,
            "the description is empty: the model reads it to decide when to call the tool",
        ));
    }
    Ok(lit)
}

fn parse_positive(input: ParseStream) -> syn::Result<u32> {
    let lit: LitInt = input.parse()?;
    match lit.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new_spanned(&lit, "must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(syn::Error::new_spanned(
            &lit,
            "expected a whole number between 1 and 4294967295",
        )),
    }
}

fn parse_bool(input: ParseStream) -> syn::Result<bool> {
    input
        .parse::<syn::LitBool>()
        .map(|b| b.value)
        .map_err(|e| syn::Error::new(e.span(), "expected `true` or `false`"))
}

fn parse_path(option: &'static str) -> impl Fn(ParseStream) -> syn::Result<Path> {
    move |input| {
        input.parse::<Path>().map_err(|e| {
            syn::Error::new(
                e.span(),
                match option {
                    "crate" => "expected the path of the idem crate, as in `crate = my_idem`",
                    _ => "expected the path of a function, as in `reconcile = find_sent_email`",
                },
            )
        })
    }
}

pub(crate) fn parse_duration(input: ParseStream) -> syn::Result<Duration> {
    const UNITS: &[(&str, u64)] = &[
        ("ms", 1),
        ("s", 1_000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
    ];
    const HELP: &str = "a duration is a whole number and a unit: `\"250ms\"`, `\"30s\"`, `\"5m\"`, `\"24h\"` or `\"7d\"`";
    let lit: LitStr = input.parse().map_err(|e| syn::Error::new(e.span(), HELP))?;
    let text = lit.value();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let millis = UNITS
        .iter()
        .find(|(u, _)| *u == unit.trim())
        .and_then(|(_, scale)| number.parse::<u64>().ok()?.checked_mul(*scale));
    match millis {
        Some(0) => Err(syn::Error::new_spanned(
            &lit,
            "a duration must be longer than zero",
        )),
        Some(millis) => Ok(Duration { millis }),
        None => Err(syn::Error::new_spanned(
            &lit,
            format!("`{text}` is not a duration: {HELP}"),
        )),
    }
}

fn parse_key(input: ParseStream) -> syn::Result<KeyOpt> {
    const FORMS: &[&str] = &["default", "natural", "custom"];
    let form = Ident::parse_any(input)?;
    let name = form.to_string();
    let key = match name.as_str() {
        "default" => KeyOpt::Default,
        "natural" => {
            let content;
            syn::parenthesized!(content in input);
            parse_natural(&form, &content)?
        }
        "custom" => {
            let content;
            syn::parenthesized!(content in input);
            let path = parse_path("custom")(&content).map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected the path of a key function, as in `key = custom(order_key)`",
                )
            })?;
            if !content.is_empty() {
                return Err(content.error("`custom(…)` takes one function path"));
            }
            KeyOpt::Custom(path)
        }
        _ => {
            return Err(syn::Error::new_spanned(
                &form,
                format!(
                    "unknown key derivation `{name}`{} (write `key = default`, `key = natural(fields(…))` or `key = custom(function)`)",
                    did_you_mean(&name, FORMS)
                ),
            ))
        }
    };
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the key derivation"));
    }
    Ok(key)
}

fn parse_natural(form: &Ident, input: ParseStream) -> syn::Result<KeyOpt> {
    const PARTS: &[&str] = &["fields", "window"];
    let mut fields: Option<Vec<NaturalField>> = None;
    let mut window = None;
    while !input.is_empty() {
        let part = Ident::parse_any(input)?;
        match part.to_string().as_str() {
            "fields" if fields.is_some() => {
                return Err(syn::Error::new_spanned(&part, "duplicate `fields(…)`"))
            }
            "fields" => {
                let content;
                syn::parenthesized!(content in input);
                fields = Some(parse_fields(&part, &content)?);
            }
            "window" if window.is_some() => {
                return Err(syn::Error::new_spanned(&part, "duplicate `window`"))
            }
            "window" => {
                input.parse::<Token![=]>()?;
                let value = parse_duration(input)?;
                window = Some(Opt { name: part, value });
            }
            other => {
                return Err(syn::Error::new_spanned(
                    &part,
                    format!(
                        "unknown part `{other}` of a natural key{} (write `natural(fields(a, b = normalise), window = \"24h\")`)",
                        did_you_mean(other, PARTS)
                    ),
                ))
            }
        }
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
        }
    }
    match fields {
        Some(fields) => Ok(KeyOpt::Natural { fields, window }),
        None => Err(syn::Error::new_spanned(
            form,
            "a natural key names the argument fields it is made of: `natural(fields(email, country))`",
        )),
    }
}

fn parse_fields(part: &Ident, input: ParseStream) -> syn::Result<Vec<NaturalField>> {
    let mut fields: Vec<NaturalField> = Vec::new();
    while !input.is_empty() {
        let ident: Ident = input.parse()?;
        let normalize = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse::<Path>()?)
        } else {
            None
        };
        if fields.iter().any(|f| f.ident == ident) {
            return Err(syn::Error::new_spanned(
                &ident,
                format!("field `{ident}` is named twice in the natural key"),
            ));
        }
        fields.push(NaturalField { ident, normalize });
        if !input.is_empty() {
            input.parse::<Token![,]>()?;
        }
    }
    if fields.is_empty() {
        return Err(syn::Error::new_spanned(
            part,
            "name at least one argument field: `fields(email)`",
        ));
    }
    Ok(fields)
}
