//! Telephone numbers, validated with libphonenumber metadata (the `phonenumber` crate).
//!
//! A candidate is a run of digits and phone punctuation. It is accepted when
//! libphonenumber says the number is valid (in international form, or in one of the
//! national plans we guess from its shape: US for `(xxx)` or 10 digits without a trunk
//! `0`; Germany, France and the UK for numbers with a trunk `0`) and it either looks like
//! a phone number (international prefix, grouping, parentheses) or has a phone context
//! word nearby. A number libphonenumber rejects is still accepted next to a strong
//! context word (`Tel.`, `phone`, `Handy`...), at a lower score.

use phonenumber::country::Id;
use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::{has_keyword, window_before};

#[rustfmt::skip]
const CONTEXT: &[&str] = &[
    "phone", "tel", "call", "mobile", "cell", "fax", "whatsapp", "sms", "text me", "reach me",
    "contact", "telefon", "handy", "mobil", "ruf", "erreichbar", "erreichen", "anrufen", "reach",
    "joignable", "rappeler", "portable", "telephone", "appel", "appelez", "joindre", "numero",
    "number", "nummer",
];

/// Finds telephone numbers.
pub struct PhoneRecognizer {
    candidate: Regex,
}

/// Decodes libphonenumber metadata now rather than on the first request.
pub(crate) fn warm_up() {
    let _ = phonenumber::parse(Some(Id::US), "+1 650-253-0000");
}

impl PhoneRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        PhoneRecognizer {
            candidate: re(
                r"(?:\+|(?-u:\b)00)?\(?\d[\d \u{00A0}().\-/]{5,24}\d(?:[ ]?(?:x|ext\.?|extension|Durchwahl|poste)[ ]?\d{1,6})?",
            ),
        }
    }
}

impl Default for PhoneRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Recognizer for PhoneRecognizer {
    fn name(&self) -> &'static str {
        "phone"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Phone]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.candidate.find_iter(text) {
            let (start, end) = trim_candidate(text, m.start(), m.end());
            if start >= end {
                continue;
            }
            if let Some(score) = score_candidate(text, start, end) {
                out.push(Detection::new(
                    EntityKind::Phone,
                    start,
                    end,
                    score,
                    self.name(),
                ));
            }
        }
    }
}

/// Drops unbalanced trailing/leading punctuation the candidate pattern may take in.
fn trim_candidate(text: &str, mut start: usize, mut end: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    loop {
        let s = &text[start..end];
        let opens = s.matches('(').count();
        let closes = s.matches(')').count();
        match bytes.get(end.wrapping_sub(1)) {
            Some(b'.' | b'-' | b'/' | b' ') if end > start => end -= 1,
            Some(b')') if closes > opens => end -= 1,
            _ => match bytes.get(start) {
                Some(b'(') if opens > closes => start += 1,
                _ => break,
            },
        }
    }
    (start, end)
}

fn score_candidate(text: &str, start: usize, end: usize) -> Option<f32> {
    let s = &text[start..end];
    let bytes = text.as_bytes();
    // Not in the middle of a longer alphanumeric token, decimal number or version.
    let before = text[..start].chars().next_back();
    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '+' || c == '/' || c == '.') {
        return None;
    }
    let after = text[end..].chars().next();
    if after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    if matches!(bytes.get(end), Some(b'.' | b'-' | b'/'))
        && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
    {
        return None;
    }
    let (main, _ext) = split_extension(s);
    let digits: String = main.chars().filter(char::is_ascii_digit).collect();
    if !(7..=15).contains(&digits.len()) {
        return None;
    }
    if looks_like_date_or_time(main) || looks_like_ip(main) || looks_like_version_or_date_run(main)
    {
        return None;
    }
    let international = main.starts_with('+') || main.starts_with("00");
    let separators = main
        .chars()
        .filter(|c| matches!(c, ' ' | '-' | '.' | '/' | '(' | ')' | '\u{00A0}'))
        .count();
    let shaped = international || main.contains('(') || separators >= 2;
    let context = has_keyword(window_before(text, start, 48), CONTEXT);

    let valid = is_valid_number(main, &digits, international);
    match (valid, shaped, context) {
        (true, true, true) => Some(0.9),
        (true, true, false) => Some(0.75),
        (true, false, true) => Some(0.7),
        // Unshaped digit runs without context are order numbers, ids...
        (true, false, false) => None,
        (false, _, true) if digits.len() >= 8 => Some(0.55),
        _ => None,
    }
}

fn split_extension(s: &str) -> (&str, &str) {
    let lower = s.to_ascii_lowercase();
    for marker in ["extension", "durchwahl", "poste", "ext", "x"] {
        if let Some(i) = lower.rfind(marker) {
            if s.is_char_boundary(i)
                && lower[i + marker.len()..]
                    .trim_start_matches(['.', ' '])
                    .chars()
                    .all(|c| c.is_ascii_digit())
            {
                return (s[..i].trim_end(), &s[i..]);
            }
        }
    }
    (s, "")
}

fn looks_like_date_or_time(s: &str) -> bool {
    let parts: Vec<&str> = s.split(['.', '/', '-']).collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
    {
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        return matches!(
            lens.as_slice(),
            [4, 2, 2] | [1 | 2, 1 | 2, 4] | [1 | 2, 1 | 2, 2]
        );
    }
    false
}

/// Versions (`0.2.0`), embedded ISO dates (`0.4.1 (2024-07-01`) and unbalanced brackets.
fn looks_like_version_or_date_run(s: &str) -> bool {
    if s.matches('(').count() != s.matches(')').count() {
        return true;
    }
    let dotted: Vec<&str> = s.split([' ', '(', ')']).collect();
    if dotted.iter().any(|chunk| {
        let parts: Vec<&str> = chunk.split('.').collect();
        parts.len() >= 3 && parts.iter().any(|p| p.len() == 1)
    }) {
        return true;
    }
    let b = s.as_bytes();
    b.windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..10].iter().all(u8::is_ascii_digit)
    })
}

fn looks_like_ip(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.chars().all(|c| c.is_ascii_digit()))
}

fn is_valid_number(main: &str, digits: &str, international: bool) -> bool {
    let parse_valid = |region: Option<Id>, s: &str| {
        phonenumber::parse(region, s)
            .map(|n| phonenumber::is_valid(&n))
            .unwrap_or(false)
    };
    if international {
        let normalized = if let Some(rest) = main.strip_prefix("00") {
            format!("+{rest}")
        } else {
            main.to_owned()
        };
        return parse_valid(None, &normalized);
    }
    if digits.starts_with('0') {
        [Id::DE, Id::FR, Id::GB]
            .into_iter()
            .any(|r| parse_valid(Some(r), main))
    } else {
        parse_valid(Some(Id::US), main)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(t: &str) -> Vec<&str> {
        let mut out = Vec::new();
        PhoneRecognizer::new().recognize(t, &mut out);
        out.iter().map(|d| &t[d.start..d.end]).collect()
    }

    #[test]
    fn phones() {
        assert_eq!(find("Call (650) 253-0000 now"), ["(650) 253-0000"]);
        assert_eq!(find("Tel.: +49 30 12345678."), ["+49 30 12345678"]);
        assert_eq!(find("Tél : 01 42 68 53 00"), ["01 42 68 53 00"]);
        assert_eq!(find("+1-650-253-0000x123"), ["+1-650-253-0000x123"]);
    }

    #[test]
    fn not_phones() {
        assert!(find("on 2023-01-15 at 10.0.0.1").is_empty());
        assert!(find("invoice 6502530000").is_empty());
        assert!(find("version 1.2.3.4567").is_empty());
        assert!(find("lock_api 0.4.12 (2024-04-15)").is_empty());
    }
}
