//! Text out of the documents a user attaches in chat: PDF (`pdf-extract`),
//! DOCX (the `zip` crate + a small scanner of `word/document.xml`),
//! Markdown, plain text and code (UTF-8). Everything runs locally.
//!
//! The kind comes from the file's magic bytes first (`%PDF-`, a zip with
//! `word/document.xml`), then its extension; anything else must be UTF-8
//! text without NUL bytes. Malformed files are errors, never panics: the PDF
//! parser is run under `catch_unwind` because some inputs make it panic.

use std::io::{Cursor, Read};

/// What a document turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentKind {
    Pdf,
    Docx,
    Markdown,
    Text,
}

/// The text of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    pub kind: DocumentKind,
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("the file is empty")]
    Empty,
    #[error("cannot read this PDF: {0}")]
    Pdf(String),
    #[error("cannot read this DOCX file: {0}")]
    Docx(String),
    #[error(
        "unsupported file type: expected PDF, DOCX, Markdown, plain text or code (UTF-8); \
         this file is binary or not UTF-8"
    )]
    Unsupported,
    #[error("the document has no text (a scanned PDF needs OCR, which Hearth does not do)")]
    NoText,
}

/// Largest `word/document.xml` read (the XML of a long book is ~50 MiB).
const MAX_DOCX_XML: u64 = 64 << 20;

/// Extracts the text of the file `name` with contents `bytes`.
pub fn extract(name: &str, bytes: &[u8]) -> Result<Extracted, DocumentError> {
    if bytes.is_empty() {
        return Err(DocumentError::Empty);
    }
    let extension = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let (kind, text) = if bytes.starts_with(b"%PDF-") {
        (DocumentKind::Pdf, pdf_text(bytes)?)
    } else if bytes.starts_with(b"PK\x03\x04") {
        (DocumentKind::Docx, docx_text(bytes)?)
    } else {
        let kind = match extension.as_str() {
            "md" | "markdown" => DocumentKind::Markdown,
            _ => DocumentKind::Text,
        };
        (kind, utf8_text(bytes)?)
    };
    let text = tidy(&text);
    if text.trim().is_empty() {
        return Err(DocumentError::NoText);
    }
    Ok(Extracted { kind, text })
}

fn utf8_text(bytes: &[u8]) -> Result<String, DocumentError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.contains(&0) {
        return Err(DocumentError::Unsupported);
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| DocumentError::Unsupported)
}

fn pdf_text(bytes: &[u8]) -> Result<String, DocumentError> {
    let result = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(bytes));
    match result {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(DocumentError::Pdf(e.to_string())),
        Err(_) => Err(DocumentError::Pdf(
            "the PDF parser failed on this file".into(),
        )),
    }
}

fn docx_text(bytes: &[u8]) -> Result<String, DocumentError> {
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| DocumentError::Docx(e.to_string()))?;
    let entry = archive.by_name("word/document.xml").map_err(|_| {
        DocumentError::Docx("no word/document.xml inside (not a Word document)".into())
    })?;
    let mut xml = String::new();
    entry
        .take(MAX_DOCX_XML)
        .read_to_string(&mut xml)
        .map_err(|e| DocumentError::Docx(e.to_string()))?;
    Ok(wordml_text(&xml))
}

/// The text of WordprocessingML: `<w:t>` runs, a newline per paragraph
/// (`</w:p>`), tabs and breaks; XML entities decoded.
pub fn wordml_text(xml: &str) -> String {
    let mut out = String::new();
    let mut rest = xml;
    let mut in_text = false;
    while let Some(open) = rest.find('<') {
        if in_text {
            out.push_str(&decode_entities(&rest[..open]));
        }
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        let tag = &rest[open + 1..open + close];
        let name = tag
            .trim_start_matches('/')
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or("");
        let closing = tag.starts_with('/');
        let self_closing = tag.ends_with('/');
        match name {
            "w:t" => in_text = !closing && !self_closing,
            "w:p" if closing => out.push('\n'),
            "w:tab" => out.push('\t'),
            "w:br" | "w:cr" => out.push('\n'),
            _ => {}
        }
        rest = &rest[open + close + 1..];
    }
    out
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let Some(semi) = after.find(';').filter(|&i| i <= 10) else {
            out.push('&');
            rest = after;
            continue;
        };
        let entity = &after[..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &after[semi + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Unix newlines, no trailing spaces, at most two blank lines in a row.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.replace("\r\n", "\n").replace('\r', "\n").lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 2 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_matches('\n').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_markdown() {
        let e = extract("notes.md", b"\xEF\xBB\xBF# Title\r\n\r\nBody  \r\n").expect("md");
        assert_eq!(e.kind, DocumentKind::Markdown);
        assert_eq!(e.text, "# Title\n\nBody");
        let e = extract("main.rs", "fn main() {}\n// é".as_bytes()).expect("code");
        assert_eq!(e.kind, DocumentKind::Text);
        assert_eq!(e.text, "fn main() {}\n// é");
    }

    #[test]
    fn binary_and_empty_are_refused() {
        assert!(matches!(
            extract("a.bin", b"\x00\x01\x02"),
            Err(DocumentError::Unsupported)
        ));
        assert!(matches!(
            extract("a.txt", b"\xff\xfe"),
            Err(DocumentError::Unsupported)
        ));
        assert!(matches!(extract("a.txt", b""), Err(DocumentError::Empty)));
        assert!(matches!(
            extract("a.txt", b"  \n "),
            Err(DocumentError::NoText)
        ));
    }

    #[test]
    fn broken_pdf_and_docx_are_errors() {
        assert!(matches!(
            extract("a.pdf", b"%PDF-1.4 garbage"),
            Err(DocumentError::Pdf(_))
        ));
        assert!(matches!(
            extract("a.docx", b"PK\x03\x04garbage"),
            Err(DocumentError::Docx(_))
        ));
    }

    #[test]
    fn wordml_paragraphs_tabs_entities() {
        let xml = r#"<w:document><w:body><w:p><w:r><w:t>Fish &amp; chips</w:t></w:r><w:r><w:tab/><w:t xml:space="preserve"> at &#x263A;</w:t></w:r></w:p><w:p><w:r><w:t>Line&lt;2&gt;</w:t><w:br/><w:t>after</w:t></w:r></w:p></w:body></w:document>"#;
        assert_eq!(wordml_text(xml), "Fish & chips\t at ☺\nLine<2>\nafter\n");
    }

    proptest::proptest! {
        /// Arbitrary bytes under any name never panic.
        #[test]
        fn arbitrary_input_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300), pdf in proptest::bool::ANY) {
            let mut data = bytes.clone();
            if pdf {
                data.splice(0..0, b"%PDF-1.5\n".iter().copied());
            }
            let _ = extract("x.pdf", &data);
            let mut zipped = b"PK\x03\x04".to_vec();
            zipped.extend_from_slice(&bytes);
            let _ = extract("x.docx", &zipped);
        }
    }
}
