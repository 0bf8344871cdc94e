//! Text ⇄ token ids, and chat templates, for a model folder or a GGUF file.
//!
//! [`Tokenizer`] wraps a Hugging Face `tokenizers` pipeline with what the rest of a tokenizer
//! folder says: the BOS/EOS/pad tokens, whether to add BOS, and the chat template. It loads from
//! two places:
//!
//! - a Hugging Face / MLX folder ([`Tokenizer::from_dir`]): `tokenizer.json`, `tokenizer_config.json`,
//!   the legacy `special_tokens_map.json`, `chat_template.jinja`, `additional_chat_templates/*.jinja`
//!   and, for extra stop tokens, `generation_config.json`;
//! - a GGUF file's metadata ([`Tokenizer::from_gguf`]): llama.cpp's `tokenizer.ggml.*` keys for a
//!   byte-level BPE vocabulary (`tokenizer.ggml.model == "gpt2"`), rebuilt into the same
//!   `tokenizers` pipeline transformers builds from them.
//!
//! [`Tokenizer::save_hf`] writes the folder form back out, so a GGUF can be converted into a
//! folder that `transformers` and `mlx_lm` load with identical encodings.
//!
//! Invariants and choices:
//! - Encodings match `transformers` 5 (`AutoTokenizer`), which runs the same Rust `tokenizers`
//!   pipeline. BOS follows `tokenizer.json`'s post-processor; in addition, when the config
//!   explicitly sets `add_bos_token: true` (or the GGUF sets `tokenizer.ggml.add_bos_token`) and
//!   the post-processor did not add it, BOS is prepended (what llama.cpp and transformers 4's
//!   Llama tokenizers do). Likewise for `add_eos_token`.
//! - `clean_up_tokenization_spaces` is never applied: transformers 5 ignores it for BPE models,
//!   and it would break streaming (see [`crate::detokenizer`]).
//! - Chat templates render through [`crate::chat_template`]; the rendered prompt already holds the
//!   template's special tokens, so encode it with `add_special_tokens = false`.
//! - Every error names the file it comes from. Nothing panics on malformed input.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

pub use crate::chat_template::{ChatTemplate, ChatTemplateError, ChatTemplateOptions};
use crate::gguf::GgufMetadata;

/// The chat template name transformers picks when tools are passed, if the tokenizer has one.
const TOOL_USE_TEMPLATE: &str = "tool_use";
/// The template name used when a tokenizer has several and none is asked for.
const DEFAULT_TEMPLATE: &str = "default";
/// GGUF `tokenizer.ggml.token_type` values.
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Split regexes for GGUF `tokenizer.ggml.pre` values (the patterns the vocabularies were trained
/// with, as llama.cpp and transformers apply them).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer could not be loaded, saved or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{} is not valid JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{}: tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\", can be built from GGUF metadata; use the model's Hugging Face tokenizer.json instead)",
        path.display()
    )]
    UnsupportedModel { path: PathBuf, model: String },
    #[error("{}: tokenizers library: {source}", path.display())]
    Library {
        path: PathBuf,
        source: tokenizers::Error,
    },
    #[error("{}: no chat template (none in the tokenizer files or GGUF metadata)", path.display())]
    NoChatTemplate { path: PathBuf },
    #[error("{}: {source}", path.display())]
    ChatTemplate {
        path: PathBuf,
        source: ChatTemplateError,
    },
}

/// A tokenizer with its special tokens and chat templates.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The folder or GGUF file this came from, for error messages.
    source: PathBuf,
    bos_token: Option<String>,
    bos_token_id: Option<u32>,
    eos_token: Option<String>,
    /// The EOS token first, then any further stop tokens (GGUF EOT/EOM, generation_config).
    eos_token_ids: Vec<u32>,
    pad_token: Option<String>,
    unk_token: Option<String>,
    /// Further named tokens from the config (`sep_token`, `image_token`, ...), which chat
    /// templates see as variables like transformers' `special_tokens_map`.
    other_tokens: BTreeMap<String, String>,
    add_bos_token: bool,
    add_eos_token: bool,
    chat_template: Option<ChatTemplate>,
    named_chat_templates: BTreeMap<String, ChatTemplate>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("add_bos_token", &self.add_bos_token)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish_non_exhaustive()
    }
}

/// The parts of `tokenizer_config.json` (and `special_tokens_map.json`) this crate uses.
#[derive(Default)]
struct FolderConfig {
    bos_token: Option<String>,
    eos_token: Option<String>,
    pad_token: Option<String>,
    unk_token: Option<String>,
    other_tokens: BTreeMap<String, String>,
    add_bos_token: Option<bool>,
    add_eos_token: Option<bool>,
    default_template: Option<String>,
    named_templates: BTreeMap<String, String>,
}

impl Tokenizer {
    /// Loads the tokenizer of a Hugging Face / MLX model folder.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let tokenizer_path = dir.join("tokenizer.json");
        if !tokenizer_path.is_file() {
            return Err(TokenizerError::Invalid {
                path: dir.to_path_buf(),
                message: "no tokenizer.json in this folder (a tokenizer.json is required; \
                          sentencepiece-only tokenizer.model folders are not supported)"
                    .into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|source| {
            TokenizerError::Library {
                path: tokenizer_path.clone(),
                source,
            }
        })?;

        let mut config = FolderConfig::default();
        let config_path = dir.join("tokenizer_config.json");
        let config_json = read_json_if_exists(&config_path)?;
        if let Some(json) = &config_json {
            config.read_tokenizer_config(json, &config_path)?;
        }
        // transformers reads special_tokens_map.json only for configs without added_tokens_decoder.
        let has_added_tokens_decoder = config_json
            .as_ref()
            .is_some_and(|json| json.get("added_tokens_decoder").is_some());
        if !has_added_tokens_decoder {
            let map_path = dir.join("special_tokens_map.json");
            if let Some(json) = read_json_if_exists(&map_path)? {
                config.read_special_tokens_map(&json, &map_path)?;
            }
        }
        // Template files take priority over templates in tokenizer_config.json.
        let template_path = dir.join("chat_template.jinja");
        if let Some(text) = read_text_if_exists(&template_path)? {
            config.default_template = Some(text);
        }
        let templates_dir = dir.join("additional_chat_templates");
        if templates_dir.is_dir() {
            let entries = fs::read_dir(&templates_dir).map_err(|source| TokenizerError::Read {
                path: templates_dir.clone(),
                source,
            })?;
            for entry in entries {
                let entry = entry.map_err(|source| TokenizerError::Read {
                    path: templates_dir.clone(),
                    source,
                })?;
                let path = entry.path();
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".jinja"));
                if let Some(name) = name {
                    if let Some(text) = read_text_if_exists(&path)? {
                        config.named_templates.insert(name.to_owned(), text);
                    }
                }
            }
        }

        let mut extra_eos = Vec::new();
        let generation_path = dir.join("generation_config.json");
        if let Some(json) = read_json_if_exists(&generation_path)? {
            match json.get("eos_token_id") {
                Some(Json::Array(ids)) => extra_eos.extend(ids.iter().filter_map(json_u32)),
                Some(id) => extra_eos.extend(json_u32(id)),
                None => {}
            }
        }

        Self::assemble(inner, dir.to_path_buf(), config, extra_eos)
    }

    /// Builds the tokenizer a GGUF file's metadata describes (`path` is the file, for messages).
    ///
    /// Supports byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`: Llama 3, Qwen 2
    /// to 3.5, SmolLM, StarCoder, GPT-2, and tekken / GPT-4o-style splits). The pre-tokenizer
    /// follows `tokenizer.ggml.pre`; an unknown value falls back to GPT-2's (as transformers
    /// does) with a warning. SentencePiece (`"llama"`) and other models are refused with
    /// [`TokenizerError::UnsupportedModel`].
    pub fn from_gguf(meta: &GgufMetadata, path: &Path) -> Result<Self, TokenizerError> {
        let invalid = |message: String| TokenizerError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let model = meta.get_str("tokenizer.ggml.model").ok_or_else(|| {
            invalid("GGUF metadata has no tokenizer (tokenizer.ggml.model)".into())
        })?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel {
                path: path.to_path_buf(),
                model: model.to_owned(),
            });
        }
        let tokens = meta.get_str_array("tokenizer.ggml.tokens").ok_or_else(|| {
            invalid("tokenizer.ggml.tokens is missing or not a string array".into())
        })?;
        let merges = meta.get_str_array("tokenizer.ggml.merges").ok_or_else(|| {
            invalid("tokenizer.ggml.merges is missing or not a string array".into())
        })?;
        let token_types = match meta.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(_) => meta
                .get_i64_array("tokenizer.ggml.token_type")
                .ok_or_else(|| {
                    invalid("tokenizer.ggml.token_type is not an integer array".into())
                })?,
        };
        let token_id = |key: &str| -> Result<Option<u32>, TokenizerError> {
            let Some(value) = meta.get(key) else {
                return Ok(None);
            };
            match value.as_u64().and_then(|id| u32::try_from(id).ok()) {
                Some(id) if (id as usize) < tokens.len() => Ok(Some(id)),
                _ => Err(invalid(format!(
                    "{key} is {value}, not a token id below the vocabulary size {}",
                    tokens.len()
                ))),
            }
        };
        let bos_id = token_id("tokenizer.ggml.bos_token_id")?;
        let eos_id = token_id("tokenizer.ggml.eos_token_id")?;
        let pad_id = token_id("tokenizer.ggml.padding_token_id")?;
        let unk_id = token_id("tokenizer.ggml.unknown_token_id")?;
        let eot_id = token_id("tokenizer.ggml.eot_token_id")?;
        let eom_id = token_id("tokenizer.ggml.eom_token_id")?;
        let pre = meta.get_str("tokenizer.ggml.pre").unwrap_or("default");

        let mut inner = build_byte_level_bpe(&tokens, &merges, pre).map_err(&invalid)?;
        add_gguf_added_tokens(&mut inner, &tokens, &token_types);

        let token_text = |id: Option<u32>| {
            id.and_then(|id| tokens.get(id as usize))
                .map(|t| (*t).to_owned())
        };
        let mut config = FolderConfig {
            bos_token: token_text(bos_id),
            eos_token: token_text(eos_id),
            pad_token: token_text(pad_id),
            unk_token: token_text(unk_id),
            other_tokens: BTreeMap::new(),
            add_bos_token: Some(
                meta.get_bool("tokenizer.ggml.add_bos_token")
                    .unwrap_or(false),
            ),
            add_eos_token: Some(
                meta.get_bool("tokenizer.ggml.add_eos_token")
                    .unwrap_or(false),
            ),
            default_template: meta.get_str("tokenizer.chat_template").map(str::to_owned),
            named_templates: BTreeMap::new(),
        };
        for (key, value) in meta.kv.range("tokenizer.chat_template.".to_owned()..) {
            let Some(name) = key.strip_prefix("tokenizer.chat_template.") else {
                break;
            };
            if let Some(text) = value.as_str() {
                config
                    .named_templates
                    .insert(name.to_owned(), text.to_owned());
            }
        }
        // Like transformers' GGUF conversion: BOS/EOS addition lives in the post-processor, so a
        // saved tokenizer.json behaves the same wherever it is loaded.
        install_template_processing(&mut inner, &config, path)?;

        Self::assemble(
            inner,
            path.to_path_buf(),
            config,
            [eot_id, eom_id].into_iter().flatten().collect(),
        )
    }

    /// Finishes construction: resolves special-token ids and compiles chat templates.
    fn assemble(
        inner: tokenizers::Tokenizer,
        source: PathBuf,
        config: FolderConfig,
        extra_eos: Vec<u32>,
    ) -> Result<Self, TokenizerError> {
        // transformers would append a token the vocabulary lacks as a new id the model has no
        // embedding for; here it keeps its text (for chat templates) but gets no id.
        let resolve = |token: &Option<String>, what: &str| -> Option<u32> {
            let text = token.as_ref()?;
            let id = inner.token_to_id(text);
            if id.is_none() {
                tracing::warn!(
                    source = %source.display(),
                    token = %text,
                    "{what} is not in the vocabulary; it will not be added or detected"
                );
            }
            id
        };
        let bos_token_id = resolve(&config.bos_token, "bos_token");
        let eos_token_id = resolve(&config.eos_token, "eos_token");
        let mut eos_token_ids: Vec<u32> = Vec::new();
        for id in eos_token_id.into_iter().chain(extra_eos) {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }

        let compile = |text: &str, name: &str| {
            ChatTemplate::new(text).map_err(|error| TokenizerError::ChatTemplate {
                path: source.clone(),
                source: match error {
                    ChatTemplateError::Syntax(message) if name != DEFAULT_TEMPLATE => {
                        ChatTemplateError::Syntax(format!("template {name:?}: {message}"))
                    }
                    other => other,
                },
            })
        };
        let mut named_chat_templates = BTreeMap::new();
        for (name, text) in &config.named_templates {
            named_chat_templates.insert(name.clone(), compile(text, name)?);
        }
        let chat_template = match &config.default_template {
            Some(text) => Some(compile(text, DEFAULT_TEMPLATE)?),
            None => None,
        };

        // The post-processor may add BOS/EOS on its own (Llama-style tokenizer.json files).
        let empty = inner
            .encode_fast("", true)
            .map(|encoding| encoding.get_ids().to_vec())
            .unwrap_or_default();
        let adds_bos = bos_token_id.is_some() && empty.first() == bos_token_id.as_ref();
        let adds_eos = eos_token_id.is_some() && empty.last() == eos_token_id.as_ref();

        Ok(Tokenizer {
            inner,
            source,
            bos_token_id,
            bos_token: config.bos_token,
            eos_token: config.eos_token,
            eos_token_ids,
            pad_token: config.pad_token,
            unk_token: config.unk_token,
            other_tokens: config.other_tokens,
            add_bos_token: adds_bos
                || (config.add_bos_token.unwrap_or(false) && bos_token_id.is_some()),
            add_eos_token: adds_eos
                || (config.add_eos_token.unwrap_or(false) && eos_token_id.is_some()),
            chat_template,
            named_chat_templates,
        })
    }

    /// Writes `tokenizer.json` and `tokenizer_config.json` into `dir` (created if needed), a
    /// folder `transformers`' `AutoTokenizer`, `mlx_lm` and [`Tokenizer::from_dir`] load back
    /// with identical encodings.
    pub fn save_hf(&self, dir: &Path) -> Result<(), TokenizerError> {
        fs::create_dir_all(dir).map_err(|source| TokenizerError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let tokenizer_path = dir.join("tokenizer.json");
        let text = self
            .inner
            .to_string(false)
            .map_err(|source| TokenizerError::Library {
                path: tokenizer_path.clone(),
                source,
            })?;
        write_file(&tokenizer_path, text.as_bytes())?;

        let mut config = serde_json::Map::new();
        config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
        config.insert("add_bos_token".into(), json!(self.add_bos_token));
        config.insert("add_eos_token".into(), json!(self.add_eos_token));
        config.insert("bos_token".into(), json!(self.bos_token));
        config.insert("eos_token".into(), json!(self.eos_token));
        config.insert("pad_token".into(), json!(self.pad_token));
        config.insert("unk_token".into(), json!(self.unk_token));
        for (name, token) in &self.other_tokens {
            config.insert(name.clone(), json!(token));
        }
        config.insert("clean_up_tokenization_spaces".into(), json!(false));
        let templates: Vec<Json> = self
            .chat_template
            .iter()
            .map(|t| json!({"name": DEFAULT_TEMPLATE, "template": t.source()}))
            .chain(
                self.named_chat_templates
                    .iter()
                    .map(|(name, t)| json!({"name": name, "template": t.source()})),
            )
            .collect();
        match (&self.chat_template, templates.len()) {
            (_, 0) => {}
            (Some(template), 1) => {
                config.insert("chat_template".into(), json!(template.source()));
            }
            _ => {
                config.insert("chat_template".into(), Json::Array(templates));
            }
        }
        let config_path = dir.join("tokenizer_config.json");
        let text = serde_json::to_string_pretty(&Json::Object(config)).map_err(|source| {
            TokenizerError::Json {
                path: config_path.clone(),
                source,
            }
        })?;
        write_file(&config_path, text.as_bytes())
    }

    /// Encodes `text`. With `add_special_tokens`, the post-processor's special tokens are added
    /// (and BOS/EOS where the configuration asks for them).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|source| self.library_error(source))?;
        let mut ids = encoding.get_ids().to_vec();
        if add_special_tokens {
            if let (true, Some(bos)) = (self.add_bos_token, self.bos_token_id) {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
            if let (true, Some(&eos)) = (self.add_eos_token, self.eos_token_ids.first()) {
                if ids.last() != Some(&eos) {
                    ids.push(eos);
                }
            }
        }
        Ok(ids)
    }

    /// Decodes `ids` into text; special tokens are left out when `skip_special_tokens`.
    ///
    /// Bytes that do not form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|source| self.library_error(source))
    }

    /// The ids that end generation: the EOS token first, then any further stop tokens
    /// (GGUF `eot`/`eom` tokens, `generation_config.json`'s `eos_token_id` list).
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    /// The BOS token's id, if the tokenizer has one.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// The BOS token's text, if the tokenizer has one.
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    /// The EOS token's text, if the tokenizer has one.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// The pad token's text, if the tokenizer has one.
    pub fn pad_token(&self) -> Option<&str> {
        self.pad_token.as_deref()
    }

    /// Whether [`Tokenizer::encode`] with `add_special_tokens` starts with BOS (because the
    /// configuration asks for it or the post-processor adds it).
    pub fn add_bos_token(&self) -> bool {
        self.add_bos_token
    }

    /// The id of `token` (vocabulary or added token).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of token `id` as the vocabulary spells it (byte-level tokens keep their
    /// `Ġ`-style spelling).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special added token (those `decode(.., true)` leaves out).
    pub fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_tokens_decoder()
            .get(&id)
            .is_some_and(|token| token.special)
    }

    /// The number of token ids this tokenizer knows, added tokens included (`len(tokenizer)` in
    /// transformers; the model's embedding table may be larger).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The default chat template, if any.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// A named chat template (`"tool_use"`, ...), if any.
    pub fn named_chat_template(&self, name: &str) -> Option<&ChatTemplate> {
        self.named_chat_templates.get(name)
    }

    /// The folder or GGUF file this tokenizer was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The underlying `tokenizers` pipeline.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Renders `messages` (OpenAI-style JSON objects) with the chat template, as transformers'
    /// `apply_chat_template(messages, tokenize=False, ...)` does. When tools are given and the
    /// tokenizer has a `tool_use` template, that one is used.
    pub fn apply_chat_template(
        &self,
        messages: &[Json],
        opts: &ChatTemplateOptions,
    ) -> Result<String, TokenizerError> {
        let named = |name: &str| self.named_chat_templates.get(name);
        let template = match (&opts.tools, &self.chat_template) {
            (Some(_), _) if named(TOOL_USE_TEMPLATE).is_some() => named(TOOL_USE_TEMPLATE),
            (_, Some(template)) => Some(template),
            (_, None) => named(DEFAULT_TEMPLATE),
        }
        .ok_or_else(|| TokenizerError::NoChatTemplate {
            path: self.source.clone(),
        })?;
        self.apply_chat_template_with(template, messages, opts)
    }

    /// Renders `messages` with `template` instead of the tokenizer's own (the tokenizer still
    /// supplies `bos_token`, `eos_token` and its other named tokens).
    pub fn apply_chat_template_with(
        &self,
        template: &ChatTemplate,
        messages: &[Json],
        opts: &ChatTemplateOptions,
    ) -> Result<String, TokenizerError> {
        let special_tokens: Vec<(&str, &str)> = [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("unk_token", &self.unk_token),
            ("pad_token", &self.pad_token),
        ]
        .into_iter()
        .filter_map(|(name, token)| token.as_deref().map(|token| (name, token)))
        .chain(
            self.other_tokens
                .iter()
                .map(|(name, token)| (name.as_str(), token.as_str())),
        )
        .collect();
        template
            .render(messages, &special_tokens, opts)
            .map_err(|source| TokenizerError::ChatTemplate {
                path: self.source.clone(),
                source,
            })
    }

    fn library_error(&self, source: tokenizers::Error) -> TokenizerError {
        TokenizerError::Library {
            path: self.source.clone(),
            source,
        }
    }
}

impl FolderConfig {
    /// Reads the token, BOS/EOS and chat-template fields of `tokenizer_config.json`.
    fn read_tokenizer_config(&mut self, json: &Json, path: &Path) -> Result<(), TokenizerError> {
        let invalid = |message: String| TokenizerError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let Json::Object(fields) = json else {
            return Err(invalid("expected a JSON object".into()));
        };
        self.read_special_tokens(fields, path)?;
        for (key, slot) in [
            ("add_bos_token", &mut self.add_bos_token),
            ("add_eos_token", &mut self.add_eos_token),
        ] {
            match fields.get(key) {
                None | Some(Json::Null) => {}
                Some(Json::Bool(value)) => *slot = Some(*value),
                Some(other) => {
                    return Err(invalid(format!("{key} is {other}, expected true or false")))
                }
            }
        }
        match fields.get("chat_template") {
            None | Some(Json::Null) => {}
            Some(Json::String(text)) => self.default_template = Some(text.clone()),
            Some(Json::Array(entries)) => {
                for entry in entries {
                    let name = entry.get("name").and_then(Json::as_str);
                    let template = entry.get("template").and_then(Json::as_str);
                    let (Some(name), Some(template)) = (name, template) else {
                        return Err(invalid(
                            "chat_template list entries must be {\"name\": ..., \"template\": ...}"
                                .into(),
                        ));
                    };
                    if name == DEFAULT_TEMPLATE {
                        self.default_template = Some(template.to_owned());
                    } else {
                        self.named_templates
                            .insert(name.to_owned(), template.to_owned());
                    }
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "chat_template must be a string or a list of named templates, not {}",
                    json_kind(other)
                )))
            }
        }
        Ok(())
    }

    /// Reads the legacy `special_tokens_map.json`, whose entries override the config's.
    fn read_special_tokens_map(&mut self, json: &Json, path: &Path) -> Result<(), TokenizerError> {
        let Json::Object(fields) = json else {
            return Err(TokenizerError::Invalid {
                path: path.to_path_buf(),
                message: "expected a JSON object".into(),
            });
        };
        self.read_special_tokens(fields, path)
    }

    fn read_special_tokens(
        &mut self,
        fields: &serde_json::Map<String, Json>,
        path: &Path,
    ) -> Result<(), TokenizerError> {
        for (key, slot) in [
            ("bos_token", &mut self.bos_token),
            ("eos_token", &mut self.eos_token),
            ("pad_token", &mut self.pad_token),
            ("unk_token", &mut self.unk_token),
        ] {
            if let Some(value) = fields.get(key) {
                *slot = special_token_text(value).map_err(|message| TokenizerError::Invalid {
                    path: path.to_path_buf(),
                    message: format!("{key}: {message}"),
                })?;
            }
        }
        // Other `*_token` entries holding a token (not flags like `add_bos_token`).
        for (key, value) in fields {
            let standard = matches!(
                key.as_str(),
                "bos_token" | "eos_token" | "pad_token" | "unk_token"
            );
            if standard || !key.ends_with("_token") {
                continue;
            }
            match special_token_text(value) {
                Ok(Some(text)) => {
                    self.other_tokens.insert(key.clone(), text);
                }
                Ok(None) => {
                    self.other_tokens.remove(key);
                }
                Err(_) => {}
            }
        }
        Ok(())
    }
}

/// A special token given as `"<s>"`, `{"content": "<s>", ...}` or `null`.
fn special_token_text(value: &Json) -> Result<Option<String>, String> {
    match value {
        Json::Null => Ok(None),
        Json::String(text) => Ok(Some(text.clone())),
        Json::Object(fields) => match fields.get("content") {
            Some(Json::String(text)) => Ok(Some(text.clone())),
            _ => Err("a token object needs a string \"content\"".into()),
        },
        other => Err(format!(
            "expected a string or a token object, not {}",
            json_kind(other)
        )),
    }
}

fn json_kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

fn json_u32(value: &Json) -> Option<u32> {
    value.as_u64().and_then(|id| u32::try_from(id).ok())
}

fn read_text_if_exists(path: &Path) -> Result<Option<String>, TokenizerError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenizerError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn read_json_if_exists(path: &Path) -> Result<Option<Json>, TokenizerError> {
    let Some(text) = read_text_if_exists(path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| TokenizerError::Json {
            path: path.to_path_buf(),
            source,
        })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), TokenizerError> {
    fs::write(path, bytes).map_err(|source| TokenizerError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// GPT-2's reversible byte → printable character map used by byte-level BPE vocabularies:
/// printable Latin-1 bytes stand for themselves, the others map to U+0100 onwards in order.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_unprintable = 0u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        let code = if printable {
            u32::from(byte)
        } else {
            let code = 256 + next_unprintable;
            next_unprintable += 1;
            code
        };
        table[usize::from(byte)] = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    table
}

/// Builds the byte-level BPE pipeline for a GGUF vocabulary: model, pre-tokenizer for `pre`,
/// byte-level decoder.
fn build_byte_level_bpe(
    tokens: &[&str],
    merges: &[&str],
    pre: &str,
) -> Result<tokenizers::Tokenizer, String> {
    let table = byte_to_char_table();
    let alphabet: HashSet<char> = table.iter().copied().collect();
    // Tokens are normally spelled in the byte alphabet already; a token that is not (llama.cpp
    // stores some added tokens as plain text) is re-spelled byte by byte.
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| {
            let spelled = if token.chars().all(|c| alphabet.contains(&c)) {
                (*token).to_owned()
            } else {
                token.bytes().map(|b| table[usize::from(b)]).collect()
            };
            (spelled, id as u32)
        })
        .collect();
    let merges = merges
        .iter()
        .enumerate()
        .map(|(index, merge)| {
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| format!("tokenizer.ggml.merges[{index}] = {merge:?} is not two tokens separated by a space"))
        })
        .collect::<Result<Vec<_>, _>>()?;

    let split = |pattern: &str| -> Result<PreTokenizerWrapper, String> {
        Split::new(
            SplitPattern::Regex(pattern.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(PreTokenizerWrapper::from)
        .map_err(|e| format!("pre-tokenizer regex for {pre:?} does not compile: {e}"))
    };
    let bytes_only = PreTokenizerWrapper::from(ByteLevel::new(false, true, false));
    let (pre_tokenizer, ignore_merges): (PreTokenizerWrapper, bool) = match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "dbrx" | "smaug-bpe" => (
            Sequence::new(vec![split(LLAMA3_SPLIT)?, bytes_only]).into(),
            true,
        ),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "megrez" => (
            Sequence::new(vec![split(QWEN2_SPLIT)?, bytes_only]).into(),
            false,
        ),
        "qwen35" => (
            Sequence::new(vec![split(QWEN35_SPLIT)?, bytes_only]).into(),
            true,
        ),
        "tekken" => (
            Sequence::new(vec![split(TEKKEN_SPLIT)?, bytes_only]).into(),
            false,
        ),
        "gpt-4o" | "llama4" | "minimax-m2" => (
            Sequence::new(vec![split(GPT4O_SPLIT)?, bytes_only]).into(),
            false,
        ),
        // StarCoder-style vocabularies: every digit is its own piece, then GPT-2's split.
        "smollm" | "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => (
            Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            false,
        ),
        other => {
            if !matches!(other, "default" | "gpt2" | "gpt-2") {
                tracing::warn!(
                    pre = other,
                    "unknown GGUF tokenizer.ggml.pre; using GPT-2's pre-tokenizer as transformers does"
                );
            }
            (ByteLevel::new(false, true, true).into(), false)
        }
    };

    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(tokenizer)
}

/// Adds GGUF control tokens (type 3) as special added tokens and user-defined ones (type 4) as
/// plain added tokens, so they are matched whole in text, as transformers' conversion does.
/// A control token with characters outside the byte alphabet is a llama.cpp mislabel and is
/// left as an ordinary vocabulary entry.
fn add_gguf_added_tokens(tokenizer: &mut tokenizers::Tokenizer, tokens: &[&str], types: &[i64]) {
    let alphabet: HashSet<char> = byte_to_char_table().into_iter().collect();
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|(token, kind)| {
            **kind == TOKEN_TYPE_CONTROL && token.chars().all(|c| alphabet.contains(&c))
        })
        .map(|(token, _)| AddedToken::from((*token).to_owned(), true).normalized(false))
        .collect();
    if !special.is_empty() {
        tokenizer.add_special_tokens(&special);
    }
    let user_defined: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|(token, kind)| {
            **kind == TOKEN_TYPE_USER_DEFINED && tokenizer.token_to_id(token).is_some()
        })
        .map(|(token, _)| AddedToken::from((*token).to_owned(), false).normalized(false))
        .collect();
    if !user_defined.is_empty() {
        tokenizer.add_tokens(&user_defined);
    }
}

/// Sets a post-processor that adds BOS/EOS as `config` asks (transformers'
/// `update_post_processor`).
fn install_template_processing(
    tokenizer: &mut tokenizers::Tokenizer,
    config: &FolderConfig,
    path: &Path,
) -> Result<(), TokenizerError> {
    let invalid = |message: String| TokenizerError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let with_id = |token: &Option<String>| -> Option<(String, u32)> {
        let token = token.as_ref()?;
        Some((token.clone(), tokenizer.token_to_id(token)?))
    };
    let bos = with_id(&config.bos_token).filter(|_| config.add_bos_token == Some(true));
    let eos = with_id(&config.eos_token).filter(|_| config.add_eos_token == Some(true));
    let mut single = Vec::new();
    let mut pair = Vec::new();
    if let Some((token, _)) = &bos {
        single.push(format!("{token}:0"));
    }
    single.push("$A:0".to_owned());
    if let Some((token, _)) = &eos {
        single.push(format!("{token}:0"));
    }
    pair.extend(single.iter().cloned());
    if let Some((token, _)) = &bos {
        pair.push(format!("{token}:1"));
    }
    pair.push("$B:1".to_owned());
    if let Some((token, _)) = &eos {
        pair.push(format!("{token}:1"));
    }
    let special_tokens: Vec<(String, u32)> = bos.iter().chain(eos.iter()).cloned().collect();
    let processor = TemplateProcessing::builder()
        .try_single(single)
        .map_err(|e| invalid(format!("cannot build the BOS/EOS template: {e}")))?
        .try_pair(pair)
        .map_err(|e| invalid(format!("cannot build the BOS/EOS template: {e}")))?
        .special_tokens(special_tokens)
        .build()
        .map_err(|e| invalid(format!("cannot build the BOS/EOS template: {e}")))?;
    tokenizer.with_post_processor(Some(processor));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let table = byte_to_char_table();
        assert_eq!(table[usize::from(b' ')], 'Ġ');
        assert_eq!(table[usize::from(b'\n')], 'Ċ');
        assert_eq!(table[usize::from(b'a')], 'a');
        assert_eq!(table[0], 'Ā');
        assert_eq!(table[0xad], 'Ń');
        let distinct: HashSet<char> = table.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    fn tiny_gguf_tokenizer(pre: &str) -> tokenizers::Tokenizer {
        let tokens = ["<|end|>", "a", "b", "Ġ", "ab", "Ġab", "1", "2", "Ġ1"];
        let merges = ["a b", "Ġ ab", "Ġ 1"];
        let mut tokenizer = build_byte_level_bpe(&tokens, &merges, pre).expect("builds");
        add_gguf_added_tokens(&mut tokenizer, &tokens, &[3, 1, 1, 1, 1, 1, 1, 1, 1]);
        tokenizer
    }

    #[test]
    fn builds_byte_level_bpe_from_gguf_vocab() {
        let tokenizer = tiny_gguf_tokenizer("default");
        let ids = tokenizer.encode_fast("ab ab<|end|> 12", false).unwrap();
        assert_eq!(ids.get_ids(), &[4, 5, 0, 8, 7]);
        assert_eq!(
            tokenizer.decode(&[4, 5, 0, 8, 7], true).unwrap(),
            "ab ab 12"
        );
        // The StarCoder-style pre-tokenizer splits digits before GPT-2's regex.
        let tokenizer = tiny_gguf_tokenizer("smollm");
        let ids = tokenizer.encode_fast("ab 12", false).unwrap();
        assert_eq!(ids.get_ids(), &[4, 3, 6, 7]);
    }

    #[test]
    fn tokenizers_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Tokenizer>();
        assert_send_sync::<ChatTemplate>();
    }

    #[test]
    fn malformed_merges_are_reported() {
        let err = build_byte_level_bpe(&["a"], &["ab"], "default").unwrap_err();
        assert!(err.contains("merges[0]"), "{err}");
    }

    #[test]
    fn special_tokens_come_as_strings_or_objects() {
        assert_eq!(special_token_text(&json!("<s>")), Ok(Some("<s>".into())));
        assert_eq!(
            special_token_text(&json!({"content": "<s>", "lstrip": false})),
            Ok(Some("<s>".into()))
        );
        assert_eq!(special_token_text(&Json::Null), Ok(None));
        assert!(special_token_text(&json!(3)).is_err());
    }
}
