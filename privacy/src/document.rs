//! One-shot masking of a whole document, for `hearth anonymize < file`.

use crate::entity::EntityKind;
use crate::error::PrivacyError;
use crate::placeholder::format_placeholder;
use crate::session::Anonymizer;

/// One row of the entity table: a placeholder, its kind, the value it hides.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EntityRow {
    /// The placeholder as written in the masked text, e.g. `[EMAIL_1]`.
    pub placeholder: String,
    /// Its kind.
    pub kind: EntityKind,
    /// The original text (clear PII: print it only to the user who owns the document).
    pub value: String,
    /// How many times it was replaced.
    pub occurrences: usize,
}

/// A masked document and its entity table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AnonymizedDocument {
    /// The text with placeholders.
    pub masked: String,
    /// One row per distinct value, in kind then number order.
    pub entities: Vec<EntityRow>,
}

impl AnonymizedDocument {
    /// The entity table as aligned plain text (`PLACEHOLDER  KIND  COUNT  VALUE`).
    /// Line breaks inside values are shown as `\n`.
    pub fn entity_table(&self) -> String {
        let ph_w = self
            .entities
            .iter()
            .map(|r| r.placeholder.len())
            .max()
            .unwrap_or(0)
            .max("PLACEHOLDER".len());
        let mut out = format!("{:<ph_w$}  {:>5}  VALUE\n", "PLACEHOLDER", "COUNT");
        for r in &self.entities {
            let value = r.value.replace('\r', "\\r").replace('\n', "\\n");
            out.push_str(&format!(
                "{:<ph_w$}  {:>5}  {}\n",
                r.placeholder, r.occurrences, value
            ));
        }
        out
    }
}

/// Masks `text` with the built-in recognizers and the gazetteer from its default
/// directory (`HEARTH_PRIVACY_DATA` or `<repo>/.hearth/privacy-data`).
///
/// Errors only when the name lists are missing or unreadable.
pub fn anonymize_document(text: &str) -> Result<AnonymizedDocument, PrivacyError> {
    let anonymizer = Anonymizer::from_default_data()?;
    Ok(anonymize_document_with(&anonymizer, text))
}

/// Masks `text` with `anonymizer` (a fresh conversation).
pub fn anonymize_document_with(anonymizer: &Anonymizer, text: &str) -> AnonymizedDocument {
    let mut conversation = anonymizer.conversation();
    let masked = conversation.anonymize_with_spans(text);
    let map = conversation.map();
    let entities = map
        .entries()
        .map(|(kind, number, value)| EntityRow {
            placeholder: format_placeholder(kind, number),
            kind,
            value: value.to_owned(),
            occurrences: masked
                .entities
                .iter()
                .filter(|e| e.kind == kind && e.number == number)
                .count(),
        })
        .collect();
    AnonymizedDocument {
        masked: masked.text,
        entities,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gazetteer::Gazetteer;
    use crate::recognizers::Analyzer;
    use std::sync::Arc;

    #[test]
    fn table_lists_each_value_once() {
        let a = Anonymizer::new(Analyzer::new(Arc::new(Gazetteer::empty())));
        let doc = anonymize_document_with(&a, "Mail a@example.com or a@example.com; IP 10.0.0.1");
        assert_eq!(doc.masked, "Mail [EMAIL_1] or [EMAIL_1]; IP [IP_1]");
        assert_eq!(doc.entities.len(), 2);
        assert_eq!(doc.entities[0].occurrences, 2);
        let table = doc.entity_table();
        assert!(table.contains("[EMAIL_1]"));
        assert!(table.contains("a@example.com"));
    }
}
