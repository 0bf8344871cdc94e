//! Placeholder syntax: writing `[KIND_N]` and recognising it (and its variants) again.
//!
//! # Form
//! A placeholder is `[` + upper-case kind label + `_` + a decimal number from 1 + `]`,
//! e.g. `[PERSON_1]`, `[EMAIL_2]`, `[DATE_OF_BIRTH_1]`. Square brackets survive Markdown
//! and HTML rendering (angle brackets vanish as tags), the label is an ordinary English
//! word the model can reason with ("PERSON_1 wrote to EMAIL_1"), and the number is a
//! separate token that models copy verbatim.
//!
//! # Variants accepted on restore
//! Models sometimes drop a bracket or change case: `PERSON_1`, `[person_1]`,
//! `Person_1]` are all accepted. A bare form (no opening bracket) must not follow an ASCII
//! letter, digit or `_` (so `ZIP_1` is not `IP_1`). Digits are read greedily (`PERSON_12`
//! is never `PERSON_1` + `2`), and a number never starts with `0` or exceeds nine digits.
//!
//! # Exactness
//! [`find_lookalikes`] finds, more permissively than the restorer, every piece of input
//! text that the restorer could ever read as a placeholder. The anonymizer masks those as
//! [`EntityKind::Literal`], which is what makes `restore(anonymize(x)) == x` hold for any
//! `x`: after masking, every placeholder-like piece of the masked text is one we wrote.

use crate::entity::EntityKind;

/// The longest number a placeholder may carry, in digits.
const MAX_DIGITS: usize = 9;

/// Writes the canonical placeholder for `kind` number `number` (from 1).
pub fn format_placeholder(kind: EntityKind, number: u32) -> String {
    format!("[{}_{}]", kind.label(), number)
}

/// Outcome of trying to read a placeholder at one position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlaceholderMatch {
    /// A placeholder of `len` bytes for `(kind, number)` starts here.
    Found {
        len: usize,
        kind: EntityKind,
        number: u32,
    },
    /// No placeholder starts here, whatever text follows.
    NoMatch,
    /// The text ends before it can be decided; more input may make it a placeholder.
    NeedMore,
}

/// Whether `b` may directly precede a bare (bracket-less) placeholder.
#[inline]
pub(crate) fn is_bare_boundary(prev: Option<u8>) -> bool {
    match prev {
        None => true,
        Some(b) => !(b.is_ascii_alphanumeric() || b == b'_'),
    }
}

/// Whether `b` can start a placeholder (opening bracket or first letter of a label).
#[inline]
pub(crate) fn can_start(b: u8) -> bool {
    matches!(
        b.to_ascii_uppercase(),
        b'[' | b'P' | b'E' | b'C' | b'I' | b'U' | b'S' | b'N' | b'A' | b'D' | b'L'
    )
}

/// Tries to read a placeholder at the start of `text`.
///
/// `prev` is the byte before `text` (None at the start of the stream); `at_end` says
/// that no more text will follow, so an undecided read resolves as if input stopped.
pub(crate) fn match_placeholder(text: &[u8], prev: Option<u8>, at_end: bool) -> PlaceholderMatch {
    let mut pos = 0;
    let bracketed = text.first() == Some(&b'[');
    if bracketed {
        pos = 1;
    } else if !is_bare_boundary(prev) {
        return PlaceholderMatch::NoMatch;
    }
    let rest = &text[pos..];
    if rest.is_empty() {
        return if at_end {
            PlaceholderMatch::NoMatch
        } else {
            PlaceholderMatch::NeedMore
        };
    }
    let mut undecided = false;
    for kind in EntityKind::ALL {
        match match_label_number(rest, kind.label().as_bytes(), at_end) {
            LabelNumber::Found { len, number } => {
                let mut total = pos + len;
                if text.get(total) == Some(&b']') {
                    total += 1;
                } else if total == text.len() && !at_end {
                    // A closing bracket may still arrive.
                    return PlaceholderMatch::NeedMore;
                }
                return PlaceholderMatch::Found {
                    len: total,
                    kind,
                    number,
                };
            }
            LabelNumber::NeedMore => undecided = true,
            LabelNumber::NoMatch => {}
        }
    }
    if undecided {
        PlaceholderMatch::NeedMore
    } else {
        PlaceholderMatch::NoMatch
    }
}

enum LabelNumber {
    Found { len: usize, number: u32 },
    NoMatch,
    NeedMore,
}

/// Reads `label` (ASCII case-insensitive) + `_` + number at the start of `text`.
fn match_label_number(text: &[u8], label: &[u8], at_end: bool) -> LabelNumber {
    let need_more = if at_end {
        LabelNumber::NoMatch
    } else {
        LabelNumber::NeedMore
    };
    // Label.
    for (i, &l) in label.iter().enumerate() {
        match text.get(i) {
            None => return need_more,
            Some(&b) if b.eq_ignore_ascii_case(&l) => {}
            Some(_) => return LabelNumber::NoMatch,
        }
    }
    let mut pos = label.len();
    match text.get(pos) {
        None => return need_more,
        Some(b'_') => pos += 1,
        Some(_) => return LabelNumber::NoMatch,
    }
    match text.get(pos) {
        None => return need_more,
        Some(b'1'..=b'9') => {}
        Some(_) => return LabelNumber::NoMatch,
    }
    let digits_start = pos;
    while let Some(b) = text.get(pos) {
        if b.is_ascii_digit() {
            pos += 1;
            if pos - digits_start > MAX_DIGITS {
                return LabelNumber::NoMatch;
            }
        } else {
            break;
        }
    }
    if pos == text.len() && !at_end {
        // More digits may follow.
        return LabelNumber::NeedMore;
    }
    let mut number: u32 = 0;
    for &b in &text[digits_start..pos] {
        number = number * 10 + u32::from(b - b'0');
    }
    LabelNumber::Found { len: pos, number }
}

/// Byte ranges of every piece of `text` that a restorer could read as a placeholder:
/// any kind label (ASCII case-insensitive, anywhere, even inside a word) followed by `_`
/// and an ASCII digit, through the last digit. A superset of what the restorer accepts.
pub(crate) fn find_lookalikes(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // Every label match needs `_` + digit after it, so look for `_` first: cheap on prose.
    while let Some(off) = memchr_underscore(&bytes[i..]) {
        let us = i + off;
        i = us + 1;
        if !bytes.get(us + 1).is_some_and(|b| b.is_ascii_digit()) {
            continue;
        }
        let mut best_start = None;
        for kind in EntityKind::ALL {
            let label = kind.label().as_bytes();
            if us < label.len() {
                continue;
            }
            let start = us - label.len();
            if bytes[start..us].eq_ignore_ascii_case(label) {
                best_start = Some(best_start.map_or(start, |s: usize| s.min(start)));
            }
        }
        if let Some(start) = best_start {
            let mut end = us + 1;
            while bytes.get(end).is_some_and(|b| b.is_ascii_digit()) {
                end += 1;
            }
            // Lookalikes never overlap: each ends in digits and starts with a letter.
            if out.last().is_none_or(|&(_, e)| e <= start) {
                out.push((start, end));
            }
            i = end;
        }
    }
    out
}

#[inline]
fn memchr_underscore(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(s: &str) -> Option<(usize, EntityKind, u32)> {
        match match_placeholder(s.as_bytes(), None, true) {
            PlaceholderMatch::Found { len, kind, number } => Some((len, kind, number)),
            _ => None,
        }
    }

    #[test]
    fn canonical_and_variants() {
        assert_eq!(found("[PERSON_1]"), Some((10, EntityKind::Person, 1)));
        assert_eq!(found("[person_12] x"), Some((11, EntityKind::Person, 12)));
        assert_eq!(found("Person_3,"), Some((8, EntityKind::Person, 3)));
        assert_eq!(found("EMAIL_2]"), Some((8, EntityKind::Email, 2)));
        assert_eq!(
            found("[DATE_OF_BIRTH_1]"),
            Some((17, EntityKind::DateOfBirth, 1))
        );
        assert_eq!(found("[PERSON_0]"), None);
        assert_eq!(found("[PERSON_]"), None);
        assert_eq!(found("[PERSONA_1]"), None);
        assert_eq!(found("[PERSON_1234567890]"), None);
    }

    #[test]
    fn bare_form_needs_a_boundary() {
        let m = match_placeholder(b"IP_1", Some(b'Z'), true);
        assert_eq!(m, PlaceholderMatch::NoMatch);
        let m = match_placeholder(b"IP_1", Some(b' '), true);
        assert!(matches!(m, PlaceholderMatch::Found { .. }));
        // A bracket needs no boundary.
        let m = match_placeholder(b"[IP_1]", Some(b'Z'), true);
        assert!(matches!(m, PlaceholderMatch::Found { len: 6, .. }));
    }

    #[test]
    fn undecided_prefixes_wait() {
        for p in ["[", "[PER", "PERSON", "PERSON_", "PERSON_1", "[PERSON_12"] {
            assert_eq!(
                match_placeholder(p.as_bytes(), None, false),
                PlaceholderMatch::NeedMore,
                "{p}"
            );
        }
        assert_eq!(
            match_placeholder(b"[X", None, false),
            PlaceholderMatch::NoMatch
        );
        assert_eq!(
            match_placeholder(b"PERSONS", None, false),
            PlaceholderMatch::NoMatch
        );
    }

    #[test]
    fn lookalikes_are_found_anywhere() {
        let t = "a PERSON_1 b zip_22 [email_3] DATE_OF_BIRTH_9x person_ x";
        let spans: Vec<&str> = find_lookalikes(t).iter().map(|&(s, e)| &t[s..e]).collect();
        assert_eq!(spans, ["PERSON_1", "ip_22", "email_3", "DATE_OF_BIRTH_9"]);
    }
}
