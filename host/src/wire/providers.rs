//! What each model vendor takes in a tool result, in one place: the
//! answers `toolhost call --format` and `POST /v1/tool_calls?format=` give,
//! and the requests the agent loop sends, are both filtered here.
//!
//! | | OpenAI (chat completions, Responses) | Anthropic (Messages) |
//! |---|---|---|
//! | image types | PNG, JPEG, WebP, GIF (not animated) | PNG, JPEG, GIF, WebP |
//! | one image | 20 MB | 5 MiB as base64 (3.75 MiB of image) and 8000×8000 px |
//! | images in a request | 500, 50 MB in all | 100, 20 MiB in all (the request's limit is 32 MB); none over 2000×2000 px when there are more than 20 |
//! | text | as it is | no empty or blank text block; an empty result reads `(no output)` |
//!
//! (From the providers' vision guides: OpenAI's image input requirements,
//! Anthropic's limits for images in the Messages API. Anthropic measures
//! an image's 5 MiB as base64 and takes up to 600 images in some models;
//! the older, lower count holds for all.)
//!
//! An image's type is read from its bytes ([`super::image`]), so one sent
//! under the wrong media type goes under its own. A block a vendor cannot
//! take is never lost silently: it is replaced by a line of text saying
//! what was dropped and why, e.g. `[image dropped: image/svg+xml, 2 KiB;
//! OpenAI takes PNG, JPEG, WebP and still GIF images]`. Other blocks
//! (audio, links, resources) keep the lines each format already gives
//! them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::image::{ImageInfo, sniff};
use crate::outcome::{ContentBlock, Media, ResourceContents};

/// A model vendor's API, for what a tool result sent to it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Vendor {
    /// OpenAI chat completions and the Responses API (and the servers
    /// compatible with them).
    OpenAI,
    /// Anthropic's Messages API.
    Anthropic,
}

/// One vendor's limits on images.
struct Rules {
    name: &'static str,
    /// Media types it takes.
    types: &'static [&'static str],
    /// The types, for people.
    types_text: &'static str,
    /// Whether it takes a GIF of several frames.
    animated_gif: bool,
    /// The most bytes of one image.
    max_bytes: usize,
    /// `max_bytes`, for people.
    max_bytes_text: &'static str,
    /// The longest side of one image, in pixels.
    max_side: Option<u32>,
    /// The most images in one request.
    max_images: usize,
    /// The most bytes of images in one request.
    max_total: usize,
    /// `max_total`, for people.
    max_total_text: &'static str,
    /// More than this many images in a request, and none may have a side
    /// longer than this.
    crowded: Option<(usize, u32)>,
}

const OPENAI: Rules = Rules {
    name: "OpenAI",
    types: &["image/png", "image/jpeg", "image/webp", "image/gif"],
    types_text: "PNG, JPEG, WebP and still GIF images",
    animated_gif: false,
    max_bytes: 20_000_000,
    max_bytes_text: "20 MB",
    max_side: None,
    max_images: 500,
    max_total: 50_000_000,
    max_total_text: "50 MB",
    crowded: None,
};

/// 5 MiB of base64 is 3.75 MiB of image.
const ANTHROPIC: Rules = Rules {
    name: "Anthropic",
    types: &["image/png", "image/jpeg", "image/gif", "image/webp"],
    types_text: "PNG, JPEG, GIF and WebP images",
    animated_gif: true,
    max_bytes: (5 << 20) / 4 * 3,
    max_bytes_text: "3.75 MiB (5 MiB as base64)",
    max_side: Some(8000),
    max_images: 100,
    max_total: 20 << 20,
    max_total_text: "20 MiB",
    crowded: Some((20, 2000)),
};

impl Vendor {
    fn rules(self) -> &'static Rules {
        match self {
            Self::OpenAI => &OPENAI,
            Self::Anthropic => &ANTHROPIC,
        }
    }
}

/// The images of one request counted so far against its vendor's
/// limits on images per request.
#[derive(Debug, Clone)]
pub struct ImageBudget {
    vendor: Vendor,
    images: usize,
    bytes: usize,
}

impl ImageBudget {
    /// Nothing counted yet.
    pub fn new(vendor: Vendor) -> Self {
        Self {
            vendor,
            images: 0,
            bytes: 0,
        }
    }

    /// Count one more image of `bytes`, or say why the request has no room
    /// for it.
    fn admit(&mut self, bytes: usize) -> Result<(), String> {
        let rules = self.vendor.rules();
        if self.images >= rules.max_images {
            return Err(format!(
                "a request to {} carries at most {} images",
                rules.name, rules.max_images
            ));
        }
        if self.bytes + bytes > rules.max_total {
            return Err(format!(
                "a request to {} carries at most {} of images",
                rules.name, rules.max_total_text
            ));
        }
        self.images += 1;
        self.bytes += bytes;
        Ok(())
    }
}

/// `blocks`, one tool result's content, as `vendor` takes them: each
/// image checked on its own (its type read from its bytes, its size) and
/// counted against the request's `budget`; an image that does not pass is
/// a line of text saying why. For Anthropic, text blocks that are empty or
/// blank are left out (the API refuses them; they say nothing).
pub fn fit(vendor: Vendor, blocks: &[ContentBlock], budget: &mut ImageBudget) -> Vec<ContentBlock> {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) if vendor == Vendor::Anthropic && text.trim().is_empty() => {
                None
            }
            ContentBlock::Image(media) => Some(
                match image(vendor.rules(), media).and_then(|info| {
                    budget
                        .admit(media.data.len())
                        .map(|()| info)
                        .map_err(|why| format!("{}, {}; {why}", info.mime_type, size(media)))
                }) {
                    Ok(info) => ContentBlock::Image(Media {
                        mime_type: info.mime_type.to_owned(),
                        data: media.data.clone(),
                    }),
                    Err(why) => ContentBlock::Text(format!("[image dropped: {why}]")),
                },
            ),
            other => Some(other.clone()),
        })
        .collect()
}

/// The tool results of one request (in the conversation's order), as
/// `vendor` takes them: each as [`fit`] makes it, newest first against
/// one budget for the whole request, so that a long conversation keeps
/// its latest images when it has more than a request may carry. For
/// Anthropic, a request of more than 20 images then takes none over
/// 2000×2000 px.
pub fn fit_request(vendor: Vendor, results: &[&[ContentBlock]]) -> Vec<Vec<ContentBlock>> {
    let mut budget = ImageBudget::new(vendor);
    let mut fitted: Vec<Vec<ContentBlock>> = results
        .iter()
        .rev()
        .map(|blocks| fit(vendor, blocks, &mut budget))
        .collect();
    fitted.reverse();
    let rules = vendor.rules();
    if let Some((most, side)) = rules.crowded
        && budget.images > most
    {
        for block in fitted.iter_mut().flatten() {
            if let ContentBlock::Image(media) = block
                && let Some(info) = sniff(&media.data)
                && info.width.max(info.height) > side
            {
                *block = ContentBlock::Text(format!(
                    "[image dropped: {}, {}x{} px; a request to {} of more than {most} images takes none over {side}x{side} px]",
                    info.mime_type, info.width, info.height, rules.name
                ));
            }
        }
    }
    fitted
}

/// What `media` is, if `rules` take it on its own; why not otherwise.
fn image(rules: &Rules, media: &Media) -> Result<ImageInfo, String> {
    let Some(info) = sniff(&media.data) else {
        return Err(format!(
            "{}, {}, is not a PNG, JPEG, GIF or WebP image",
            media.mime_type,
            size(media)
        ));
    };
    if !rules.types.contains(&info.mime_type) {
        return Err(format!(
            "{}, {}; {} takes {}",
            info.mime_type,
            size(media),
            rules.name,
            rules.types_text
        ));
    }
    if info.animated && info.mime_type == "image/gif" && !rules.animated_gif {
        return Err(format!(
            "an animated GIF, {}; {} takes {}",
            size(media),
            rules.name,
            rules.types_text
        ));
    }
    if media.data.len() > rules.max_bytes {
        return Err(format!(
            "{}, {}; {} takes images up to {}",
            info.mime_type,
            size(media),
            rules.name,
            rules.max_bytes_text
        ));
    }
    if let Some(side) = rules.max_side
        && info.width.max(info.height) > side
    {
        return Err(format!(
            "{}, {}x{} px; {} takes images up to {side}x{side} px",
            info.mime_type, info.width, info.height, rules.name
        ));
    }
    Ok(info)
}

fn size(media: &Media) -> String {
    bytesize::ByteSize::b(media.data.len() as u64)
        .display()
        .iec()
        .to_string()
}

/// What an Anthropic tool result reads when nothing is left of it: the API
/// refuses empty content.
pub const NO_OUTPUT: &str = "(no output)";

/// A tool result's content blocks as the content of Anthropic's
/// `tool_result`, fitted first ([`fit`]): text, image and document blocks,
/// and a line of text for what the API cannot take; never empty.
pub fn anthropic_content(blocks: &[ContentBlock], budget: &mut ImageBudget) -> Value {
    anthropic_blocks(&fit(Vendor::Anthropic, blocks, budget))
}

/// Blocks already fitted for Anthropic, in its shapes.
pub(crate) fn anthropic_blocks(blocks: &[ContentBlock]) -> Value {
    let text = |block: &ContentBlock| json!({"type": "text", "text": block.as_text()});
    let mut out: Vec<Value> = blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => json!({"type": "text", "text": t}),
            ContentBlock::Image(media) => json!({
                "type": "image",
                "source": {"type": "base64", "media_type": media.mime_type, "data": BASE64.encode(&media.data)},
            }),
            ContentBlock::Resource(resource) => match &resource.contents {
                ResourceContents::Text(t) if !t.trim().is_empty() => json!({
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": t},
                    "title": resource.uri,
                }),
                ResourceContents::Blob(data)
                    if resource.mime_type.as_deref() == Some("application/pdf") =>
                {
                    json!({
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": BASE64.encode(data)},
                        "title": resource.uri,
                    })
                }
                _ => text(block),
            },
            _ => text(block),
        })
        .collect();
    if out.is_empty() {
        out.push(json!({"type": "text", "text": NO_OUTPUT}));
    }
    Value::Array(out)
}

/// A tool result's text as Anthropic's `tool_result` content: the text,
/// or [`NO_OUTPUT`] for none (the API refuses an empty text block).
pub fn anthropic_text(text: &str) -> Value {
    if text.trim().is_empty() {
        json!(NO_OUTPUT)
    } else {
        json!(text)
    }
}

/// OpenAI chat completions' tool message: text only (errors spelled out),
/// exactly the fields the API takes.
pub fn openai_tool_message(call_id: &str, content: &str) -> Value {
    json!({"role": "tool", "tool_call_id": call_id, "content": content})
}

/// The parts of the user message that carries a tool result's images for
/// OpenAI chat completions, which take text only in tool messages: a line
/// naming the call, then each image of `blocks` (fitted already) as a
/// data URL.
pub fn openai_image_parts(call_id: &str, blocks: &[ContentBlock]) -> Vec<Value> {
    let mut parts = Vec::new();
    for block in blocks {
        if let ContentBlock::Image(media) = block {
            parts.push(
                json!({"type": "text", "text": format!("Image returned by tool call {call_id}:")}),
            );
            parts.push(json!({"type": "image_url", "image_url": {"url": data_url(media)}}));
        }
    }
    parts
}

/// The user message that follows a turn's tool messages for OpenAI chat
/// completions, carrying their images; `None` when there are none.
pub fn openai_images_message(parts: Vec<Value>) -> Option<Value> {
    (!parts.is_empty()).then(|| json!({"role": "user", "content": parts}))
}

/// `media` as a `data:` URL.
pub fn data_url(media: &Media) -> String {
    format!(
        "data:{};base64,{}",
        media.mime_type,
        BASE64.encode(&media.data)
    )
}

/// Blocks as text, each block other than text on a line of its own, as a
/// tool message carries them.
pub fn as_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::wire::image::tests::{gif_of, png_of};

    fn image(mime_type: &str, data: impl Into<Bytes>) -> ContentBlock {
        ContentBlock::Image(Media {
            mime_type: mime_type.into(),
            data: data.into(),
        })
    }

    /// The line an image became, or a panic naming the block.
    fn dropped(block: &ContentBlock) -> &str {
        match block {
            ContentBlock::Text(text) if text.starts_with("[image dropped: ") => text,
            other => panic!("expected a dropped image, got {other:?}"),
        }
    }

    fn fit_one(vendor: Vendor, block: ContentBlock) -> ContentBlock {
        let mut fitted = fit(vendor, &[block], &mut ImageBudget::new(vendor));
        assert_eq!(fitted.len(), 1);
        fitted.remove(0)
    }

    #[test]
    fn each_provider_takes_only_its_image_types() {
        let svg = image(
            "image/svg+xml",
            &b"<svg xmlns='http://www.w3.org/2000/svg'/>"[..],
        );
        for vendor in [Vendor::OpenAI, Vendor::Anthropic] {
            let note = dropped(&fit_one(vendor, svg.clone())).to_owned();
            assert!(
                note.contains("image/svg+xml") && note.contains("is not a PNG, JPEG, GIF or WebP"),
                "{note}"
            );
            // A still GIF goes to both.
            assert!(matches!(
                fit_one(vendor, image("image/gif", gif_of(1))),
                ContentBlock::Image(_)
            ));
        }
        // An animated GIF: OpenAI takes only still ones, Anthropic takes
        // it (and reads its first frame).
        let note = dropped(&fit_one(Vendor::OpenAI, image("image/gif", gif_of(2)))).to_owned();
        assert!(
            note.contains("an animated GIF")
                && note.contains("OpenAI takes PNG, JPEG, WebP and still GIF images"),
            "{note}"
        );
        assert!(matches!(
            fit_one(Vendor::Anthropic, image("image/gif", gif_of(2))),
            ContentBlock::Image(_)
        ));
    }

    /// The API checks the bytes against the media type: an image goes
    /// under the type its bytes have.
    #[test]
    fn an_image_goes_under_the_type_its_bytes_have() {
        for vendor in [Vendor::OpenAI, Vendor::Anthropic] {
            match fit_one(vendor, image("image/jpeg", png_of(4, 4, 0))) {
                ContentBlock::Image(media) => assert_eq!(media.mime_type, "image/png"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn anthropic_takes_images_up_to_5_mib_as_base64_and_8000_px() {
        let largest = png_of(100, 100, ANTHROPIC.max_bytes - 33);
        assert_eq!(BASE64.encode(&largest).len(), 5 << 20);
        assert!(matches!(
            fit_one(Vendor::Anthropic, image("image/png", largest)),
            ContentBlock::Image(_)
        ));
        let note = dropped(&fit_one(
            Vendor::Anthropic,
            image("image/png", png_of(100, 100, ANTHROPIC.max_bytes - 32)),
        ))
        .to_owned();
        assert!(
            note.contains("Anthropic takes images up to 3.75 MiB (5 MiB as base64)"),
            "{note}"
        );
        // OpenAI takes that one.
        assert!(matches!(
            fit_one(
                Vendor::OpenAI,
                image("image/png", png_of(100, 100, ANTHROPIC.max_bytes))
            ),
            ContentBlock::Image(_)
        ));
        let note = dropped(&fit_one(
            Vendor::Anthropic,
            image("image/png", png_of(8001, 10, 0)),
        ))
        .to_owned();
        assert!(
            note.contains("8001x10 px; Anthropic takes images up to 8000x8000 px"),
            "{note}"
        );
        assert!(matches!(
            fit_one(Vendor::Anthropic, image("image/png", png_of(8000, 8000, 0))),
            ContentBlock::Image(_)
        ));
    }

    #[test]
    fn openai_takes_images_up_to_20_mb() {
        let note = dropped(&fit_one(
            Vendor::OpenAI,
            image("image/png", png_of(10, 10, 20_000_000)),
        ))
        .to_owned();
        assert!(note.contains("OpenAI takes images up to 20 MB"), "{note}");
    }

    #[test]
    fn a_request_carries_only_so_many_images_and_bytes() {
        // Anthropic: 100 images; the 101st is a line.
        let small = image("image/png", png_of(1, 1, 0));
        let blocks = vec![small.clone(); 101];
        let fitted = fit(
            Vendor::Anthropic,
            &blocks,
            &mut ImageBudget::new(Vendor::Anthropic),
        );
        assert!(
            fitted[..100]
                .iter()
                .all(|b| matches!(b, ContentBlock::Image(_)))
        );
        assert!(
            dropped(&fitted[100]).contains("a request to Anthropic carries at most 100 images")
        );
        // OpenAI: 50 MB in all; one image past it is a line, a smaller one
        // after it may still fit.
        let big = image("image/png", Bytes::from(png_of(10, 10, 19_000_000)));
        let fitted = fit(
            Vendor::OpenAI,
            &[big.clone(), big.clone(), big, small],
            &mut ImageBudget::new(Vendor::OpenAI),
        );
        assert!(
            dropped(&fitted[2]).contains("a request to OpenAI carries at most 50 MB of images")
        );
        assert!(matches!(fitted[3], ContentBlock::Image(_)));
    }

    /// A conversation keeps its newest images when it has more than a
    /// request may carry; and Anthropic takes none over 2000 px in a
    /// request of more than 20.
    #[test]
    fn a_request_keeps_its_newest_images_and_anthropics_crowded_rule() {
        let small = image("image/png", png_of(1, 1, 0));
        let results: Vec<Vec<ContentBlock>> = (0..101).map(|_| vec![small.clone()]).collect();
        let borrowed: Vec<&[ContentBlock]> = results.iter().map(Vec::as_slice).collect();
        let fitted = fit_request(Vendor::Anthropic, &borrowed);
        assert!(
            dropped(&fitted[0][0]).contains("at most 100 images"),
            "the oldest gives way"
        );
        assert!(
            fitted[1..]
                .iter()
                .all(|r| matches!(r[0], ContentBlock::Image(_)))
        );

        let wide = image("image/png", png_of(2500, 100, 0));
        let mut results: Vec<Vec<ContentBlock>> = (0..20).map(|_| vec![small.clone()]).collect();
        results.push(vec![wide.clone()]);
        let borrowed: Vec<&[ContentBlock]> = results.iter().map(Vec::as_slice).collect();
        let fitted = fit_request(Vendor::Anthropic, &borrowed);
        let note = dropped(&fitted[20][0]);
        assert!(note.contains("2500x100 px; a request to Anthropic of more than 20 images takes none over 2000x2000 px"), "{note}");
        // Twenty images in all: the wide one stays; OpenAI has no such rule.
        let fitted = fit_request(Vendor::Anthropic, &borrowed[1..]);
        assert!(matches!(fitted[19][0], ContentBlock::Image(_)));
        let fitted = fit_request(Vendor::OpenAI, &borrowed);
        assert!(matches!(fitted[20][0], ContentBlock::Image(_)));
    }

    #[test]
    fn anthropic_gets_no_blank_text_and_no_empty_content() {
        let blocks = [
            ContentBlock::Text(String::new()),
            ContentBlock::Text(" \n\t".into()),
            ContentBlock::Text("kept".into()),
        ];
        let mut budget = ImageBudget::new(Vendor::Anthropic);
        assert_eq!(
            anthropic_content(&blocks, &mut budget),
            json!([{"type": "text", "text": "kept"}])
        );
        assert_eq!(
            anthropic_content(&blocks[..2], &mut budget),
            json!([{"type": "text", "text": NO_OUTPUT}])
        );
        assert_eq!(anthropic_text(""), json!(NO_OUTPUT));
        assert_eq!(anthropic_text("0"), json!("0"));
        // OpenAI keeps text as it is.
        let fitted = fit(
            Vendor::OpenAI,
            &blocks,
            &mut ImageBudget::new(Vendor::OpenAI),
        );
        assert_eq!(fitted.len(), 3);
    }
}
