//! Honest token accounting: the received text bounds what the server may claim.
//!
//! For every response the harness tokenizes what it actually received, with
//! the model's own tokenizer, two ways:
//! - the whole text at once (`text_tokens`): BPE re-encoding finds a short
//!   encoding, so this is (up to a few tokens) a **lower bound** on what was
//!   generated; a server cannot inflate it;
//! - each content event on its own (`event_tokens`): a stream that sends
//!   one token per event encodes back to about one token per event, so this
//!   is an **upper bound** for such streams.
//!
//! The server's `usage.completion_tokens` must lie within those bounds (plus
//! the tolerance). If it does, it is the count used for throughput
//! ([`TokenSource::Usage`], verified); if it does not, or is missing, the
//! harness falls back to the lower bound ([`TokenSource::Text`]) and flags
//! the response. `--count text` ([`CountPolicy::Text`]) always uses the lower
//! bound. Either way a server's claim alone never sets a tok/s figure. The
//! whole-text count bounds only text the tokenizer would itself produce:
//! sampled tokens (the random ones of dummy weights above all) can re-encode
//! longer, so a `usage` below it that one content event per token confirms
//! is counted, the smaller count ([`FlagKind::RetokenizationSurplus`]).
//!
//! The number of content events is checked against the count too: more
//! events than tokens means text is split below token size (per-event rates
//! would be inflated: the phantom 14 000 tok/s pattern); far fewer means
//! tokens are batched per event (inter-token latency is per event; a
//! completion in one event has no decode rate at all). A large gap between
//! the whole-text count and the count used is reported as well: expected for
//! the repetitive output of dummy weights (`"\n\n\n\n"` re-encodes as one
//! token), suspicious for a real model.
//!
//! Softer flags record what makes runs incomparable: no usage, generation
//! ended before `max_tokens`, a prompt size that is not what was sent, no
//! `[DONE]`, a non-streamed answer.

use serde::{Deserialize, Serialize};

use super::{
    config::{Api, Tolerance},
    request::StreamRecord,
};

/// How much a flag undermines the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; numbers stand.
    Info,
    /// Numbers stand but comparisons may be unequal, or need a human look.
    Warning,
    /// A count disagrees: treat the throughput of this server with suspicion.
    Mismatch,
}

/// What was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagKind {
    /// `usage.completion_tokens` outside the bounds the received text allows.
    UsageMismatch,
    /// More content events than tokens.
    ChunkSurplus,
    /// More tokens than `max_tokens`.
    OverGeneration,
    /// Several tokens in one event: no per-token timing.
    SingleChunk,
    /// The whole received text re-encodes to noticeably fewer tokens.
    RetokenizationGap,
    /// The whole received text re-encodes to more tokens than `usage`, which
    /// one content event per token confirms: the smaller count is used.
    RetokenizationSurplus,
    PromptMismatch,
    ShortGeneration,
    NotStreamed,
    MultiTokenChunks,
    MissingUsage,
    NoDoneMarker,
    UnparsableEvents,
    /// The text holds U+FFFD (stray bytes): the lower bound is looser.
    ReplacementChars,
}

impl FlagKind {
    pub fn severity(self) -> Severity {
        match self {
            FlagKind::UsageMismatch
            | FlagKind::ChunkSurplus
            | FlagKind::OverGeneration
            | FlagKind::SingleChunk => Severity::Mismatch,
            FlagKind::RetokenizationGap
            | FlagKind::RetokenizationSurplus
            | FlagKind::PromptMismatch
            | FlagKind::ShortGeneration
            | FlagKind::NotStreamed => Severity::Warning,
            FlagKind::MultiTokenChunks
            | FlagKind::MissingUsage
            | FlagKind::NoDoneMarker
            | FlagKind::UnparsableEvents
            | FlagKind::ReplacementChars => Severity::Info,
        }
    }
}

/// One finding about one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flag {
    pub kind: FlagKind,
    pub severity: Severity,
    pub message: String,
}

impl Flag {
    fn new(kind: FlagKind, message: String) -> Self {
        Self {
            kind,
            severity: kind.severity(),
            message,
        }
    }
}

/// Which count throughput is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountPolicy {
    /// The server's usage when the received text confirms it, else the
    /// whole-text count.
    #[default]
    Verified,
    /// Always the whole-text count (the strict lower bound).
    Text,
}

/// Where a response's token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// `usage.completion_tokens`, confirmed by the received text.
    Usage,
    /// The received text re-encoded as a whole.
    Text,
}

/// The received text counted by the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextCounts {
    /// Whole text encoded at once (lower bound), replacement characters left out.
    pub whole: usize,
    /// Sum over content events encoded one by one.
    pub per_event: usize,
    /// U+FFFD characters in the text: bytes that were not valid UTF-8.
    pub replacement_chars: usize,
}

impl TextCounts {
    /// Counts `text` (the whole answer) and `pieces` (its content events)
    /// with `count`, the model's tokenizer. Replacement characters are left
    /// out of the whole-text count: a generated token holding a stray byte
    /// (common in the random output of dummy weights) reaches the client as
    /// U+FFFD, which re-encodes to several tokens and would lift the lower
    /// bound above what was generated.
    pub fn measure<E>(
        text: &str,
        pieces: &[String],
        count: impl Fn(&str) -> Result<usize, E>,
    ) -> Result<Self, E> {
        let replacement_chars = text.matches('\u{FFFD}').count();
        let whole = if replacement_chars == 0 {
            count(text)?
        } else {
            count(&text.replace('\u{FFFD}', ""))?
        };
        let mut per_event = 0;
        for piece in pieces {
            per_event += count(piece)?;
        }
        Ok(TextCounts {
            whole,
            per_event,
            replacement_chars,
        })
    }
}

/// What a response is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Expectation {
    pub api: Api,
    /// Tokens in the prompt text we sent (no template, no BOS).
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    pub tolerance: Tolerance,
    pub policy: CountPolicy,
}

/// The outcome of [`cross_check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Generated tokens, as used for every rate.
    pub tokens: usize,
    pub source: TokenSource,
    pub flags: Vec<Flag>,
}

/// Most tokens a chat template may add around one user message before the
/// server's `usage.prompt_tokens` is flagged.
pub const CHAT_TEMPLATE_ALLOWANCE: usize = 256;

/// Cross-check one finished (successful) response.
pub fn cross_check(record: &StreamRecord, counts: TextCounts, expect: &Expectation) -> Checked {
    let mut flags = Vec::new();
    let tolerance = expect.tolerance;
    let lower = counts.whole;
    let upper = counts.per_event.max(counts.whole);
    let usage = record.usage_completion_tokens.map(|u| u as usize);
    if counts.replacement_chars > 0 {
        flags.push(Flag::new(
            FlagKind::ReplacementChars,
            format!(
                "{} replacement characters (bytes that are not UTF-8, normal for dummy \
                 weights) left out of the whole-text count",
                counts.replacement_chars
            ),
        ));
    }
    let events = record.content_times.len();
    let within = |u: usize| u + tolerance.allowed(lower) >= lower;
    let below_upper = |u: usize| u <= upper + tolerance.allowed(upper);
    // Below the whole-text count, but no fewer than the content events (each
    // carries at least one token): a sequence of sampled tokens need not be
    // the tokenizer's own encoding of its text (random tokens of dummy
    // weights cross pre-tokenizer boundaries and re-encode longer), so the
    // whole-text count is a lower bound only for text the tokenizer would
    // produce. Counting `usage` then takes the smaller of the two counts:
    // it cannot inflate a rate.
    let confirmed_by_events = |u: usize| u > 0 && u + tolerance.allowed(u) >= events;
    let verified = usage.filter(|&u| below_upper(u) && (within(u) || confirmed_by_events(u)));
    if let Some(u) = verified.filter(|&u| !within(u)) {
        flags.push(Flag::new(
            FlagKind::RetokenizationSurplus,
            format!(
                "the received text re-encodes to {lower} tokens, more than the {u} \
                 generated that {events} content events confirm: sampled tokens that are \
                 not the tokenizer's own encoding (normal for dummy weights); counted {u}"
            ),
        ));
    }
    match (usage, verified) {
        (Some(u), None) => flags.push(Flag::new(
            FlagKind::UsageMismatch,
            format!(
                "usage.completion_tokens={u} but the received text is {lower} tokens \
                 ({upper} counted event by event)"
            ),
        )),
        (None, _) => flags.push(Flag::new(
            FlagKind::MissingUsage,
            "no usage in the stream (stream_options.include_usage ignored); \
             counted from the received text"
                .into(),
        )),
        _ => {}
    }
    let (tokens, source) = match (verified, expect.policy) {
        (Some(u), CountPolicy::Verified) => (u, TokenSource::Usage),
        _ => (lower, TokenSource::Text),
    };
    if let Some(u) = usage.filter(|&u| u > expect.max_tokens) {
        flags.push(Flag::new(
            FlagKind::OverGeneration,
            format!(
                "usage.completion_tokens={u} exceeds max_tokens={}",
                expect.max_tokens
            ),
        ));
    }
    if source == TokenSource::Usage && lower + tolerance.allowed(tokens) < tokens {
        flags.push(Flag::new(
            FlagKind::RetokenizationGap,
            format!(
                "the received text re-encodes to {lower} tokens, {tokens} generated \
                 ({} event by event): normal for repetitive dummy-model output, \
                 suspicious for a real model",
                counts.per_event
            ),
        ));
    }
    if events > tokens + tolerance.allowed(tokens) {
        flags.push(Flag::new(
            FlagKind::ChunkSurplus,
            format!("{events} content events for {tokens} tokens: events are smaller than tokens"),
        ));
    }
    if tokens > 1 && events <= 1 {
        flags.push(Flag::new(
            FlagKind::SingleChunk,
            format!("{tokens} tokens arrived in {events} event(s): no per-token timing exists"),
        ));
    } else if tokens > 1 && events + tolerance.allowed(tokens) < tokens {
        flags.push(Flag::new(
            FlagKind::MultiTokenChunks,
            format!(
                "{events} content events for {tokens} tokens: inter-token latency is per event"
            ),
        ));
    }
    let generated = usage.unwrap_or(tokens);
    if generated + tolerance.allowed(expect.max_tokens) < expect.max_tokens {
        flags.push(Flag::new(
            FlagKind::ShortGeneration,
            format!(
                "generated {generated} of max_tokens={} (finish_reason {}); \
                 the server may not support ignore_eos",
                expect.max_tokens,
                record.finish_reason.as_deref().unwrap_or("none")
            ),
        ));
    }
    if let Some(prompt) = record.usage_prompt_tokens {
        let prompt = prompt as usize;
        let sent = expect.prompt_tokens;
        let plausible = match expect.api {
            // The server may add a BOS token.
            Api::Completions => prompt.abs_diff(sent) <= 2,
            Api::Chat => prompt >= sent && prompt <= sent + CHAT_TEMPLATE_ALLOWANCE,
        };
        if !plausible {
            flags.push(Flag::new(
                FlagKind::PromptMismatch,
                format!("usage.prompt_tokens={prompt} for a prompt of {sent} tokens"),
            ));
        }
    }
    if record.not_streamed {
        flags.push(Flag::new(
            FlagKind::NotStreamed,
            "the server answered with one JSON body instead of a stream".into(),
        ));
    } else if !record.done_marker {
        flags.push(Flag::new(
            FlagKind::NoDoneMarker,
            "the stream ended without data: [DONE]".into(),
        ));
    }
    if record.unparsable_events > 0 {
        flags.push(Flag::new(
            FlagKind::UnparsableEvents,
            format!(
                "{} events were neither JSON nor [DONE]",
                record.unparsable_events
            ),
        ));
    }
    Checked {
        tokens,
        source,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn record(events: usize, usage: Option<u64>, prompt: Option<u64>) -> StreamRecord {
        StreamRecord {
            content_times: (0..events)
                .map(|i| Duration::from_millis(i as u64))
                .collect(),
            usage_completion_tokens: usage,
            usage_prompt_tokens: prompt,
            done_marker: true,
            finish_reason: Some("length".into()),
            ..Default::default()
        }
    }

    fn expect(max_tokens: usize) -> Expectation {
        Expectation {
            api: Api::Chat,
            prompt_tokens: 100,
            max_tokens,
            tolerance: Tolerance::default(),
            policy: CountPolicy::Verified,
        }
    }

    fn counts(whole: usize, per_event: usize) -> TextCounts {
        TextCounts {
            whole,
            per_event,
            replacement_chars: 0,
        }
    }

    /// A stand-in tokenizer for `measure`: one token per character, except
    /// that U+FFFD costs three (as its bytes do in a byte-level BPE).
    fn chars(text: &str) -> Result<usize, ()> {
        Ok(text
            .chars()
            .map(|c| if c == '\u{FFFD}' { 3 } else { 1 })
            .sum())
    }

    #[test]
    fn replacement_characters_do_not_lift_the_lower_bound() {
        // Seven tokens generated: "a", "b", four stray bytes, "c".
        let text = "ab\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}c";
        let mut pieces = vec!["ab".to_string()];
        pieces.extend(std::iter::repeat_n("\u{FFFD}".to_string(), 4));
        pieces.push("c".into());
        let m = TextCounts::measure(text, &pieces, chars).unwrap();
        assert_eq!((m.whole, m.per_event, m.replacement_chars), (3, 15, 4));
        let c = cross_check(&record(7, Some(7), Some(110)), m, &expect(7));
        assert_eq!((c.tokens, c.source), (7, TokenSource::Usage));
        assert!(kinds(&c).contains(&FlagKind::ReplacementChars));
        assert!(!kinds(&c).contains(&FlagKind::UsageMismatch));
        // Counted as the tokenizer encodes it, U+FFFD would put the lower
        // bound (15) far above the 7 tokens generated: only the seven events
        // would then confirm the usage (a retokenization surplus) ...
        let naive = counts(chars(text).unwrap(), 15);
        let c = cross_check(&record(7, Some(7), Some(110)), naive, &expect(7));
        assert!(kinds(&c).contains(&FlagKind::RetokenizationSurplus));
        assert_eq!(c.tokens, 7);
        // ... and a usage below the events a mismatch.
        let c = cross_check(&record(7, Some(4), Some(110)), naive, &expect(7));
        assert!(kinds(&c).contains(&FlagKind::UsageMismatch));
        // (Within the true bounds, it is more events than tokens.)
        let c = cross_check(&record(7, Some(4), Some(110)), m, &expect(7));
        assert!(kinds(&c).contains(&FlagKind::ChunkSurplus));
    }

    fn kinds(checked: &Checked) -> Vec<FlagKind> {
        checked.flags.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn consistent_stream_is_verified_and_clean() {
        let c = cross_check(
            &record(64, Some(64), Some(110)),
            counts(64, 64),
            &expect(64),
        );
        assert_eq!((c.tokens, c.source), (64, TokenSource::Usage));
        assert!(c.flags.is_empty(), "{:?}", c.flags);
        // Small re-tokenization differences are tolerated.
        let c = cross_check(
            &record(63, Some(64), Some(110)),
            counts(62, 65),
            &expect(64),
        );
        assert!(c.flags.is_empty(), "{:?}", c.flags);
    }

    #[test]
    fn usage_above_what_the_text_allows_is_flagged_and_ignored() {
        // The server claims 640 tokens but sent text worth 64.
        let c = cross_check(
            &record(64, Some(640), Some(110)),
            counts(64, 64),
            &expect(640),
        );
        assert_eq!(kinds(&c), [FlagKind::UsageMismatch]);
        assert_eq!((c.tokens, c.source), (64, TokenSource::Text));
        assert_eq!(c.flags[0].severity, Severity::Mismatch);
        // And below the text.
        let c = cross_check(
            &record(64, Some(10), Some(110)),
            counts(64, 64),
            &expect(64),
        );
        assert!(kinds(&c).contains(&FlagKind::UsageMismatch));
        assert_eq!(c.tokens, 64);
    }

    #[test]
    fn text_that_re_encodes_longer_than_the_tokens_sent_counts_the_usage() {
        // 256 random tokens, one per event, whose text re-encodes to 273
        // (seen for every server on dummy weights at 8–16 streams).
        let c = cross_check(
            &record(256, Some(256), Some(110)),
            counts(273, 290),
            &expect(256),
        );
        assert_eq!((c.tokens, c.source), (256, TokenSource::Usage));
        assert_eq!(kinds(&c), [FlagKind::RetokenizationSurplus]);
        assert_eq!(c.flags[0].severity, Severity::Warning);
        // Fewer tokens claimed than events received: a mismatch, counted
        // from the text.
        let c = cross_check(
            &record(256, Some(200), Some(110)),
            counts(273, 290),
            &expect(256),
        );
        assert!(kinds(&c).contains(&FlagKind::UsageMismatch));
        assert!(!kinds(&c).contains(&FlagKind::RetokenizationSurplus));
        assert_eq!((c.tokens, c.source), (273, TokenSource::Text));
        // Above the per-event bound stays a mismatch too.
        let c = cross_check(
            &record(256, Some(400), Some(110)),
            counts(273, 290),
            &expect(400),
        );
        assert!(kinds(&c).contains(&FlagKind::UsageMismatch));
        assert!(!kinds(&c).contains(&FlagKind::RetokenizationSurplus));
        // The strict policy still counts the whole text.
        let strict = Expectation {
            policy: CountPolicy::Text,
            ..expect(256)
        };
        let c = cross_check(
            &record(256, Some(256), Some(110)),
            counts(273, 290),
            &strict,
        );
        assert_eq!((c.tokens, c.source), (273, TokenSource::Text));
    }

    #[test]
    fn more_events_than_tokens_is_flagged() {
        // Phantom throughput: every character its own event.
        let c = cross_check(&record(300, None, Some(110)), counts(64, 300), &expect(64));
        assert_eq!(kinds(&c), [FlagKind::MissingUsage, FlagKind::ChunkSurplus]);
        assert_eq!(c.tokens, 64);
    }

    #[test]
    fn repetitive_text_is_verified_per_event_but_noted() {
        // 64 "\n" tokens re-encode as a handful of tokens as a whole.
        let c = cross_check(&record(64, Some(64), Some(110)), counts(8, 64), &expect(64));
        assert_eq!((c.tokens, c.source), (64, TokenSource::Usage));
        assert_eq!(kinds(&c), [FlagKind::RetokenizationGap]);
        // The strict policy uses the lower bound instead.
        let strict = Expectation {
            policy: CountPolicy::Text,
            ..expect(64)
        };
        let c = cross_check(&record(64, Some(64), Some(110)), counts(8, 64), &strict);
        assert_eq!((c.tokens, c.source), (8, TokenSource::Text));
        assert!(kinds(&c).contains(&FlagKind::ChunkSurplus));
    }

    #[test]
    fn batched_events_and_single_chunk() {
        let c = cross_check(
            &record(16, Some(64), Some(110)),
            counts(64, 64),
            &expect(64),
        );
        assert_eq!(kinds(&c), [FlagKind::MultiTokenChunks]);
        let c = cross_check(&record(1, Some(64), Some(110)), counts(64, 64), &expect(64));
        assert_eq!(kinds(&c), [FlagKind::SingleChunk]);
    }

    #[test]
    fn soft_flags() {
        let mut r = record(10, None, Some(5));
        r.done_marker = false;
        r.finish_reason = Some("stop".into());
        let c = cross_check(&r, counts(10, 10), &expect(64));
        assert_eq!(
            kinds(&c),
            [
                FlagKind::MissingUsage,
                FlagKind::ShortGeneration,
                FlagKind::PromptMismatch,
                FlagKind::NoDoneMarker
            ]
        );
        let completions = Expectation {
            api: Api::Completions,
            ..expect(10)
        };
        let ok = cross_check(
            &record(10, Some(10), Some(101)),
            counts(10, 10),
            &completions,
        );
        assert!(ok.flags.is_empty());
        let off = cross_check(
            &record(10, Some(10), Some(120)),
            counts(10, 10),
            &completions,
        );
        assert_eq!(kinds(&off), [FlagKind::PromptMismatch]);
    }
}
