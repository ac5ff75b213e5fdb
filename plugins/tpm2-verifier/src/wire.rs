//! A strict reader over untrusted bytes: every read is bounds-checked and fails with a
//! [`ParseError`] naming what was being read; nothing here can panic, whatever the input.

use std::fmt;

/// Why bytes did not parse: the field and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl ParseError {
    /// An error about `what`.
    pub fn new(what: impl Into<String>) -> ParseError {
        ParseError(what.into())
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// A cursor over a byte slice. Big-endian reads for TPM structures, little-endian ones for the
/// TCG event log.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], ParseError> {
        let end = self.pos.checked_add(n).ok_or_else(|| ParseError::new(format!("{what}: length overflow")))?;
        let slice = self.buf.get(self.pos..end).ok_or_else(|| {
            ParseError::new(format!(
                "{what}: truncated (needs {n} bytes at offset {}, {} left)",
                self.pos,
                self.remaining()
            ))
        })?;
        self.pos = end;
        Ok(slice)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ParseError> {
        let slice = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    /// One byte.
    pub fn u8(&mut self, what: &str) -> Result<u8, ParseError> {
        Ok(u8::from_be_bytes(self.array::<1>(what)?))
    }

    /// A big-endian u16.
    pub fn u16(&mut self, what: &str) -> Result<u16, ParseError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// A big-endian u32.
    pub fn u32(&mut self, what: &str) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// A big-endian u64.
    pub fn u64(&mut self, what: &str) -> Result<u64, ParseError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// A little-endian u16.
    pub fn u16_le(&mut self, what: &str) -> Result<u16, ParseError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u32.
    pub fn u32_le(&mut self, what: &str) -> Result<u32, ParseError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u64.
    pub fn u64_le(&mut self, what: &str) -> Result<u64, ParseError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A TPM2B: a big-endian u16 size, then that many bytes, at most `max`.
    pub fn tpm2b(&mut self, max: usize, what: &str) -> Result<&'a [u8], ParseError> {
        let size = usize::from(self.u16(what)?);
        if size > max {
            return Err(ParseError::new(format!("{what}: size {size} exceeds the maximum {max}")));
        }
        self.bytes(size, what)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self, what: &str) -> Result<(), ParseError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(ParseError::new(format!("{what}: {n} trailing bytes after offset {}", self.pos))),
        }
    }
}

/// Lowercase hex, for details.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Decodes hex (either case); `None` on any other character or an odd length.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some((nibble(*hi)? << 4) | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded_and_finish_is_strict() {
        let mut r = Reader::new(&[0, 2, 0xaa, 0xbb, 1]);
        assert_eq!(r.tpm2b(4, "x").unwrap(), &[0xaa, 0xbb]);
        assert!(r.finish("x").is_err());
        assert_eq!(r.u8("y").unwrap(), 1);
        assert!(r.finish("x").is_ok());
        assert!(r.u8("z").is_err());
        let mut r = Reader::new(&[0, 5, 1]);
        assert!(r.tpm2b(4, "x").is_err());
        let mut r = Reader::new(&[0xff, 0xff]);
        assert!(r.tpm2b(usize::MAX, "x").is_err());
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00AB10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}
