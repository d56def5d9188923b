//! Text made safe to show a person: the one place that decides which
//! characters a tool, a model or a client may put in front of someone.
//!
//! Whatever they write is shown as their words and can never drive the
//! terminal, reorder what a viewer shows, hide part of itself, or pose as
//! the host's own prompt. Three kinds of character are taken out of text
//! ([`text`], [`one_line`]) and escaped in JSON ([`json`]):
//!
//! - **controls** (Unicode category Cc: C0, DEL and C1), which move the
//!   cursor, clear the screen or set the window title (ESC, and the one-byte
//!   CSI U+009B); multi-line text keeps `\n` and `\t`, and a carriage return
//!   is dropped, so `\r\n` is one newline;
//! - **format characters** (category Cf, every one of them), all invisible:
//!   the bidirectional marks, embeddings, overrides and isolates that show
//!   `exe.txt` for `txt.exe` (U+061C, U+200E–U+200F, U+202A–U+202E,
//!   U+2066–U+2069), zero-width spaces and joiners (U+200B–U+200D), the
//!   word joiner and invisible operators (U+2060–U+2064), the byte-order
//!   mark (U+FEFF), the soft hyphen (U+00AD), the Mongolian vowel separator
//!   (U+180E), interlinear annotations, Arabic and Syriac number marks, and
//!   the tag characters (U+E0000–U+E007F), which carry a hidden ASCII
//!   message past a person ("ASCII smuggling");
//! - **other characters that render as nothing** although not Cf:
//!   variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF), which can carry
//!   hidden bytes after any character, the Mongolian free variation
//!   selectors, the combining grapheme joiner (U+034F), the Hangul fillers
//!   and the Khmer inherent vowels.
//!
//! Line and paragraph separators (U+2028, U+2029) are newlines.
//!
//! What it costs: emoji built with joiners show as their parts (👨‍👩‍👧 as
//! 👨👩👧), an emoji's presentation selector is dropped, and Persian text
//! loses its zero-width non-joiners; each stays readable. Look-alike
//! letters (a Cyrillic `а` for a Latin `a`) are visible characters and are
//! not changed: where a name must be exact, show it beside what it names.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;
use unicode_general_category::{GeneralCategory, get_general_category};

/// How a line break is shown in text made one line: a visible mark that no
/// tool can make pass for the end of a line.
pub const NEWLINE_MARK: char = '⏎';

/// Whether `c` is invisible or reorders text: every format character (Cf)
/// and the other characters that render as nothing (see the module docs).
/// Controls are not included: see [`text`] for which of them are kept.
#[must_use]
pub fn is_hidden(c: char) -> bool {
    // ASCII and Latin-1 letters are by far the most common: decided
    // without the category table.
    if c < '\u{a0}' {
        return false;
    }
    matches!(
        c,
        '\u{34f}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180d}'
            | '\u{180f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{ffa0}'
            | '\u{e0100}'..='\u{e01ef}'
    ) || get_general_category(c) == GeneralCategory::Format
}

/// Whether `c` breaks a line: `\n`, and the line and paragraph separators
/// some viewers break on.
fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\u{2028}' | '\u{2029}')
}

/// Whether `c` must be written as an escape in JSON shown to a person.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_hidden(c) || is_line_break(c)
}

/// `text` as a person may be shown it over several lines: without
/// controls (but `\n` and `\t`) and hidden characters, line and paragraph
/// separators made `\n`. Borrowed when nothing changes.
#[must_use]
pub fn text(text: &str) -> Cow<'_, str> {
    let keep = |c: char| (c == '\n' || c == '\t' || !c.is_control()) && !is_hidden(c);
    if text
        .chars()
        .all(|c| keep(c) && !is_line_break(c) || c == '\n')
    {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .filter(|&c| keep(c))
            .map(|c| if is_line_break(c) { '\n' } else { c })
            .collect(),
    )
}

/// `text` as one line of at most `max_chars` characters (and `…` when cut),
/// for anything shown where it could pose as a prompt of the host's: made
/// printable as [`text`] makes it, each line break shown as
/// [`NEWLINE_MARK`], every run of white space (tabs and wide spaces too)
/// one space, and none at either end. A run of spaces could otherwise push
/// what follows onto a line of its own in a narrow terminal.
#[must_use]
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max_chars.saturating_mul(4)));
    let mut count = 0;
    let mut space = false;
    for c in self::text(text).chars() {
        let c = match c {
            '\n' => NEWLINE_MARK,
            c if c.is_whitespace() => {
                space = count > 0;
                continue;
            }
            c => c,
        };
        let extra = usize::from(space);
        if count + extra + 1 > max_chars {
            line.push('…');
            return line;
        }
        if space {
            line.push(' ');
            space = false;
        }
        line.push(c);
        count += extra + 1;
    }
    line
}

/// `value` as compact JSON on one line with every control, hidden
/// character and line break in its strings written as a `\u` escape: the
/// same JSON value, so a person approving it sees exactly what will run,
/// character for character, and nothing in it is invisible.
#[must_use]
pub fn json(value: &Value) -> String {
    let compact = value.to_string();
    if !compact.chars().any(needs_escape) {
        return compact;
    }
    // serde_json escapes C0 already; these are only ever inside strings,
    // where a `\u` escape means the same character.
    let mut shown = String::with_capacity(compact.len() + 16);
    for c in compact.chars() {
        if needs_escape(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(shown, "\\u{unit:04x}");
            }
        } else {
            shown.push(c);
        }
    }
    shown
}

/// `text` cut to at most `max_chars` characters, saying how many more there
/// were: for text a person decides on, where a silent cut would hide the
/// part that matters.
#[must_use]
pub fn cut_noted(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((end, _)) => {
            let more = text[end..].chars().count();
            Cow::Owned(format!(
                "{}… ({more} more characters not shown)",
                &text[..end]
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_go_but_newlines_and_tabs_stay_in_text() {
        assert_eq!(text("ok\n\tline"), "ok\n\tline");
        assert!(matches!(text("plain ünïcode ✓"), Cow::Borrowed(_)));
        assert_eq!(
            text("\u{1b}[2Jclear\u{1b}]0;title\u{7}"),
            "[2Jclear]0;title"
        );
        assert_eq!(text("c1\u{9b}31m\u{7f}"), "c131m");
        assert_eq!(text("dos\r\nline"), "dos\nline");
        assert_eq!(text("a\u{2028}b\u{2029}c"), "a\nb\nc");
    }

    #[test]
    fn bidi_controls_are_removed() {
        assert_eq!(text("evil\u{202E}txt.exe"), "eviltxt.exe");
        assert_eq!(text("a\u{200E}b\u{200F}c\u{61C}d"), "abcd");
        for c in ('\u{202a}'..='\u{202e}').chain('\u{2066}'..='\u{2069}') {
            assert!(is_hidden(c), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn invisible_characters_are_removed() {
        let invisible = [
            '\u{ad}',
            '\u{34f}',
            '\u{115f}',
            '\u{1160}',
            '\u{17b4}',
            '\u{180b}',
            '\u{180e}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{2064}',
            '\u{3164}',
            '\u{fe0f}',
            '\u{feff}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{110bd}',
            '\u{1d173}',
            '\u{e0001}',
            '\u{e0041}',
            '\u{e007f}',
            '\u{e0100}',
            '\u{e01ef}',
        ];
        for c in invisible {
            assert!(is_hidden(c), "U+{:04X} is invisible", u32::from(c));
            assert_eq!(text(&format!("a{c}b")), "ab", "U+{:04X}", u32::from(c));
        }
        // An ASCII message in tag characters, invisible in most viewers.
        let smuggled: String = "approve"
            .chars()
            .map(|c| char::from_u32(0xE0000 + u32::from(c)).unwrap())
            .collect();
        assert_eq!(text(&format!("Proceed?{smuggled}")), "Proceed?");
    }

    #[test]
    fn visible_text_of_every_script_is_kept() {
        for visible in [
            "Grüße",
            "Ελληνικά",
            "русский",
            "עברית",
            "العربية",
            "हिन्दी",
            "日本語",
            "한국어",
            "ข้อความ",
            "😀",
            "a\u{301}",
            "\u{a0}",
        ] {
            assert_eq!(text(visible), visible);
            assert!(!visible.chars().any(is_hidden), "{visible}");
        }
    }

    #[test]
    fn one_line_marks_breaks_and_folds_white_space() {
        assert_eq!(
            one_line("\n? run calc with {}? [y/N] ", 200),
            "⏎? run calc with {}? [y/N]"
        );
        assert_eq!(one_line("a\r\nb\u{2028}c", 200), "a⏎b⏎c");
        assert_eq!(one_line("wide   \t\u{3000}  gap", 200), "wide gap");
        let padded = format!("x{}? [y/N]", " ".repeat(300));
        assert_eq!(one_line(&padded, 200), "x ? [y/N]");
        assert_eq!(one_line("\u{1b}abcdef", 3), "abc…");
        assert_eq!(one_line("ab cd", 4), "ab c…");
        assert_eq!(one_line("abc", 3), "abc");
        assert_eq!(one_line("", 3), "");
    }

    #[test]
    fn json_escapes_what_a_person_could_not_see() {
        let value = serde_json::json!({
            "path": "report\u{202e}fdp.exe",
            "note\u{200b}": "line\nbreak\u{2028}",
            "tag": "\u{e0041}",
            "c1": "\u{9b}\u{7f}",
        });
        let shown = json(&value);
        assert!(!shown.chars().any(needs_escape), "{shown}");
        assert!(shown.contains(r#""report\u202efdp.exe""#), "{shown}");
        assert!(shown.contains(r#""note\u200b""#), "{shown}");
        assert!(shown.contains(r"line\nbreak\u2028"), "{shown}");
        assert!(shown.contains(r#""\udb40\udc41""#), "{shown}");
        assert!(shown.contains(r#""\u009b\u007f""#), "{shown}");
        // The same value, character for character.
        assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), value);
        assert_eq!(json(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
    }

    #[test]
    fn a_cut_says_how_much_is_not_shown() {
        assert_eq!(cut_noted("abcdef", 3), "abc… (3 more characters not shown)");
        assert_eq!(cut_noted("abc", 3), "abc");
    }
}
