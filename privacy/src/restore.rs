//! Putting original values back: whole texts and token streams.
//!
//! [`StreamRestorer`] is fed the chunks a model streams (content, `reasoning_content`, or
//! tool-call arguments, one restorer per stream). It emits every byte at once except a
//! tail that could still be the start of a placeholder (`[`, `[PER`, `PERSON_1`: digits
//! or a `]` may follow), so a placeholder cut across chunks is restored whole, and its
//! output equals [`restore`] of the concatenated text for every way of chunking it.
//! The decision at a position depends only on the byte before it and on the bytes after
//! it up to the end of a possible placeholder, which is what makes that equality hold.
//!
//! Placeholders that are not in the map (the model invented `[PERSON_9]`) pass through
//! unchanged. In [`RestoreMode::JsonString`] the values are written JSON-escaped, for
//! tool-call arguments streamed as JSON text.

use std::sync::Arc;

use crate::map::PlaceholderMap;
use crate::placeholder::{can_start, match_placeholder, PlaceholderMatch};

/// How restored values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    /// Verbatim (chat content, reasoning).
    #[default]
    Text,
    /// Escaped for the inside of a JSON string (tool-call arguments).
    JsonString,
}

/// Restores every placeholder of `map` in `text`.
pub fn restore(map: &PlaceholderMap, text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    restore_into(map, text, None, true, RestoreMode::Text, &mut out);
    out
}

/// Restores as much of `text` as can be decided; returns the number of bytes consumed.
/// Unconsumed bytes (only possible when `at_end` is false) are a possible placeholder start.
fn restore_into(
    map: &PlaceholderMap,
    text: &str,
    prev: Option<u8>,
    at_end: bool,
    mode: RestoreMode,
    out: &mut String,
) -> usize {
    let bytes = text.as_bytes();
    let mut emitted = 0; // bytes of `text` already copied to `out`
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !can_start(b) {
            i += 1;
            continue;
        }
        let before = if i == 0 { prev } else { Some(bytes[i - 1]) };
        match match_placeholder(&bytes[i..], before, at_end) {
            PlaceholderMatch::NoMatch => i += 1,
            PlaceholderMatch::NeedMore => {
                out.push_str(&text[emitted..i]);
                return i;
            }
            PlaceholderMatch::Found { len, kind, number } => match map.value(kind, number) {
                Some(value) => {
                    out.push_str(&text[emitted..i]);
                    match mode {
                        RestoreMode::Text => out.push_str(value),
                        RestoreMode::JsonString => push_json_escaped(out, value),
                    }
                    i += len;
                    emitted = i;
                }
                // Unknown placeholder: leave it as written, and resume after it so that a
                // part of it is never read as another placeholder.
                None => i += len,
            },
        }
    }
    out.push_str(&text[emitted..]);
    bytes.len()
}

fn push_json_escaped(out: &mut String, value: &str) {
    match serde_json::to_string(value) {
        Ok(quoted) if quoted.len() >= 2 => out.push_str(&quoted[1..quoted.len() - 1]),
        _ => out.push_str(value),
    }
}

/// Incremental restorer for one output stream.
///
/// ```
/// # use hearth_privacy::{PlaceholderMap, EntityKind, StreamRestorer};
/// # use std::sync::Arc;
/// let mut map = PlaceholderMap::new();
/// map.number_for(EntityKind::Person, "Ada Lovelace");
/// let mut r = StreamRestorer::new(Arc::new(map));
/// let mut out = r.push("Hello [PER");
/// out += &r.push("SON_1], welcome");
/// out += &r.finish();
/// assert_eq!(out, "Hello Ada Lovelace, welcome");
/// ```
pub struct StreamRestorer {
    map: Arc<PlaceholderMap>,
    mode: RestoreMode,
    /// Text received but not yet decided (a possible placeholder prefix).
    pending: String,
    /// Last byte already emitted (or consumed), for the bare-placeholder boundary rule.
    prev: Option<u8>,
}

impl StreamRestorer {
    /// A restorer writing values verbatim.
    pub fn new(map: Arc<PlaceholderMap>) -> Self {
        Self::with_mode(map, RestoreMode::Text)
    }

    /// A restorer writing values as `mode` says.
    pub fn with_mode(map: Arc<PlaceholderMap>, mode: RestoreMode) -> Self {
        StreamRestorer {
            map,
            mode,
            pending: String::new(),
            prev: None,
        }
    }

    /// Feeds one chunk; returns the restored text that is safe to emit now.
    pub fn push(&mut self, chunk: &str) -> String {
        let mut out = String::new();
        self.push_into(chunk, &mut out);
        out
    }

    /// Feeds one chunk, appending the text safe to emit now to `out`.
    pub fn push_into(&mut self, chunk: &str, out: &mut String) {
        self.pending.push_str(chunk);
        self.drain(false, out);
    }

    /// Ends the stream; returns whatever was held back, restored.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.drain(true, &mut out);
        out
    }

    /// Bytes held back, waiting for the next chunk.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    fn drain(&mut self, at_end: bool, out: &mut String) {
        let consumed = restore_into(&self.map, &self.pending, self.prev, at_end, self.mode, out);
        if consumed > 0 {
            self.prev = Some(self.pending.as_bytes()[consumed - 1]);
            self.pending.drain(..consumed);
        }
    }
}

impl std::fmt::Debug for StreamRestorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRestorer")
            .field("map", &self.map)
            .field("mode", &self.mode)
            .field("pending_bytes", &self.pending.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::EntityKind;

    fn map() -> Arc<PlaceholderMap> {
        let mut m = PlaceholderMap::new();
        m.number_for(EntityKind::Person, "Ada Lovelace");
        m.number_for(EntityKind::Email, "ada@example.org");
        m.number_for(EntityKind::Secret, "p\"w\\d");
        Arc::new(m)
    }

    #[test]
    fn whole_text_variants() {
        let m = map();
        assert_eq!(
            restore(&m, "[PERSON_1] <[email_1]> Person_1, PERSON_1] [PERSON_2]"),
            "Ada Lovelace <ada@example.org> Ada Lovelace, Ada Lovelace [PERSON_2]"
        );
        assert_eq!(restore(&m, "XPERSON_1 PERSON_10"), "XPERSON_1 PERSON_10");
    }

    #[test]
    fn holds_back_only_possible_prefixes() {
        let mut r = StreamRestorer::new(map());
        assert_eq!(r.push("Hi [PERSON_"), "Hi ");
        assert_eq!(r.pending_len(), 8);
        assert_eq!(r.push("1"), "");
        assert_eq!(r.push("]!"), "Ada Lovelace!");
        assert_eq!(r.push(" plain [x"), " plain [x");
        assert_eq!(r.pending_len(), 0);
        assert_eq!(r.push(" PERSON_1"), " ");
        assert_eq!(r.finish(), "Ada Lovelace");
    }

    #[test]
    fn json_mode_escapes_values() {
        let mut r = StreamRestorer::with_mode(map(), RestoreMode::JsonString);
        let mut out = r.push("{\"pw\": \"[SEC");
        out += &r.push("RET_1]\"}");
        out += &r.finish();
        assert_eq!(out, r#"{"pw": "p\"w\\d"}"#);
    }
}
