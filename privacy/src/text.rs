//! Small text helpers shared by the recognizers: folding, word boundaries, context windows.

/// Lower-cases `word` and strips the diacritics of Latin letters (`Müller` → `muller`,
/// `Thérèse` → `therese`, `Straße` → `strasse`), for gazetteer and keyword look-ups.
pub(crate) fn fold(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        fold_char(c, &mut out);
    }
    out
}

fn fold_char(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    let base = match c {
        'À'..='Å' | 'à'..='å' | 'Ā' | 'ā' | 'Ă' | 'ă' | 'Ą' | 'ą' => "a",
        'Æ' | 'æ' => "ae",
        'Ç' | 'ç' | 'Ć' | 'ć' | 'Č' | 'č' => "c",
        'Ð' | 'ð' | 'Ď' | 'ď' | 'Đ' | 'đ' => "d",
        'È'..='Ë' | 'è'..='ë' | 'Ē' | 'ē' | 'Ė' | 'ė' | 'Ę' | 'ę' | 'Ě' | 'ě' => "e",
        'Ì'..='Ï' | 'ì'..='ï' | 'Ī' | 'ī' | 'İ' | 'ı' => "i",
        'Ñ' | 'ñ' | 'Ń' | 'ń' | 'Ň' | 'ň' | 'Ņ' | 'ņ' => "n",
        'Ò'..='Ö' | 'Ø' | 'ò'..='ö' | 'ø' | 'Ō' | 'ō' | 'Ő' | 'ő' => "o",
        'Œ' | 'œ' => "oe",
        'Ù'..='Ü' | 'ù'..='ü' | 'Ū' | 'ū' | 'Ů' | 'ů' | 'Ű' | 'ű' => "u",
        'Ý' | 'ý' | 'ÿ' | 'Ÿ' => "y",
        'ß' | 'ẞ' => "ss",
        'Ś' | 'ś' | 'Š' | 'š' | 'Ş' | 'ş' => "s",
        'Ł' | 'ł' | 'Ľ' | 'ľ' | 'Ļ' | 'ļ' => "l",
        'Ř' | 'ř' => "r",
        'Ť' | 'ť' | 'Ţ' | 'ţ' => "t",
        'Ž' | 'ž' | 'Ż' | 'ż' | 'Ź' | 'ź' => "z",
        'Ğ' | 'ğ' | 'Ģ' | 'ģ' => "g",
        'Ķ' | 'ķ' => "k",
        '’' | 'ʼ' => "'",
        _ => {
            out.extend(c.to_lowercase());
            return;
        }
    };
    out.push_str(base);
}

/// Whether the char before byte `start` and the char at byte `end` are not word characters
/// (letters, digits, `_`), i.e. `text[start..end]` is a whole word or token.
pub(crate) fn is_word_bounded(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
}

#[inline]
pub(crate) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The largest char boundary at or before `i`.
pub(crate) fn floor_boundary(text: &str, mut i: usize) -> usize {
    if i >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Up to `bytes` bytes of text before `start` (on char boundaries).
pub(crate) fn window_before(text: &str, start: usize, bytes: usize) -> &str {
    let from = floor_boundary(text, start.saturating_sub(bytes));
    &text[from..start]
}

/// Whether any of `keywords` (already folded) starts a word of the folded `window`
/// (`tel` matches "Tel.:" and "telephone", not "hotel").
pub(crate) fn has_keyword(window: &str, keywords: &[&str]) -> bool {
    let w = fold(window);
    keywords.iter().any(|k| {
        w.match_indices(k).any(|(i, _)| {
            k.starts_with(|c: char| !c.is_alphanumeric())
                || !w[..i]
                    .chars()
                    .next_back()
                    .is_some_and(char::is_alphanumeric)
        })
    })
}

/// Shannon entropy of `s` in bits per char.
pub(crate) fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding() {
        assert_eq!(fold("Müller"), "muller");
        assert_eq!(fold("Thérèse"), "therese");
        assert_eq!(fold("Straße"), "strasse");
        assert_eq!(fold("ŁUKASZ"), "lukasz");
    }

    #[test]
    fn keywords_start_words() {
        assert!(has_keyword("Tel.: ", &["tel"]));
        assert!(!has_keyword("im Hotel ", &["tel"]));
        assert!(!has_keyword("geprüft und ", &["ruf"]));
    }

    #[test]
    fn windows_respect_boundaries() {
        let t = "héllo wörld";
        assert_eq!(window_before(t, 7, 5), "éllo ");
    }
}
