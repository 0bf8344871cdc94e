//! End-to-end checks with the real name lists. They fail (never skip) when
//! the lists are missing: run `privacy/fetch-data.sh` (scripts/setup.sh does).

use hearth_privacy::{anonymize_document, Anonymizer, RestoreMode};

fn anonymizer() -> Anonymizer {
    Anonymizer::from_default_data()
        .unwrap_or_else(|e| panic!("{e} (run privacy/fetch-data.sh or scripts/setup.sh)"))
}

#[test]
fn masks_a_mixed_document_and_restores_it() {
    let a = anonymizer();
    let text = "From: Rachel Davis <rachel.davis@example.com>\n\
                Hallo Herr Müller, bitte überweisen Sie auf DE89 3704 0044 0532 0130 00.\n\
                Tél : 01 42 68 53 00, né le 3 mars 1980.\n\
                OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345\n\
                Server 10.0.0.12, SSN 123-45-6789.\n";
    let mut conv = a.conversation();
    let masked = conv.anonymize(text);
    for leaked in [
        "Rachel",
        "Davis",
        "rachel.davis",
        "Müller",
        "DE89",
        "01 42",
        "1980",
        "sk-proj",
        "10.0.0.12",
        "123-45",
    ] {
        assert!(!masked.contains(leaked), "{leaked} leaked in {masked}");
    }
    assert_eq!(conv.restore(&masked), text);

    // The model answers with placeholders, streamed in small pieces.
    let answer = format!(
        "Sure, I'll write to {} and [person_2] today.",
        masked
            .split_whitespace()
            .find(|w| w.starts_with("[EMAIL_"))
            .unwrap_or("[EMAIL_1]>")
            .trim_end_matches('>')
    );
    let mut r = conv.stream_restorer();
    let mut out = String::new();
    for piece in answer.as_bytes().chunks(3) {
        out.push_str(&r.push(std::str::from_utf8(piece).unwrap_or("")));
    }
    out.push_str(&r.finish());
    assert!(out.contains("rachel.davis@example.com"), "{out}");
    assert!(out.contains("Müller"), "{out}");

    let mut json = conv.stream_restorer_with_mode(RestoreMode::JsonString);
    let args = json.push("{\"to\": \"[EMAIL_1]\"}") + &json.finish();
    assert_eq!(args, "{\"to\": \"rachel.davis@example.com\"}");
}

#[test]
fn document_entity_table() {
    anonymizer();
    let doc =
        anonymize_document("Dear John Smith, call me at +1 650-253-0000.").expect("data present");
    assert_eq!(doc.masked, "Dear [PERSON_1], call me at [PHONE_1].");
    let table = doc.entity_table();
    assert!(
        table.contains("[PERSON_1]") && table.contains("John Smith"),
        "{table}"
    );
}
