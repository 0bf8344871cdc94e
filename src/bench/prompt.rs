//! Deterministic synthetic prompts of exactly N tokens.
//!
//! Every server in a comparison must see the same prompts, and a prompt of
//! "1 024 tokens" must be 1 024 tokens under the model's tokenizer, not
//! "about 4 KB of text". [`PromptBuilder`] makes plain English-like text from
//! a fixed word list and a seeded generator (SplitMix64: identical on every
//! platform and version), then trims and pads it at word boundaries until the
//! tokenizer counts exactly the requested number of tokens (without special
//! tokens: chat templates and BOS are the server's business and show up in
//! the server's `usage.prompt_tokens`).
//!
//! Prompts with different seeds differ from their first words on, so no two
//! requests of a run share a prefix a server could serve from a prompt cache;
//! the runner gives every request its own seed and gives the same request slot
//! the same seed on every server.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::error::BenchError;

/// A tokenizer plus where it came from (for the report).
pub struct TokenCounter {
    tokenizer: Tokenizer,
    path: PathBuf,
}

impl TokenCounter {
    /// Load `tokenizer.json`, or `<dir>/tokenizer.json` when given a folder.
    pub fn load(path: &Path) -> Result<Self, BenchError> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let tokenizer = Tokenizer::from_file(&file).map_err(|e| BenchError::Tokenizer {
            path: file.clone(),
            message: e.to_string(),
        })?;
        Ok(Self {
            tokenizer,
            path: file,
        })
    }

    /// Wrap an already built tokenizer (tests, embedding callers).
    pub fn from_tokenizer(tokenizer: Tokenizer, label: impl Into<PathBuf>) -> Self {
        Self {
            tokenizer,
            path: label.into(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of tokens in `text`, without special tokens.
    pub fn count(&self, text: &str) -> Result<usize, BenchError> {
        Ok(self.encode(text)?.len())
    }

    fn encode(&self, text: &str) -> Result<tokenizers::Encoding, BenchError> {
        self.tokenizer
            .encode(text, false)
            .map_err(|e| BenchError::Tokenizer {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }
}

/// Everyday words; only the shape of ordinary prose matters, not meaning.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "that",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "their",
    "our",
    "this",
    "which",
    "one",
    "all",
    "were",
    "when",
    "there",
    "can",
    "an",
    "more",
    "time",
    "people",
    "about",
    "many",
    "then",
    "them",
    "some",
    "would",
    "other",
    "into",
    "has",
    "two",
    "like",
    "could",
    "first",
    "water",
    "been",
    "long",
    "little",
    "very",
    "after",
    "words",
    "called",
    "just",
    "where",
    "most",
    "know",
    "through",
    "back",
    "much",
    "before",
    "good",
    "new",
    "great",
    "help",
    "line",
    "right",
    "too",
    "means",
    "old",
    "same",
    "tell",
    "boy",
    "follow",
    "came",
    "want",
    "show",
    "also",
    "around",
    "form",
    "three",
    "small",
    "set",
    "put",
    "end",
    "does",
    "another",
    "well",
    "large",
    "must",
    "big",
    "even",
    "such",
    "because",
    "turn",
    "here",
    "why",
    "asked",
    "went",
    "men",
    "read",
    "need",
    "land",
    "different",
    "home",
    "us",
    "move",
    "try",
    "kind",
    "hand",
    "picture",
    "again",
    "change",
    "off",
    "play",
    "spell",
    "air",
    "away",
    "animal",
    "house",
    "point",
    "page",
    "letter",
    "mother",
    "answer",
    "found",
    "study",
    "still",
    "learn",
    "should",
    "world",
    "high",
    "every",
    "near",
    "add",
    "food",
    "between",
    "own",
    "below",
    "country",
    "plant",
    "last",
    "school",
    "father",
    "keep",
    "tree",
    "never",
    "start",
    "city",
    "earth",
    "eyes",
    "light",
    "thought",
    "head",
    "under",
    "story",
    "saw",
    "left",
    "few",
    "while",
    "along",
    "might",
    "close",
    "something",
    "seemed",
    "next",
    "hard",
    "open",
    "example",
    "begin",
    "life",
    "always",
    "those",
    "both",
    "paper",
    "together",
    "got",
    "group",
    "often",
    "run",
    "important",
    "until",
    "children",
    "side",
    "feet",
    "car",
    "mile",
    "night",
    "walk",
    "white",
    "sea",
    "began",
    "grow",
    "took",
    "river",
    "four",
    "carry",
    "state",
    "once",
    "book",
    "hear",
    "stop",
    "without",
    "second",
    "later",
    "miss",
    "idea",
    "enough",
    "eat",
    "face",
    "watch",
    "far",
    "really",
    "almost",
    "let",
    "above",
    "girl",
    "sometimes",
    "mountains",
    "cut",
    "young",
    "talk",
    "soon",
    "list",
    "song",
    "being",
    "leave",
    "family",
    "garden",
    "market",
    "window",
    "morning",
];

/// Candidate one-token words for padding, tried in this order.
const FILLERS: &[&str] = &["the", "and", "of", "to", "in", "is", "it", "a", "on", "at"];

/// SplitMix64: tiny, well mixed, and stable forever (unlike library RNGs).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Seeded prose: sentences of 6-17 words, capitalised, ending in a period.
fn prose(seed: u64, min_bytes: usize) -> (String, Vec<usize>) {
    let mut rng = SplitMix64(seed ^ 0x4845_4152_5448); // "HEARTH"
    let mut text = String::with_capacity(min_bytes + 64);
    // Byte offsets where a word (with its leading space) starts; cutting
    // there never splits a word.
    let mut word_starts = Vec::new();
    let mut left_in_sentence = 0;
    while text.len() < min_bytes {
        let sentence_start = left_in_sentence == 0;
        if sentence_start {
            left_in_sentence = 6 + rng.below(12);
        }
        let word = WORDS[rng.below(WORDS.len())];
        if !text.is_empty() {
            word_starts.push(text.len());
            text.push(' ');
        }
        if sentence_start {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                text.extend(first.to_uppercase());
                text.push_str(chars.as_str());
            }
        } else {
            text.push_str(word);
        }
        left_in_sentence -= 1;
        if left_in_sentence == 0 {
            text.push('.');
        }
    }
    (text, word_starts)
}

/// Builds exact-length prompts under one tokenizer.
pub struct PromptBuilder<'a> {
    counter: &'a TokenCounter,
}

impl<'a> PromptBuilder<'a> {
    pub fn new(counter: &'a TokenCounter) -> Self {
        Self { counter }
    }

    /// Text of exactly `tokens` tokens (no special tokens), determined by
    /// `seed` and the tokenizer only.
    pub fn build(&self, tokens: usize, seed: u64) -> Result<String, BenchError> {
        let fail = |message: String| BenchError::Prompt {
            wanted: tokens,
            message,
        };
        if tokens == 0 {
            return Err(fail("prompt length must be at least 1".into()));
        }
        // Grow the text until it has more tokens than wanted.
        let mut budget = tokens * 6 + 64;
        let (mut text, word_starts, encoding) = loop {
            let (text, starts) = prose(seed, budget);
            let encoding = self.counter.encode(&text)?;
            if encoding.len() > tokens {
                break (text, starts, encoding);
            }
            if budget > tokens * 64 + 4096 {
                return Err(fail(format!(
                    "{budget} bytes of text are only {} tokens",
                    encoding.len()
                )));
            }
            budget *= 2;
        };
        // Cut at the last word start at or before the first surplus token.
        let surplus_start = encoding.get_offsets()[tokens].0;
        let cut_index = word_starts.partition_point(|&start| start <= surplus_start);
        let mut kept_words = cut_index;
        text.truncate(if cut_index == 0 {
            0
        } else {
            word_starts[cut_index - 1]
        });
        // Pad with one-token words, or drop words, until exact.
        let mut filler = 0usize;
        for _ in 0..64 {
            let count = if text.is_empty() {
                0
            } else {
                self.counter.count(&text)?
            };
            if count == tokens {
                return Ok(text);
            }
            if count < tokens {
                for _ in 0..tokens - count {
                    if !text.is_empty() {
                        text.push(' ');
                    }
                    text.push_str(FILLERS[filler % FILLERS.len()]);
                }
            } else {
                // Too long (tokenizers that merge across spaces): drop a word.
                match text.rfind(' ') {
                    Some(last_space) => text.truncate(last_space),
                    None => text.clear(),
                }
                kept_words = kept_words.saturating_sub(1);
                // A different filler word next time, in case this one merges.
                filler += 1;
            }
        }
        Err(fail(format!(
            "did not converge (tokenizer merges across word boundaries?); {kept_words} words kept"
        )))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A word-level tokenizer over [`WORDS`] (+ fillers, punctuation, [UNK])
    /// as tokenizer.json text, so the tests need no downloaded files.
    pub(crate) fn word_level_json() -> String {
        let mut vocab = serde_json::Map::new();
        let mut add = |w: String| {
            let next = vocab.len();
            vocab.entry(w).or_insert(serde_json::json!(next));
        };
        add("[UNK]".into());
        add(".".into());
        for w in WORDS.iter().chain(FILLERS) {
            add(w.to_string());
            let mut chars = w.chars();
            let first = chars.next().unwrap().to_uppercase().collect::<String>();
            add(first + chars.as_str());
        }
        serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null,
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
        })
        .to_string()
    }

    pub(crate) fn word_level_counter() -> TokenCounter {
        let tokenizer: Tokenizer = word_level_json().parse().expect("word-level tokenizer");
        TokenCounter::from_tokenizer(tokenizer, "word-level (test)")
    }

    /// The real Qwen3 tokenizer fetched by scripts/setup.sh, if present.
    pub(crate) fn qwen3_counter() -> Option<TokenCounter> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".hearth/fixtures/qwen3-tokenizer/tokenizer.json");
        if !path.exists() {
            eprintln!(
                "skipping: {} not found (run scripts/setup.sh)",
                path.display()
            );
            return None;
        }
        Some(TokenCounter::load(&path).expect("qwen3 tokenizer"))
    }

    #[test]
    fn exact_lengths_with_word_level_tokenizer() {
        let counter = word_level_counter();
        let builder = PromptBuilder::new(&counter);
        for n in [1, 2, 3, 7, 64, 100, 257, 1024] {
            let text = builder.build(n, 9).unwrap();
            assert_eq!(counter.count(&text).unwrap(), n, "{n}: {text:?}");
        }
    }

    #[test]
    fn exact_lengths_with_qwen3_tokenizer() {
        let Some(counter) = qwen3_counter() else {
            return;
        };
        let builder = PromptBuilder::new(&counter);
        for (n, seed) in [
            (1, 0),
            (5, 1),
            (64, 2),
            (100, 3),
            (256, 4),
            (1000, 5),
            (4099, 6),
        ] {
            let text = builder.build(n, seed).unwrap();
            assert_eq!(counter.count(&text).unwrap(), n, "n={n} seed={seed}");
            assert!(!text.starts_with(' '));
        }
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        let counter = word_level_counter();
        let builder = PromptBuilder::new(&counter);
        let a = builder.build(200, 1).unwrap();
        assert_eq!(a, builder.build(200, 1).unwrap());
        let b = builder.build(200, 2).unwrap();
        assert_ne!(a, b);
        // Different seeds diverge from the very beginning (no shared prefix
        // for a prompt cache to reuse) with overwhelming probability.
        let prefix = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(prefix < 20, "shared prefix of {prefix} bytes");
        // A longer prompt with the same seed extends the shorter one's prose.
        let long = builder.build(400, 1).unwrap();
        assert!(long.starts_with(&a[..a.rfind(' ').unwrap()]));
    }

    #[test]
    fn zero_tokens_is_an_error() {
        let counter = word_level_counter();
        assert!(PromptBuilder::new(&counter).build(0, 0).is_err());
    }

    #[test]
    fn splitmix_is_stable() {
        // Reference values of SplitMix64 seeded with 0.
        let mut rng = SplitMix64(0);
        assert_eq!(rng.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next(), 0x6E78_9E6A_A1B9_65F4);
    }
}
