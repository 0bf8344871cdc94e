//! Reversible, streaming-safe PII anonymization for Hearth.
//!
//! Personal data and credentials in prompts are replaced by typed, numbered placeholders
//! (`[PERSON_1]`, `[EMAIL_2]`, `[SECRET_1]`) before a model sees them, and the model's
//! answer gets the real values back, also while it streams.
//!
//! - [`Analyzer`] runs [`Recognizer`]s (patterns with validators, a name gazetteer with
//!   context cues; a model-based NER can be plugged in later) and resolves overlaps.
//! - [`Anonymizer`] is the shared, read-only part; [`Conversation`] holds one chat's
//!   [`PlaceholderMap`] so the same value keeps its placeholder across turns. The map is
//!   kept in memory only and every `Debug` impl here is redacted.
//! - [`StreamRestorer`] restores placeholders in a token stream, holding back only a
//!   possible placeholder prefix; its output equals [`restore`] of the whole text for every
//!   chunking. One restorer per stream (content, reasoning, tool-call arguments).
//! - [`anonymize_document`] is the one-shot path behind `hearth anonymize`.
//!
//! Invariant: `conversation.restore(&conversation.anonymize(x)) == x` for every string `x`
//! (input text that already looks like a placeholder is itself masked, as `LITERAL`).
//!
//! The gazetteer is third-party data fetched at set-up time by `privacy/fetch-data.sh`
//! and read at run time (see [`Gazetteer`]); see `docs/privacy.md` for the design and the
//! measured precision/recall against Presidio.

mod document;
mod entity;
mod error;
mod gazetteer;
mod map;
mod placeholder;
mod recognizers;
mod restore;
mod session;
mod text;

pub use document::{anonymize_document, anonymize_document_with, AnonymizedDocument, EntityRow};
pub use entity::{Detection, EntityKind};
pub use error::PrivacyError;
pub use gazetteer::{Gazetteer, DATA_DIR_ENV};
pub use map::PlaceholderMap;
pub use placeholder::format_placeholder;
pub use recognizers::{
    AddressRecognizer, Analyzer, CardRecognizer, CredentialUrlRecognizer, DateOfBirthRecognizer,
    EmailRecognizer, IbanRecognizer, IpRecognizer, NationalIdRecognizer, PersonNameRecognizer,
    PhoneRecognizer, Recognizer, SecretRecognizer, SsnRecognizer,
};
pub use restore::{restore, RestoreMode, StreamRestorer};
pub use session::{Anonymizer, Conversation, Masked, MaskedEntity};
