//! The few DER shapes a key file or a certificate holds: a strict reader
//! and a writer for tag-length-value items.
//!
//! Strict because a key is trust: only definite, minimal lengths are read
//! (BER's indefinite and padded lengths are refused), and a caller that
//! has read what it expects asks [`Reader::finish`] to refuse trailing
//! bytes, so two parsers can never disagree on what one file says.

/// DER tag of a BOOLEAN.
pub(super) const BOOLEAN: u8 = 0x01;
/// DER tag of an INTEGER.
pub(super) const INTEGER: u8 = 0x02;
/// DER tag of a BIT STRING.
pub(super) const BIT_STRING: u8 = 0x03;
/// DER tag of an OCTET STRING.
pub(super) const OCTET_STRING: u8 = 0x04;
/// DER tag of a NULL.
pub(super) const NULL: u8 = 0x05;
/// DER tag of an OBJECT IDENTIFIER.
pub(super) const OID: u8 = 0x06;
/// DER tag of a UTF8String.
pub(super) const UTF8_STRING: u8 = 0x0c;
/// DER tag of a (constructed) SEQUENCE.
pub(super) const SEQUENCE: u8 = 0x30;

/// The longest item a key file or certificate needs: a P-384 PKCS#8 is
/// under 200 bytes, an RSA-4096 key (refused, but read far enough to name
/// it) about 550, a Fulcio certificate under 4 KiB; two length bytes cover
/// 64 KiB and anything longer is neither.
const MAX_LENGTH_BYTES: usize = 2;

/// Reads DER items from the front of a byte slice.
#[derive(Debug)]
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// The tag of the next item, if any remains.
    pub(super) fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The contents of the next item, which must carry `tag`.
    pub(super) fn read(&mut self, tag: u8) -> Result<&'a [u8], String> {
        let (&found, after_tag) = self
            .rest
            .split_first()
            .ok_or_else(|| format!("expected {} but the data ends", name(tag)))?;
        if found != tag {
            return Err(format!(
                "expected {} but found tag 0x{found:02x}",
                name(tag)
            ));
        }
        let (length, after_length) = read_length(after_tag)?;
        if after_length.len() < length {
            return Err(format!(
                "{} claims {length} bytes but only {} remain",
                name(tag),
                after_length.len()
            ));
        }
        let (contents, rest) = after_length.split_at(length);
        self.rest = rest;
        Ok(contents)
    }

    /// The next item whatever its tag: its tag, its contents and the
    /// whole item as encoded (to copy it unchanged into another).
    pub(super) fn read_any(&mut self) -> Result<(u8, &'a [u8], &'a [u8]), String> {
        let start = self.rest;
        let tag = self.peek().ok_or("expected an item but the data ends")?;
        let contents = self.read(tag)?;
        let whole = &start[..start.len() - self.rest.len()];
        Ok((tag, contents, whole))
    }

    /// Whether every item has been read.
    pub(super) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Refuses bytes left after the last item read.
    pub(super) fn finish(&self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes after the item", self.rest.len()))
        }
    }
}

/// Reads a definite, minimally encoded length; returns it and the bytes
/// after it.
fn read_length(bytes: &[u8]) -> Result<(usize, &[u8]), String> {
    let (&first, rest) = bytes.split_first().ok_or("the data ends inside a length")?;
    if first < 0x80 {
        return Ok((usize::from(first), rest));
    }
    let count = usize::from(first & 0x7f);
    if count == 0 {
        return Err("indefinite length (BER, not DER)".into());
    }
    if count > MAX_LENGTH_BYTES {
        return Err(format!(
            "a {count}-byte length: no key or certificate is that long"
        ));
    }
    if rest.len() < count {
        return Err("the data ends inside a length".into());
    }
    let (digits, rest) = rest.split_at(count);
    let length = digits
        .iter()
        .fold(0usize, |acc, &digit| (acc << 8) | usize::from(digit));
    // DER takes the shortest form: no leading zero byte, and the long form
    // only for lengths the short form cannot hold.
    if digits[0] == 0 || length < 0x80 {
        return Err("a length not in its shortest form (BER, not DER)".into());
    }
    Ok((length, rest))
}

/// One DER item: `tag`, then the length of `contents`, then `contents`.
pub(super) fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = contents.len();
    if length < 0x80 {
        out.push(length as u8);
    } else if length <= 0xff {
        out.extend([0x81, length as u8]);
    } else {
        // Keys and certificates are far below 64 KiB; the writer serves
        // only items toolhost built or re-encodes from ones it read.
        out.extend([0x82, (length >> 8) as u8, length as u8]);
    }
    out.extend_from_slice(contents);
    out
}

/// How a tag reads in a message.
fn name(tag: u8) -> &'static str {
    match tag {
        INTEGER => "an INTEGER",
        BOOLEAN => "a BOOLEAN",
        BIT_STRING => "a BIT STRING",
        OCTET_STRING => "an OCTET STRING",
        NULL => "a NULL",
        OID => "an OBJECT IDENTIFIER",
        UTF8_STRING => "a UTF8String",
        SEQUENCE => "a SEQUENCE",
        _ => "another item",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lengths_read_back_what_tlv_wrote() {
        for size in [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x1234] {
            let contents = vec![0xab; size];
            let item = tlv(OCTET_STRING, &contents);
            let mut reader = Reader::new(&item);
            assert_eq!(reader.read(OCTET_STRING).unwrap(), &contents[..]);
            reader.finish().unwrap();
        }
    }

    #[test]
    fn ber_lengths_are_refused() {
        let indefinite = [SEQUENCE, 0x80, 0x00, 0x00];
        assert!(
            Reader::new(&indefinite)
                .read(SEQUENCE)
                .unwrap_err()
                .contains("indefinite")
        );
        let padded = [OCTET_STRING, 0x81, 0x05, 1, 2, 3, 4, 5];
        assert!(
            Reader::new(&padded)
                .read(OCTET_STRING)
                .unwrap_err()
                .contains("shortest")
        );
        let leading_zero = [OCTET_STRING, 0x82, 0x00, 0x90];
        assert!(
            Reader::new(&leading_zero)
                .read(OCTET_STRING)
                .unwrap_err()
                .contains("shortest")
        );
        let huge = [OCTET_STRING, 0x84, 0x10, 0, 0, 0];
        assert!(
            Reader::new(&huge)
                .read(OCTET_STRING)
                .unwrap_err()
                .contains("4-byte")
        );
    }

    #[test]
    fn truncated_items_and_trailing_bytes_are_refused() {
        let short = [OCTET_STRING, 0x05, 1, 2];
        assert!(
            Reader::new(&short)
                .read(OCTET_STRING)
                .unwrap_err()
                .contains("only 2 remain")
        );
        let wrong_tag = [NULL, 0x00];
        assert!(
            Reader::new(&wrong_tag)
                .read(OID)
                .unwrap_err()
                .contains("0x05")
        );
        let trailing = [NULL, 0x00, 0x00];
        let mut reader = Reader::new(&trailing);
        reader.read(NULL).unwrap();
        assert!(reader.finish().unwrap_err().contains("1 trailing"));
    }
}
