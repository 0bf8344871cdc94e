//! Payment cards (Luhn + issuer prefix) and IBANs (ISO 13616 length + mod 97).

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};

/// Finds payment card numbers.
pub struct CardRecognizer {
    candidate: Regex,
}

impl CardRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        CardRecognizer {
            candidate: re(r"(?-u:\b)\d(?:[ \-]?\d){12,18}(?-u:\b)"),
        }
    }
}

impl Default for CardRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Luhn checksum over ASCII digits.
pub(crate) fn luhn_valid(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (i, &d) in digits.iter().rev().enumerate() {
        let mut v = u32::from(d - b'0');
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// Whether the issuer prefix and length belong to a known card network.
fn known_issuer(d: &[u8]) -> bool {
    let n = d.len();
    let prefix = |k: usize| -> u32 {
        d.iter()
            .take(k)
            .fold(0u32, |acc, &b| acc * 10 + u32::from(b - b'0'))
    };
    let p2 = prefix(2);
    let p3 = prefix(3);
    let p4 = prefix(4);
    let p6 = prefix(6);
    match d.first() {
        Some(b'4') => matches!(n, 13 | 16 | 19), // Visa
        Some(b'5') => {
            (51..=55).contains(&p2) && n == 16 || (50..=69).contains(&p2) && (12..=19).contains(&n)
        } // Mastercard, Maestro
        Some(b'2') => (2221..=2720).contains(&p4) && n == 16, // Mastercard 2-series
        Some(b'3') => {
            (p2 == 34 || p2 == 37) && n == 15 // Amex
                || (3528..=3589).contains(&p4) && (16..=19).contains(&n) // JCB
                || ((300..=305).contains(&p3) || p2 == 36 || p2 == 38 || p2 == 39) && (14..=19).contains(&n)
            // Diners
        }
        Some(b'6') => {
            (p4 == 6011 || p2 == 65 || (644..=649).contains(&p3) || (622126..=622925).contains(&p6))
                && (16..=19).contains(&n) // Discover
                || p2 == 62 && (16..=19).contains(&n) // UnionPay
                || (p2 == 63 || p2 == 67) && (12..=19).contains(&n) // Maestro
        }
        _ => false,
    }
}

impl Recognizer for CardRecognizer {
    fn name(&self) -> &'static str {
        "card"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Card]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.candidate.find_iter(text) {
            let s = m.as_str();
            // One separator style only (all spaces, all dashes, or none).
            if s.contains(' ') && s.contains('-') {
                continue;
            }
            let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_digit).collect();
            if !(13..=19).contains(&digits.len()) || digits.iter().all(|&d| d == digits[0]) {
                continue;
            }
            if luhn_valid(&digits) && known_issuer(&digits) {
                out.push(Detection::new(
                    EntityKind::Card,
                    m.start(),
                    m.end(),
                    0.95,
                    self.name(),
                ));
            }
        }
    }
}

/// Finds IBANs, grouped or not.
pub struct IbanRecognizer {
    candidate: Regex,
}

impl IbanRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        IbanRecognizer {
            candidate: re(r"(?i)(?-u:\b)[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,32}"),
        }
    }
}

impl Default for IbanRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

/// IBAN length by country (ISO 13616 registry).
fn iban_length(country: &str) -> Option<usize> {
    Some(match country {
        "NO" => 15,
        "BE" => 16,
        "DK" | "FI" | "FO" | "GL" | "NL" => 18,
        "MK" | "SI" => 19,
        "AT" | "BA" | "EE" | "KZ" | "LT" | "LU" | "XK" => 20,
        "CH" | "CR" | "HR" | "LI" | "LV" => 21,
        "BG" | "BH" | "DE" | "GB" | "GE" | "IE" | "ME" | "RS" | "VA" => 22,
        "AE" | "GI" | "IL" | "TL" => 23,
        "AD" | "CZ" | "ES" | "MD" | "PK" | "RO" | "SA" | "SE" | "SK" | "TN" | "VG" => 24,
        "PT" | "ST" => 25,
        "IS" | "TR" => 26,
        "FR" | "GR" | "IT" | "MC" | "MR" | "SM" => 27,
        "AL" | "AZ" | "BY" | "CY" | "DO" | "GT" | "HU" | "LB" | "PL" | "SV" => 28,
        "BR" | "EG" | "PS" | "QA" | "UA" => 29,
        "JO" | "KW" | "MU" => 30,
        "MT" | "SC" => 31,
        "LC" => 32,
        _ => return None,
    })
}

/// ISO 7064 mod 97-10 over an IBAN without spaces (upper case).
pub(crate) fn iban_mod97_valid(iban: &[u8]) -> bool {
    if iban.len() < 5 {
        return false;
    }
    let rearranged = iban[4..].iter().chain(&iban[..4]);
    let mut rem: u32 = 0;
    for &c in rearranged {
        let v = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

impl Recognizer for IbanRecognizer {
    fn name(&self) -> &'static str {
        "iban"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Iban]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.candidate.find_iter(text) {
            let s = m.as_str();
            let country = s[..2].to_ascii_uppercase();
            let Some(len) = iban_length(&country) else {
                continue;
            };
            // Take exactly `len` alphanumerics; the pattern may have run into the next word.
            let mut compact = Vec::with_capacity(len);
            let mut end = m.start();
            for (i, b) in s.bytes().enumerate() {
                if b == b' ' {
                    continue;
                }
                compact.push(b.to_ascii_uppercase());
                if compact.len() == len {
                    end = m.start() + i + 1;
                    break;
                }
            }
            if compact.len() != len {
                continue;
            }
            let next = text[end..].chars().next();
            if next.is_some_and(|c| c.is_alphanumeric()) {
                continue;
            }
            if iban_mod97_valid(&compact) {
                out.push(Detection::new(
                    EntityKind::Iban,
                    m.start(),
                    end,
                    0.98,
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
    fn cards() {
        let r = CardRecognizer::new();
        assert_eq!(
            find(&r, "Visa 4111 1111 1111 1111."),
            ["4111 1111 1111 1111"]
        );
        assert_eq!(find(&r, "amex 378282246310005"), ["378282246310005"]);
        assert!(find(&r, "4111 1111 1111 1112").is_empty());
        assert!(find(&r, "order 1234567890123").is_empty());
    }

    #[test]
    fn ibans() {
        let r = IbanRecognizer::new();
        assert_eq!(
            find(&r, "IBAN: DE89 3704 0044 0532 0130 00 Bank"),
            ["DE89 3704 0044 0532 0130 00"]
        );
        assert_eq!(
            find(&r, "FR1420041010050500013M02606."),
            ["FR1420041010050500013M02606"]
        );
        assert!(find(&r, "DE89 3704 0044 0532 0130 01").is_empty());
    }
}
