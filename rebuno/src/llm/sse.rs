//! Reading a streamed (Server-Sent Events) answer: its JSON events and text deltas.

use crate::error::{Error, Result};
use crate::sse::{MAX_EVENT_BYTES, SseReader};
use serde_json::Value;
use std::collections::VecDeque;

/// A streamed answer of [`OpenAi::chat_stream`](super::OpenAi::chat_stream) or
/// [`Anthropic::messages_stream`](super::Anthropic::messages_stream): the `data:` JSON of each
/// event as it arrives, or just the text deltas.
///
/// The call is one `llm_call` step: live deltas go to the kernel while you read, and the whole
/// stream is recorded when it ends (even if you stop reading early). A replayed stream yields
/// the recorded events.
///
/// Reading to the end ([`ChatStream::text`], or [`ChatStream::next_event`] until `None`)
/// returns only once the call is recorded. A stream dropped early is read and recorded in the
/// background, and the handler's next effect waits for that record. So no later effect can
/// overtake it (if one blocked the execution, the next attempt would find the call unrecorded
/// and make it again). A stream still held, unread, while the handler starts another effect
/// is not waited for (that wait could never end): finish or drop a stream before the next
/// effect.
///
/// One event may hold at most [`MAX_STREAM_EVENT_BYTES`](super::MAX_STREAM_EVENT_BYTES): a
/// provider that sends more without ending the event fails the read with an error naming the
/// bound, instead of growing the reader's memory.
#[derive(Debug)]
pub struct ChatStream {
    provider: &'static str,
    resp: reqwest::Response,
    reader: SseReader,
    /// Why the stream broke (an event over the bound): every later read answers it again.
    broken: Option<Error>,
    events: VecDeque<Value>,
    done: bool,
    usage: Option<super::Usage>,
}

impl ChatStream {
    pub(crate) fn new(provider: &'static str, resp: reqwest::Response) -> Self {
        ChatStream {
            provider,
            resp,
            reader: SseReader::new(MAX_EVENT_BYTES),
            broken: None,
            events: VecDeque::new(),
            done: false,
            usage: None,
        }
    }

    /// The next event's `data:` JSON (OpenAI: a `chat.completion.chunk`; Anthropic:
    /// `message_start`, `content_block_delta`, …), or `None` at the end (`data: [DONE]` or
    /// the end of the body). An `error` event is returned as an error.
    pub async fn next_event(&mut self) -> Result<Option<Value>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                if let Some(usage) = event
                    .get("usage")
                    .or_else(|| event.pointer("/message/usage"))
                    .and_then(super::Usage::from_value)
                {
                    let prev = self.usage.unwrap_or_default();
                    self.usage = Some(super::Usage {
                        input_tokens: prev.input_tokens.max(usage.input_tokens),
                        output_tokens: prev.output_tokens.max(usage.output_tokens),
                    });
                }
                return Ok(Some(event));
            }
            if let Some(e) = &self.broken {
                return Err(e.clone());
            }
            if self.done {
                // Read the body to its end even after `[DONE]`: it ends only once the call is
                // recorded, so the handler's next effect cannot overtake the record (if that
                // effect blocked the execution, the next attempt could find the call still
                // executing and make it again).
                while self.resp.chunk().await?.is_some() {}
                return Ok(None);
            }
            match self.resp.chunk().await? {
                Some(bytes) => {
                    if let Err(e) = self.reader.feed(&bytes) {
                        // Not read any further: the rest of such a body may never end.
                        let e = Error::Other(format!("{}: {e}", self.provider));
                        self.broken = Some(e.clone());
                        return Err(e);
                    }
                    while let Some(event) = self.reader.next() {
                        self.parse(event.data)?;
                        if self.done {
                            break;
                        }
                    }
                }
                None => {
                    // A last event the body ended without a blank line after.
                    let last = self.reader.finish();
                    self.parse(last.and_then(|e| e.data))?;
                    self.done = true;
                }
            }
        }
    }

    /// The next non-empty text delta (OpenAI `choices[0].delta.content`, Anthropic
    /// `content_block_delta` `text_delta`), or `None` at the end.
    pub async fn next_text(&mut self) -> Result<Option<String>> {
        while let Some(event) = self.next_event().await? {
            if let Some(text) = delta_text(&event).filter(|t| !t.is_empty()) {
                return Ok(Some(text.to_owned()));
            }
        }
        Ok(None)
    }

    /// Reads the stream to its end and answers the whole text.
    pub async fn text(&mut self) -> Result<String> {
        let mut out = String::new();
        while let Some(piece) = self.next_text().await? {
            out.push_str(&piece);
        }
        Ok(out)
    }

    /// The token usage the events read so far reported (OpenAI sends it in the last chunk
    /// with `stream_options.include_usage`; Anthropic in `message_start` / `message_delta`).
    pub fn usage(&self) -> Option<super::Usage> {
        self.usage
    }

    /// Takes one event's `data` (its `data:` lines joined; `None` when it had none).
    fn parse(&mut self, data: Option<String>) -> Result<()> {
        let Some(data) = data else {
            return Ok(());
        };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let event: Value = serde_json::from_str(&data).map_err(|e| {
            Error::Serialization(format!(
                "{}: a stream event is not JSON ({e}): {data}",
                self.provider
            ))
        })?;
        let is_error = event.get("type").and_then(Value::as_str) == Some("error")
            || (event.get("error").is_some_and(Value::is_object) && event.get("choices").is_none());
        if is_error {
            let message = event
                .pointer("/error/message")
                .and_then(Value::as_str)
                .map_or_else(|| event.to_string(), str::to_owned);
            return Err(Error::Other(format!(
                "{}: stream error: {message}",
                self.provider
            )));
        }
        self.events.push_back(event);
        Ok(())
    }
}

/// The text delta of a stream event, in either provider's shape.
pub(crate) fn delta_text(event: &Value) -> Option<&str> {
    if let Some(text) = event
        .pointer("/choices/0/delta/content")
        .and_then(Value::as_str)
    {
        return Some(text);
    }
    if event.get("type").and_then(Value::as_str) == Some("content_block_delta")
        && event.pointer("/delta/type").and_then(Value::as_str) == Some("text_delta")
    {
        return event.pointer("/delta/text").and_then(Value::as_str);
    }
    None
}
