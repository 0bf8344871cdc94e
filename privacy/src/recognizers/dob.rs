//! Dates of birth: a date (numeric, or with an English/German/French month name) within a
//! short distance after a birth context word ("born", "DOB", "geboren", "né le"...).
//! Dates without such a word are not personal data by themselves and are left alone.

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::{fold, window_before};

/// Finds dates of birth.
pub struct DateOfBirthRecognizer {
    date: Regex,
}

#[rustfmt::skip]
const CONTEXT: &[&str] = &[
    "born", "date of birth", "birth date", "birthdate", "birthday", "dob", "d.o.b", "geboren",
    "geburtsdatum", "geb.", "geburtstag", "ne le", "nee le", "ne(e) le", "date de naissance",
    "naissance", "anniversaire",
];

impl DateOfBirthRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        let en = "Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?";
        let de = "Januar|Jänner|Februar|März|April|Mai|Juni|Juli|August|September|Oktober|November|Dezember";
        let fr = "janvier|février|fevrier|mars|avril|mai|juin|juillet|août|aout|septembre|octobre|novembre|décembre|decembre";
        let year = r"(?:1[89]\d\d|20\d\d)";
        let pattern = format!(
            r"(?i)(?-u:\b)(?:\d{{1,2}}[./\-]\d{{1,2}}[./\-]{year}|{year}[./\-]\d{{1,2}}[./\-]\d{{1,2}}|(?:{en})\.? \d{{1,2}}(?:st|nd|rd|th)?,? {year}|\d{{1,2}}(?:st|nd|rd|th|\.|er)? ?(?:of )?(?:{en}|{de}|{fr})\.?,? {year})(?-u:\b)"
        );
        DateOfBirthRecognizer { date: re(&pattern) }
    }
}

impl Default for DateOfBirthRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `keyword` occurs in `folded` as whole words.
fn has_word(folded: &str, keyword: &str) -> bool {
    let mut from = 0;
    while let Some(i) = folded[from..].find(keyword) {
        let s = from + i;
        let e = s + keyword.len();
        let before_ok = !folded[..s]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric);
        let after_ok = !folded[e..]
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric)
            || keyword.ends_with('.');
        if before_ok && after_ok {
            return true;
        }
        from = e;
    }
    false
}

impl Recognizer for DateOfBirthRecognizer {
    fn name(&self) -> &'static str {
        "date-of-birth"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::DateOfBirth]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.date.find_iter(text) {
            let window = fold(window_before(text, m.start(), 48));
            // Only the current line (or the previous one for label-on-its-own-line forms).
            let window = match window.rfind('\n') {
                Some(i) if window[i + 1..].trim().is_empty() => window[..i].to_owned(),
                Some(i) => window[i + 1..].to_owned(),
                None => window,
            };
            if CONTEXT.iter().any(|k| has_word(&window, k)) {
                out.push(Detection::new(
                    EntityKind::DateOfBirth,
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

    fn find(t: &str) -> Vec<&str> {
        let mut out = Vec::new();
        DateOfBirthRecognizer::new().recognize(t, &mut out);
        out.iter().map(|d| &t[d.start..d.end]).collect()
    }

    #[test]
    fn dates_of_birth() {
        assert_eq!(find("DOB: 04/12/1985"), ["04/12/1985"]);
        assert_eq!(find("born on March 3, 1990 in Ohio"), ["March 3, 1990"]);
        assert_eq!(find("geboren am 3. März 1990"), ["3. März 1990"]);
        assert_eq!(find("née le 1er janvier 1970"), ["1er janvier 1970"]);
        assert_eq!(find("Geburtsdatum: 1990-03-03"), ["1990-03-03"]);
        assert!(find("Invoice dated 04/12/1985").is_empty());
        assert!(find("une lettre du 04/12/1985").is_empty());
    }
}
