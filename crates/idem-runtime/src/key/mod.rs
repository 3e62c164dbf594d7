//! Idempotency keys: how they are derived, namespaced and versioned.
//!
//! The full derivation, with test vectors a program in another language can
//! reproduce byte for byte, is written down in `docs/keys.md` at the root of
//! the repository. In short:
//!
//! * A key is the lowercase hex SHA-256 of a sequence of *framed fields*;
//!   each field is its UTF-8 bytes preceded by their length as a 4-byte
//!   big-endian integer, so no two field sequences share an encoding.
//! * The fields are `"idem-key"`, the derivation version in decimal, the
//!   namespace (tenant / principal), the tool name, a source tag, and the
//!   source's own fields:
//!   * `call`: the provider's tool-call id — the default when there is one;
//!   * `step`: the run id, the step number in decimal and the argument
//!     [`Fingerprint`] (hex SHA-256 of the RFC 8785 canonical arguments) —
//!     the default without a call id. Never the arguments alone: the same
//!     email tomorrow is a new email;
//!   * `natural`: the canonical JSON of the named argument fields and the
//!     time-window number (empty without a window) — find-or-create;
//!   * `custom`: key material returned by the tool's own function;
//!   * `window`: the window's length and number, the intended-repeat
//!     count and the argument fingerprint — a call that carries no key at
//!     all (a chat client's), where the same tool and arguments within the
//!     window are one effect.
//! * The argument [`Fingerprint`] is the lowercase hex SHA-256 of the
//!   canonical arguments. It is stored with the record; the same key with a
//!   different fingerprint is a key-reuse error (except for natural keys).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use crate::text::json_type;
use sha2::{Digest, Sha256};

use crate::canonical::{self, CanonicalError};

mod derive;
mod framer;

pub use derive::{derive_key, window_bucket, KeyInput, KeySource};
use framer::Framer;

/// The derivation version written into every key unless a tool overrides it.
pub const DEFAULT_KEY_VERSION: u32 = 1;

/// Longest accepted call id, run id, namespace or custom key material, in
/// bytes.
pub const MAX_KEY_PART_LEN: usize = 256;

/// A derived idempotency key: 64 lowercase hex digits.
///
/// Pass it downstream (`Idempotency-Key` header, Message-ID) so that the
/// provider deduplicates too; [`IdempotencyKey::sub`] derives stable keys for
/// the several requests of a multi-request tool.
///
/// Cloning is cheap (a shared allocation), and hashing reads the first
/// eight bytes of the digest: keys are SHA-256 outputs, already uniform,
/// and no caller can choose a key's hash.
#[derive(Clone)]
pub struct IdempotencyKey {
    /// The digest, then its 64 hex digits, in one shared allocation: a
    /// store that keeps digests rather than texts (the memory store) looks
    /// a key up without decoding its text on every call.
    bytes: Arc<[u8; KEY_BYTES]>,
    /// The digest's first 64 bits, kept beside the pointer: what the key
    /// hashes as. A map that grows rehashes every key it holds, and
    /// reading the bits from the shared allocation would fetch each key's
    /// from memory.
    bits: u64,
}

/// A key's digest and its hex, end to end.
const KEY_BYTES: usize = 32 + 64;

impl IdempotencyKey {
    /// A key of `hex`, decoded once.
    fn of_hex(hex: Hex64) -> Self {
        IdempotencyKey::of(hex.digest(), hex)
    }

    fn of(digest: [u8; 32], hex: Hex64) -> Self {
        let mut bytes = [0u8; KEY_BYTES];
        bytes[..32].copy_from_slice(&digest);
        bytes[32..].copy_from_slice(&hex.0);
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        IdempotencyKey {
            bytes: Arc::new(bytes),
            bits: u64::from_be_bytes(first),
        }
    }
}

impl PartialEq for IdempotencyKey {
    fn eq(&self, other: &Self) -> bool {
        // The digits spell the digest: equal digests, equal keys.
        self.bits == other.bits
            && (Arc::ptr_eq(&self.bytes, &other.bytes) || self.bytes[..32] == other.bytes[..32])
    }
}

impl Eq for IdempotencyKey {}

impl PartialOrd for IdempotencyKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// In the order of the text, as stores page through keys.
impl Ord for IdempotencyKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Lowercase hex keeps the order of the bytes it spells.
        self.bytes[..32].cmp(&other.bytes[..32])
    }
}

/// 64 lowercase hex digits, inline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Hex64([u8; 64]);

impl Hex64 {
    fn of(digest: [u8; 32]) -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 64];
        for (pair, b) in text.chunks_exact_mut(2).zip(digest) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0xf)];
        }
        Hex64(text)
    }

    /// `s` if it is 64 lowercase hex digits.
    fn parse(s: &str) -> Option<Self> {
        let bytes: [u8; 64] = s.as_bytes().try_into().ok()?;
        bytes
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            .then_some(Hex64(bytes))
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }

    /// The 32 bytes these digits spell.
    fn digest(&self) -> [u8; 32] {
        // Without a branch: `0`–`9` are 0x30–0x39 and `a`–`f` 0x61–0x66,
        // so the low four bits, plus 9 for a letter (bit 6 set), are the
        // digit's value.
        let nibble = |c: u8| (c & 0xf) + 9 * (c >> 6);
        let mut digest = [0u8; 32];
        for (b, pair) in digest.iter_mut().zip(self.0.chunks_exact(2)) {
            *b = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        digest
    }
}

/// How the key whose digest is `digest` orders against the text `text`,
/// as its own text would (keys order by their text; lowercase hex keeps
/// the order of the bytes it spells, so digests order alike).
pub(crate) fn cmp_digest_with(digest: &[u8; 32], text: &str) -> std::cmp::Ordering {
    Hex64::of(*digest).as_str().cmp(text)
}

impl Hash for IdempotencyKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.bits());
    }
}

/// A [`BuildHasher`](std::hash::BuildHasher) for maps keyed by
/// [`IdempotencyKey`]: passes the key's own hash through instead of
/// rehashing it with SipHash.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHashBuilder;

impl std::hash::BuildHasher for KeyHashBuilder {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// The hasher of [`KeyHashBuilder`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys hashed some other way; fold the bytes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

impl IdempotencyKey {
    /// Parse a key that was derived earlier (64 lowercase hex digits).
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        Hex64::parse(s)
            .map(IdempotencyKey::of_hex)
            .ok_or_else(|| KeyError::Malformed {
                given: s.chars().take(80).collect(),
            })
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[32..]).expect("hex digits are ASCII")
    }

    /// The SHA-256 digest this key is the hex of: half the size of its
    /// text, for a store that keeps many keys in memory.
    pub(crate) fn digest(&self) -> [u8; 32] {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&self.bytes[..32]);
        digest
    }

    /// The digest's first 64 bits: what the key hashes as.
    pub(crate) fn bits(&self) -> u64 {
        self.bits
    }

    /// The key whose digest is `digest` ([`IdempotencyKey::digest`]): the
    /// hex of it, not parsed back from the text just written.
    pub(crate) fn from_digest(digest: &[u8; 32]) -> Self {
        IdempotencyKey::of(*digest, Hex64::of(*digest))
    }

    /// A stable sub-key for one of several downstream requests made under
    /// this key (`"charge"`, `"receipt-email"`).
    ///
    /// `SHA-256(frame("idem-subkey") ‖ frame(parent hex) ‖ frame(label))`.
    pub fn sub(&self, label: &str) -> IdempotencyKey {
        let mut h = Framer::new("idem-subkey");
        h.field(&self.bytes[32..]).field(label.as_bytes());
        h.finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.as_str())
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        IdempotencyKey::parse(&s)
    }
}

impl From<IdempotencyKey> for String {
    fn from(k: IdempotencyKey) -> String {
        k.as_str().to_owned()
    }
}

/// The lowercase hex SHA-256 of a call's canonical arguments. Cloning is
/// cheap: a computed fingerprint is held inline, one read back from a store
/// is a shared string.
#[derive(Clone)]
pub struct Fingerprint(FingerprintText);

#[derive(Clone)]
enum FingerprintText {
    /// 64 hex digits, and the digest they spell: a store that keeps
    /// digests (the memory store) compares a duplicate's fingerprint
    /// without decoding it.
    Digest(Hex64, [u8; 32]),
    Text(Arc<str>),
}

impl Fingerprint {
    /// A fingerprint from its text (as read back from a store).
    pub fn new(text: impl Into<Arc<str>>) -> Self {
        Fingerprint(FingerprintText::Text(text.into()))
    }

    /// The fingerprint as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            FingerprintText::Digest(hex, _) => hex.as_str(),
            FingerprintText::Text(text) => text,
        }
    }

    /// The text's bytes, for hashing into a key: no UTF-8 check of digits
    /// known to be ASCII.
    fn text_bytes(&self) -> &[u8] {
        match &self.0 {
            FingerprintText::Digest(hex, _) => &hex.0,
            FingerprintText::Text(text) => text.as_bytes(),
        }
    }

    /// The SHA-256 digest this fingerprint is the hex of, when its text is
    /// one (64 lowercase hex digits, computed or read back): what a store
    /// that keeps many in memory holds instead of the text. Fingerprints
    /// compare by their text, so [`Fingerprint::from_digest`] of it is
    /// equal to this one.
    pub(crate) fn digest(&self) -> Option<[u8; 32]> {
        match &self.0 {
            FingerprintText::Digest(_, digest) => Some(*digest),
            FingerprintText::Text(text) => Hex64::parse(text).map(|hex| hex.digest()),
        }
    }

    /// The fingerprint whose digest is `digest` ([`Fingerprint::digest`]).
    pub(crate) fn from_digest(digest: &[u8; 32]) -> Self {
        Fingerprint(FingerprintText::Digest(Hex64::of(*digest), *digest))
    }
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (FingerprintText::Digest(_, a), FingerprintText::Digest(_, b)) => a == b,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for Fingerprint {}

impl Hash for Fingerprint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Fingerprint").field(&self.as_str()).finish()
    }
}

impl From<String> for Fingerprint {
    fn from(text: String) -> Self {
        Fingerprint::from(text.as_str())
    }
}

impl From<&str> for Fingerprint {
    fn from(text: &str) -> Self {
        match Hex64::parse(text) {
            Some(hex) => Fingerprint(FingerprintText::Digest(hex, hex.digest())),
            None => Fingerprint(FingerprintText::Text(Arc::from(text))),
        }
    }
}

/// Keys and fingerprints are written and read as JSON strings, without an
/// intermediate `String` either way (they are in every record a store
/// reads or writes).
mod text_serde {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    use super::{Fingerprint, IdempotencyKey};

    impl serde::Serialize for IdempotencyKey {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    impl serde::Serialize for Fingerprint {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    impl<'de> serde::Deserialize<'de> for IdempotencyKey {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(FromStr(PhantomData))
        }
    }

    impl<'de> serde::Deserialize<'de> for Fingerprint {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(FromStr(PhantomData))
        }
    }

    /// Builds a `T` from a borrowed or transient string.
    struct FromStr<T>(PhantomData<T>);

    /// What [`FromStr`] builds.
    trait Parse: Sized {
        const EXPECTING: &'static str;
        fn parse<E: de::Error>(s: &str) -> Result<Self, E>;
    }

    impl Parse for IdempotencyKey {
        const EXPECTING: &'static str = "an idempotency key (64 lowercase hex digits)";
        fn parse<E: de::Error>(s: &str) -> Result<Self, E> {
            IdempotencyKey::parse(s).map_err(E::custom)
        }
    }

    impl Parse for Fingerprint {
        const EXPECTING: &'static str = "a fingerprint";
        fn parse<E: de::Error>(s: &str) -> Result<Self, E> {
            Ok(Fingerprint::from(s))
        }
    }

    impl<T: Parse> Visitor<'_> for FromStr<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
            T::parse(s)
        }
    }
}

impl From<Fingerprint> for String {
    fn from(f: Fingerprint) -> String {
        f.as_str().to_owned()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant / principal namespace. Keys of different namespaces never
/// collide, so one tenant can never receive another tenant's stored result.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// A validated namespace: 1 to [`MAX_KEY_PART_LEN`] bytes.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        check_part("namespace", &name)?;
        Ok(Namespace(Arc::from(name)))
    }

    /// The namespace as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    /// The namespace `"default"`, for single-tenant programs.
    fn default() -> Self {
        static DEFAULT: std::sync::LazyLock<Namespace> =
            std::sync::LazyLock::new(|| Namespace(Arc::from("default")));
        DEFAULT.clone()
    }
}

impl TryFrom<String> for Namespace {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        Namespace::new(s)
    }
}

impl From<Namespace> for String {
    fn from(n: Namespace) -> String {
        n.0.to_string()
    }
}

/// Arguments in RFC 8785 canonical form, with their fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanonicalArgs {
    /// The canonical JSON text.
    pub text: String,
    /// SHA-256 of `text`, lowercase hex.
    pub fingerprint: Fingerprint,
}

impl CanonicalArgs {
    /// Canonicalize tool arguments, which must be a JSON object.
    pub fn from_value(args: &Value) -> Result<Self, KeyError> {
        if !args.is_object() {
            return Err(KeyError::ArgumentsNotObject {
                found: json_type(args),
            });
        }
        Ok(Self::from_text(canonical::canonicalize(args)?))
    }

    /// Canonicalize typed tool arguments, which must serialize as a JSON
    /// object, without building a `serde_json::Value`.
    pub fn from_serialize<T: serde::Serialize + ?Sized>(args: &T) -> Result<Self, KeyError> {
        let text = canonical::to_canonical_string(args)?;
        if !text.starts_with('{') {
            let found = match text.as_bytes().first() {
                Some(b'[') => "an array",
                Some(b'"') => "a string",
                Some(b't' | b'f') => "a boolean",
                Some(b'n') => "null",
                _ => "a number",
            };
            return Err(KeyError::ArgumentsNotObject { found });
        }
        Ok(Self::from_text(text))
    }

    fn from_text(text: String) -> Self {
        let fingerprint = Fingerprint::from_digest(&Sha256::digest(text.as_bytes()).into());
        CanonicalArgs { text, fingerprint }
    }
}

fn check_part(what: &'static str, value: &str) -> Result<(), KeyError> {
    if value.is_empty() {
        Err(KeyError::Empty { what })
    } else if value.len() > MAX_KEY_PART_LEN {
        Err(KeyError::TooLong {
            what,
            len: value.len(),
            max: MAX_KEY_PART_LEN,
        })
    } else {
        Ok(())
    }
}

/// A key could not be derived or is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key part was empty.
    #[error("the {what} is empty: an idempotency key cannot be derived from nothing")]
    Empty {
        /// Which part.
        what: &'static str,
    },
    /// A key part exceeded [`MAX_KEY_PART_LEN`].
    #[error("the {what} is {len} bytes long; the limit is {max} bytes")]
    TooLong {
        /// Which part.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Neither a call id nor a run context was given to a keyed tool.
    #[error("tool `{tool}` needs an idempotency key, but the call has no call id and no run context (run id and step); pass one of them")]
    NoSource {
        /// The tool.
        tool: String,
    },
    /// A natural or custom key could not be computed from the arguments.
    #[error("tool `{tool}` derives its key from its arguments ({derivation} key), but no key material could be computed from these arguments (a field is not representable as JSON)")]
    NoMaterial {
        /// The tool.
        tool: String,
        /// `"natural"` or `"custom"`.
        derivation: &'static str,
    },
    /// The arguments of a tool call must be a JSON object.
    #[error("tool arguments must be a JSON object, found {found}")]
    ArgumentsNotObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// The arguments have no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// Text that should be a derived key is not one.
    #[error("`{given}` is not an idempotency key (64 lowercase hex digits)")]
    Malformed {
        /// What was given (first 80 characters).
        given: String,
    },
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn a_key_hashes_as_its_digests_first_bits_and_orders_by_its_text() {
        let derived = IdempotencyKey::parse(&"0".repeat(64))
            .unwrap()
            .sub("charge");
        let parsed = IdempotencyKey::parse(derived.as_str()).unwrap();
        assert_eq!(derived, parsed);
        let first_bits = u64::from_str_radix(&derived.as_str()[..16], 16).unwrap();
        assert_eq!(KeyHashBuilder.hash_one(&derived), first_bits);
        assert_eq!(KeyHashBuilder.hash_one(&parsed), first_bits);

        // Same first 64 bits, different keys: unequal, ordered by text.
        let low = IdempotencyKey::parse(&format!("{}{}", "a".repeat(16), "0".repeat(48))).unwrap();
        let high = IdempotencyKey::parse(&format!("{}{}", "a".repeat(16), "f".repeat(48))).unwrap();
        assert_eq!(
            KeyHashBuilder.hash_one(&low),
            KeyHashBuilder.hash_one(&high)
        );
        assert_ne!(low, high);
        assert!(low < high && parsed.cmp(&derived).is_eq());
    }

    #[test]
    fn a_key_and_a_fingerprint_go_to_their_digest_and_back() {
        // A pointer to the digest and digits, and the hash's bits.
        assert_eq!(std::mem::size_of::<IdempotencyKey>(), 16);
        let every_digit = IdempotencyKey::parse(&"0123456789abcdef".repeat(4)).unwrap();
        assert_eq!(
            every_digit.digest()[..8],
            [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        );
        let key = IdempotencyKey::parse(&"0".repeat(64)).unwrap().sub("x");
        let digest = key.digest();
        assert_eq!(IdempotencyKey::from_digest(&digest), key);
        assert_eq!(
            u64::from_be_bytes(digest[..8].try_into().unwrap()),
            key.bits()
        );
        assert!(cmp_digest_with(&digest, key.as_str()).is_eq());
        assert!(cmp_digest_with(&digest, "").is_gt());
        assert!(cmp_digest_with(&digest, "g").is_lt());

        let computed = CanonicalArgs::from_value(&serde_json::json!({"n": 1}))
            .unwrap()
            .fingerprint;
        let digest = computed
            .digest()
            .expect("a computed fingerprint is a digest");
        assert_eq!(Fingerprint::from_digest(&digest), computed);
        let read_back = Fingerprint::new(computed.as_str());
        assert_eq!(
            read_back.digest(),
            Some(digest),
            "a digest read back as text"
        );
        assert_eq!(Fingerprint::new("f").digest(), None);
        assert_eq!(
            Fingerprint::new("AB".repeat(32)).digest(),
            None,
            "not lowercase"
        );
    }
}
