//! Reading Server-Sent Events from a byte stream with every event bounded: the one SSE parser of
//! the crate, behind an LLM provider's streamed answer ([`crate::llm::ChatStream`]) and the MCP
//! client's streamable HTTP transport.
//!
//! Lines end at `\n`, `\r\n` or `\r`; a blank line ends an event; a line starting with `:` is a
//! comment; `data` lines join with `\n`; `event`, `id` (unless it holds a NUL) and `retry` (when
//! all digits) are kept; other fields are ignored; a leading byte-order mark is skipped; bytes
//! that are not UTF-8 become U+FFFD. An event is dispatched once any of its fields was seen.
//!
//! **The bound.** A peer that never ends a line, or never ends an event, would otherwise grow
//! the reader's memory for as long as it keeps sending. The reader holds at most `max` bytes
//! of one event (its field lines, with the unfinished line; a comment counts while it is the
//! unfinished line, and is dropped at its end) and fails with [`EventTooLarge`] as soon as an
//! event would pass it, before buffering the bytes that would.

use std::collections::VecDeque;

/// The bound on one event of the streams the crate reads (an LLM provider's streamed answer, an
/// MCP server's SSE answers): 10 MiB, the kernel's request-body limit. An event carries one
/// JSON message (an MCP result, a chunk of an LLM answer), and nothing larger could be recorded
/// in a step anyway.
pub const MAX_EVENT_BYTES: usize = crate::protocol::MAX_REQUEST_BODY_BYTES;

/// One event: its fields as the stream sent them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event` field (the type; `None` is a `message`).
    pub(crate) event: Option<String>,
    /// The `data` lines, joined with `\n`.
    pub(crate) data: Option<String>,
    /// The `id` field.
    pub(crate) id: Option<String>,
    /// The `retry` field, in milliseconds.
    pub(crate) retry: Option<u64>,
}

/// An event passed the reader's bound before it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a server-sent event passed {max} bytes without ending (the bound on one event); the stream \
     was dropped"
)]
pub(crate) struct EventTooLarge {
    /// The bound, in bytes.
    pub(crate) max: usize,
}

/// An incremental SSE parser: [`SseReader::feed`] it bytes as they arrive, take the finished
/// events with [`SseReader::next`].
#[derive(Debug)]
pub(crate) struct SseReader {
    max: usize,
    /// The line not ended yet.
    line: Vec<u8>,
    /// The last byte fed was a `\r`: a `\n` right after it ends no further line.
    after_cr: bool,
    /// No line has ended yet (a byte-order mark may lead the first).
    first_line: bool,
    /// The event being read, once one of its fields was seen.
    event: Option<Event>,
    /// Bytes of the event's field lines so far (each with its end).
    event_bytes: usize,
    ready: VecDeque<Event>,
}

impl SseReader {
    /// A reader holding at most `max` bytes of one event.
    pub(crate) fn new(max: usize) -> Self {
        SseReader {
            max,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            event: None,
            event_bytes: 0,
            ready: VecDeque::new(),
        }
    }

    /// Reads `bytes`, the next piece of the stream (cut anywhere). Fails once the event being
    /// read passes the bound; the reader is then of no further use.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), EventTooLarge> {
        if self.after_cr {
            self.after_cr = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            let Some(end) = bytes.iter().position(|b| matches!(b, b'\n' | b'\r')) else {
                self.grow_line(bytes)?;
                return Ok(());
            };
            self.grow_line(&bytes[..end])?;
            let mut line = std::mem::take(&mut self.line);
            self.end_line(&line, true)?;
            line.clear();
            self.line = line; // its allocation serves the next line
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes {
                    [b'\n', rest @ ..] => bytes = rest,
                    [] => self.after_cr = true,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The next finished event, if any.
    pub(crate) fn next(&mut self) -> Option<Event> {
        self.ready.pop_front()
    }

    /// At the end of the stream: the event still being read, as if a blank line had ended it
    /// (a stream may end without one). Without this, an unfinished event is dropped.
    pub(crate) fn finish(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            // Within the bound already: it was counted while unfinished.
            let _ = self.end_line(&line, false);
        }
        self.event_bytes = 0;
        self.event.take()
    }

    fn grow_line(&mut self, bytes: &[u8]) -> Result<(), EventTooLarge> {
        if self.event_bytes + self.line.len() + bytes.len() > self.max {
            return Err(EventTooLarge { max: self.max });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Applies one ended line (without its end); `bounded`: fail if the event passes the bound.
    fn end_line(&mut self, mut line: &[u8], bounded: bool) -> Result<(), EventTooLarge> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.event_bytes = 0;
            if let Some(event) = self.event.take() {
                self.ready.push_back(event);
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment: nothing of it is kept
        }
        // The line end counts too: it becomes the `\n` joining `data` lines.
        self.event_bytes += line.len() + 1;
        if bounded && self.event_bytes > self.max {
            return Err(EventTooLarge { max: self.max });
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let text = || String::from_utf8_lossy(value).into_owned();
        match field {
            b"data" => {
                let event = self.event.get_or_insert_default();
                match &mut event.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(&String::from_utf8_lossy(value));
                    }
                    None => event.data = Some(text()),
                }
            }
            b"event" => self.event.get_or_insert_default().event = Some(text()),
            b"id" if !value.contains(&0) => self.event.get_or_insert_default().id = Some(text()),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Ok(ms) = text().parse() {
                    self.event.get_or_insert_default().retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(pieces: &[&[u8]], max: usize) -> Result<Vec<Event>, EventTooLarge> {
        let mut r = SseReader::new(max);
        let mut out = Vec::new();
        for p in pieces {
            r.feed(p)?;
            out.extend(std::iter::from_fn(|| r.next()));
        }
        Ok(out)
    }

    fn data(d: &str) -> Event {
        Event {
            data: Some(d.into()),
            ..Event::default()
        }
    }

    #[test]
    fn events_split_anywhere_with_any_line_ends_read_alike() {
        let text = "\u{feff}: hi\r\nevent: e\r\nid: 7\r\nretry: 50\r\ndata: a\r\ndata:b\r\n\r\n\
                    data: ü\rdata: 2\r\rdata: 3\n\nunknown: x\nnocolon\n\n";
        let want = vec![
            Event {
                event: Some("e".into()),
                data: Some("a\nb".into()),
                id: Some("7".into()),
                retry: Some(50),
            },
            data("ü\n2"),
            data("3"),
        ];
        let bytes = text.as_bytes();
        assert_eq!(read_all(&[bytes], 1000).unwrap(), want);
        for cut in 0..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(read_all(&[a, b], 1000).unwrap(), want, "cut at {cut}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read_all(&bytewise, 1000).unwrap(), want);
    }

    #[test]
    fn an_id_with_a_nul_and_a_retry_that_is_not_digits_are_ignored() {
        let got = read_all(&[b"id: a\0b\nretry: 5s\ndata: x\n\n"], 100).unwrap();
        assert_eq!(got, vec![data("x")]);
    }

    #[test]
    fn an_event_up_to_the_bound_is_read_and_one_past_it_fails() {
        // `data: ` + 94 bytes + `\n` = 101 bytes: over a bound of 100, within one of 101.
        let line = format!("data: {}\n\n", "x".repeat(94));
        assert_eq!(read_all(&[line.as_bytes()], 101).unwrap().len(), 1);
        assert_eq!(
            read_all(&[line.as_bytes()], 100),
            Err(EventTooLarge { max: 100 })
        );
    }

    #[test]
    fn an_endless_line_fails_before_its_bytes_are_held() {
        let mut r = SseReader::new(1000);
        r.feed(b"data: ").unwrap();
        let chunk = [b'x'; 100];
        let mut fed = 6;
        let err = loop {
            match r.feed(&chunk) {
                Ok(()) => fed += chunk.len(),
                Err(e) => break e,
            }
        };
        assert_eq!(err, EventTooLarge { max: 1000 });
        assert!(fed <= 1000 && r.line.capacity() <= 2000, "{fed}");
    }

    #[test]
    fn lines_of_an_event_that_never_ends_count_together() {
        let mut r = SseReader::new(1000);
        let line = [b"data: ".as_slice(), &[b'x'; 93], b"\n"].concat(); // 100 bytes
        for _ in 0..10 {
            r.feed(&line).unwrap();
        }
        assert_eq!(r.feed(b"d"), Err(EventTooLarge { max: 1000 }));
        // Blank lines end events: the same lines, as events, never fail.
        let mut r = SseReader::new(1000);
        for _ in 0..100 {
            r.feed(&line).unwrap();
            r.feed(b"\n").unwrap();
        }
        assert_eq!(std::iter::from_fn(|| r.next()).count(), 100);
    }

    #[test]
    fn comments_are_not_kept_but_an_endless_one_is_bounded() {
        let mut r = SseReader::new(100);
        for _ in 0..100 {
            r.feed(b": keep-alive\n").unwrap();
        }
        r.feed(b"data: x\n\n").unwrap();
        assert_eq!(r.next(), Some(data("x")));
        assert!(r.feed(&[b':'; 101]).is_err());
    }

    #[test]
    fn finish_answers_an_event_the_stream_did_not_end() {
        let mut r = SseReader::new(100);
        r.feed(b"data: a\ndata: b").unwrap();
        assert_eq!(r.next(), None);
        assert_eq!(r.finish(), Some(data("a\nb")));
        assert_eq!(r.finish(), None);
    }
}
