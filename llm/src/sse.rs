//! An incremental server-sent-events parser (the subset of the WHATWG rules that model APIs
//! use): `event:` and `data:` fields, multi-line data, `:` comments, LF or CRLF line ends.
//!
//! Guarantees: bytes may arrive split anywhere (even inside a UTF-8 character or a CRLF);
//! an event is emitted only once its terminating blank line has arrived, so an event cut off
//! by the end of the body is never emitted — except by [`SseParser::finish`], which also
//! emits a last event whose `data:` lines are complete but whose blank line is missing.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Accumulates bytes and yields complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let end = start + pos;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            if let Some(ev) = self.line(&line) {
                out.push(ev);
            }
        }
        self.buf.drain(..start);
        out
    }

    /// Ends the input: a pending event whose lines all arrived is emitted; a partial line
    /// (no newline yet) is dropped.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        self.buf.clear();
        self.dispatch().into_iter().collect()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let data = self.data.take()?;
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn events_split_at_every_byte() {
        let text =
            "event: ping\ndata: {\"type\":\"ping\"}\n\n: comment\r\ndata: a\r\ndata: é\r\n\r\n";
        let want = vec![ev(Some("ping"), "{\"type\":\"ping\"}"), ev(None, "a\né")];
        for split in 0..text.len() {
            let mut p = SseParser::default();
            let mut got = p.push(&text.as_bytes()[..split]);
            got.extend(p.push(&text.as_bytes()[split..]));
            got.extend(p.finish());
            assert_eq!(got, want, "split at {split}");
        }
    }

    #[test]
    fn a_partial_line_at_the_end_is_dropped() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: {\"partial\":").is_empty());
        assert!(p.finish().is_empty());
    }

    #[test]
    fn complete_lines_without_blank_line_are_emitted_at_finish() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: [DONE]\n").is_empty());
        assert_eq!(p.finish(), vec![ev(None, "[DONE]")]);
    }

    #[test]
    fn an_event_field_without_data_dispatches_nothing() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: ping\n\n").is_empty());
        assert_eq!(p.push(b"data: x\n\n"), vec![ev(None, "x")]);
    }
}
