//! Entity kinds and detections.
//!
//! A [`Detection`] is a byte range of the analysed text plus a kind and a confidence; it
//! never holds the text itself, so detections can be logged or counted without leaking PII.

use serde::{Deserialize, Serialize};

/// The kinds of personal or secret data Hearth recognises.
///
/// Each kind has a short upper-case label used in placeholders (`[PERSON_1]`) and in the
/// entity table. [`EntityKind::Literal`] is internal: it masks text in the input that would
/// otherwise read as one of our placeholders, so that restoring is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EntityKind {
    /// A person's name.
    Person,
    /// An e-mail address.
    Email,
    /// A telephone number (validated against libphonenumber metadata).
    Phone,
    /// A payment card number (Luhn-valid, known issuer prefix).
    Card,
    /// An IBAN (ISO 13616, mod-97 valid).
    Iban,
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// A URL carrying a user name and password.
    CredentialUrl,
    /// An API key, token, password, private key or similar credential.
    Secret,
    /// A US social security number.
    Ssn,
    /// Another national identifier with a checksum (French NIR, German tax id).
    NationalId,
    /// A postal address.
    Address,
    /// A date of birth (a date next to birth context words).
    DateOfBirth,
    /// Input text that looks like one of our placeholders (masked so restore is exact).
    Literal,
}

impl EntityKind {
    /// Every kind, in placeholder-label order.
    pub const ALL: [EntityKind; 13] = [
        EntityKind::Person,
        EntityKind::Email,
        EntityKind::Phone,
        EntityKind::Card,
        EntityKind::Iban,
        EntityKind::IpAddress,
        EntityKind::CredentialUrl,
        EntityKind::Secret,
        EntityKind::Ssn,
        EntityKind::NationalId,
        EntityKind::Address,
        EntityKind::DateOfBirth,
        EntityKind::Literal,
    ];

    /// The label used inside placeholders, e.g. `PERSON` in `[PERSON_1]`.
    pub const fn label(self) -> &'static str {
        match self {
            EntityKind::Person => "PERSON",
            EntityKind::Email => "EMAIL",
            EntityKind::Phone => "PHONE",
            EntityKind::Card => "CARD",
            EntityKind::Iban => "IBAN",
            EntityKind::IpAddress => "IP",
            EntityKind::CredentialUrl => "URL",
            EntityKind::Secret => "SECRET",
            EntityKind::Ssn => "SSN",
            EntityKind::NationalId => "NATIONAL_ID",
            EntityKind::Address => "ADDRESS",
            EntityKind::DateOfBirth => "DATE_OF_BIRTH",
            EntityKind::Literal => "LITERAL",
        }
    }

    /// The kind whose label is `label`, compared ASCII-case-insensitively.
    pub fn from_label(label: &str) -> Option<EntityKind> {
        EntityKind::ALL
            .into_iter()
            .find(|k| k.label().eq_ignore_ascii_case(label))
    }

    /// Position in [`EntityKind::ALL`], used to index per-kind tables.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for EntityKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// One recognised span of a text: `text[start..end]` is of kind `kind`.
///
/// Offsets are byte offsets on UTF-8 character boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Detection {
    /// What was found.
    pub kind: EntityKind,
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset one past the last byte.
    pub end: usize,
    /// Confidence in 0..=1; used to resolve overlaps.
    pub score: f32,
    /// Name of the recognizer that produced it.
    pub recognizer: &'static str,
}

impl Detection {
    /// A detection of `kind` over `start..end`.
    pub fn new(
        kind: EntityKind,
        start: usize,
        end: usize,
        score: f32,
        recognizer: &'static str,
    ) -> Self {
        Detection {
            kind,
            start,
            end,
            score,
            recognizer,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether two detections share at least one byte.
    pub fn overlaps(&self, other: &Detection) -> bool {
        self.start < other.end && other.start < self.end
    }
}
