//! `qr_code`: render text as a QR code, returned as a PNG image (and a line
//! of text). Shows a tool whose result is an image: MCP clients display it,
//! Anthropic models see it, and OpenAI models get it in a user message
//! after the tool's. Pure computation: needs no grants.
//!
//! Build with `scripts/build-tools.sh` (or `cargo build -p qr --target wasm32-wasip2 --profile guest`).

use qrcode::{Color, QrCode};
use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_guest::{Output, Tool, ToolError, progress};

/// Arguments of `qr_code`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QrArgs {
    /// The text or URL to encode, at most 1000 characters.
    #[schemars(length(min = 1, max = 1000))]
    text: String,
}

/// Pixels per module, and modules of quiet zone around the code.
const SCALE: usize = 6;
const QUIET: usize = 4;

fn qr_code(args: QrArgs) -> Result<Output, ToolError> {
    let code = QrCode::new(args.text.as_bytes()).map_err(|e| {
        ToolError::invalid_input(format!("cannot encode that text as a QR code: {e}"))
    })?;
    progress(1.0, Some(2.0), Some("encoded"));
    let modules = code.width();
    let colors = code.to_colors();
    let side = (modules + 2 * QUIET) * SCALE;
    // One byte per pixel, 0 black and 255 white.
    let mut pixels = vec![255u8; side * side];
    for (i, color) in colors.iter().enumerate() {
        if *color == Color::Dark {
            let (x, y) = ((i % modules + QUIET) * SCALE, (i / modules + QUIET) * SCALE);
            for row in y..y + SCALE {
                pixels[row * side + x..row * side + x + SCALE].fill(0);
            }
        }
    }
    let mut png = Vec::new();
    {
        let side =
            u32::try_from(side).map_err(|_| ToolError::invalid_input("the code is too large"))?;
        let mut encoder = png::Encoder::new(&mut png, side, side);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| ToolError::new("png", e.to_string()))?;
        writer
            .write_image_data(&pixels)
            .map_err(|e| ToolError::new("png", e.to_string()))?;
    }
    progress(2.0, Some(2.0), Some("rendered"));
    Ok(Output::text(format!(
        "A QR code ({modules}x{modules} modules, {side}x{side} px PNG) for: {}",
        args.text
    ))
    .with_image("image/png", png))
}

toolhost_guest::export_tools! {
    Tool::new("qr_code", "Render text or a URL as a QR code image (PNG)", qr_code)
        .title("QR code")
        .read_only()
        .idempotent(),
}
