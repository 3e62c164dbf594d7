//! RFC 8785 canonical JSON written straight from a `Serialize` value,
//! without building a `serde_json::Value` first.
//!
//! It produces exactly what `canonicalize(&serde_json::to_value(x)?)` would
//! (a test holds the two together), with the checks `to_value` skips: NaN
//! and infinities are refused rather than turned into `null`. Object members
//! are written as they come and put in UTF-16 order of their names when the
//! object ends, through per-thread buffers: once those are warm, writing an
//! object allocates nothing.

use serde::ser::{self, Impossible, Serialize};

use super::{write_double, write_string, CanonicalError};

/// Canonical JSON text of `value`.
pub(super) fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(128);
    value.serialize(Writer { out: &mut out })?;
    Ok(out)
}

impl ser::Error for CanonicalError {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        CanonicalError::Serialize(msg.to_string())
    }
}

/// `serde_json`'s marker for a `RawValue` inside a struct.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

struct Writer<'a> {
    out: &'a mut String,
}

type Done = Result<(), CanonicalError>;

impl Writer<'_> {
    fn integer(self, v: i128) -> Done {
        const MAX_EXACT: i128 = 1 << 53;
        if v.abs() <= MAX_EXACT {
            self.out.push_str(itoa::Buffer::new().format(v));
            return Ok(());
        }
        let double = v as f64;
        if v > i128::from(u64::MAX) || v < i128::from(i64::MIN) || double as i128 != v {
            return Err(CanonicalError::InexactInteger {
                path: "/".to_owned(),
                value: v.to_string(),
            });
        }
        write_double(self.out, double)
    }

    /// `{"variant": …}`, serde_json's externally tagged form.
    fn tagged(self, variant: &'static str) {
        self.out.push('{');
        write_string(self.out, variant);
        self.out.push(':');
    }
}

/// The integer methods of [`Writer`], each widening to `i128` (which holds
/// every integer but the largest `u128`s).
macro_rules! integers {
    ($($m:ident: $t:ty),*) => {$(
        fn $m(self, v: $t) -> Done {
            self.integer(v.into())
        }
    )*};
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = CanonicalError;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Done {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    integers!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64);
    fn serialize_u128(self, v: u128) -> Done {
        match i128::try_from(v) {
            Ok(v) => self.integer(v),
            Err(_) => Err(CanonicalError::InexactInteger {
                path: "/".to_owned(),
                value: v.to_string(),
            }),
        }
    }
    fn serialize_f32(self, v: f32) -> Done {
        write_double(self.out, f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Done {
        write_double(self.out, v)
    }
    fn serialize_char(self, v: char) -> Done {
        write_string(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Done {
        write_string(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        // serde_json writes bytes as an array of numbers.
        self.out.push('[');
        for (i, b) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(itoa::Buffer::new().format(*b));
        }
        self.out.push(']');
        Ok(())
    }
    fn serialize_none(self) -> Done {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        self.serialize_none()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Done {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Done {
        let out = self.out;
        Writer { out: &mut *out }.tagged(variant);
        v.serialize(Writer { out: &mut *out })
            .map_err(|e| e.under(variant))?;
        out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, CanonicalError> {
        self.out.push('[');
        Ok(Seq {
            out: self.out,
            index: 0,
            close: "]",
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, CanonicalError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Seq<'a>, CanonicalError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, CanonicalError> {
        let Writer { out } = self;
        Writer { out: &mut *out }.tagged(variant);
        out.push('[');
        Ok(Seq {
            out,
            index: 0,
            close: "]}",
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::new(self.out, None, false))
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::new(self.out, None, name == RAW_VALUE_TOKEN))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Object<'a>, CanonicalError> {
        let Writer { out } = self;
        Writer { out: &mut *out }.tagged(variant);
        Ok(Object::new(out, Some(variant), false))
    }
}

/// An array being written.
pub(super) struct Seq<'a> {
    out: &'a mut String,
    index: usize,
    close: &'static str,
}

impl Seq<'_> {
    fn element<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
        if self.index > 0 {
            self.out.push(',');
        }
        let i = self.index;
        self.index += 1;
        v.serialize(Writer { out: self.out })
            .map_err(|e| e.under(&i.to_string()))
    }
    fn finish(self) -> Done {
        self.out.push_str(self.close);
        Ok(())
    }
}

macro_rules! seq_impl {
    ($($tr:ident :: $m:ident),*) => {$(
        impl ser::$tr for Seq<'_> {
            type Ok = ();
            type Error = CanonicalError;
            fn $m<T: ?Sized + Serialize>(&mut self, v: &T) -> Done { self.element(v) }
            fn end(self) -> Done { self.finish() }
        }
    )*};
}
seq_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// An object being written. Members are written to `out` as they come,
/// in their final form; if their names did not come in UTF-16 order, they
/// are put in order when the object ends (through a reused per-thread
/// buffer). A struct whose fields are declared in order is never copied.
pub(super) struct Object<'a> {
    out: &'a mut String,
    /// Where the object's first member starts in `out` (after `{`).
    body: usize,
    /// The members written so far, and the names of a map's members.
    scratch: Scratch,
    /// Whether the members so far came in order.
    sorted: bool,
    /// Set for a struct variant: close the wrapping object too.
    variant: Option<&'static str>,
    /// A serde_json `RawValue`: its one field is JSON text to canonicalize.
    raw: bool,
    /// The name of the member whose value comes next (maps), in
    /// `scratch.names`.
    pending: Option<std::ops::Range<usize>>,
}

/// One member of an [`Object`]: its name, and its text (`"name":value`)
/// in the output.
struct Member {
    name: Name,
    text: std::ops::Range<usize>,
}

/// A member's unescaped name.
enum Name {
    /// A struct field's.
    Field(&'static str),
    /// A map key's, in [`Scratch::names`].
    Key(std::ops::Range<usize>),
}

/// An object's bookkeeping, taken from a per-thread pool so that writing
/// an object allocates nothing once the pool is warm.
#[derive(Default)]
struct Scratch {
    members: Vec<Member>,
    names: String,
}

impl Scratch {
    fn name<'s>(&'s self, member: &'s Member) -> &'s str {
        match &member.name {
            Name::Field(name) => name,
            Name::Key(range) => &self.names[range.clone()],
        }
    }
}

thread_local! {
    /// Bookkeeping of objects that ended (one per level of nesting), and
    /// the buffer members are reordered through.
    static POOL: std::cell::RefCell<(Vec<Scratch>, String)> = const {
        std::cell::RefCell::new((Vec::new(), String::new()))
    };
}

/// Pooled buffers larger than this are dropped rather than kept.
const POOL_MAX_BYTES: usize = 64 * 1024;

impl<'a> Object<'a> {
    fn new(out: &'a mut String, variant: Option<&'static str>, raw: bool) -> Self {
        if !raw {
            out.push('{');
        }
        let scratch = POOL
            .with(|pool| pool.borrow_mut().0.pop())
            .unwrap_or_default();
        Object {
            body: out.len(),
            out,
            scratch,
            sorted: true,
            variant,
            raw,
            pending: None,
        }
    }

    /// Write the member `name` with value `v`.
    fn member<T: ?Sized + Serialize>(&mut self, name: Name, v: &T) -> Done {
        let Object { out, scratch, .. } = self;
        if out.len() > self.body {
            out.push(',');
        }
        let start = out.len();
        let member = Member {
            name,
            text: start..start,
        };
        let text = scratch.name(&member);
        write_string(out, text);
        out.push(':');
        v.serialize(Writer { out }).map_err(|e| e.under(text))?;
        if let Some(last) = scratch.members.last() {
            if self.sorted && super::utf16_order(scratch.name(last), text).is_gt() {
                self.sorted = false;
            }
        }
        let member = Member {
            text: start..out.len(),
            ..member
        };
        scratch.members.push(member);
        Ok(())
    }

    fn field<T: ?Sized + Serialize>(&mut self, name: &'static str, v: &T) -> Done {
        if self.raw {
            // The field is the raw JSON text: parse it and canonicalize that.
            let text = serde_json::to_value(v)
                .ok()
                .and_then(|t| t.as_str().map(str::to_owned))
                .ok_or_else(|| CanonicalError::Serialize("malformed RawValue".into()))?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| CanonicalError::Serialize(e.to_string()))?;
            self.out.push_str(&super::canonicalize(&value)?);
            return Ok(());
        }
        self.member(Name::Field(name), v)
    }

    fn finish(mut self) -> Done {
        if !self.raw {
            if !self.sorted {
                self.reorder();
            }
            self.out.push('}');
            if self.variant.is_some() {
                self.out.push('}');
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        if scratch.names.capacity() <= POOL_MAX_BYTES {
            scratch.members.clear();
            scratch.names.clear();
            POOL.with(|pool| pool.borrow_mut().0.push(scratch));
        }
        Ok(())
    }

    /// Rewrite the members in the order of their names.
    fn reorder(&mut self) {
        let Object {
            out, body, scratch, ..
        } = self;
        let names = &scratch.names;
        let name = |m: &Member| match &m.name {
            Name::Field(name) => *name,
            Name::Key(range) => &names[range.clone()],
        };
        scratch
            .members
            .sort_by(|a, b| super::utf16_order(name(a), name(b)));
        POOL.with(|pool| {
            let copy = &mut pool.borrow_mut().1;
            copy.clear();
            copy.push_str(&out[*body..]);
            out.truncate(*body);
            for (i, m) in scratch.members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&copy[m.text.start - *body..m.text.end - *body]);
            }
            if copy.capacity() > POOL_MAX_BYTES {
                *copy = String::new();
            }
        });
    }
}

macro_rules! object_impl {
    ($($tr:ident),*) => {$(
        impl ser::$tr for Object<'_> {
            type Ok = ();
            type Error = CanonicalError;
            fn serialize_field<T: ?Sized + Serialize>(&mut self, name: &'static str, v: &T) -> Done {
                self.field(name, v)
            }
            fn end(self) -> Done {
                self.finish()
            }
        }
    )*};
}
object_impl!(SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Done {
        let names = &mut self.scratch.names;
        let start = names.len();
        key.serialize(KeyWriter { out: names })?;
        self.pending = Some(start..names.len());
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
        let name = self
            .pending
            .take()
            .ok_or_else(|| CanonicalError::Serialize("map value without a key".into()))?;
        self.member(Name::Key(name), v)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

/// Writes a map key as the raw text of a member name, accepting what
/// serde_json accepts as keys (strings, chars, integers, bools).
struct KeyWriter<'a> {
    out: &'a mut String,
}

fn key_error() -> CanonicalError {
    CanonicalError::Serialize("a map key must be a string, a number or a boolean".into())
}

macro_rules! key_display {
    ($($m:ident: $t:ty),*) => {$(
        fn $m(self, v: $t) -> Done {
            self.out.push_str(&v.to_string());
            Ok(())
        }
    )*};
}

/// The methods of [`KeyWriter`] for what cannot be a key: each refuses
/// with [`key_error`].
macro_rules! key_refused {
    ($($m:ident $(<$g:ident>)? ($($t:ty),*) -> $r:ty),*) => {$(
        fn $m$(<$g: ?Sized + Serialize>)?(self, $(_: $t),*) -> Result<$r, CanonicalError> {
            Err(key_error())
        }
    )*};
}

impl ser::Serializer for KeyWriter<'_> {
    type Ok = ();
    type Error = CanonicalError;
    type SerializeSeq = Impossible<(), CanonicalError>;
    type SerializeTuple = Impossible<(), CanonicalError>;
    type SerializeTupleStruct = Impossible<(), CanonicalError>;
    type SerializeTupleVariant = Impossible<(), CanonicalError>;
    type SerializeMap = Impossible<(), CanonicalError>;
    type SerializeStruct = Impossible<(), CanonicalError>;
    type SerializeStructVariant = Impossible<(), CanonicalError>;

    key_display!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_char: char,
        serialize_str: &str);

    key_refused!(
        serialize_f32(f32) -> (),
        serialize_f64(f64) -> (),
        serialize_bytes(&[u8]) -> (),
        serialize_none() -> (),
        serialize_some<T>(&T) -> (),
        serialize_unit() -> (),
        serialize_unit_struct(&'static str) -> (),
        serialize_newtype_variant<T>(&'static str, u32, &'static str, &T) -> (),
        serialize_seq(Option<usize>) -> Self::SerializeSeq,
        serialize_tuple(usize) -> Self::SerializeTuple,
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct,
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant,
        serialize_map(Option<usize>) -> Self::SerializeMap,
        serialize_struct(&'static str, usize) -> Self::SerializeStruct,
        serialize_struct_variant(&'static str, u32, &'static str, usize)
            -> Self::SerializeStructVariant
    );

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Done {
        self.out.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
}
