//! Errors of the privacy crate.
//!
//! Recognizing and restoring never fail (any input is valid text); only loading the
//! name gazetteer touches the file system and can fail.

use std::path::PathBuf;

/// Everything that can go wrong in `hearth-privacy`.
#[derive(Debug, thiserror::Error)]
pub enum PrivacyError {
    /// The gazetteer directory or one of its lists is absent.
    #[error(
        "name lists not found at {path}: run `privacy/fetch-data.sh` (or set HEARTH_PRIVACY_DATA \
         to a directory holding given_names.txt and surnames.txt)"
    )]
    GazetteerMissing {
        /// The file that was looked for.
        path: PathBuf,
    },
    /// A gazetteer list exists but could not be read.
    #[error("could not read name list {path}: {source}")]
    GazetteerRead {
        /// The file that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A gazetteer list was read but holds no names.
    #[error("name list {path} is empty: re-run `privacy/fetch-data.sh --force`")]
    GazetteerEmpty {
        /// The empty file.
        path: PathBuf,
    },
}
