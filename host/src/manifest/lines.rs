//! Where a key is in a manifest's text, so that an error about its value
//! (found after parsing, by validation) names the line, as TOML's own
//! syntax and unknown-key errors do.

use toml::de::{DeTable, DeValue};

/// A manifest's keys with their places; a text that does not parse has
/// none (and its syntax error already names the line).
pub(crate) struct KeyLines<'a> {
    text: &'a str,
    table: Option<DeTable<'a>>,
}

impl<'a> KeyLines<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            table: DeTable::parse(text).ok().map(toml::Spanned::into_inner),
        }
    }

    /// The line (from 1) of the innermost key along `path` that is there:
    /// `["registry", "host", "ghcr.io"]` is where that host's table is
    /// named.
    pub(crate) fn line(&self, path: &[&str]) -> Option<usize> {
        let mut table = self.table.as_ref()?;
        let mut found = None;
        for name in path {
            let Some((key, value)) = table.iter().find(|(key, _)| key.get_ref() == name) else {
                break;
            };
            found = Some(key.span().start);
            match value.get_ref() {
                DeValue::Table(inner) => table = inner,
                _ => break,
            }
        }
        let offset = found?;
        Some(self.text.get(..offset)?.matches('\n').count() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_on_its_line_whether_in_a_header_or_inline() {
        let text = "[registry]\ntimeout = \"x\"\n\n[registry.host.\"ghcr.io\"]\ninsecure = true\n";
        let lines = KeyLines::new(text);
        assert_eq!(lines.line(&["registry", "timeout"]), Some(2));
        assert_eq!(lines.line(&["registry", "host", "ghcr.io"]), Some(4));
        // Not there: the innermost key that is.
        assert_eq!(lines.line(&["registry", "max_component"]), Some(1));
        assert_eq!(lines.line(&["nothing"]), None);
        assert_eq!(KeyLines::new("= nonsense").line(&["registry"]), None);
    }
}
