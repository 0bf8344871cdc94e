//! Property tests: exact round trip, streaming equals whole-text restore for any chunking,
//! and no panic or malformed span from the recognizers on arbitrary input.

use std::sync::{Arc, LazyLock};

use hearth_privacy::{
    restore, Analyzer, Anonymizer, EntityKind, Gazetteer, PlaceholderMap, RestoreMode,
    StreamRestorer,
};
use proptest::prelude::*;

static ANONYMIZER: LazyLock<Anonymizer> = LazyLock::new(|| {
    let gazetteer = Gazetteer::from_lists(
        ["Rachel", "John", "Hans", "Marie", "Jürgen"],
        ["Davis", "Smith", "Müller", "Dupont"],
    );
    Anonymizer::new(Analyzer::new(Arc::new(gazetteer)))
});

/// Pieces that stress the recognizers and the placeholder syntax.
const FRAGMENTS: &[&str] = &[
    "[PERSON_1]",
    "PERSON_1",
    "person_2]",
    "[EMAIL_",
    "_1",
    "]",
    "[",
    "LITERAL_1",
    "ip_3",
    "Rachel Davis",
    "Dear John,",
    "Herr Müller",
    " ",
    "\n",
    "a@b.example.com",
    "10.0.0.1",
    "fe80::1",
    "password=Abc123!x",
    "DE89 3704 0044 0532 0130 00",
    "4111 1111 1111 1111",
    "+49 30 12345678",
    "123-45-6789",
    "sk-proj-abcdefghijklmnopqrstuvwx",
    "DATE_OF_BIRTH_1",
    "born 01/02/1990",
    "é",
    "日本",
    "🙂",
    "\u{0}",
    "x",
    "9",
    "_",
    "[[",
    "]]",
    "Ⅻ",
    "K",
];

fn text_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => prop::sample::select(FRAGMENTS).prop_map(str::to_owned),
        2 => any::<String>(),
        1 => "[A-Za-z_\\[\\]0-9 ]{0,12}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

/// Restores `text` through a stream cut at `cuts` (byte offsets, snapped to char boundaries).
fn stream_restore(
    map: &Arc<PlaceholderMap>,
    text: &str,
    cuts: &[usize],
    mode: RestoreMode,
) -> String {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| {
            let mut c = c % (text.len() + 1);
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    points.sort_unstable();
    let mut r = StreamRestorer::with_mode(Arc::clone(map), mode);
    let mut out = String::new();
    let mut prev = 0;
    for p in points.into_iter().chain([text.len()]) {
        r.push_into(&text[prev..p], &mut out);
        prev = p;
    }
    out.push_str(&r.finish());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn restore_inverts_anonymize(a in text_strategy(), b in text_strategy()) {
        let mut conv = ANONYMIZER.conversation();
        let ma = conv.anonymize(&a);
        let mb = conv.anonymize(&b);
        prop_assert_eq!(conv.restore(&ma), a);
        prop_assert_eq!(conv.restore(&mb), b);
    }

    #[test]
    fn streaming_equals_whole_text(
        input in text_strategy(),
        model_text in text_strategy(),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut conv = ANONYMIZER.conversation();
        let masked = conv.anonymize(&input);
        let map = Arc::new(conv.map().clone());
        for text in [masked.as_str(), model_text.as_str(), &format!("{model_text}{masked}")] {
            let whole = restore(&map, text);
            prop_assert_eq!(stream_restore(&map, text, &cuts, RestoreMode::Text), whole);
        }
    }

    #[test]
    fn json_mode_is_chunking_independent(
        text in text_strategy(),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut map = PlaceholderMap::new();
        map.number_for(EntityKind::Person, "A \"quoted\" \\ name");
        map.number_for(EntityKind::Email, "x@y.z");
        let map = Arc::new(map);
        let one = stream_restore(&map, &text, &[], RestoreMode::JsonString);
        prop_assert_eq!(stream_restore(&map, &text, &cuts, RestoreMode::JsonString), one);
    }

    #[test]
    fn recognizers_never_panic_and_spans_are_sound(text in any::<String>()) {
        check_spans(&text);
    }

    #[test]
    fn recognizers_on_pii_shaped_noise(
        text in "[0-9 +()./:@_=\\-a-fA-FxX\\[\\]\"'\\n#sk]{0,200}",
        prefix in "(|Tel: |IBAN |SSN |password=|Dear |born |token: )",
    ) {
        check_spans(&format!("{prefix}{text}"));
    }
}

fn check_spans(text: &str) {
    let detections = ANONYMIZER.analyzer().analyze(text);
    let mut last_end = 0;
    for d in &detections {
        assert!(d.start < d.end && d.end <= text.len(), "{d:?}");
        assert!(
            text.is_char_boundary(d.start) && text.is_char_boundary(d.end),
            "{d:?}"
        );
        assert!(d.start >= last_end, "overlap at {d:?}");
        last_end = d.end;
    }
    let mut conv = ANONYMIZER.conversation();
    let masked = conv.anonymize(text);
    assert_eq!(conv.restore(&masked), text);
}

/// Every way of cutting a few short texts into chunks (2^(n-1) chunkings each).
#[test]
fn every_chunking_of_short_texts() {
    let mut map = PlaceholderMap::new();
    map.number_for(EntityKind::Person, "Ada");
    map.number_for(EntityKind::Ssn, "123-45-6789");
    let map = Arc::new(map);
    for text in [
        "x[PERSON_1]y",
        "PERSON_1 ssn_1]",
        "[[Person_1]]_",
        "aPERSON_1 [SSN_12",
        "é[PERSON_1é",
    ] {
        let whole = restore(&map, text);
        let bounds: Vec<usize> = (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for mask in 0u32..(1 << bounds.len()) {
            let cuts: Vec<usize> = bounds
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, &b)| b)
                .collect();
            assert_eq!(
                stream_restore(&map, text, &cuts, RestoreMode::Text),
                whole,
                "{text:?} {cuts:?}"
            );
        }
    }
}
