//! Recognizers and the [`Analyzer`] that runs them and resolves overlaps.
//!
//! A [`Recognizer`] looks at a whole text and reports [`Detection`]s; each built-in one
//! pairs a cheap candidate pattern with a validator (Luhn, mod-97, libphonenumber
//! metadata, checksums, context words). A model-based NER can be added later as one more
//! `Recognizer` through [`Analyzer::with_recognizer`].
//!
//! Overlaps are resolved greedily: higher score first, then the longer span, then the
//! earlier one; a detection that overlaps an accepted one is dropped. Spans that are not
//! on char boundaries, empty or out of range are dropped too, so a faulty plug-in
//! recognizer can never make masking panic.

mod address;
mod dob;
mod email;
mod financial;
mod names;
mod national_id;
mod network;
mod phone;
mod secrets;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use address::AddressRecognizer;
pub use dob::DateOfBirthRecognizer;
pub use email::EmailRecognizer;
pub use financial::{CardRecognizer, IbanRecognizer};
pub use names::PersonNameRecognizer;
pub use national_id::{NationalIdRecognizer, SsnRecognizer};
pub use network::{CredentialUrlRecognizer, IpRecognizer};
pub use phone::PhoneRecognizer;
pub use secrets::SecretRecognizer;

use crate::entity::{Detection, EntityKind};
use crate::error::PrivacyError;
use crate::gazetteer::Gazetteer;
use crate::placeholder::find_lookalikes;

/// Something that finds entities in text.
///
/// Implementations must not panic on any input and should run in time linear in the
/// text length. Offsets must be byte offsets on char boundaries of `text`.
pub trait Recognizer: Send + Sync {
    /// A short stable name, reported in [`Detection::recognizer`].
    fn name(&self) -> &'static str;
    /// The kinds this recognizer can report.
    fn kinds(&self) -> &'static [EntityKind];
    /// Appends every detection in `text` to `out`.
    fn recognize(&self, text: &str, out: &mut Vec<Detection>);
}

/// Runs a set of recognizers over a text and resolves their overlaps.
pub struct Analyzer {
    recognizers: Vec<Box<dyn Recognizer>>,
    min_score: f32,
}

impl Analyzer {
    /// An analyzer with no recognizer (add some with [`Analyzer::with_recognizer`]).
    pub fn empty() -> Self {
        Analyzer {
            recognizers: Vec::new(),
            min_score: 0.5,
        }
    }

    /// The built-in recognizers, names found with `gazetteer`.
    pub fn new(gazetteer: Arc<Gazetteer>) -> Self {
        let analyzer = Analyzer::empty()
            .with_recognizer(Box::new(SecretRecognizer::new()))
            .with_recognizer(Box::new(CredentialUrlRecognizer::new()))
            .with_recognizer(Box::new(EmailRecognizer::new()))
            .with_recognizer(Box::new(IbanRecognizer::new()))
            .with_recognizer(Box::new(CardRecognizer::new()))
            .with_recognizer(Box::new(SsnRecognizer::new()))
            .with_recognizer(Box::new(NationalIdRecognizer::new()))
            .with_recognizer(Box::new(IpRecognizer::new()))
            .with_recognizer(Box::new(PhoneRecognizer::new()))
            .with_recognizer(Box::new(DateOfBirthRecognizer::new()))
            .with_recognizer(Box::new(AddressRecognizer::new()))
            .with_recognizer(Box::new(PersonNameRecognizer::new(gazetteer)));
        // libphonenumber metadata is decoded on first use; pay that here, not per request.
        phone::warm_up();
        analyzer
    }

    /// The built-in recognizers with the gazetteer from [`Gazetteer::load_default`].
    pub fn from_default_data() -> Result<Self, PrivacyError> {
        Ok(Analyzer::new(Arc::new(Gazetteer::load_default()?)))
    }

    /// Adds a recognizer (e.g. a model-based NER).
    pub fn with_recognizer(mut self, recognizer: Box<dyn Recognizer>) -> Self {
        self.recognizers.push(recognizer);
        self
    }

    /// Sets the score under which detections are ignored (default 0.5).
    pub fn with_min_score(mut self, min_score: f32) -> Self {
        self.min_score = min_score;
        self
    }

    /// Names of the recognizers, in run order.
    pub fn recognizer_names(&self) -> Vec<&'static str> {
        self.recognizers.iter().map(|r| r.name()).collect()
    }

    /// Every entity in `text`: non-overlapping, sorted by start.
    pub fn analyze(&self, text: &str) -> Vec<Detection> {
        let mut raw = Vec::new();
        for r in &self.recognizers {
            r.recognize(text, &mut raw);
        }
        resolve(text, raw, &[], self.min_score)
    }

    /// What masking replaces: [`Analyzer::analyze`] plus placeholder look-alikes already
    /// in the input (as [`EntityKind::Literal`], taking precedence over everything).
    pub(crate) fn analyze_for_masking(&self, text: &str) -> Vec<Detection> {
        let literals: Vec<Detection> = find_lookalikes(text)
            .into_iter()
            .map(|(s, e)| Detection::new(EntityKind::Literal, s, e, 1.0, "placeholder-literal"))
            .collect();
        let mut raw = Vec::new();
        for r in &self.recognizers {
            r.recognize(text, &mut raw);
        }
        resolve(text, raw, &literals, self.min_score)
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Analyzer::new(Arc::new(Gazetteer::empty()))
    }
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("recognizers", &self.recognizer_names())
            .field("min_score", &self.min_score)
            .finish()
    }
}

/// Keeps valid, non-overlapping detections: `forced` first, then the rest by score.
fn resolve(
    text: &str,
    mut raw: Vec<Detection>,
    forced: &[Detection],
    min_score: f32,
) -> Vec<Detection> {
    let valid = |d: &Detection| {
        d.start < d.end
            && d.end <= text.len()
            && text.is_char_boundary(d.start)
            && text.is_char_boundary(d.end)
    };
    raw.retain(|d| valid(d) && d.score >= min_score && d.score.is_finite());
    raw.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.len().cmp(&a.len()))
            .then(a.start.cmp(&b.start))
    });
    let mut accepted: BTreeMap<usize, Detection> = BTreeMap::new();
    for d in forced.iter().copied().filter(valid).chain(raw) {
        let clash = accepted
            .range(..d.end)
            .next_back()
            .is_some_and(|(_, prev)| prev.end > d.start);
        if !clash {
            accepted.insert(d.start, d);
        }
    }
    accepted.into_values().collect()
}

/// A compiled regex from a pattern that is a compile-time constant of this crate.
pub(crate) fn re(pattern: &str) -> regex::Regex {
    match regex::Regex::new(pattern) {
        Ok(r) => r,
        // Patterns are constants covered by unit tests; this cannot happen at run time.
        Err(e) => unreachable!("invalid built-in pattern {pattern:?}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_prefer_score_then_length() {
        let text = "0123456789";
        let raw = vec![
            Detection::new(EntityKind::Phone, 0, 8, 0.6, "a"),
            Detection::new(EntityKind::Card, 2, 10, 0.9, "b"),
            Detection::new(EntityKind::Email, 0, 1, 0.9, "c"),
            Detection::new(EntityKind::Person, 5, 99, 0.99, "bad"),
        ];
        let out = resolve(text, raw, &[], 0.5);
        let kinds: Vec<_> = out.iter().map(|d| d.kind).collect();
        assert_eq!(kinds, [EntityKind::Email, EntityKind::Card]);
    }

    #[test]
    fn invalid_spans_are_dropped() {
        let text = "é";
        let raw = vec![Detection::new(EntityKind::Person, 1, 2, 0.9, "x")];
        assert!(resolve(text, raw, &[], 0.5).is_empty());
    }
}
