//! The framing of `docs/keys.md`: each field hashed after its length (4
//! bytes, big-endian), so that no two different lists of fields hash the
//! same text.

use sha2::{Digest, Sha256};

use super::IdempotencyKey;

/// SHA-256 over length-prefixed fields.
pub(super) struct Framer {
    hash: Sha256,
    /// Framed fields not hashed yet: hashed in one update when the key
    /// is finished (or this fills), rather than two small updates a field.
    pending: [u8; FRAMER_PENDING],
    len: usize,
}

/// [`Framer::pending`]'s size: a key's fields from a call id, or from a
/// run, a step and a fingerprint, fit in it.
const FRAMER_PENDING: usize = 256;

impl Framer {
    pub(super) fn new(domain: &str) -> Self {
        let mut f = Framer {
            hash: Sha256::new(),
            pending: [0; FRAMER_PENDING],
            len: 0,
        };
        f.field(domain.as_bytes());
        f
    }

    pub(super) fn field(&mut self, bytes: &[u8]) -> &mut Self {
        let framed = 4 + bytes.len();
        if self.len + framed > FRAMER_PENDING {
            self.flush();
        }
        let length = (bytes.len() as u32).to_be_bytes();
        if framed > FRAMER_PENDING {
            self.hash.update(length);
            self.hash.update(bytes);
        } else {
            let at = self.len;
            self.pending[at..at + 4].copy_from_slice(&length);
            self.pending[at + 4..at + framed].copy_from_slice(bytes);
            self.len += framed;
        }
        self
    }

    fn flush(&mut self) {
        self.hash.update(&self.pending[..self.len]);
        self.len = 0;
    }

    pub(super) fn finish(mut self) -> IdempotencyKey {
        self.flush();
        IdempotencyKey::from_digest(&self.hash.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framing, written out: every field's length, then the field.
    fn unbuffered(fields: &[&[u8]]) -> [u8; 32] {
        let mut h = Sha256::new();
        for field in fields {
            h.update((field.len() as u32).to_be_bytes());
            h.update(field);
        }
        h.finalize().into()
    }

    #[test]
    fn fields_held_back_hash_as_the_framing_written_out_whatever_their_sizes() {
        let long = vec![b'x'; 3 * FRAMER_PENDING];
        // Around the buffer's edge: fields that fill it exactly, one byte
        // short of it and past it, alone, after others, and empty ones.
        for sizes in [
            vec![0],
            vec![1, 0, 2],
            vec![FRAMER_PENDING - 8, 0],
            vec![FRAMER_PENDING - 8, 1],
            vec![FRAMER_PENDING - 4],
            vec![FRAMER_PENDING - 3],
            vec![10, FRAMER_PENDING, 10],
            vec![100, 100, 100, 100],
            vec![3 * FRAMER_PENDING, 5],
        ] {
            let fields: Vec<&[u8]> = sizes.iter().map(|&n| &long[..n]).collect();
            let (domain, rest) = fields.split_first().expect("a domain");
            let mut framer = Framer::new(std::str::from_utf8(domain).unwrap());
            for field in rest {
                framer.field(field);
            }
            assert_eq!(
                framer.finish().digest(),
                unbuffered(&fields),
                "fields of {sizes:?} bytes"
            );
        }
    }
}
