//! Structured output on the request side: OpenAI's `response_format` read
//! into an [`OutputFormat`] and compiled into a grammar for the sampler.
//!
//! `{"type": "text"}` (or no field) is free text; `{"type": "json_object"}`
//! is any JSON object; `{"type": "json_schema", "json_schema": {"name",
//! "schema", "strict"}}` is JSON valid against `schema` (enforced whatever
//! `strict` says). A schema llguidance cannot compile is a 400 naming
//! `response_format`. The per-model compiler indexes the vocabulary once,
//! on the first structured request (see [`crate::engine::constraint`]).

use std::sync::Arc;

use serde_json::Value;

use super::{error::ApiError, protocol::GenerationOptions, state::AppState};
use crate::engine::constraint::{CompiledGrammar, ConstraintError, GrammarCompiler, OutputFormat};

/// Reads `response_format` (`param` names the field in errors). `None`:
/// free text.
pub fn parse_response_format(
    value: Option<&Value>,
    param: &str,
) -> Result<Option<OutputFormat>, ApiError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let bad = |message: String| ApiError::invalid_param(param, message);
    let Some(object) = value.as_object() else {
        return Err(bad(format!("`{param}` must be an object.")));
    };
    match object.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
        Some("json_schema") => {
            let Some(spec) = object.get("json_schema").and_then(Value::as_object) else {
                return Err(bad(format!(
                    "`{param}.json_schema` must be an object with `name` and `schema`."
                )));
            };
            match spec.get("name") {
                Some(Value::String(name))
                    if !name.is_empty()
                        && name.len() <= 64
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') => {}
                _ => {
                    return Err(bad(format!(
                        "`{param}.json_schema.name` must be 1 to 64 letters, digits, `_` or `-`."
                    )))
                }
            }
            if spec.get("strict").is_some_and(|s| !s.is_boolean()) {
                return Err(bad(format!(
                    "`{param}.json_schema.strict` must be a boolean."
                )));
            }
            match spec.get("schema") {
                Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                    Ok(Some(OutputFormat::JsonSchema(schema.clone())))
                }
                Some(_) => Err(bad(format!(
                    "`{param}.json_schema.schema` must be a JSON schema object."
                ))),
                None => Err(bad(format!("`{param}.json_schema.schema` is required."))),
            }
        }
        _ => Err(bad(format!(
            "`{param}.type` must be \"text\", \"json_object\" or \"json_schema\"."
        ))),
    }
}

/// Puts the grammar of `format` (if any) into `options`' sampling: the
/// one call both endpoints make after validating their options.
pub async fn constrain(
    state: &Arc<AppState>,
    format: Option<OutputFormat>,
    options: &mut GenerationOptions,
) -> Result<(), ApiError> {
    let Some(format) = format else {
        return Ok(());
    };
    if !options.stop_at_eos {
        return Err(ApiError::invalid_param(
            "ignore_eos",
            "`ignore_eos` cannot be combined with `response_format`.",
        ));
    }
    options.sampling.grammar = Some(compile(state, format, "response_format").await?);
    Ok(())
}

/// Compiles `format` for the served model (building the model's compiler
/// on first use), off the async threads.
pub async fn compile(
    state: &Arc<AppState>,
    format: OutputFormat,
    param: &str,
) -> Result<CompiledGrammar, ApiError> {
    let state = state.clone();
    let param = param.to_string();
    tokio::task::spawn_blocking(move || {
        let unavailable = |message: String| {
            ApiError::internal(format!(
                "structured output is unavailable for this model: {message}"
            ))
        };
        let compiler = compiler(&state).map_err(unavailable)?;
        compiler.compile(&format).map_err(|e| match e {
            ConstraintError::Grammar(message) => {
                ApiError::invalid_param(&param, format!("Invalid `{param}`: {message}"))
            }
            ConstraintError::Tokenizer(message) => unavailable(message),
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("compiling the grammar failed: {e}")))?
}

/// The served model's grammar compiler, built once.
fn compiler(state: &AppState) -> Result<Arc<GrammarCompiler>, String> {
    state
        .grammar
        .get_or_init(|| {
            let scheduler = &state.scheduler;
            let info = scheduler.info();
            let started = std::time::Instant::now();
            let compiler = GrammarCompiler::new(
                scheduler.tokenizer().clone(),
                info.config.vocab_size,
                &info.eos_token_ids,
            )
            .map(Arc::new)
            .map_err(|e| e.to_string());
            tracing::info!(
                ms = started.elapsed().as_millis() as u64,
                ok = compiler.is_ok(),
                "structured output: vocabulary indexed"
            );
            compiler
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Option<OutputFormat>, ApiError> {
        parse_response_format(Some(&value), "response_format")
    }

    #[test]
    fn reads_openai_shapes() {
        assert_eq!(parse(json!({"type": "text"})).unwrap(), None);
        assert_eq!(parse_response_format(None, "x").unwrap(), None);
        assert_eq!(
            parse(json!({"type": "json_object"})).unwrap(),
            Some(OutputFormat::JsonObject)
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            parse(json!({"type": "json_schema",
                         "json_schema": {"name": "a_1-b", "schema": schema, "strict": true}}))
            .unwrap(),
            Some(OutputFormat::JsonSchema(schema))
        );
    }

    #[test]
    fn bad_shapes_are_400s_naming_the_field() {
        for bad in [
            json!("json_object"),
            json!({"type": "yaml"}),
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"schema": {}}}),
            json!({"type": "json_schema", "json_schema": {"name": "has space", "schema": {}}}),
            json!({"type": "json_schema", "json_schema": {"name": "n"}}),
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": 3}}),
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "strict": 1}}),
        ] {
            let error = parse(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(error.status.as_u16(), 400, "{bad}");
            assert_eq!(error.param.as_deref(), Some("response_format"), "{bad}");
        }
    }
}
