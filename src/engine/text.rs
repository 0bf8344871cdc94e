//! From token ids to the text a client sees: streaming detokenization (never
//! a split UTF-8 character) followed by stop strings (text that might start
//! one is held back until it is decided). Used by the CLI's generation loop
//! and by every API handler, so both behave alike.

use hearth_models::{detokenizer::StreamDecoder, tokenizer::TokenizerError, Tokenizer};

use super::stop::StopMatcher;

/// One request's text state.
pub struct TextStream<'a> {
    decoder: StreamDecoder<'a>,
    stops: StopMatcher,
    stopped: bool,
}

/// Text produced by one token.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TextDelta {
    /// Text safe to send now (may be empty).
    pub text: String,
    /// A stop string completed; nothing more should be sent.
    pub stopped: bool,
}

impl<'a> TextStream<'a> {
    pub fn new(tokenizer: &'a Tokenizer, stops: &[String]) -> Self {
        TextStream {
            decoder: StreamDecoder::new(tokenizer),
            stops: StopMatcher::new(stops),
            stopped: false,
        }
    }

    /// Feeds one generated token (not an end-of-sequence token).
    pub fn push(&mut self, token: u32) -> Result<TextDelta, TokenizerError> {
        if self.stopped {
            return Ok(TextDelta {
                text: String::new(),
                stopped: true,
            });
        }
        let piece = self.decoder.push(token)?;
        let outcome = self.stops.push(&piece);
        self.stopped = outcome.stopped.is_some();
        Ok(TextDelta {
            text: outcome.emit,
            stopped: self.stopped,
        })
    }

    /// Everything still held back, at the end of generation (empty if a stop
    /// string ended it: text after a stop is never sent).
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        if self.stopped {
            return Ok(String::new());
        }
        let rest = self.decoder.finish()?;
        let outcome = self.stops.push(&rest);
        let mut text = outcome.emit;
        if outcome.stopped.is_some() {
            self.stopped = true;
        } else {
            text.push_str(&self.stops.finish());
        }
        Ok(text)
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Which stop string (index into the `stops` given to [`TextStream::new`])
    /// ended the text, if one did.
    pub fn matched_stop(&self) -> Option<usize> {
        self.stops.stopped()
    }
}
