//! An OpenAI-compatible chat-completions client whose calls are `llm_call` steps.

use super::{
    ChatStream, LlmHttp, ToolCall, Usage, json_answer, provider_builders, request_object,
    stream_answer,
};
use crate::error::Result;
use serde::Serialize;
use serde_json::{Value, json};

/// The default base URL of [`OpenAi`].
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A client of an OpenAI-compatible chat-completions API (OpenAI, vLLM, Ollama, LiteLLM, …):
/// `POST {base_url}/chat/completions` with `Authorization: Bearer <api_key>`. Every call is a
/// durable `llm_call` step (see the [module docs](super)); a refusal is returned as the typed
/// error (`Policy`, `RateLimited`, `Blocked`, …).
#[derive(Debug, Clone)]
pub struct OpenAi {
    http: LlmHttp,
    base_url: String,
    api_key: String,
}

provider_builders!(
    OpenAi,
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "Uses `url` (e.g. `http://localhost:11434/v1`) instead of OpenAI's."
);

impl OpenAi {
    /// A client of `https://api.openai.com/v1` with `api_key` (empty: no `Authorization`).
    pub fn new(api_key: impl Into<String>) -> Self {
        OpenAi {
            http: LlmHttp::new(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: api_key.into(),
        }
    }

    fn request(&self, body: &Value) -> Result<reqwest::Request> {
        let mut builder = self
            .http
            .client()
            .post(format!("{}/chat/completions", self.base_url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body)?);
        if !self.api_key.is_empty() {
            builder = builder.bearer_auth(&self.api_key);
        }
        Ok(builder.build()?)
    }

    /// Creates a chat completion: `request` is the API's body (`model`, `messages`, `tools`,
    /// …) as JSON or any serializable type; `stream` flags are removed.
    pub async fn chat(&self, request: impl Serialize) -> Result<ChatResponse> {
        let mut body = request_object(&request)?;
        body.remove("stream");
        body.remove("stream_options");
        let resp = self
            .http
            .execute_typed(self.request(&Value::Object(body))?)
            .await?;
        Ok(ChatResponse {
            raw: json_answer("openai", resp).await?,
        })
    }

    /// Creates a streamed chat completion (`"stream": true`, and
    /// `"stream_options": {"include_usage": true}` unless set, so the record carries token
    /// usage): read it with [`ChatStream::next_text`] or [`ChatStream::next_event`].
    pub async fn chat_stream(&self, request: impl Serialize) -> Result<ChatStream> {
        let mut body = request_object(&request)?;
        body.insert("stream".into(), Value::Bool(true));
        body.entry("stream_options")
            .or_insert_with(|| json!({"include_usage": true}));
        let resp = self
            .http
            .execute_typed(self.request(&Value::Object(body))?)
            .await?;
        stream_answer("openai", resp).await
    }
}

/// A chat completion (`choices[]`, `usage`, …) with readers for what an agent loop needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ChatResponse {
    raw: Value,
}

impl ChatResponse {
    /// The answer as the provider sent it.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The answer as the provider sent it, by value.
    pub fn into_raw(self) -> Value {
        self.raw
    }

    /// The first choice's assistant message (append it to the conversation before the tool
    /// results).
    pub fn message(&self) -> Option<&Value> {
        self.raw.pointer("/choices/0/message")
    }

    /// The assistant's text: `choices[0].message.content` (a string, or the `text` of its
    /// parts); `None` when there is none (for example only tool calls).
    pub fn text(&self) -> Option<String> {
        match self.message()?.get("content")? {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let text: String = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                Some(text)
            }
            _ => None,
        }
    }

    /// The tool calls of `choices[0].message.tool_calls[]` (`function.name`, and
    /// `function.arguments` parsed from its JSON string).
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        let Some(calls) = self
            .message()
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        calls
            .iter()
            .filter_map(|call| {
                let function = call.get("function")?;
                let arguments = match function.get("arguments") {
                    Some(Value::String(s)) if s.trim().is_empty() => json!({}),
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    Some(other) => other.clone(),
                    None => json!({}),
                };
                Some(ToolCall {
                    id: call
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: function.get("name")?.as_str()?.to_owned(),
                    arguments,
                })
            })
            .collect()
    }

    /// `choices[0].finish_reason` (`stop`, `tool_calls`, `length`, …).
    pub fn finish_reason(&self) -> Option<&str> {
        self.raw
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
    }

    /// The token usage, when reported.
    pub fn usage(&self) -> Option<Usage> {
        self.raw.get("usage").and_then(Usage::from_value)
    }
}
