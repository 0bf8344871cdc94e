//! Stop strings over streamed text.
//!
//! Generated text arrives in pieces (one detokenized delta per step). A
//! [`StopMatcher`] sits between the detokenizer and the client: it passes on
//! text as soon as that text can no longer be the start of a stop string,
//! holds back the rest, and when a stop string completes it passes on the
//! text before it and reports which stop matched. As in OpenAI's API, the stop
//! string itself is never emitted.
//!
//! # Semantics
//!
//! The stop that fires is the one that *completes first* in the text: the
//! earliest end position; among stops ending at the same position, the one
//! starting first (the longest); then the lowest index. Emitted text is
//! everything before that stop's start. This depends only on the whole text,
//! never on how it was cut into pieces, which the property tests check.
//!
//! # Invariants
//!
//! * The held-back text is the longest suffix of the text seen so far that is
//!   a proper prefix of some stop string, so it is shorter than the longest
//!   stop, and no stop string occurs in it.
//! * Emitted text is always whole UTF-8 characters: a stop string starts with
//!   a leading byte, so every cut falls on a character boundary.
//! * Empty stop strings are ignored; with no stop strings `push` returns its
//!   input untouched and nothing is ever held.
//! * After a stop, the matcher is finished: later pushes emit nothing and
//!   report the same stop, and [`StopMatcher::finish`] returns nothing.

/// Result of feeding one piece of text to a [`StopMatcher`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text that is safe to pass on now.
    pub emit: String,
    /// Index (into the list given to [`StopMatcher::new`]) of the stop string
    /// that completed, if one has.
    pub stopped: Option<usize>,
}

/// Finds stop strings in streamed text; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    /// Non-empty stop strings with their index in the caller's list.
    stops: Vec<(usize, String)>,
    /// Length in bytes of the longest stop string.
    longest: usize,
    /// Text not yet emitted because it may begin a stop string.
    held: String,
    /// The stop that fired, once one has.
    stopped: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops`; indices in [`StopOutcome::stopped`] refer to this slice.
    pub fn new(stops: &[String]) -> Self {
        let stops: Vec<(usize, String)> = stops
            .iter()
            .enumerate()
            .filter(|(_, stop)| !stop.is_empty())
            .map(|(index, stop)| (index, stop.clone()))
            .collect();
        let longest = stops.iter().map(|(_, stop)| stop.len()).max().unwrap_or(0);
        Self {
            stops,
            longest,
            held: String::new(),
            stopped: None,
        }
    }

    /// Whether there is any stop string to look for.
    pub fn is_active(&self) -> bool {
        !self.stops.is_empty()
    }

    /// The stop that has fired, if any.
    pub fn stopped(&self) -> Option<usize> {
        self.stopped
    }

    /// Feeds the next piece of text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stopped.is_some() {
            return StopOutcome {
                emit: String::new(),
                stopped: self.stopped,
            };
        }
        if self.stops.is_empty() {
            return StopOutcome {
                emit: text.to_owned(),
                stopped: None,
            };
        }

        let mut pending = std::mem::take(&mut self.held);
        pending.push_str(text);

        if let Some((start, index)) = self.first_completed(&pending) {
            pending.truncate(start);
            self.stopped = Some(index);
            return StopOutcome {
                emit: pending,
                stopped: Some(index),
            };
        }

        let keep_from = self.held_suffix_start(&pending);
        self.held = pending.split_off(keep_from);
        StopOutcome {
            emit: pending,
            stopped: None,
        }
    }

    /// Ends the stream: returns the held-back text (empty after a stop).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The stop that completes first in `text`, as `(start byte, caller index)`.
    fn first_completed(&self, text: &str) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .filter_map(|(index, stop)| {
                // A stop's first occurrence is also its earliest-ending one.
                text.find(stop.as_str())
                    .map(|start| (start + stop.len(), start, *index))
            })
            .min()
            .map(|(_, start, index)| (start, index))
    }

    /// Start of the longest suffix of `text` that is a proper prefix of a
    /// stop string (`text.len()` when there is none).
    fn held_suffix_start(&self, text: &str) -> usize {
        let earliest = text.len().saturating_sub(self.longest.saturating_sub(1));
        (earliest..text.len())
            .filter(|&start| text.is_char_boundary(start))
            .find(|&start| {
                let suffix = &text[start..];
                self.stops
                    .iter()
                    .any(|(_, stop)| stop.len() > suffix.len() && stop.starts_with(suffix))
            })
            .unwrap_or(text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stops(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Feeds `pieces` and returns everything emitted plus the stop reported.
    fn run(stop_list: &[String], pieces: &[&str]) -> (String, Option<usize>) {
        let mut matcher = StopMatcher::new(stop_list);
        let mut emitted = String::new();
        let mut stopped = None;
        for piece in pieces {
            let outcome = matcher.push(piece);
            emitted.push_str(&outcome.emit);
            if outcome.stopped.is_some() {
                assert!(
                    stopped.is_none() || stopped == outcome.stopped,
                    "stop changed"
                );
                stopped = outcome.stopped;
            }
        }
        emitted.push_str(&matcher.finish());
        (emitted, stopped)
    }

    /// The specification, on the whole text at once.
    fn reference(stop_list: &[String], text: &str) -> (String, Option<usize>) {
        let first = stop_list
            .iter()
            .enumerate()
            .filter(|(_, stop)| !stop.is_empty())
            .filter_map(|(index, stop)| {
                text.find(stop.as_str())
                    .map(|start| (start + stop.len(), start, index))
            })
            .min();
        match first {
            Some((_, start, index)) => (text[..start].to_owned(), Some(index)),
            None => (text.to_owned(), None),
        }
    }

    #[test]
    fn no_stops_passes_text_through() {
        let mut matcher = StopMatcher::new(&[]);
        assert!(!matcher.is_active());
        assert_eq!(matcher.push("hello").emit, "hello");
        assert_eq!(matcher.push("").emit, "");
        assert_eq!(matcher.finish(), "");
    }

    #[test]
    fn holds_a_possible_prefix_and_releases_it() {
        let mut matcher = StopMatcher::new(&stops(&["</s>"]));
        let first = matcher.push("hello <");
        assert_eq!(first.emit, "hello ");
        assert_eq!(first.stopped, None);
        let second = matcher.push("/t");
        assert_eq!(second.emit, "</t");
        assert_eq!(matcher.finish(), "");
    }

    #[test]
    fn stop_split_across_many_pushes() {
        let list = stops(&["STOP"]);
        let (emitted, stopped) = run(&list, &["abc S", "T", "O", "P and more"]);
        assert_eq!(emitted, "abc ");
        assert_eq!(stopped, Some(0));
    }

    #[test]
    fn after_a_stop_nothing_more_is_emitted() {
        let mut matcher = StopMatcher::new(&stops(&["x"]));
        assert_eq!(
            matcher.push("abxcd"),
            StopOutcome {
                emit: "ab".into(),
                stopped: Some(0)
            }
        );
        assert_eq!(
            matcher.push("more"),
            StopOutcome {
                emit: String::new(),
                stopped: Some(0)
            }
        );
        assert_eq!(matcher.finish(), "");
    }

    #[test]
    fn the_first_stop_to_complete_wins() {
        // "bc" completes before "abcd" could.
        let list = stops(&["abcd", "bc"]);
        assert_eq!(run(&list, &["ab", "cd"]), ("a".into(), Some(1)));
        // Same end: the longer (earlier-starting) stop wins.
        let list = stops(&["bc", "abc"]);
        assert_eq!(run(&list, &["xab", "c"]), ("x".into(), Some(1)));
        // Overlapping occurrences of one stop.
        let list = stops(&["aab"]);
        assert_eq!(run(&list, &["a", "a", "a", "b"]), ("a".into(), Some(0)));
    }

    #[test]
    fn empty_stop_strings_are_ignored() {
        let list = stops(&["", "z"]);
        assert_eq!(run(&list, &["abz"]), ("ab".into(), Some(1)));
    }

    #[test]
    fn multibyte_text_is_never_split() {
        let list = stops(&["日本語", "é!"]);
        let mut matcher = StopMatcher::new(&list);
        let outcome = matcher.push("café日本");
        assert_eq!(outcome.emit, "café");
        assert_eq!(matcher.push("人").emit, "日本人");
        assert_eq!(run(&list, &["caf", "é", "!"]), ("caf".into(), Some(1)));
    }

    /// Text over a small alphabet with multibyte characters, so that stops
    /// occur often and cuts land next to multibyte characters.
    fn text_over(chars: &[char], max_len: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(chars.to_vec()), 0..max_len)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn chunking_never_changes_the_result(
            text in text_over(&['a', 'b', 'c', 'é', '日'], 40),
            stop_list in proptest::collection::vec(text_over(&['a', 'b', 'é', '日'], 5), 0..4),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
        ) {
            let expected = reference(&stop_list, &text);
            prop_assert_eq!(run(&stop_list, &[text.as_str()]), expected.clone());

            let boundaries: Vec<usize> =
                (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            let mut points: Vec<usize> =
                cuts.iter().map(|cut| boundaries[cut.index(boundaries.len())]).collect();
            points.push(0);
            points.push(text.len());
            points.sort_unstable();
            let pieces: Vec<&str> =
                points.windows(2).map(|pair| &text[pair[0]..pair[1]]).collect();
            prop_assert_eq!(run(&stop_list, &pieces), expected);
        }
    }
}
