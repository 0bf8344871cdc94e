//! IP addresses (v4 and v6, parsed by `std::net`) and URLs that carry credentials.

use std::net::Ipv6Addr;
use std::str::FromStr;

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::window_before;

/// Finds IPv4 and IPv6 addresses.
pub struct IpRecognizer {
    v4: Regex,
    v6: Regex,
}

impl IpRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        IpRecognizer {
            v4: re(
                r"(?-u:\b)(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?-u:\b)",
            ),
            v6: re(
                r"(?i)[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})?",
            ),
        }
    }
}

impl Default for IpRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Recognizer for IpRecognizer {
    fn name(&self) -> &'static str {
        "ip"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::IpAddress]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        let bytes = text.as_bytes();
        for m in self.v4.find_iter(text) {
            let (s, e) = (m.start(), m.end());
            // Part of a longer dotted number (version, OID) or a word.
            let before = s.checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(e).copied();
            let after2 = bytes.get(e + 1).copied();
            if matches!(before, Some(b'.') | Some(b'_'))
                || before.is_some_and(|b| b.is_ascii_alphanumeric())
                || (after == Some(b'.') && after2.is_some_and(|b| b.is_ascii_digit()))
                || after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                continue;
            }
            if preceded_by_version_word(text, s) {
                continue;
            }
            out.push(Detection::new(
                EntityKind::IpAddress,
                s,
                e,
                0.9,
                self.name(),
            ));
        }
        for m in self.v6.find_iter(text) {
            let (s, mut e) = (m.start(), m.end());
            // A trailing single ':' is punctuation ("at fe80::1:").
            while e > s && bytes[e - 1] == b':' && !text[s..e].ends_with("::") {
                e -= 1;
            }
            let cand = &text[s..e];
            let before = s.checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(e).copied();
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
                || after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                continue;
            }
            let hex_digits = cand.bytes().filter(u8::is_ascii_hexdigit).count();
            let groups = cand.split(':').filter(|g| !g.is_empty()).count();
            if hex_digits < 4 || groups < 2 {
                continue;
            }
            if Ipv6Addr::from_str(cand).is_ok() {
                out.push(Detection::new(
                    EntityKind::IpAddress,
                    s,
                    e,
                    0.9,
                    self.name(),
                ));
            }
        }
    }
}

/// Whether the word right before `start` says the number is a version ("version 1.2.3.4").
fn preceded_by_version_word(text: &str, start: usize) -> bool {
    let window = crate::text::fold(window_before(text, start, 16));
    let w = window.trim_end();
    let w = w.strip_suffix(':').unwrap_or(w).trim_end();
    [
        "version", "ver.", "ver", "v", "release", "build", "firmware",
    ]
    .iter()
    .any(|k| {
        w.ends_with(k)
            && !w[..w.len() - k.len()]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
    }) || text[..start].ends_with('v')
}

/// Finds URLs with `user:password@` in their authority.
pub struct CredentialUrlRecognizer {
    pattern: Regex,
}

impl CredentialUrlRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        CredentialUrlRecognizer {
            pattern: re(
                r#"(?i)(?-u:\b)[a-z][a-z0-9+.\-]{1,20}://[^\s:/@"'<>]+:[^\s/@"'<>]+@[^\s/?#"'<>]+[^\s"'<>]*"#,
            ),
        }
    }
}

impl Default for CredentialUrlRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Recognizer for CredentialUrlRecognizer {
    fn name(&self) -> &'static str {
        "credential-url"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::CredentialUrl]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        for m in self.pattern.find_iter(text) {
            let mut end = m.end();
            while end > m.start()
                && matches!(
                    text.as_bytes()[end - 1],
                    b'.' | b',' | b';' | b':' | b')' | b'!' | b'?' | b']' | b'}'
                )
            {
                end -= 1;
            }
            out.push(Detection::new(
                EntityKind::CredentialUrl,
                m.start(),
                end,
                0.99,
                self.name(),
            ));
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
    fn ips() {
        let r = IpRecognizer::new();
        assert_eq!(
            find(&r, "from 192.168.1.20, and 2001:db8::8a2e:370:7334."),
            ["192.168.1.20", "2001:db8::8a2e:370:7334"]
        );
        assert_eq!(find(&r, "fe80::1 up"), ["fe80::1"]);
        assert_eq!(find(&r, "kam von IP 10.1.2.3."), ["10.1.2.3"]);
        assert!(find(&r, "version 1.2.3.4 and 1.2.3.4.5 at 12:30:45 std::fmt").is_empty());
        assert!(find(&r, "mac 00:1a:2b:3c:4d:5e").is_empty());
    }

    #[test]
    fn credential_urls() {
        let r = CredentialUrlRecognizer::new();
        assert_eq!(
            find(
                &r,
                "DATABASE_URL=postgres://app:s3cr3t@db.internal:5432/app."
            ),
            ["postgres://app:s3cr3t@db.internal:5432/app"]
        );
        assert!(find(&r, "see https://example.com/a:b").is_empty());
    }
}
