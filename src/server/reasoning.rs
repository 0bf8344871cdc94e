//! Splitting a thinking model's output into `reasoning_content` and
//! `content` (Qwen3 and other models that think between `<think>` and
//! `</think>`).
//!
//! Text arrives in arbitrary pieces, so a tag may be cut across pieces:
//! [`ReasoningSplitter`] holds back any suffix that could be the start of the
//! tag it is waiting for and decides once the next piece shows whether it is.
//! The result depends only on the whole text, never on how it was cut (the
//! tests check every cut of a few texts).
//!
//! Rules:
//! * Outside reasoning, `<think>` opens it; inside, `</think>` closes it.
//!   The tags themselves are never emitted.
//! * A chat template may open the think block itself (the prompt ends inside
//!   `<think>`, as templates that force thinking do): then the output starts
//!   inside reasoning; see [`prompt_opens_reasoning`].
//! * Whitespace right after a tag is dropped, and whitespace at the end of
//!   reasoning is held until something other than whitespace follows, so
//!   `<think>\nplan\n</think>\n\nanswer` gives `plan` and `answer`.
//! * A think block left open at the end of generation keeps its text as
//!   reasoning (the model ran out of tokens while thinking).

/// The tags of a thinking model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkTags {
    pub open: String,
    pub close: String,
}

impl Default for ThinkTags {
    fn default() -> Self {
        ThinkTags {
            open: "<think>".into(),
            close: "</think>".into(),
        }
    }
}

/// Whether a rendered prompt leaves a think block open for the model, i.e.
/// its last opening tag is not followed by a closing one.
pub fn prompt_opens_reasoning(prompt: &str, tags: &ThinkTags) -> bool {
    match prompt.rfind(&tags.open) {
        Some(at) => !prompt[at..].contains(&tags.close),
        None => false,
    }
}

/// Text of one step, split by channel.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SplitDelta {
    pub reasoning: String,
    pub content: String,
}

/// Streaming splitter for one generated sequence.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    tags: ThinkTags,
    in_reasoning: bool,
    /// Drop whitespace until the next non-whitespace text (right after a tag).
    skip_whitespace: bool,
    /// Undecided text: a possible tag prefix, or trailing reasoning whitespace.
    held: String,
    /// Whether any reasoning was seen (for `reasoning_content: null` vs "").
    saw_reasoning: bool,
}

impl ReasoningSplitter {
    /// A splitter whose output starts inside reasoning when `starts_in_reasoning`.
    pub fn new(tags: ThinkTags, starts_in_reasoning: bool) -> Self {
        ReasoningSplitter {
            tags,
            in_reasoning: starts_in_reasoning,
            skip_whitespace: starts_in_reasoning,
            held: String::new(),
            saw_reasoning: starts_in_reasoning,
        }
    }

    /// Whether the splitter is inside a think block now.
    pub fn in_reasoning(&self) -> bool {
        self.in_reasoning
    }

    /// Whether the output had a think block at all.
    pub fn saw_reasoning(&self) -> bool {
        self.saw_reasoning
    }

    /// Feeds one piece of text; returns what is decided.
    pub fn push(&mut self, piece: &str) -> SplitDelta {
        let mut out = SplitDelta::default();
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(piece);
        loop {
            if self.skip_whitespace {
                let trimmed = buf.trim_start();
                if trimmed.is_empty() {
                    return out;
                }
                buf = trimmed.to_string();
                self.skip_whitespace = false;
            }
            let tag = if self.in_reasoning {
                &self.tags.close
            } else {
                &self.tags.open
            };
            if let Some(at) = buf.find(tag.as_str()) {
                let before = &buf[..at];
                if self.in_reasoning {
                    out.reasoning.push_str(before.trim_end());
                } else {
                    out.content.push_str(before);
                    self.saw_reasoning = true;
                }
                buf = buf[at + tag.len()..].to_string();
                self.in_reasoning = !self.in_reasoning;
                self.skip_whitespace = true;
                continue;
            }
            // No whole tag: emit all but a suffix that may start one.
            let keep_from = partial_tag_start(&buf, tag);
            let (decided, undecided) = buf.split_at(keep_from);
            if self.in_reasoning {
                // Trailing whitespace waits: it is dropped if the block closes.
                let body = decided.trim_end();
                out.reasoning.push_str(body);
                self.held = format!("{}{}", &decided[body.len()..], undecided);
            } else {
                out.content.push_str(decided);
                self.held = undecided.to_string();
            }
            return out;
        }
    }

    /// The end of generation: everything still held, in its channel.
    pub fn finish(&mut self) -> SplitDelta {
        let held = std::mem::take(&mut self.held);
        let mut out = SplitDelta::default();
        if self.skip_whitespace {
            return out;
        }
        if self.in_reasoning {
            out.reasoning = held.trim_end().to_string();
        } else {
            out.content = held;
        }
        out
    }
}

/// The byte index where the longest suffix of `text` that is a proper prefix
/// of `tag` starts (`text.len()` if none).
fn partial_tag_start(text: &str, tag: &str) -> usize {
    let longest = tag.len().saturating_sub(1).min(text.len());
    for len in (1..=longest).rev() {
        let start = text.len() - len;
        if text.is_char_boundary(start) && tag.starts_with(&text[start..]) {
            return start;
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pieces: &[&str], starts_in_reasoning: bool) -> (String, String) {
        let mut s = ReasoningSplitter::new(ThinkTags::default(), starts_in_reasoning);
        let (mut reasoning, mut content) = (String::new(), String::new());
        for piece in pieces {
            let d = s.push(piece);
            reasoning += &d.reasoning;
            content += &d.content;
        }
        let d = s.finish();
        reasoning += &d.reasoning;
        content += &d.content;
        (reasoning, content)
    }

    /// Every way of cutting `text` in up to three pieces gives `expected`.
    fn check_all_cuts(text: &str, starts_in_reasoning: bool, expected: (&str, &str)) {
        let bounds: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let pieces = [&text[..a], &text[a..b], &text[b..]];
                let got = split_all(&pieces, starts_in_reasoning);
                assert_eq!((got.0.as_str(), got.1.as_str()), expected, "cut {pieces:?}");
            }
        }
    }

    #[test]
    fn splits_think_block_however_cut() {
        check_all_cuts(
            "<think>\nLet me plan.\n</think>\n\nParis.",
            false,
            ("Let me plan.", "Paris."),
        );
    }

    #[test]
    fn template_opened_block() {
        check_all_cuts("plan  a\n</think>\n\nanswer", true, ("plan  a", "answer"));
    }

    #[test]
    fn no_tags_is_all_content() {
        check_all_cuts(
            "Just <b>text</b> < thin",
            false,
            ("", "Just <b>text</b> < thin"),
        );
    }

    #[test]
    fn unclosed_block_stays_reasoning() {
        check_all_cuts("<think>still thinking ", false, ("still thinking", ""));
    }

    #[test]
    fn empty_think_block() {
        check_all_cuts("<think>\n\n</think>\n\nHi", false, ("", "Hi"));
    }

    #[test]
    fn multibyte_text_near_tags() {
        check_all_cuts("<think>é€</think>ü<", false, ("é€", "ü<"));
    }

    #[test]
    fn prompt_detection() {
        let tags = ThinkTags::default();
        assert!(prompt_opens_reasoning(
            "<|im_start|>assistant\n<think>\n",
            &tags
        ));
        assert!(!prompt_opens_reasoning(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n",
            &tags
        ));
        assert!(!prompt_opens_reasoning("<|im_start|>assistant\n", &tags));
    }
}
