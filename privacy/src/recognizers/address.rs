//! Postal addresses (US, German, French layouts).
//!
//! Two ways in:
//! 1. An *anchor* (US `City, ST 12345`, military `APO AE 12345`, or European
//!    `12345 City`) with a street line right before it, on the previous line or before a
//!    comma on the same line: the whole address is one detection.
//! 2. A street line with a street-type word and a house number (`Hauptstraße 5`,
//!    `12, rue de la Paix`, `500 Oak Street`), scored higher after a context word
//!    ("address", "Anschrift", "adresse", "lives at"...).
//!
//! A postcode and city alone, or a street name without a number, are not reported.

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::{has_keyword, window_before};

const US_STATES: &str = "AL|AK|AZ|AR|CA|CO|CT|DE|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH|NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|DC|PR|GU|VI|AS|MP|PW|FM|MH|AA|AE|AP";
#[rustfmt::skip]
const CONTEXT: &[&str] = &[
    "address", "adress", "anschrift", "wohnhaft", "wohnt", "wohne", "lives at", "located at",
    "ship to", "shipping", "billing", "mailing", "domicil", "demeurant", "residant", "habite",
    "sis ", "situe", "sitz", "postanschrift", "lieferadresse", "rechnungsadresse", "adresse",
];

/// Finds postal addresses.
pub struct AddressRecognizer {
    anchors: Vec<Regex>,
    /// Street lines that must end where the anchor's street area ends.
    street_at_end: Vec<Regex>,
    /// Street lines with a street-type word, found anywhere.
    street_anywhere: Vec<Regex>,
}

const EN_UNIT: &str = r"(?:,? (?:Apt\.?|Suite|Ste\.?|Unit|Floor|Fl\.?|#) ?[A-Za-z0-9\-]+)?";
const EN_SUFFIX: &str = r"(?:Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Drive|Dr|Boulevard|Blvd|Court|Ct|Way|Place|Pl|Terrace|Ter|Circle|Cir|Parkway|Pkwy|Highway|Hwy|Square|Sq|Trail|Trl|Plaza|Crescent|Alley|Loop|Row)";
const DE_SUFFIX: &str = r"(?:straße|strasse|str\.|weg|allee|platz|gasse|ring|damm|ufer|chaussee|steig|pfad|markt|graben|hof|berg|feld)";
const FR_TYPES: &str = r"(?:rue|avenue|av\.|boulevard|bd|chemin|place|impasse|allée|allee|quai|route|cours|square|passage|rond-point|voie|sentier|villa|cité|cite|hameau|résidence|residence|lieu-dit|faubourg|promenade)";
const HOUSE_NO: &str = r"\d{1,4}[a-zA-Z]?(?:[/\-]\d{1,4}[a-zA-Z]?)?";

impl AddressRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        let cap = r"[A-ZÄÖÜÀ-ÝŒ][\p{L}'.\-]*";
        let de_link = r"(?:van|von|der|den|dem|des|am|an|im|zum|zur|auf|de|la|le|du|di|bei|unter)";
        let en_street =
            format!(r"\d{{1,6}}[A-Za-z]?(?: [A-Z0-9][\p{{L}}0-9'.\-]*){{1,5}}{EN_UNIT}");
        let military =
            r"(?:USNS|USNV|USS|USCGC) [A-Z][a-z]+|PSC \d{4}, Box \d{4}|Unit \d{4} Box \d{4}";
        let de_street = format!(r"{cap}(?:[ \-](?:{de_link}|{cap})){{0,4}} {HOUSE_NO}");
        let fr_street =
            format!(r"(?i:\d{{1,4}}(?: ?(?:bis|ter))?,? )?(?i:{FR_TYPES}) [\p{{L}}'’.\- ]{{1,50}}");
        AddressRecognizer {
            anchors: vec![
                re(&format!(
                    r"{cap}(?: {cap}){{0,3}},? (?:{US_STATES}) \d{{5}}(?:-\d{{4}})?(?-u:\b)"
                )),
                re(r"(?-u:\b)(?:APO|FPO|DPO) A[AEP] \d{5}(?-u:\b)"),
                re(&format!(
                    r"(?-u:\b)\d{{5}} {cap}(?:-[\p{{L}}'.]+| (?:(?:am|an der|an|im|bei|ob|sur|sous|en|lès|les|de|du|la|le) )?{cap}){{0,4}}"
                )),
            ],
            street_at_end: [
                en_street.as_str(),
                military,
                de_street.as_str(),
                fr_street.as_str(),
            ]
            .into_iter()
            .map(|p| re(&format!("(?:{p})$")))
            .collect(),
            street_anywhere: vec![
                re(&format!(
                    r"(?-u:\b)\d{{1,6}}[A-Za-z]? (?:[A-Z][\p{{L}}'.\-]* ){{0,4}}{EN_SUFFIX}(?-u:\b)\.?{EN_UNIT}"
                )),
                re(&format!(
                    r"{cap}(?:[ \-](?:{de_link}|{cap})){{0,3}}{DE_SUFFIX} {HOUSE_NO}(?-u:\b)"
                )),
                re(&format!(
                    r"{cap}(?:[ \-](?:{de_link}|{cap})){{0,3}}[ \-](?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm|Ufer|Chaussee) {HOUSE_NO}(?-u:\b)"
                )),
                re(&format!(
                    r"(?i:(?-u:\b)\d{{1,4}}(?: ?(?:bis|ter))?,? )(?i:{FR_TYPES}) [\p{{L}}'’.\- ]{{1,50}}"
                )),
            ],
        }
    }
}

impl Default for AddressRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the char before `start` is a letter or digit (a match that starts mid-word;
/// the patterns avoid Unicode `\b`, which would slow the regex engine down).
fn starts_inside_word(text: &str, start: usize) -> bool {
    text[..start]
        .chars()
        .next_back()
        .is_some_and(char::is_alphanumeric)
}

/// Trims trailing spaces and commas; returns the new end.
fn trim_end_at(text: &str, start: usize, mut end: usize) -> usize {
    while end > start && matches!(text.as_bytes()[end - 1], b' ' | b',' | b'\t' | b'\r') {
        end -= 1;
    }
    end
}

impl AddressRecognizer {
    /// The text right before an anchor where its street line may be.
    fn street_area(text: &str, anchor_start: usize) -> Option<(usize, usize)> {
        let line_start = text[..anchor_start].rfind('\n').map_or(0, |i| i + 1);
        if text[line_start..anchor_start].trim().is_empty() {
            // Anchor starts a line: the street is the previous line.
            let prev_end = line_start.checked_sub(1)?;
            let prev_start = text[..prev_end].rfind('\n').map_or(0, |i| i + 1);
            let end = trim_end_at(text, prev_start, prev_end);
            return Some((prev_start, end));
        }
        // Same line: the street ends at the comma before the anchor.
        let before = &text[line_start..anchor_start];
        let trimmed = before.trim_end();
        if !trimmed.ends_with(',') {
            return None;
        }
        let end = trim_end_at(text, line_start, anchor_start);
        Some((line_start, end))
    }
}

impl Recognizer for AddressRecognizer {
    fn name(&self) -> &'static str {
        "address"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Address]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for anchor in &self.anchors {
            for m in anchor.find_iter(text) {
                if starts_inside_word(text, m.start()) {
                    continue;
                }
                let mut anchor_end = m.end();
                // The European anchor runs to the end of the city name only.
                while anchor_end > m.start()
                    && matches!(text.as_bytes()[anchor_end - 1], b'.' | b' ' | b'\'' | b'-')
                {
                    anchor_end -= 1;
                }
                let Some((area_start, area_end)) = Self::street_area(text, m.start()) else {
                    continue;
                };
                if area_end <= area_start {
                    continue;
                }
                // Only the last 100 bytes can hold the street line.
                let area_start =
                    crate::text::floor_boundary(text, area_end.saturating_sub(100)).max(area_start);
                let area = &text[area_start..area_end];
                let street_start = self
                    .street_at_end
                    .iter()
                    .filter_map(|r| r.find(area).map(|s| s.start()))
                    .min();
                if let Some(s) = street_start {
                    out.push(Detection::new(
                        EntityKind::Address,
                        area_start + s,
                        anchor_end,
                        0.85,
                        self.name(),
                    ));
                }
            }
        }
        for street in &self.street_anywhere {
            for m in street.find_iter(text) {
                if starts_inside_word(text, m.start()) {
                    continue;
                }
                let end = trim_end_at(text, m.start(), m.end());
                // Stop a French street at the end of its line or sentence.
                let end = text[m.start()..end]
                    .find(['\n', '.', ';', '('])
                    .map_or(end, |i| {
                        trim_end_at(text, m.start(), m.start() + i).max(m.start())
                    });
                if end <= m.start() {
                    continue;
                }
                let context = has_keyword(window_before(text, m.start(), 40), CONTEXT);
                out.push(Detection::new(
                    EntityKind::Address,
                    m.start(),
                    end,
                    if context { 0.75 } else { 0.6 },
                    self.name(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        AddressRecognizer::new().recognize(t, &mut out);
        let resolved = super::super::resolve(t, out, &[], 0.5);
        resolved
            .iter()
            .map(|d| t[d.start..d.end].to_owned())
            .collect()
    }

    #[test]
    fn us() {
        assert_eq!(
            find("Ship to:\n5650 Ellis Burgs Apt. 289\nPort Christopher, OH 33962\nThanks"),
            ["5650 Ellis Burgs Apt. 289\nPort Christopher, OH 33962"]
        );
        assert_eq!(
            find("We are at 500 Oak Street, Springfield, IL 62704."),
            ["500 Oak Street, Springfield, IL 62704"]
        );
    }

    #[test]
    fn de_fr() {
        assert_eq!(
            find("Anschrift: Magdalena-Hein-Allee 389\n84011 Merseburg\n"),
            ["Magdalena-Hein-Allee 389\n84011 Merseburg"]
        );
        assert_eq!(
            find("Adresse : 67, chemin Adrien Tanguy\n69738 Rémy-sur-Albert"),
            ["67, chemin Adrien Tanguy\n69738 Rémy-sur-Albert"]
        );
        assert_eq!(find("wohnhaft in der Hauptstraße 5."), ["Hauptstraße 5"]);
        assert!(find("Total: 12345 Euro").is_empty());
    }
}
