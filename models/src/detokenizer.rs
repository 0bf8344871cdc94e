//! Streaming detokenization: token ids in, text out, as soon as the text is final.
//!
//! Decoding token by token and concatenating does not give the text of the whole sequence:
//! byte-level BPE tokens can hold part of a UTF-8 character, and SentencePiece-style decoders
//! drop the leading space of the first token of whatever they are given. [`StreamDecoder`] keeps
//! a small window of recent tokens and emits the difference between decodings of that window:
//!
//! - The window is `[context tokens | new tokens]`. The context tokens' text was emitted already;
//!   they are decoded together with the new tokens only so the decoder sees the same neighbours
//!   as in the full sequence, and their text (`baseline`) is cut off the front of the result.
//! - Text ending in U+FFFD is held back: it is (or may be) an unfinished character whose
//!   remaining bytes are in tokens not seen yet. Everything before it is emitted.
//! - Once the window's text is emitted in full, the new tokens become the next context and the
//!   old context is dropped, so each step decodes a few tokens, not the whole history
//!   (amortised O(1) per token).
//!
//! Invariant: the concatenation of every [`StreamDecoder::push`] result and
//! [`StreamDecoder::finish`] equals `tokenizer.decode(all_ids)`, and no chunk contains a U+FFFD
//! that the full decoding lacks. This holds whenever decoding is prefix-stable, which is the
//! case for byte-level BPE (lossy UTF-8 over the concatenated bytes) and for SentencePiece
//! decoders on valid UTF-8. The one known exception is SentencePiece byte-fallback output that
//! is not valid UTF-8: there the whole run of byte tokens turns into U+FFFD after the fact, and
//! the stream keeps the characters it already emitted.

use crate::tokenizer::{Tokenizer, TokenizerError};

/// Drop emitted context tokens once this many have piled up at the front of the window.
const COMPACT_AFTER: usize = 32;

/// Incremental decoder for one generated sequence.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    skip_special_tokens: bool,
    /// The window: `tokens[start..context_end]` is context, `tokens[context_end..]` is new.
    tokens: Vec<u32>,
    start: usize,
    context_end: usize,
    /// The decoding of the window that has been emitted: the context's text, plus any part of
    /// the new tokens' text already sent.
    emitted: String,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder that leaves special tokens out, like `decode(ids, true)`.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Self::with_skip_special_tokens(tokenizer, true)
    }

    /// A decoder whose output concatenates to `decode(ids, skip_special_tokens)`.
    pub fn with_skip_special_tokens(tokenizer: &'a Tokenizer, skip_special_tokens: bool) -> Self {
        StreamDecoder {
            tokenizer,
            skip_special_tokens,
            tokens: Vec::new(),
            start: 0,
            context_end: 0,
            emitted: String::new(),
        }
    }

    /// Adds one token and returns the text that became final (often empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.tokens.push(id);
        let text = self.decode_window()?;
        if !text.starts_with(self.emitted.as_str()) {
            // Decoding is not prefix-stable here (see the module docs); wait for `finish`.
            return Ok(String::new());
        }
        let final_len = text.trim_end_matches('\u{fffd}').len();
        let chunk = if final_len > self.emitted.len() {
            text[self.emitted.len()..final_len].to_owned()
        } else {
            String::new()
        };
        if final_len == text.len() {
            self.advance()?;
        } else if final_len > self.emitted.len() {
            self.emitted.push_str(&chunk);
        }
        Ok(chunk)
    }

    /// Returns whatever is still held back (an unfinished character becomes U+FFFD, as in
    /// `decode`) and resets the decoder for a new sequence.
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        let text = self.decode_window()?;
        let rest = match text.strip_prefix(self.emitted.as_str()) {
            Some(rest) => rest.to_owned(),
            None => {
                // Not prefix-stable: emit what follows the longest common prefix.
                let common = self
                    .emitted
                    .char_indices()
                    .zip(text.chars())
                    .take_while(|((_, a), b)| a == b)
                    .last()
                    .map_or(0, |((index, c), _)| index + c.len_utf8());
                text[common.min(text.len())..].to_owned()
            }
        };
        self.tokens.clear();
        self.start = 0;
        self.context_end = 0;
        self.emitted.clear();
        Ok(rest)
    }

    fn decode_window(&self) -> Result<String, TokenizerError> {
        self.tokenizer
            .decode(&self.tokens[self.start..], self.skip_special_tokens)
    }

    /// The whole window has been emitted: its new tokens become the context.
    fn advance(&mut self) -> Result<(), TokenizerError> {
        self.start = self.context_end;
        self.context_end = self.tokens.len();
        if self.start >= COMPACT_AFTER {
            self.tokens.drain(..self.start);
            self.context_end -= self.start;
            self.start = 0;
        }
        self.emitted = self.tokenizer.decode(
            &self.tokens[self.start..self.context_end],
            self.skip_special_tokens,
        )?;
        Ok(())
    }
}
