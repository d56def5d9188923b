//! What an image's bytes say it is: its type, size in pixels and whether it
//! is animated, read from its header alone.
//!
//! Model providers check an image against the media type it is sent under,
//! and refuse some sizes and animations (see [`super::providers`]). A tool
//! may declare any media type for any bytes, so the host reads the truth
//! from the bytes. Only headers are read, each within the data: no image is
//! decoded, and no input makes this read past its end or loop without
//! moving forward.

/// An image as its bytes describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: &'static str,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// More than one frame (a GIF of several images, an animated WebP).
    pub animated: bool,
}

/// The type, size and animation of the PNG, JPEG, GIF or WebP image in
/// `data`, or `None` when its header is not one of those.
pub fn sniff(data: &[u8]) -> Option<ImageInfo> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        png(data)
    } else if data.starts_with(b"\xff\xd8") {
        jpeg(data)
    } else if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") {
        gif(data)
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        webp(data)
    } else {
        None
    }
}

fn info(mime_type: &'static str, width: u32, height: u32, animated: bool) -> Option<ImageInfo> {
    (width > 0 && height > 0).then_some(ImageInfo {
        mime_type,
        width,
        height,
        animated,
    })
}

fn be16(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        data.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le16(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(
        data.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le24(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at + 3)?;
    Some(u32::from(bytes[0]) | u32::from(bytes[1]) << 8 | u32::from(bytes[2]) << 16)
}

/// The signature, then the IHDR chunk: width and height, big-endian.
fn png(data: &[u8]) -> Option<ImageInfo> {
    if data.get(12..16)? != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(data.get(16..20)?.try_into().ok()?);
    let height = u32::from_be_bytes(data.get(20..24)?.try_into().ok()?);
    info("image/png", width, height, false)
}

/// Segments after SOI until a start-of-frame, which holds the size.
fn jpeg(data: &[u8]) -> Option<ImageInfo> {
    let mut at = 2;
    loop {
        // Markers may be padded with any number of 0xFF bytes.
        while *data.get(at)? == 0xff && *data.get(at + 1)? == 0xff {
            at += 1;
        }
        if *data.get(at)? != 0xff {
            return None;
        }
        let marker = *data.get(at + 1)?;
        at += 2;
        match marker {
            // Markers without a length.
            0x01 | 0xd0..=0xd7 => continue,
            // End of image, or start of scan, before any frame header.
            0xd9 | 0xda => return None,
            // Start of frame (baseline, progressive, lossless, arithmetic):
            // length, precision, height, width.
            0xc0..=0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                let height = be16(data, at + 3)?;
                let width = be16(data, at + 5)?;
                return info("image/jpeg", width, height, false);
            }
            _ => {
                let length = be16(data, at)? as usize;
                // A length counts itself: under 2 would not move forward.
                if length < 2 {
                    return None;
                }
                at += length;
            }
        }
    }
}

/// The logical screen's size, then the blocks, counting image descriptors:
/// a GIF of more than one image is animated (OpenAI takes only still ones).
fn gif(data: &[u8]) -> Option<ImageInfo> {
    let width = le16(data, 6)?;
    let height = le16(data, 8)?;
    let packed = *data.get(10)?;
    let mut at = 13;
    if packed & 0x80 != 0 {
        at += 3 << ((packed & 0x07) + 1);
    }
    let mut frames = 0u32;
    // A file cut short, or with no trailer, is judged by the frames seen.
    while let Some(&introducer) = data.get(at) {
        match introducer {
            // Extension: label, then data sub-blocks.
            0x21 => at = skip_sub_blocks(data, at + 2)?,
            // Image descriptor: position and size, an optional local colour
            // table, the LZW code size, then data sub-blocks.
            0x2c => {
                frames += 1;
                if frames > 1 {
                    break;
                }
                let packed = *data.get(at + 9)?;
                at += 10;
                if packed & 0x80 != 0 {
                    at += 3 << ((packed & 0x07) + 1);
                }
                at = skip_sub_blocks(data, at + 1)?;
            }
            // Trailer, or anything else: the end.
            _ => break,
        }
    }
    info("image/gif", width, height, frames > 1)
}

/// The index after the sub-blocks starting at `at` (each a length byte and
/// that many bytes; a zero length ends them).
fn skip_sub_blocks(data: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let length = usize::from(*data.get(at)?);
        at += 1 + length;
        if length == 0 {
            return Some(at);
        }
    }
}

/// RIFF, then the first chunk: lossy (`VP8 `), lossless (`VP8L`) or
/// extended (`VP8X`, whose flags say whether it is animated).
fn webp(data: &[u8]) -> Option<ImageInfo> {
    match data.get(12..16)? {
        b"VP8 " => {
            // Frame tag (3 bytes), start code, then 14-bit sizes.
            if data.get(23..26)? != b"\x9d\x01\x2a" {
                return None;
            }
            let width = le16(data, 26)? & 0x3fff;
            let height = le16(data, 28)? & 0x3fff;
            info("image/webp", width, height, false)
        }
        b"VP8L" => {
            if *data.get(20)? != 0x2f {
                return None;
            }
            let bits = u32::from_le_bytes(data.get(21..25)?.try_into().ok()?);
            let width = (bits & 0x3fff) + 1;
            let height = ((bits >> 14) & 0x3fff) + 1;
            info("image/webp", width, height, false)
        }
        b"VP8X" => {
            let flags = *data.get(20)?;
            let width = le24(data, 24)? + 1;
            let height = le24(data, 27)? + 1;
            info("image/webp", width, height, flags & 0x02 != 0)
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A PNG header of `width` × `height`, followed by `pad` bytes.
    pub(crate) fn png_of(width: u32, height: u32, pad: usize) -> Vec<u8> {
        let mut data = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        data.extend_from_slice(&width.to_be_bytes());
        data.extend_from_slice(&height.to_be_bytes());
        data.extend_from_slice(b"\x08\x06\0\0\0\0\0\0\0");
        data.resize(data.len() + pad, 0);
        data
    }

    /// A GIF of `frames` 1×1 images.
    pub(crate) fn gif_of(frames: usize) -> Vec<u8> {
        // Header, screen 3×2 with a 2-colour global table.
        let mut data = b"GIF89a\x03\0\x02\0\x80\0\0".to_vec();
        data.extend_from_slice(&[0, 0, 0, 255, 255, 255]);
        // The NETSCAPE looping extension animated GIFs carry.
        data.extend_from_slice(b"\x21\xff\x0bNETSCAPE2.0\x03\x01\0\0\0");
        for _ in 0..frames {
            // Graphic control extension, then the image.
            data.extend_from_slice(b"\x21\xf9\x04\0\x0a\0\0\0");
            data.extend_from_slice(b"\x2c\0\0\0\0\x01\0\x01\0\0\x02\x02\x44\x01\0");
        }
        data.push(0x3b);
        data
    }

    #[test]
    fn each_type_is_read_from_its_header() {
        assert_eq!(
            sniff(&png_of(640, 480, 16)),
            Some(ImageInfo {
                mime_type: "image/png",
                width: 640,
                height: 480,
                animated: false
            })
        );
        // JPEG: SOI, an APP0 segment, padding, then a baseline SOF0.
        let mut jpeg = b"\xff\xd8\xff\xe0\0\x10JFIF\0\x01\x01\0\0\x01\0\x01\0\0".to_vec();
        jpeg.extend_from_slice(b"\xff\xff\xc0\0\x11\x08\x01\xe0\x02\x80\x03\x01\x22\0");
        let info = sniff(&jpeg).unwrap();
        assert_eq!(
            (info.mime_type, info.width, info.height),
            ("image/jpeg", 640, 480)
        );
        let still = sniff(&gif_of(1)).unwrap();
        assert_eq!(
            (still.mime_type, still.width, still.height, still.animated),
            ("image/gif", 3, 2, false)
        );
        assert!(sniff(&gif_of(2)).unwrap().animated);
        // WebP: lossy, lossless and extended (animated) headers.
        let mut lossy = b"RIFF\0\0\0\0WEBPVP8 \0\0\0\0\0\0\0\x9d\x01\x2a".to_vec();
        lossy.extend_from_slice(&[0x80, 0x02, 0xe0, 0x01]);
        assert_eq!(
            sniff(&lossy).map(|i| (i.mime_type, i.width, i.height)),
            Some(("image/webp", 640, 480))
        );
        let mut lossless = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
        let bits: u32 = 639 | (479 << 14);
        lossless.extend_from_slice(&bits.to_le_bytes());
        assert_eq!(
            sniff(&lossless).map(|i| (i.width, i.height)),
            Some((640, 480))
        );
        let mut extended = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\x02\0\0\0".to_vec();
        extended.extend_from_slice(&[0x7f, 0x02, 0x00, 0xdf, 0x01, 0x00]);
        let info = sniff(&extended).unwrap();
        assert_eq!((info.width, info.height, info.animated), (640, 480, true));
    }

    #[test]
    fn what_is_no_image_of_these_types_is_none() {
        for data in [
            &b""[..],
            b"\x89PNG\r\n\x1a\n",
            b"\x89PNG\r\n\x1a\n\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07",
            b"<svg xmlns='http://www.w3.org/2000/svg'/>",
            b"\xff\xd8\xff\xd9",
            b"\xff\xd8\xff\xe0\0\x01",
            b"\xff\xd8\xff\xe0\xff\xff",
            b"GIF89a\x01",
            b"RIFF\0\0\0\0WEBPVP8 ",
            b"BM\x36\0\0\0",
        ] {
            assert_eq!(sniff(data), None, "{data:?}");
        }
        // A zero-sized image is none either.
        assert_eq!(sniff(&png_of(0, 10, 0)), None);
    }

    #[test]
    fn cut_and_hostile_headers_end_without_reading_past_the_data() {
        let gif = gif_of(3);
        for end in 0..gif.len() {
            let _ = sniff(&gif[..end]);
        }
        // Sub-block lengths pointing past the end, a colour table larger
        // than the file.
        assert!(sniff(b"GIF89a\x01\0\x01\0\x87\0\0\x2c").is_some_and(|i| !i.animated));
        let _ = sniff(b"GIF89a\x01\0\x01\0\0\0\0\x21\xf9\xff\x01");
        let mut jpeg = b"\xff\xd8".to_vec();
        for _ in 0..10_000 {
            jpeg.extend_from_slice(b"\xff\xe1\0\x02");
        }
        assert_eq!(sniff(&jpeg), None);
    }
}
