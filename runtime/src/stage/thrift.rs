//! A walk over Thrift compact-protocol structs (Parquet's footer and page headers) that checks
//! every size they declare before a decoder trusts it.
//!
//! Decoders allocate what the bytes declare: a list's element count becomes
//! `Vec::with_capacity(n)` of decoded structs (up to 2^31 of them), a binary field's length a
//! buffer, all before a single element is read. A forged footer of a few bytes aborted the
//! process this way. The walk allocates nothing and refuses, with the field's position:
//! - a list, set or map declaring more elements than the bytes left could hold (each takes at
//!   least one byte);
//! - a binary value above [`Bounds::binary`] or past the end;
//! - more than [`Bounds::decoded`] bytes of decoded elements in all, counting a struct element
//!   as [`STRUCT_BYTES`] (what a decoder's structs take, about) and anything else as
//!   [`VALUE_BYTES`];
//! - nesting deeper than [`MAX_DEPTH`].

use std::io::Read;

/// What one decoded struct element may take in memory (Parquet's column chunk metadata, the
/// largest, is a few hundred bytes).
pub(super) const STRUCT_BYTES: u64 = 512;
/// What one decoded non-struct element takes (a `Vec`'s or `String`'s header, a number).
pub(super) const VALUE_BYTES: u64 = 24;
const MAX_DEPTH: usize = 32;

/// The sizes one walk accepts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// One binary or string value.
    pub binary: u64,
    /// Every element of every list, set and map, weighted as decoded.
    pub decoded: u64,
}

/// A compact-protocol reader over at most `left` bytes of `input`.
pub(super) struct Walk<R> {
    input: R,
    left: u64,
    at: u64,
    decoded: u64,
    bounds: Bounds,
    /// The field ids leading to the value being read.
    path: Vec<i16>,
}

/// What a walk found wrong, and where (bytes from the start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub(super) struct Forged {
    what: String,
    at: u64,
}

type Result<T> = std::result::Result<T, Forged>;

// Compact protocol types.
const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
const UUID: u8 = 13;

impl<R: Read> Walk<R> {
    pub(super) fn new(input: R, left: u64, bounds: Bounds) -> Self {
        Self {
            input,
            left,
            at: 0,
            decoded: 0,
            bounds,
            path: Vec::new(),
        }
    }

    /// Bytes read so far.
    pub(super) fn position(&self) -> u64 {
        self.at
    }

    fn forged(&self, what: impl Into<String>) -> Forged {
        Forged {
            what: what.into(),
            at: self.at,
        }
    }

    fn byte(&mut self) -> Result<u8> {
        if self.left == 0 {
            return Err(self.forged("the structure runs past the end"));
        }
        let mut b = [0u8; 1];
        self.input
            .read_exact(&mut b)
            .map_err(|e| self.forged(format!("cannot read: {e}")))?;
        self.left -= 1;
        self.at += 1;
        Ok(b[0])
    }

    fn skip(&mut self, n: u64) -> Result<()> {
        if n > self.left {
            return Err(self.forged(format!("a value of {n} bytes runs past the end")));
        }
        let copied = {
            let mut part = (&mut self.input).take(n);
            std::io::copy(&mut part, &mut std::io::sink())
        };
        let copied = copied.map_err(|e| self.forged(format!("cannot read: {e}")))?;
        if copied != n {
            return Err(self.forged("the structure runs past the end"));
        }
        self.left -= n;
        self.at += n;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.forged("a varint longer than 10 bytes"))
    }

    fn zigzag(&mut self) -> Result<i64> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// Counts `n` elements of `element` type against what the bytes left can hold and what
    /// decoding them may take.
    fn elements(&mut self, n: u64, element: u8, min_bytes: u64) -> Result<()> {
        if n.saturating_mul(min_bytes) > self.left {
            return Err(self.forged(format!(
                "a collection declares {n} elements, more than the {} bytes left could hold",
                self.left
            )));
        }
        let each = if element == STRUCT {
            STRUCT_BYTES
        } else {
            VALUE_BYTES
        };
        self.decoded = self.decoded.saturating_add(n.saturating_mul(each));
        if self.decoded > self.bounds.decoded {
            return Err(self.forged(format!(
                "the collections declare more than {} bytes once decoded",
                self.bounds.decoded
            )));
        }
        Ok(())
    }

    /// A value of `kind`, shown to `visit` (integers, binary lengths and collection sizes).
    fn value(&mut self, kind: u8, depth: usize, visit: Visit<'_>) -> Result<()> {
        match kind {
            TRUE | FALSE => Ok(()),
            BYTE => {
                let b = self.byte()?;
                visit(&self.path, Seen::Int(i64::from(b as i8)));
                Ok(())
            }
            I16 | I32 | I64 => {
                let v = self.zigzag()?;
                visit(&self.path, Seen::Int(v));
                Ok(())
            }
            DOUBLE => self.skip(8),
            UUID => self.skip(16),
            BINARY => {
                let len = self.varint()?;
                if len > self.bounds.binary {
                    return Err(self.forged(format!(
                        "a binary value of {len} bytes, above the {} allowed",
                        self.bounds.binary
                    )));
                }
                visit(&self.path, Seen::Binary(len));
                self.skip(len)
            }
            LIST | SET => {
                let header = self.byte()?;
                let element = header & 0x0f;
                let n = match header >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                self.elements(n, element, 1)?;
                visit(&self.path, Seen::Collection(n));
                for _ in 0..n {
                    // A boolean element is one byte of its own.
                    if matches!(element, TRUE | FALSE) {
                        self.byte()?;
                    } else {
                        self.nested(element, depth, visit)?;
                    }
                }
                Ok(())
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                let (key, value) = (types >> 4, types & 0x0f);
                self.elements(n, value.max(key), 2)?;
                visit(&self.path, Seen::Collection(n));
                for _ in 0..n {
                    for kind in [key, value] {
                        if matches!(kind, TRUE | FALSE) {
                            self.byte()?;
                        } else {
                            self.nested(kind, depth, visit)?;
                        }
                    }
                }
                Ok(())
            }
            STRUCT => self.fields(depth + 1, visit),
            other => Err(self.forged(format!("an unknown type {other}"))),
        }
    }

    fn nested(&mut self, kind: u8, depth: usize, visit: Visit<'_>) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(self.forged(format!("structures nested over {MAX_DEPTH} deep")));
        }
        self.value(kind, depth + 1, visit)
    }

    /// A struct's fields up to its end, then [`Seen::End`].
    fn fields(&mut self, depth: usize, visit: Visit<'_>) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(self.forged(format!("structures nested over {MAX_DEPTH} deep")));
        }
        let mut id: i16 = 0;
        loop {
            let header = self.byte()?;
            let kind = header & 0x0f;
            if kind == STOP {
                visit(&self.path, Seen::End);
                return Ok(());
            }
            id = match header >> 4 {
                0 => i16::try_from(self.zigzag()?)
                    .map_err(|_| self.forged("a field id out of range"))?,
                delta => id.wrapping_add(i16::from(delta)),
            };
            self.path.push(id);
            let value = self.value(kind, depth, visit);
            self.path.pop();
            value?;
        }
    }

    /// One whole struct, every value of it and of what it nests shown to `visit` with the path
    /// of field ids that leads to it (a list's elements share the list's path).
    pub(super) fn read_struct(&mut self, visit: Visit<'_>) -> Result<()> {
        self.fields(0, visit)
    }
}

/// What a walk shows of a value, at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// An integer field (or list element).
    Int(i64),
    /// A binary or string value of this many bytes.
    Binary(u64),
    /// A list, set or map declaring this many elements.
    Collection(u64),
    /// The end of a struct (for a list of structs: of one element).
    End,
}

type Visit<'a> = &'a mut dyn FnMut(&[i16], Seen);

#[cfg(test)]
mod tests {
    use super::*;

    const LOOSE: Bounds = Bounds {
        binary: 1 << 20,
        decoded: 1 << 30,
    };

    fn walk(bytes: &[u8], bounds: Bounds) -> Result<Vec<(Vec<i16>, Seen)>> {
        let mut seen = Vec::new();
        Walk::new(bytes, bytes.len() as u64, bounds)
            .read_struct(&mut |path, v| seen.push((path.to_vec(), v)))?;
        Ok(seen)
    }

    #[test]
    fn values_are_seen_at_their_paths() {
        // field 1: i32 3 (zigzag 6); field 2: i32 -1 (zigzag 1); field 3: struct { field 1:
        // i32 5 }; field 20 (long form): i64 7; field 21 (delta 1): list of 2 structs
        // { field 4: binary "ab" }; stop.
        let bytes = [
            0x15, 6, 0x15, 1, 0x1c, 0x15, 10, 0, 0x06, 40, 14, 0x19, 0x2c, 0x48, 2, b'a', b'b', 0,
            0x48, 0, 0, 0,
        ];
        let seen = walk(&bytes, LOOSE).unwrap();
        assert_eq!(
            seen,
            vec![
                (vec![1], Seen::Int(3)),
                (vec![2], Seen::Int(-1)),
                (vec![3, 1], Seen::Int(5)),
                (vec![3], Seen::End),
                (vec![20], Seen::Int(7)),
                (vec![21], Seen::Collection(2)),
                (vec![21, 4], Seen::Binary(2)),
                (vec![21], Seen::End),
                (vec![21, 4], Seen::Binary(0)),
                (vec![21], Seen::End),
                (vec![], Seen::End),
            ]
        );
    }

    #[test]
    fn declared_sizes_beyond_the_bytes_are_refused() {
        // field 1: a list of i32 declaring 2^31 - 1 elements, with three bytes after it.
        let mut huge = vec![0x19, 0xf5];
        huge.extend([0xff, 0xff, 0xff, 0xff, 0x07, 1, 2, 3]);
        let e = walk(&huge, LOOSE).unwrap_err();
        assert!(e.to_string().contains("2147483647 elements"), "{e}");
        // field 1: binary of 1 MiB + 1 declared.
        let binary = [0x18, 0x81, 0x80, 0x40, 0];
        let e = walk(&binary, LOOSE).unwrap_err();
        assert!(e.to_string().contains("binary value"), "{e}");
        // A list of structs within the bytes, but over the decoded bound.
        let mut structs = vec![0x19, 0xfc, 100];
        structs.extend([0u8; 100]);
        structs.push(0);
        assert!(walk(&structs, LOOSE).is_ok());
        let tight = Bounds {
            binary: 1 << 20,
            decoded: 99 * STRUCT_BYTES,
        };
        let e = walk(&structs, tight).unwrap_err();
        assert!(e.to_string().contains("once decoded"), "{e}");
        // Truncated, and nested too deep.
        assert!(walk(&[0x15], LOOSE).is_err());
        let deep: Vec<u8> = std::iter::repeat_n(0x1c, 100).collect();
        assert!(
            walk(&deep, LOOSE)
                .unwrap_err()
                .to_string()
                .contains("nested")
        );
    }
}
