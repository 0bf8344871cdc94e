//! Structured output: constrained decoding with `llguidance`.
//!
//! A [`GrammarCompiler`] is built once per loaded model from its tokenizer:
//! it spells every token id as the bytes it produces (GPT-2 byte-level BPE,
//! SentencePiece byte fallback, special tokens behind toktrie's `0xFF`
//! marker so no grammar can produce them) and indexes them in a token trie.
//! [`GrammarCompiler::compile`] turns an [`OutputFormat`] (any JSON object,
//! a JSON schema, or a Lark grammar) into a [`TokenConstraint`]: one
//! sequence's parser state.
//!
//! Per decode step the sampler asks each constrained row for its allowed
//! tokens ([`TokenConstraint::fill_allowed`]), bans the rest with `-inf`
//! logits, and feeds the sampled token back ([`TokenConstraint::advance`]).
//! Once the grammar is complete only the model's end-of-sequence tokens are
//! allowed, so a constrained sequence ends with `finish_reason: stop` and
//! text that the grammar accepts (unless `max_tokens` cuts it short).
//!
//! # Invariants
//!
//! * The mask width is the model's vocabulary (logits width): ids the
//!   tokenizer does not know are padding and never allowed.
//! * A constraint that fails at run time (a parser limit, a token that the
//!   grammar cannot take) never fails the batch: it allows only the
//!   end-of-sequence tokens from then on and logs a warning.
//! * JSON is generated compactly (`,` and `:` separators, no free
//!   whitespace), so a rambling model cannot pad the output with blanks.

use std::{fmt, sync::Arc};

use hearth_models::Tokenizer;
use llguidance::{
    api::{GrammarWithLexer, TopLevelGrammar},
    toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv},
    Matcher, ParserFactory,
};
use serde_json::{json, Value};

/// What a constrained sequence must produce.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputFormat {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema (OpenAI `json_schema`).
    JsonSchema(Value),
    /// Text of a Lark grammar (llguidance's dialect).
    Lark(String),
}

/// Why a grammar could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    /// The tokenizer's vocabulary could not be indexed.
    #[error("cannot index the tokenizer for constrained decoding: {0}")]
    Tokenizer(String),
    /// The schema or grammar is invalid or unsupported (the request's fault).
    #[error("{0}")]
    Grammar(String),
}

/// Per-model grammar compiler: the token trie and llguidance's factory.
pub struct GrammarCompiler {
    factory: ParserFactory,
    vocab_size: usize,
    eos_token_ids: Vec<u32>,
}

impl fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    /// Indexes `tokenizer` for a model whose logits are `vocab_size` wide
    /// and which ends a sequence with any of `eos_token_ids`.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        vocab_size: usize,
        eos_token_ids: &[u32],
    ) -> Result<Self, ConstraintError> {
        let words = token_bytes(&tokenizer, vocab_size)?;
        let vocab = u32::try_from(words.len())
            .map_err(|_| ConstraintError::Tokenizer("vocabulary too large".into()))?;
        let eos: Vec<u32> = eos_token_ids
            .iter()
            .copied()
            .filter(|&t| t < vocab)
            .collect();
        let Some(&first_eos) = eos.first() else {
            return Err(ConstraintError::Tokenizer(
                "the model has no end-of-sequence token inside its vocabulary".into(),
            ));
        };
        let info = TokRxInfo::new(vocab, first_eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        let env: TokEnv = Arc::new(TrieEnv { trie, tokenizer });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| ConstraintError::Tokenizer(e.to_string()))?;
        factory.quiet();
        Ok(GrammarCompiler {
            factory,
            vocab_size: words.len(),
            eos_token_ids: eos,
        })
    }

    /// The width of the masks this compiler's constraints produce.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Compiles `format`; each sequence starts its own state from the result.
    pub fn compile(&self, format: &OutputFormat) -> Result<CompiledGrammar, ConstraintError> {
        let grammar = match format {
            OutputFormat::JsonObject => json_grammar(json!({"type": "object"}))?,
            OutputFormat::JsonSchema(schema) => json_grammar(schema.clone())?,
            OutputFormat::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ConstraintError::Grammar(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(error) = matcher.get_error() {
            return Err(ConstraintError::Grammar(error));
        }
        Ok(CompiledGrammar {
            initial: Arc::new(TokenConstraint {
                matcher,
                eos_token_ids: self.eos_token_ids.clone(),
                failed: false,
            }),
        })
    }
}

/// A compiled grammar, cheap to clone; [`CompiledGrammar::start`] gives one
/// sequence its own parser state. Two values are equal when they come from
/// the same compilation.
#[derive(Clone, Debug)]
pub struct CompiledGrammar {
    initial: Arc<TokenConstraint>,
}

impl PartialEq for CompiledGrammar {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.initial, &other.initial)
    }
}

impl CompiledGrammar {
    /// A fresh parser state for one sequence (lexer caches are shared).
    pub fn start(&self) -> TokenConstraint {
        (*self.initial).clone()
    }
}

/// A JSON schema as a grammar with compact separators. A boolean schema
/// `true` is any JSON value; `false` matches nothing.
fn json_grammar(schema: Value) -> Result<TopLevelGrammar, ConstraintError> {
    let mut schema = match schema {
        Value::Bool(true) => json!({}),
        Value::Object(_) => schema,
        Value::Bool(false) => {
            return Err(ConstraintError::Grammar(
                "the schema `false` matches nothing".into(),
            ))
        }
        other => {
            return Err(ConstraintError::Grammar(format!(
                "a JSON schema must be an object or a boolean, got {other}"
            )))
        }
    };
    if let Value::Object(map) = &mut schema {
        map.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"}),
        );
    }
    Ok(TopLevelGrammar::from_grammar(
        GrammarWithLexer::from_json_schema(schema),
    ))
}

/// One sequence's grammar state.
#[derive(Clone)]
pub struct TokenConstraint {
    matcher: Matcher,
    eos_token_ids: Vec<u32>,
    /// The parser failed: only end-of-sequence tokens are allowed.
    failed: bool,
}

impl fmt::Debug for TokenConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenConstraint")
            .field("failed", &self.failed)
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl TokenConstraint {
    /// Writes which tokens may come next into `allowed` (one entry per
    /// vocabulary id; entries past the grammar's vocabulary are `false`).
    pub fn fill_allowed(&mut self, allowed: &mut [bool]) {
        allowed.fill(false);
        if !self.failed {
            match self.matcher.compute_mask_or_eos() {
                Ok(mask) if !mask.is_zero() => {
                    let words = mask.as_slice();
                    for (word_index, &word) in words.iter().enumerate() {
                        if word == 0 {
                            continue;
                        }
                        let base = word_index * 32;
                        for bit in 0..32 {
                            if word & (1 << bit) != 0 {
                                if let Some(slot) = allowed.get_mut(base + bit) {
                                    *slot = true;
                                }
                            }
                        }
                    }
                    return;
                }
                Ok(_) => self.fail("the grammar allows no token"),
                Err(e) => self.fail(&e.to_string()),
            }
        }
        for &eos in &self.eos_token_ids {
            if let Some(slot) = allowed.get_mut(eos as usize) {
                *slot = true;
            }
        }
    }

    /// Feeds the token the sequence produced. End-of-sequence tokens end
    /// the sequence and are not fed.
    pub fn advance(&mut self, token: u32) {
        if self.failed || self.eos_token_ids.contains(&token) {
            return;
        }
        if let Err(e) = self.matcher.consume_token(token as TokenId) {
            self.fail(&e.to_string());
        }
    }

    /// Whether the grammar is complete (only end-of-sequence may follow).
    pub fn is_complete(&self) -> bool {
        self.failed || self.matcher.is_stopped()
    }

    fn fail(&mut self, reason: &str) {
        tracing::warn!(
            reason,
            "constrained decoding failed; ending the sequence at the next token"
        );
        self.failed = true;
    }
}

/// The token trie plus the tokenizer, for llguidance's tokenization needs.
struct TrieEnv {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .encode(text, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(text.as_bytes()))
        })
    }
}

/// The bytes every id in `0..vocab_size` stands for. Special tokens (and
/// added tokens spelled `<...>`) get toktrie's special marker; ids the
/// tokenizer does not know become unreachable special placeholders.
fn token_bytes(tokenizer: &Tokenizer, vocab_size: usize) -> Result<Vec<Vec<u8>>, ConstraintError> {
    let inner = tokenizer.inner();
    let mut byte_level = false;
    let mut byte_fallback = false;
    let mut space = None;
    if let Some(decoder) = inner.get_decoder() {
        inspect_decoder(decoder, &mut byte_level, &mut byte_fallback, &mut space);
    }
    if !byte_level && !byte_fallback {
        return Err(ConstraintError::Tokenizer(
            "the tokenizer is neither byte-level BPE nor byte-fallback".into(),
        ));
    }
    let added = inner.get_added_tokens_decoder();
    let known = tokenizer.vocab_size().max(vocab_size);
    let mut words = Vec::with_capacity(known);
    for id in 0..known {
        let id32 = u32::try_from(id).unwrap_or(u32::MAX);
        let special_word = |name: &str| {
            let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
            bytes.extend_from_slice(name.as_bytes());
            bytes
        };
        let word = match (added.get(&id32), inner.id_to_token(id32)) {
            (Some(token), _) => {
                let content = &token.content;
                if token.special || (content.starts_with('<') && content.ends_with('>')) {
                    special_word(content)
                } else {
                    content.as_bytes().to_vec()
                }
            }
            (None, Some(piece)) => {
                if byte_level {
                    byte_level_bytes(&piece).ok_or_else(|| {
                        ConstraintError::Tokenizer(format!(
                            "token {id} ({piece:?}) is outside the byte-level alphabet"
                        ))
                    })?
                } else if let Some(byte) = byte_fallback_byte(&piece) {
                    vec![byte]
                } else {
                    match space {
                        Some(marker) => piece.replace(marker, " ").into_bytes(),
                        None => piece.into_bytes(),
                    }
                }
            }
            (None, None) => special_word(&format!("<[{id}]>")),
        };
        words.push(word);
    }
    // The model's embedding may be larger than the tokenizer; a tokenizer
    // larger than the logits would let the grammar pick ids the model has
    // no logit for, so those are cut.
    words.truncate(vocab_size);
    Ok(words)
}

fn inspect_decoder(
    decoder: &tokenizers::DecoderWrapper,
    byte_level: &mut bool,
    byte_fallback: &mut bool,
    space: &mut Option<char>,
) {
    use tokenizers::DecoderWrapper;
    match decoder {
        DecoderWrapper::ByteLevel(_) => *byte_level = true,
        DecoderWrapper::ByteFallback(_) => *byte_fallback = true,
        DecoderWrapper::Metaspace(_) => {
            if let Ok(v) = serde_json::to_value(decoder) {
                *space = v["replacement"].as_str().and_then(|s| s.chars().next());
            }
        }
        DecoderWrapper::Replace(_) => {
            // SentencePiece's `▁` -> ` `; the pattern is private, read it back.
            if let Ok(v) = serde_json::to_value(decoder) {
                if v["content"].as_str() == Some(" ") {
                    let mut chars = v["pattern"]["String"].as_str().unwrap_or("").chars();
                    if let (Some(c), None) = (chars.next(), chars.next()) {
                        *space = Some(c);
                    }
                }
            }
        }
        DecoderWrapper::Sequence(seq) => {
            for d in seq.get_decoders() {
                inspect_decoder(d, byte_level, byte_fallback, space);
            }
        }
        _ => {}
    }
}

/// Bytes of a byte-level BPE token spelled in GPT-2's printable alphabet:
/// printable Latin-1 bytes stand for themselves, the other 68 byte values
/// were moved to U+0100.. in ascending order.
pub(crate) fn byte_level_bytes(piece: &str) -> Option<Vec<u8>> {
    fn printable(b: u8) -> bool {
        matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
    }
    piece
        .chars()
        .map(|c| {
            let code = u32::from(c);
            if code < 256 {
                let b = code as u8;
                return printable(b).then_some(b);
            }
            let nth = usize::try_from(code.checked_sub(256)?).ok()?;
            (0u8..=255).filter(|&b| !printable(b)).nth(nth)
        })
        .collect()
}

/// SentencePiece byte-fallback tokens look like `<0x0A>`.
pub(crate) fn byte_fallback_byte(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_covers_every_byte_once() {
        let mut seen = [false; 256];
        for code in (0x21u32..0x17F).chain(0xA1..0x100) {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            if let Some(bytes) = byte_level_bytes(&c.to_string()) {
                for b in bytes {
                    seen[b as usize] = true;
                }
            }
        }
        assert!(seen.iter().all(|&s| s), "some byte has no spelling");
        assert_eq!(byte_level_bytes("Ġ"), Some(vec![b' ']));
        assert_eq!(byte_level_bytes("Ċ"), Some(vec![b'\n']));
        assert_eq!(byte_level_bytes("hi"), Some(b"hi".to_vec()));
        assert_eq!(byte_level_bytes("\u{4e2d}"), None);
    }

    #[test]
    fn byte_fallback_pieces() {
        assert_eq!(byte_fallback_byte("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_fallback_byte("<0x0>"), None);
        assert_eq!(byte_fallback_byte("<s>"), None);
    }
}
