//! E-mail addresses: a practical RFC 5321 subset, validated for dot placement and TLD.

use super::Recognizer;
use crate::entity::{Detection, EntityKind};

/// Finds e-mail addresses (`local@domain.tld`, Unicode letters allowed).
///
/// Scans for `@` and grows the local part and the domain around it, which is much faster
/// than a regex without a literal prefix on long texts.
pub struct EmailRecognizer;

impl EmailRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        EmailRecognizer
    }
}

impl Default for EmailRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

fn is_local_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '_' | '%' | '+' | '-')
}

fn is_domain_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-')
}

/// The e-mail address around the `@` at byte `at`, if any: its byte range.
fn email_at(text: &str, at: usize) -> Option<(usize, usize)> {
    // Local part: up to 64 chars back, not starting with a dot.
    let mut start = at;
    for (n, (i, c)) in text[..at].char_indices().rev().enumerate() {
        if n >= 64 || !is_local_char(c) {
            break;
        }
        start = i;
    }
    while text[start..at].starts_with('.') {
        start += 1;
    }
    let local = &text[start..at];
    if local.is_empty() || local.ends_with('.') || local.contains("..") {
        return None;
    }
    // Domain: up to 253 bytes forward, then drop a trailing dot or hyphen.
    let mut end = at + 1;
    for (i, c) in text[at + 1..].char_indices() {
        if i >= 253 || !is_domain_char(c) {
            break;
        }
        end = at + 1 + i + c.len_utf8();
    }
    while end > at + 1 && text[..end].ends_with(['.', '-']) {
        end -= 1;
    }
    let domain = &text[at + 1..end];
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2
        || labels
            .iter()
            .any(|l| l.is_empty() || l.starts_with('-') || l.ends_with('-') || l.len() > 63)
    {
        return None;
    }
    let tld = labels[labels.len() - 1];
    let tld_len = tld.chars().count();
    if !(2..=24).contains(&tld_len) || !tld.chars().all(char::is_alphabetic) {
        return None;
    }
    // Glued to more address-like text (`a@b.com@c`).
    if text[end..].starts_with('@') || text[..start].ends_with('@') {
        return None;
    }
    Some((start, end))
}

impl Recognizer for EmailRecognizer {
    fn name(&self) -> &'static str {
        "email"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Email]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        let mut last_end = 0;
        for (at, _) in text.match_indices('@') {
            if at < last_end {
                continue;
            }
            if let Some((s, e)) = email_at(text, at) {
                out.push(Detection::new(EntityKind::Email, s, e, 0.95, self.name()));
                last_end = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(t: &str) -> Vec<&str> {
        let mut out = Vec::new();
        EmailRecognizer::new().recognize(t, &mut out);
        out.iter().map(|d| &t[d.start..d.end]).collect()
    }

    #[test]
    fn emails() {
        assert_eq!(
            find("Mail jean.dupont+x@example.fr, or jürgen@müller.de."),
            ["jean.dupont+x@example.fr", "jürgen@müller.de"]
        );
        assert!(
            find("a..b@example.com").is_empty() || find("a..b@example.com") == ["b@example.com"]
        );
        assert!(find("user@localhost").is_empty());
        assert!(find("version 1.2@3").is_empty());
    }
}
