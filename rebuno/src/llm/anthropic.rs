//! An Anthropic messages client whose calls are `llm_call` steps.

use super::{
    ChatStream, LlmHttp, ToolCall, Usage, json_answer, provider_builders, request_object,
    stream_answer,
};
use crate::error::Result;
use serde::Serialize;
use serde_json::Value;

/// The default base URL of [`Anthropic`].
const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The `anthropic-version` header [`Anthropic`] sends unless told otherwise.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A client of Anthropic's messages API: `POST {base_url}/messages` with `x-api-key` and
/// `anthropic-version`. Every call is a durable `llm_call` step (see the
/// [module docs](super)); a refusal is returned as the typed error (`Policy`, `RateLimited`,
/// `Blocked`, …).
#[derive(Debug, Clone)]
pub struct Anthropic {
    http: LlmHttp,
    base_url: String,
    api_key: String,
    version: String,
}

provider_builders!(
    Anthropic,
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "Uses `url` instead of Anthropic's (it ends before `/messages`)."
);

impl Anthropic {
    /// A client of `https://api.anthropic.com/v1` with `api_key` (empty: no `x-api-key`).
    pub fn new(api_key: impl Into<String>) -> Self {
        Anthropic {
            http: LlmHttp::new(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: api_key.into(),
            version: ANTHROPIC_VERSION.to_owned(),
        }
    }

    /// Sends `anthropic-version: <version>` instead of [`ANTHROPIC_VERSION`].
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    fn request(&self, body: &Value) -> Result<reqwest::Request> {
        let mut builder = self
            .http
            .client()
            .post(format!("{}/messages", self.base_url))
            .header("anthropic-version", &self.version)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body)?);
        if !self.api_key.is_empty() {
            builder = builder.header("x-api-key", &self.api_key);
        }
        Ok(builder.build()?)
    }

    /// Creates a message: `request` is the API's body (`model`, `max_tokens`, `messages`,
    /// `system`, `tools`, …) as JSON or any serializable type; a `stream` flag is removed.
    pub async fn messages(&self, request: impl Serialize) -> Result<MessagesResponse> {
        let mut body = request_object(&request)?;
        body.remove("stream");
        let resp = self
            .http
            .execute_typed(self.request(&Value::Object(body))?)
            .await?;
        Ok(MessagesResponse {
            raw: json_answer("anthropic", resp).await?,
        })
    }

    /// Creates a streamed message (`"stream": true`): read it with [`ChatStream::next_text`]
    /// or [`ChatStream::next_event`].
    pub async fn messages_stream(&self, request: impl Serialize) -> Result<ChatStream> {
        let mut body = request_object(&request)?;
        body.insert("stream".into(), Value::Bool(true));
        let resp = self
            .http
            .execute_typed(self.request(&Value::Object(body))?)
            .await?;
        stream_answer("anthropic", resp).await
    }
}

/// A message (`content[]`, `stop_reason`, `usage`, …) with readers for what an agent loop
/// needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct MessagesResponse {
    raw: Value,
}

impl MessagesResponse {
    /// The answer as the provider sent it.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The answer as the provider sent it, by value.
    pub fn into_raw(self) -> Value {
        self.raw
    }

    /// The content blocks (append `{"role": "assistant", "content": <this>}` to the
    /// conversation before the tool results).
    pub fn content(&self) -> &[Value] {
        self.raw
            .get("content")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The text of the `text` blocks, joined; `None` when there is none.
    pub fn text(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .content()
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        (!texts.is_empty()).then(|| texts.concat())
    }

    /// The `tool_use` blocks (`id`, `name`, `input`).
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content()
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .filter_map(|b| {
                Some(ToolCall {
                    id: b
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: b.get("name")?.as_str()?.to_owned(),
                    arguments: b
                        .get("input")
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Default::default())),
                })
            })
            .collect()
    }

    /// `stop_reason` (`end_turn`, `tool_use`, `max_tokens`, …).
    pub fn stop_reason(&self) -> Option<&str> {
        self.raw.get("stop_reason").and_then(Value::as_str)
    }

    /// The token usage, when reported.
    pub fn usage(&self) -> Option<Usage> {
        self.raw.get("usage").and_then(Usage::from_value)
    }
}
