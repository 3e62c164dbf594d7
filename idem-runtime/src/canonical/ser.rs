//! RFC 8785 canonical JSON written straight from a `Serialize` value,
//! without building a `serde_json::Value` first.
//!
//! It produces exactly what `canonicalize(&serde_json::to_value(x)?)` would
//! (a test holds the two together), with the checks `to_value` skips: NaN
//! and infinities are refused rather than turned into `null`. Object members
//! are written to a scratch buffer and emitted in UTF-16 order of their
//! names, so an object costs two allocations however many members it has.

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
    fn serialize_i8(self, v: i8) -> Done {
        self.integer(v.into())
    }
    fn serialize_i16(self, v: i16) -> Done {
        self.integer(v.into())
    }
    fn serialize_i32(self, v: i32) -> Done {
        self.integer(v.into())
    }
    fn serialize_i64(self, v: i64) -> Done {
        self.integer(v.into())
    }
    fn serialize_i128(self, v: i128) -> Done {
        self.integer(v)
    }
    fn serialize_u8(self, v: u8) -> Done {
        self.integer(v.into())
    }
    fn serialize_u16(self, v: u16) -> Done {
        self.integer(v.into())
    }
    fn serialize_u32(self, v: u32) -> Done {
        self.integer(v.into())
    }
    fn serialize_u64(self, v: u64) -> Done {
        self.integer(v.into())
    }
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
    fn serialize_map(self, len: Option<usize>) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::new(self.out, len.unwrap_or(4), None, false))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::new(self.out, len, None, name == RAW_VALUE_TOKEN))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Object<'a>, CanonicalError> {
        let Writer { out } = self;
        Writer { out: &mut *out }.tagged(variant);
        Ok(Object::new(out, len, Some(variant), false))
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

/// An object being written: members go to `scratch` (name and value text
/// side by side) and are emitted sorted when it ends.
pub(super) struct Object<'a> {
    out: &'a mut String,
    scratch: String,
    /// (name range, value range) in `scratch`.
    members: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// Set for a struct variant: close the wrapping object too.
    variant: Option<&'static str>,
    /// A serde_json `RawValue`: its one field is JSON text to canonicalize.
    raw: bool,
    /// The name of the member whose value comes next (maps).
    pending: Option<std::ops::Range<usize>>,
}

impl<'a> Object<'a> {
    fn new(out: &'a mut String, len: usize, variant: Option<&'static str>, raw: bool) -> Self {
        Object {
            out,
            scratch: String::with_capacity(len * 24),
            members: Vec::with_capacity(len),
            variant,
            raw,
            pending: None,
        }
    }

    fn value<T: ?Sized + Serialize>(&mut self, name: std::ops::Range<usize>, v: &T) -> Done {
        let start = self.scratch.len();
        v.serialize(Writer {
            out: &mut self.scratch,
        })
        .map_err(|e| e.under(&self.scratch[name.clone()]))?;
        self.members.push((name, start..self.scratch.len()));
        Ok(())
    }

    fn field<T: ?Sized + Serialize>(&mut self, name: &str, v: &T) -> Done {
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
        let start = self.scratch.len();
        self.scratch.push_str(name);
        self.value(start..self.scratch.len(), v)
    }

    fn finish(self) -> Done {
        if self.raw {
            return Ok(());
        }
        let Object {
            out,
            scratch,
            mut members,
            variant,
            ..
        } = self;
        let name = |r: &std::ops::Range<usize>| &scratch[r.clone()];
        let sorted = members
            .windows(2)
            .all(|w| super::utf16_order(name(&w[0].0), name(&w[1].0)).is_le());
        if !sorted {
            members.sort_by(|a, b| super::utf16_order(name(&a.0), name(&b.0)));
        }
        out.push('{');
        for (i, (n, v)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(out, name(n));
            out.push(':');
            out.push_str(&scratch[v.clone()]);
        }
        out.push('}');
        if variant.is_some() {
            out.push('}');
        }
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, name: &'static str, v: &T) -> Done {
        self.field(name, v)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, name: &'static str, v: &T) -> Done {
        self.field(name, v)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Done {
        let start = self.scratch.len();
        key.serialize(KeyWriter {
            out: &mut self.scratch,
        })?;
        self.pending = Some(start..self.scratch.len());
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
        let name = self
            .pending
            .take()
            .ok_or_else(|| CanonicalError::Serialize("map value without a key".into()))?;
        self.value(name, v)
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

    fn serialize_f32(self, _: f32) -> Done {
        Err(key_error())
    }
    fn serialize_f64(self, _: f64) -> Done {
        Err(key_error())
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Err(key_error())
    }
    fn serialize_none(self) -> Done {
        Err(key_error())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Done {
        Err(key_error())
    }
    fn serialize_unit(self) -> Done {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Err(key_error())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Done {
        self.out.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Done {
        Err(key_error())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, CanonicalError> {
        Err(key_error())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, CanonicalError> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, CanonicalError> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, CanonicalError> {
        Err(key_error())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, CanonicalError> {
        Err(key_error())
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, CanonicalError> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, CanonicalError> {
        Err(key_error())
    }
}
