//! National identifiers: US SSN (area/group/serial rules), French NIR (mod-97 key) and
//! German tax id (ISO 7064 mod 11,10, with a context word).

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::{has_keyword, window_before};

/// Finds US social security numbers.
pub struct SsnRecognizer {
    grouped: Regex,
    plain: Regex,
}

impl SsnRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        SsnRecognizer {
            grouped: re(r"(?-u:\b)\d{3}([\- ])\d{2}[\- ]\d{4}(?-u:\b)"),
            plain: re(r"(?-u:\b)\d{9}(?-u:\b)"),
        }
    }
}

impl Default for SsnRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

const SSN_CONTEXT: &[&str] = &[
    "ssn",
    "social security",
    "social sec",
    "ss#",
    "ss #",
    "tin",
    "taxpayer",
];

fn ssn_parts_valid(digits: &[u8]) -> bool {
    if digits.len() != 9 {
        return false;
    }
    let area = &digits[0..3];
    let group = &digits[3..5];
    let serial = &digits[5..9];
    area != b"000" && area != b"666" && area[0] != b'9' && group != b"00" && serial != b"0000"
}

impl Recognizer for SsnRecognizer {
    fn name(&self) -> &'static str {
        "ssn"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Ssn]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for caps in self.grouped.captures_iter(text) {
            let Some(m) = caps.get(0) else { continue };
            let s = m.as_str();
            let sep = caps.get(1).map_or("-", |c| c.as_str());
            // Both separators the same.
            if s.as_bytes().get(6).map(|&b| b as char) != sep.chars().next() {
                continue;
            }
            let bytes = text.as_bytes();
            // Not part of a longer dashed/dotted number (phone, date, id).
            if matches!(
                m.start().checked_sub(1).map(|i| bytes[i]),
                Some(b'-' | b'.' | b'/' | b'+')
            ) || matches!(bytes.get(m.end()), Some(b'-' | b'/'))
                || (bytes.get(m.end()) == Some(&b'.')
                    && bytes.get(m.end() + 1).is_some_and(u8::is_ascii_digit))
            {
                continue;
            }
            let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_digit).collect();
            if !ssn_parts_valid(&digits) {
                continue;
            }
            let context = has_keyword(window_before(text, m.start(), 40), SSN_CONTEXT);
            let score = match (sep, context) {
                (_, true) => 0.95,
                ("-", false) => 0.8,
                _ => continue,
            };
            out.push(Detection::new(
                EntityKind::Ssn,
                m.start(),
                m.end(),
                score,
                self.name(),
            ));
        }
        for m in self.plain.find_iter(text) {
            if ssn_parts_valid(m.as_str().as_bytes())
                && has_keyword(window_before(text, m.start(), 30), SSN_CONTEXT)
            {
                out.push(Detection::new(
                    EntityKind::Ssn,
                    m.start(),
                    m.end(),
                    0.85,
                    self.name(),
                ));
            }
        }
    }
}

/// Finds French social security numbers (NIR) and German tax ids.
pub struct NationalIdRecognizer {
    nir: Regex,
    steuer_id: Regex,
}

impl NationalIdRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        NationalIdRecognizer {
            nir: re(
                r"(?-u:\b)[12] ?\d{2} ?(?:0[1-9]|1[0-2]|[2-9]\d) ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}(?-u:\b)",
            ),
            steuer_id: re(r"(?-u:\b)[1-9]\d(?: ?\d){9}(?-u:\b)"),
        }
    }
}

impl Default for NationalIdRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

fn nir_valid(compact: &str) -> bool {
    if compact.len() != 15 {
        return false;
    }
    let body = compact[..13].replace("2A", "19").replace("2B", "18");
    let Ok(n) = body.parse::<u64>() else {
        return false;
    };
    let Ok(key) = compact[13..].parse::<u64>() else {
        return false;
    };
    97 - n % 97 == key
}

fn steuer_id_valid(d: &[u8]) -> bool {
    if d.len() != 11 || d[0] == b'0' {
        return false;
    }
    // In the first ten digits exactly one digit repeats (twice or three times).
    let mut counts = [0u8; 10];
    for &b in &d[..10] {
        counts[usize::from(b - b'0')] += 1;
    }
    let repeated = counts.iter().filter(|&&c| c >= 2).count();
    if repeated != 1 || counts.iter().any(|&c| c > 3) {
        return false;
    }
    let mut product = 10u32;
    for &b in &d[..10] {
        let mut sum = (u32::from(b - b'0') + product) % 10;
        if sum == 0 {
            sum = 10;
        }
        product = (sum * 2) % 11;
    }
    let check = (11 - product) % 10;
    check == u32::from(d[10] - b'0')
}

impl Recognizer for NationalIdRecognizer {
    fn name(&self) -> &'static str {
        "national-id"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::NationalId]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.nir.find_iter(text) {
            let compact: String = m.as_str().chars().filter(|c| *c != ' ').collect();
            if nir_valid(&compact) {
                out.push(Detection::new(
                    EntityKind::NationalId,
                    m.start(),
                    m.end(),
                    0.9,
                    self.name(),
                ));
            }
        }
        for m in self.steuer_id.find_iter(text) {
            let digits: Vec<u8> = m.as_str().bytes().filter(u8::is_ascii_digit).collect();
            if steuer_id_valid(&digits)
                && has_keyword(
                    window_before(text, m.start(), 40),
                    &["steuer", "idnr", "identifikationsnummer", "tax id", "tin"],
                )
            {
                out.push(Detection::new(
                    EntityKind::NationalId,
                    m.start(),
                    m.end(),
                    0.85,
                    self.name(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(r: &dyn Recognizer, t: &str) -> Vec<String> {
        let mut out = Vec::new();
        r.recognize(t, &mut out);
        out.iter().map(|d| t[d.start..d.end].to_owned()).collect()
    }

    #[test]
    fn ssn() {
        let r = SsnRecognizer::new();
        assert_eq!(find(&r, "SSN 123-45-6789."), ["123-45-6789"]);
        assert!(find(&r, "666-45-6789 000-12-3456 123-00-4567").is_empty());
        assert!(find(&r, "call 555-123-45-6789").is_empty());
        assert_eq!(find(&r, "social security number: 123456789"), ["123456789"]);
        assert!(find(&r, "order 123456789").is_empty());
    }

    #[test]
    fn nir_and_steuer_id() {
        let r = NationalIdRecognizer::new();
        // 1 84 12 76 451 089 46: key 97 - (1841276451089 mod 97).
        assert_eq!(
            find(&r, "NIR 1 84 12 76 451 089 46"),
            ["1 84 12 76 451 089 46"]
        );
        assert!(find(&r, "NIR 1 84 12 76 451 089 47").is_empty());
        assert_eq!(find(&r, "Steuer-ID: 86095742719"), ["86095742719"]);
        assert!(find(&r, "86095742719").is_empty());
    }
}
