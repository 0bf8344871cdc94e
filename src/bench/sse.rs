//! Incremental Server-Sent Events parser (the WHATWG `text/event-stream` rules).
//!
//! Bytes go in as they arrive from the socket, in arbitrarily split pieces;
//! complete events come out. What the rules require, and what naive
//! "split on `\n\n`, strip `data: `" parsers get wrong:
//! - lines end in LF, CRLF or a lone CR, and a CRLF may be split across two
//!   reads (a read ending in CR must not produce an empty line when LF follows);
//! - an event ends at an empty line; several `data:` lines in one event are
//!   joined with `\n`;
//! - lines starting with `:` are comments (keep-alives), never events;
//! - `field:value` drops exactly one space after the colon; a line without a
//!   colon is a field with an empty value; unknown fields are ignored;
//! - an event whose data buffer is empty is not dispatched;
//! - a leading UTF-8 BOM is skipped.
//!
//! Lines are decoded as UTF-8 only once complete, so a multi-byte character
//! split across reads is never mangled. OpenAI's `[DONE]` sentinel is plain
//! data here; interpreting it is the caller's job.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any (OpenAI streams leave it unset).
    pub event: Option<String>,
    /// All `data:` lines of the event joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// Streaming parser state; feed bytes with [`SseParser::feed`].
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
    comments: u64,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume `bytes` and append every event they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        if !self.started {
            // Hold back until we can tell whether the stream starts with a BOM.
            self.line.extend_from_slice(bytes);
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                return;
            }
            self.started = true;
            let pending = std::mem::take(&mut self.line);
            let pending = pending.strip_prefix(BOM).unwrap_or(&pending);
            self.feed_started(pending, out);
            return;
        }
        self.feed_started(bytes, out);
    }

    fn feed_started(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue; // second half of a CRLF
                }
            }
            match byte {
                b'\n' => self.end_line(out),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(out);
                }
                _ => self.line.push(byte),
            }
        }
    }

    /// The end of the stream: an event not closed by an empty line is, per
    /// the standard, discarded. Returns it anyway (some servers omit the final
    /// blank line) so the caller can decide and report it.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            self.end_line(&mut Vec::new());
        }
        if self.has_data {
            Some(self.take_event())
        } else {
            None
        }
    }

    /// How many comment lines were seen (keep-alives, `: ping`).
    pub fn comments(&self) -> u64 {
        self.comments
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data {
                out.push(self.take_event());
            } else {
                self.event = None;
            }
            return;
        }
        if line[0] == b':' {
            self.comments += 1;
            return;
        }
        let line = String::from_utf8_lossy(&line);
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields do not matter here
        }
    }

    fn take_event(&mut self) -> SseEvent {
        self.has_data = false;
        SseEvent {
            event: self.event.take(),
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pieces(pieces: &[&[u8]]) -> (Vec<SseEvent>, Option<SseEvent>) {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            parser.feed(piece, &mut out);
        }
        let tail = parser.finish();
        (out, tail)
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn openai_style_stream() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n";
        let (events, tail) = parse_pieces(&[stream]);
        assert_eq!(data(&events), ["{\"a\":1}", "{\"a\":2}", "[DONE]"]);
        assert!(tail.is_none());
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let stream: &[u8] =
            b"data: one\r\n\r\n: keep-alive\r\ndata: t\xC3\xA9l\xC3\xA9\r\ndata: two\r\n\r\ndata: [DONE]\r\n\r\n";
        let (whole, _) = parse_pieces(&[stream]);
        assert_eq!(data(&whole), ["one", "télé\ntwo", "[DONE]"]);
        for split in 0..=stream.len() {
            let (events, _) = parse_pieces(&[&stream[..split], &stream[split..]]);
            assert_eq!(events, whole, "split at {split}");
        }
        // Byte by byte.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_pieces(&bytes).0, whole);
    }

    #[test]
    fn crlf_split_across_reads_is_one_line_end() {
        // "data: a\r" | "\n\r" | "\n": one event, not an extra blank line.
        let (events, _) = parse_pieces(&[b"data: a\r", b"\n\r", b"\ndata: b\n\n"]);
        assert_eq!(data(&events), ["a", "b"]);
    }

    #[test]
    fn lone_cr_line_endings() {
        let (events, _) = parse_pieces(&[b"data: a\r\rdata: b\rdata: c\r\r"]);
        assert_eq!(data(&events), ["a", "b\nc"]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let (events, _) = parse_pieces(&[b"data: first\ndata:second\ndata:  third\n\n"]);
        // Only one leading space is removed.
        assert_eq!(data(&events), ["first\nsecond\n third"]);
    }

    #[test]
    fn comments_and_empty_events_are_not_dispatched() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.feed(b": ping\n\n:another\n\nevent: x\n\nretry: 10\n\n", &mut out);
        assert!(out.is_empty());
        assert_eq!(parser.comments(), 2);
        parser.feed(b"data\n\n", &mut out);
        // `data` without a colon is a data field with an empty value.
        assert_eq!(data(&out), [""]);
    }

    #[test]
    fn event_and_id_fields() {
        let (events, _) = parse_pieces(&[b"event: error\nid: 7\ndata: {}\n\ndata: x\n\n"]);
        assert_eq!(events[0].event.as_deref(), Some("error"));
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[1].event, None);
        // The last event id persists (standard behaviour).
        assert_eq!(events[1].id.as_deref(), Some("7"));
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let (events, _) = parse_pieces(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
        assert_eq!(data(&events), ["x"]);
        // A stream that merely starts like a BOM is kept.
        let (events, _) = parse_pieces(&[b"\xEF", b"data: y\n\n"]);
        assert_eq!(events.len(), 0, "invalid field name line is ignored");
    }

    #[test]
    fn unterminated_final_event_is_returned_by_finish() {
        let (events, tail) = parse_pieces(&[b"data: a\n\ndata: [DONE]"]);
        assert_eq!(data(&events), ["a"]);
        assert_eq!(tail.unwrap().data, "[DONE]");
        let (_, tail) = parse_pieces(&[b"data: a\n\ndata: [DONE]\n"]);
        assert_eq!(tail.unwrap().data, "[DONE]");
    }

    #[test]
    fn colon_in_value_is_kept() {
        let (events, _) = parse_pieces(&[b"data: {\"k\": \"a:b\"}\n\n"]);
        assert_eq!(data(&events), ["{\"k\": \"a:b\"}"]);
    }
}
