//! Masking sessions: [`Anonymizer`] (shared, stateless) and [`Conversation`] (one per chat).
//!
//! A conversation keeps one [`PlaceholderMap`] for all its turns, so the same value gets
//! the same placeholder in every message and the masked prompt prefix stays byte-stable
//! for the prefix cache. For stateless chat APIs (the client resends the history), mask
//! the messages in order with a fresh conversation per request: numbering depends only
//! on the text of the messages and their order, so it comes out the same every time.
//!
//! Name parts found in earlier turns are remembered: if turn 1 had "Rachel Davis", a bare
//! "Rachel" in turn 3 is masked too.
//!
//! Nothing here logs values; `Debug` shows counts only.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use crate::entity::{Detection, EntityKind};
use crate::error::PrivacyError;
use crate::map::PlaceholderMap;
use crate::recognizers::Analyzer;
use crate::restore::{restore, RestoreMode, StreamRestorer};

/// The shared, read-only part: recognizers and their data. Cheap to clone.
#[derive(Clone)]
pub struct Anonymizer {
    analyzer: Arc<Analyzer>,
}

impl Anonymizer {
    /// An anonymizer running `analyzer`.
    pub fn new(analyzer: Analyzer) -> Self {
        Anonymizer {
            analyzer: Arc::new(analyzer),
        }
    }

    /// The built-in recognizers with the gazetteer from its default directory.
    pub fn from_default_data() -> Result<Self, PrivacyError> {
        Ok(Self::new(Analyzer::from_default_data()?))
    }

    /// The analyzer (to list detections without masking).
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// Starts a conversation with an empty placeholder map.
    pub fn conversation(&self) -> Conversation {
        Conversation {
            analyzer: Arc::clone(&self.analyzer),
            map: Arc::new(PlaceholderMap::new()),
            remembered_names: HashSet::new(),
        }
    }
}

impl std::fmt::Debug for Anonymizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anonymizer")
            .field("analyzer", &self.analyzer)
            .finish()
    }
}

/// One masked entity of a text (no value: look it up in the input by `original`).
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedEntity {
    /// What it is.
    pub kind: EntityKind,
    /// Its placeholder number (`[KIND_number]`).
    pub number: u32,
    /// Byte range in the input text.
    pub original: Range<usize>,
    /// Byte range of the placeholder in the masked text.
    pub masked: Range<usize>,
    /// Confidence of the detection.
    pub score: f32,
    /// Recognizer that found it.
    pub recognizer: &'static str,
}

/// A masked text and where its placeholders are.
#[derive(Debug, Clone, PartialEq)]
pub struct Masked {
    /// The text with every entity replaced by its placeholder.
    pub text: String,
    /// The replacements, in text order.
    pub entities: Vec<MaskedEntity>,
}

/// A chat's masking state: the placeholder map and remembered names.
pub struct Conversation {
    analyzer: Arc<Analyzer>,
    map: Arc<PlaceholderMap>,
    /// Words of person names masked in earlier turns (exact spelling).
    remembered_names: HashSet<String>,
}

impl Conversation {
    /// Masks `text`, extending this conversation's map.
    pub fn anonymize(&mut self, text: &str) -> String {
        self.anonymize_with_spans(text).text
    }

    /// Masks `text` and reports every replacement.
    pub fn anonymize_with_spans(&mut self, text: &str) -> Masked {
        let mut detections = self.analyzer.analyze_for_masking(text);
        self.add_remembered_names(text, &mut detections);
        let map = Arc::make_mut(&mut self.map);
        let mut out = String::with_capacity(text.len() + detections.len() * 8);
        let mut entities = Vec::with_capacity(detections.len());
        let mut pos = 0;
        for d in detections {
            out.push_str(&text[pos..d.start]);
            let value = &text[d.start..d.end];
            let number = map.number_for(d.kind, value);
            let placeholder = crate::placeholder::format_placeholder(d.kind, number);
            let masked_start = out.len();
            out.push_str(&placeholder);
            entities.push(MaskedEntity {
                kind: d.kind,
                number,
                original: d.start..d.end,
                masked: masked_start..out.len(),
                score: d.score,
                recognizer: d.recognizer,
            });
            if d.kind == EntityKind::Person {
                for word in value.split(|c: char| !c.is_alphabetic() && c != '-' && c != '\'') {
                    if word.chars().count() >= 3
                        && word.chars().next().is_some_and(char::is_uppercase)
                    {
                        self.remembered_names.insert(word.to_owned());
                    }
                }
            }
            pos = d.end;
        }
        out.push_str(&text[pos..]);
        Masked {
            text: out,
            entities,
        }
    }

    /// Adds detections for whole-word occurrences of remembered name words not yet covered.
    fn add_remembered_names(&self, text: &str, detections: &mut Vec<Detection>) {
        if self.remembered_names.is_empty() {
            return;
        }
        let mut extra = Vec::new();
        for word in &self.remembered_names {
            let mut from = 0;
            while let Some(i) = text[from..].find(word.as_str()) {
                let s = from + i;
                let e = s + word.len();
                from = e;
                if !crate::text::is_word_bounded(text, s, e) {
                    continue;
                }
                if detections
                    .iter()
                    .chain(&extra)
                    .any(|d: &Detection| d.start < e && s < d.end)
                {
                    continue;
                }
                extra.push(Detection::new(
                    EntityKind::Person,
                    s,
                    e,
                    0.6,
                    "remembered-name",
                ));
            }
        }
        if !extra.is_empty() {
            detections.extend(extra);
            detections.sort_by_key(|d| d.start);
        }
    }

    /// Puts the original values back into a whole text.
    pub fn restore(&self, text: &str) -> String {
        restore(&self.map, text)
    }

    /// A restorer for one output stream (content or reasoning), values verbatim.
    pub fn stream_restorer(&self) -> StreamRestorer {
        StreamRestorer::new(Arc::clone(&self.map))
    }

    /// A restorer for one output stream with the given mode (JSON-escaped values for
    /// tool-call arguments).
    pub fn stream_restorer_with_mode(&self, mode: RestoreMode) -> StreamRestorer {
        StreamRestorer::with_mode(Arc::clone(&self.map), mode)
    }

    /// The placeholder map (clear values: for a user-facing entity table only).
    pub fn map(&self) -> &PlaceholderMap {
        &self.map
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("map", &self.map)
            .field("remembered_names", &self.remembered_names.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gazetteer::Gazetteer;

    fn anonymizer() -> Anonymizer {
        let g = Gazetteer::from_lists(["Rachel", "John"], ["Davis", "Smith"]);
        Anonymizer::new(Analyzer::new(Arc::new(g)))
    }

    #[test]
    fn same_value_same_placeholder_across_turns() {
        let mut c = anonymizer().conversation();
        let t1 = c.anonymize("Rachel Davis <rachel@example.com> wrote to John Smith.");
        assert_eq!(t1, "[PERSON_1] <[EMAIL_1]> wrote to [PERSON_2].");
        let t2 = c.anonymize("Ask rachel@example.com, or Rachel directly. PERSON_1 is a literal.");
        assert_eq!(
            t2,
            "Ask [EMAIL_1], or [PERSON_3] directly. [LITERAL_1] is a literal."
        );
        assert_eq!(
            c.restore(&t2),
            "Ask rachel@example.com, or Rachel directly. PERSON_1 is a literal."
        );
    }

    #[test]
    fn debug_never_shows_values() {
        let mut c = anonymizer().conversation();
        c.anonymize("password=Sup3rSecret!");
        let d = format!("{c:?}");
        assert!(!d.contains("Sup3r"), "{d}");
    }
}
