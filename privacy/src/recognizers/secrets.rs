//! Credentials: vendor key formats, JWTs, PEM private keys, and values assigned to
//! password/token/secret-like names (`password=...`, `"api_key": "..."`, `Bearer ...`).
//!
//! Vendor formats are specific enough to stand alone. Assigned values are accepted when
//! they do not look like a reference (`${VAR}`, `os.environ[...]`, `<redacted>`, `***`)
//! and, for token/key names, when they look random (length and character entropy).

use regex::Regex;

use super::{re, Recognizer};
use crate::entity::{Detection, EntityKind};
use crate::text::entropy;

/// Finds secrets.
pub struct SecretRecognizer {
    vendor: Vec<(Regex, f32)>,
    jwt: Regex,
    pem_begin: Regex,
    pem_end: Regex,
    assignment: Regex,
    prose: Regex,
    auth_header: Regex,
}

impl SecretRecognizer {
    /// A new recognizer.
    pub fn new() -> Self {
        let vendor = [
            // Anthropic.
            r"(?-u:\b)sk-ant-[a-z0-9]{2,12}-[A-Za-z0-9_\-]{32,}",
            // OpenAI (legacy, project, service account, admin).
            r"(?-u:\b)sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}",
            // GitHub.
            r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{36,255}(?-u:\b)",
            r"(?-u:\b)github_pat_[A-Za-z0-9_]{50,255}(?-u:\b)",
            // GitLab.
            r"(?-u:\b)gl(?:pat|dt|rt|ptt|ft|soat|agent|oas|cbt|imt|ffct)-[A-Za-z0-9_\-]{20,}",
            // Slack tokens and webhooks.
            r"(?-u:\b)xox[abposr]-[A-Za-z0-9\-]{10,}",
            r"https://hooks\.slack\.com/services/[A-Za-z0-9_/\-]{20,}",
            // Stripe secret, restricted and webhook keys.
            r"(?-u:\b)(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}(?-u:\b)",
            r"(?-u:\b)whsec_[A-Za-z0-9]{24,}(?-u:\b)",
            // AWS access key ids.
            r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?-u:\b)",
            // Google API keys.
            r"(?-u:\b)AIza[0-9A-Za-z_\-]{35}(?-u:\b)",
            // Hugging Face tokens.
            r"(?-u:\b)hf_[A-Za-z0-9]{30,}(?-u:\b)",
        ]
        .into_iter()
        .map(|p| (re(p), 0.99))
        .collect();
        SecretRecognizer {
            vendor,
            jwt: re(r"(?-u:\b)eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
            pem_begin: re(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
            pem_end: re(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
            // A name containing a credential word, then `:`, `=`, `:=`, `=>` or `->`.
            assignment: re(
                r#"(?i)([A-Za-z0-9_.\-]*(?:passw(?:or)?d|passwort|kennwort|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|token|credential|auth)[A-Za-z0-9_.\-]*|mot de passe|mdp|password)["']?[ \t]*(?::=|=>|->|=|:)[ \t]*"#,
            ),
            prose: re(
                r"(?i)(?-u:\b)(?:password|passwort|kennwort|mot de passe|pin|passcode|token|api key)[ \t]+(?:(?:ist|is|lautet|est|was|war)(?-u:\b)[ \t]*:?|:)[ \t]*",
            ),
            auth_header: re(r"(?i)(?-u:\b)(?:bearer|token|basic)[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)"),
        }
    }
}

impl Default for SecretRecognizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Words for names whose values should look random to count (keys and tokens).
fn is_key_like(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !(n.contains("pass") || n.contains("pwd") || n.contains("kennwort") || n == "mdp")
}

/// Reads the assigned value starting at `start`: quoted (up to the closing quote on the
/// same line) or bare (up to whitespace, less trailing punctuation and unbalanced closing
/// brackets). Returns its byte range.
fn read_value(text: &str, start: usize) -> Option<(usize, usize)> {
    let rest = &text[start..];
    let first = rest.chars().next()?;
    if first == '"' || first == '\'' || first == '`' {
        let body = &rest[1..];
        let close = body.find([first, '\n'])?;
        if body[close..].starts_with('\n') {
            return None;
        }
        return Some((start + 1, start + 1 + close));
    }
    let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let mut end = start + len;
    loop {
        let value = &text[start..end];
        let Some(last) = value.chars().next_back() else {
            break;
        };
        let unbalanced = |open: char, close: char| {
            last == close && value.matches(open).count() < value.matches(close).count()
        };
        if matches!(last, '.' | '!' | '?' | ':' | ',' | ';' | '"' | '\'' | '`')
            || unbalanced('(', ')')
            || unbalanced('[', ']')
            || unbalanced('{', '}')
        {
            end -= last.len_utf8();
        } else {
            break;
        }
    }
    Some((start, end))
}

/// Whether an assigned value is a reference or filler rather than a secret.
fn is_non_secret_value(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    let first = v.chars().next().unwrap_or(' ');
    let last = v.chars().next_back().unwrap_or(' ');
    let wrapped = matches!(
        (first, last),
        ('{', '}') | ('<', '>') | ('[', ']') | ('(', ')')
    );
    let variable = first == '$'
        && v[1..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        || v.starts_with("${")
        || v.starts_with("$(")
        || v.starts_with("{{")
        || v.starts_with("%(")
        || v.starts_with("%{")
        || v.starts_with("%s");
    wrapped
        || variable
        || v.chars().all(|c| c == first)
        || lower.starts_with("os.")
        || lower.starts_with("process.env")
        || lower.starts_with("env(")
        || lower.starts_with("env.")
        || lower.starts_with("getenv")
        || lower.starts_with("settings.")
        || lower.starts_with("config.")
        || lower.starts_with("self.")
        || lower.starts_with("this.")
        || lower.contains("redacted")
        || lower.contains("xxxx")
        || lower.contains("****")
        || matches!(
            lower.as_str(),
            "null"
                | "none"
                | "nil"
                | "true"
                | "false"
                | "undefined"
                | "required"
                | "optional"
                | "string"
                | "str"
                | "int"
                | "bool"
                | "bytes"
                | "secret"
                | "password"
                | "token"
                | "your_password"
                | "your-password"
                | "your_token"
                | "changeit"
                | "example"
                | "value"
                | "empty"
                | "hidden"
                | "masked"
                | "yes"
                | "no"
                | "ok"
                | "the"
                | "a"
                | "an"
                | "is"
                | "was"
                | "reset"
                | "expired"
                | "invalid"
                | "missing"
                | "wrong"
                | "incorrect"
                | "new"
                | "old"
                | "same"
                | "field"
                | "input"
                | "bearer"
        )
}

/// Whether a credential word is a whole part of `name` (split at `_ - .`, spaces and
/// lower-to-upper case changes): `DB_PASSWORD`, `apiKey`, `access-token`, not `tokenizer`.
fn credential_name_ok(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "passwort",
        "kennwort",
        "secret",
        "apikey",
        "token",
        "credential",
        "credentials",
        "auth",
        "mdp",
        "key",
        "accesskey",
        "secretkey",
        "privatekey",
        "authtoken",
        "accesstoken",
        "refreshtoken",
        "clientsecret",
    ];
    let mut parts: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            if !cur.is_empty() {
                parts.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            parts.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    let lower = name.to_lowercase();
    if lower == "mot de passe" || lower == "password" {
        return true;
    }
    // Single parts, and adjacent pairs joined ("api" + "key").
    parts.iter().any(|p| WORDS.contains(&p.as_str()))
        || parts
            .windows(2)
            .any(|w| WORDS.contains(&format!("{}{}", w[0], w[1]).as_str()))
}

/// Whether a value reads as code (a call or a path) rather than a literal secret.
fn looks_like_code(v: &str) -> bool {
    if v.contains("::") || v.contains("=>") {
        return true;
    }
    // `Tokenizer::new(x)`, `get_token()`, `config.get("x")`.
    let ident_end = v
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(v.len());
    ident_end > 0 && v[ident_end..].starts_with('(') && v.ends_with(')')
}

fn looks_random(v: &str) -> bool {
    let len = v.chars().count();
    let has_digit = v.chars().any(|c| c.is_ascii_digit());
    let has_alpha = v.chars().any(|c| c.is_alphabetic());
    let has_upper = v.chars().any(|c| c.is_uppercase());
    let has_lower = v.chars().any(|c| c.is_lowercase());
    let classes = usize::from(has_digit) + usize::from(has_upper) + usize::from(has_lower);
    len >= 12 && entropy(v) >= 3.0 && (classes >= 2 || (has_digit && has_alpha))
        || len >= 20 && entropy(v) >= 3.5
}

fn looks_like_password(v: &str) -> bool {
    let len = v.chars().count();
    if !(4..=128).contains(&len) {
        return false;
    }
    let has_digit = v.chars().any(|c| c.is_ascii_digit());
    let has_symbol = v.chars().any(|c| !c.is_alphanumeric());
    let has_upper_inside = v.chars().skip(1).any(|c| c.is_uppercase());
    has_digit || has_symbol || has_upper_inside || len >= 10
}

impl Recognizer for SecretRecognizer {
    fn name(&self) -> &'static str {
        "secret"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Secret]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        let push = |out: &mut Vec<Detection>, s: usize, e: usize, score: f32| {
            if s < e {
                out.push(Detection::new(EntityKind::Secret, s, e, score, "secret"));
            }
        };
        for (pattern, score) in &self.vendor {
            for m in pattern.find_iter(text) {
                push(out, m.start(), m.end(), *score);
            }
        }
        for m in self.jwt.find_iter(text) {
            if jwt_header_ok(m.as_str()) {
                push(out, m.start(), m.end(), 0.99);
            }
        }
        for begin in self.pem_begin.find_iter(text) {
            let end = match self.pem_end.find_at(text, begin.end()) {
                Some(e) => e.end(),
                // Truncated key: mask through the end of the base64 body.
                None => {
                    let body = &text[begin.end()..];
                    let len = body
                        .find(|c: char| {
                            !(c.is_ascii_alphanumeric()
                                || matches!(c, '+' | '/' | '=' | '\n' | '\r' | ' ' | '\\'))
                        })
                        .unwrap_or(body.len());
                    begin.end() + len
                }
            };
            push(out, begin.start(), end, 1.0);
        }
        for caps in self.assignment.captures_iter(text) {
            let (Some(whole), Some(name)) = (caps.get(0), caps.get(1)) else {
                continue;
            };
            // `==` / `!=` comparisons are not assignments.
            if text[whole.end()..].starts_with('=') || text[..name.start()].ends_with('!') {
                continue;
            }
            // `a::b` paths are not `a: b` assignments; the credential word must be a whole
            // part of the name (`api_key`, `authToken`), not of `tokenizer` or `author`.
            if text[whole.end()..].starts_with(':')
                || text[..whole.end()].trim_end().ends_with("::")
                || !credential_name_ok(name.as_str())
            {
                continue;
            }
            let Some((s, e)) = read_value(text, whole.end()) else {
                continue;
            };
            let value = &text[s..e];
            if value.is_empty() || is_non_secret_value(value) || looks_like_code(value) {
                continue;
            }
            let ok = if is_key_like(name.as_str()) {
                looks_random(value)
            } else {
                looks_like_password(value)
            };
            if ok {
                push(out, s, e, 0.85);
            }
        }
        for m in self.prose.find_iter(text) {
            let Some((s, e)) = read_value(text, m.end()) else {
                continue;
            };
            let value = &text[s..e];
            if !value.is_empty()
                && !is_non_secret_value(value)
                && (looks_like_password(value) && value.chars().any(|c| !c.is_alphabetic())
                    || looks_random(value))
            {
                push(out, s, e, 0.8);
            }
        }
        for caps in self.auth_header.captures_iter(text) {
            if let Some(v) = caps.get(1) {
                if looks_random(v.as_str()) {
                    push(out, v.start(), v.end(), 0.9);
                }
            }
        }
    }
}

/// Whether the first JWT segment decodes to a JSON object naming an algorithm or type.
fn jwt_header_ok(token: &str) -> bool {
    let Some(header) = token.split('.').next() else {
        return false;
    };
    match base64url_decode(header) {
        Some(bytes) => {
            let s = String::from_utf8_lossy(&bytes);
            s.trim_start().starts_with('{') && (s.contains("\"alg\"") || s.contains("\"typ\""))
        }
        None => false,
    }
}

fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        SecretRecognizer::new().recognize(t, &mut out);
        let mut v: Vec<_> = out.iter().map(|d| t[d.start..d.end].to_owned()).collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn vendor_keys() {
        let gh = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        assert_eq!(find(&format!("token {gh} ok")), [gh]);
        let aws = "AKIAIOSFODNN7EXAMPLE";
        assert_eq!(find(&format!("key={aws}")), [aws]);
        let stripe = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";
        assert_eq!(find(stripe), [stripe]);
    }

    #[test]
    fn assignments() {
        assert_eq!(find("password = \"hunter2!\""), ["hunter2!"]);
        assert_eq!(find("DB_PASSWORD=Sommer2024"), ["Sommer2024"]);
        assert_eq!(
            find(r#"{"client_secret": "q8Zr2LmN4pXv7TbK1wYe"}"#),
            ["q8Zr2LmN4pXv7TbK1wYe"]
        );
        assert!(find("password: ${DB_PASSWORD}").is_empty());
        assert!(find("token = os.environ['TOKEN']").is_empty());
        assert!(find("if password == other").is_empty());
        assert!(find("api_key: string").is_empty());
        assert!(find("password: $DB_PASSWORD and token: <your token>").is_empty());
        assert_eq!(find("password: %7Hubnkq&C"), ["%7Hubnkq&C"]);
        assert_eq!(find("password is $)LmfLmd5ZQ7*Sz"), ["$)LmfLmd5ZQ7*Sz"]);
        assert_eq!(find("das Passwort ist z*#CbUq^ag4E*\n"), ["z*#CbUq^ag4E*"]);
        assert_eq!(find("login(password=s3cretPass)"), ["s3cretPass"]);
        assert!(find("let tokenizer = Tokenizer::from_pretrained(x);").is_empty());
        assert!(find("use tokenizers::tokenizer::{Result, Tokenizer};").is_empty());
        assert!(find("let token = get_token_from_env(\"X\");").is_empty());
        assert_eq!(
            find("authToken: 'q8Zr2LmN4pXv7TbK1wYe'"),
            ["q8Zr2LmN4pXv7TbK1wYe"]
        );
    }

    #[test]
    fn jwt_and_pem() {
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(find(&format!("Authorization: {jwt}")), [jwt]);
        let pem =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----";
        assert_eq!(find(&format!("key:\n{pem}\n")), [pem]);
    }
}
